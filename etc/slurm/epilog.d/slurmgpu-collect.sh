#!/bin/sh
# slurm.conf: Epilog=/etc/slurm/epilog.d/*.sh  (or call this from your own epilog script)
#
# Stores the ending job's GPU-use summary (docs/measuring.md): merged into the job's
# AdminComment (the tier decision record there is kept) and/or into a spool directory.
# An epilog that fails drains the node, so this script always exits 0; `slurmgpu collect
# --epilog` itself always exits 0 and logs what went wrong to the log file.
#
# For a spool instead of AdminComment (jobstats sites, many-node jobs), use:
#   --spool /shared/slurmgpu/spool --no-admin-comment
@SLURMGPU@ collect --epilog \
    --state /var/lib/slurmgpu/collect-state.json \
    --log-file /var/log/slurmgpu-collect.log \
    </dev/null >/dev/null 2>&1 || true
exit 0
