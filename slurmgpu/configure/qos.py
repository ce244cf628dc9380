"""`qos_plan` / `qos_apply`: the tier QOS and the associations' QOS lists in slurmdbd brought
to the site policy with sacctmgr."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from slurmgpu.errors import SlurmgpuError

# Association QOS lists inherit: an account's qos-= also reaches its users, so a user the
# policy names may need a second round. Three rounds always settle a valid policy.
APPLY_ROUNDS = 3


def qos_plan(policy_path: str | None = None, prune: bool = False) -> Any:
    """The sacctmgr commands and slurm.conf settings the policy needs (`render.qos.QosPlan`),
    from the live `scontrol show config`, QOS, associations and the QOS jobs still use."""
    from slurmgpu.render.qos import build_plan
    from slurmgpu.sources import sacctmgr
    from slurmgpu.sources.policy_file import default_policy_path, load_policy
    from slurmgpu.sources.slurm import scontrol_show_config

    pol = load_policy(policy_path or default_policy_path())
    config = scontrol_show_config()
    live = sacctmgr.show_qos()
    assocs = sacctmgr.show_associations(config.get("ClusterName", ""))
    in_use = sacctmgr.qos_in_use([q.name for q in live])
    return build_plan(pol, live, assocs, config, in_use=in_use, prune=prune)


def qos_apply(
    policy_path: str | None = None,
    prune: bool = False,
    *,
    plan: Any = None,
    ran: Callable[[str], None] = lambda _: None,
) -> int:
    """Run the plan's sacctmgr commands (`-i`) and plan again until nothing is left to do;
    the number of commands run (`ran` hears each one). `plan`: the first plan, if already
    made. Raises when slurmdbd still differs after APPLY_ROUNDS rounds."""
    from slurmgpu.render.qos import format_command
    from slurmgpu.sources.sacctmgr import run_sacctmgr

    plan = plan if plan is not None else qos_plan(policy_path, prune)
    total = 0
    for _ in range(APPLY_ROUNDS):
        if plan.nothing_to_do:
            break
        for cmd in plan.commands:
            run_sacctmgr(cmd)
            ran(format_command(cmd))
        total += len(plan.commands)
        plan = qos_plan(policy_path, prune)
    if not plan.nothing_to_do:
        left = "; ".join(format_command(c) for c in plan.commands)
        raise SlurmgpuError(f"after apply, slurmdbd still differs from the policy: {left}")
    return total
