"""`slurmgpu rebalance` output: the moves with reasons, then the slurm.conf node lists."""

from __future__ import annotations

from slurmgpu.model.rebalance import RebalancePlan
from slurmgpu.render.templating import render
from slurmgpu.util.hostlist import compress_hostlist


def render_plan(plan: RebalancePlan, *, applied: bool, durable: str | None = None) -> str:
    """The moves, then where they are kept (`durable`: the include file rebalance owns)."""
    changed = sorted({m.source for m in plan.moves} | {m.target for m in plan.moves})
    lines = [(p, compress_hostlist(plan.after[p])) for p in changed]
    return render("rebalance.txt.j2", plan=plan, applied=applied, lines=lines, durable=durable)
