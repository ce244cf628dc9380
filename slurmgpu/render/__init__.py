"""Slurm configuration writers from the model: gres.conf and the node line, topology,
job_submit.lua, sacctmgr QOS commands, the wrapper's sbatch arguments (docs/architecture.md).

Imported downward by `mig/`, `fleet/` and `measure/`; the views of results are in `views/`.
"""
