"""The judge: a scenario's replay against the baseline's, under the site's `[objective]`.

`verdict(before, after, objective, top_tier)` scores a scenario (the weighted relative change
of each partition's and tier's mean and p95 wait: lower is better) and lists every limit it
breaks (a partition's mean or p95 wait growing more than `max_wait_growth` and
`max_wait_growth_s` together allow, the top tier's p95 over `p0_max_wait_s`, useful GPU-hours
under `min_useful_gpu_hours` of the baseline's, more GPU-hours lost to preemption, more jobs
that cannot run). A change with any violation is never recommended.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurmgpu.model.policy import Objective
from slurmgpu.replay.engine import CANCELLED_PENDING
from slurmgpu.replay.results import ResultBlock, Waits

# relative changes are taken against the baseline wait plus this (seconds): a wait going from
# 1 s to 3 s is not "3x worse" in any way a site cares about
SCORE_FLOOR_S = 60.0
GPU_HOURS_EPSILON = 0.5  # GPU-hours of rounding between two replays of one window


@dataclass(frozen=True)
class Verdict:
    score: float  # weighted relative wait change (negative: better)
    violations: tuple[str, ...]  # every limit the scenario breaks (empty: accepted)

    @property
    def accepted(self) -> bool:
        return not self.violations


def _rel(before: float | None, after: float | None) -> float:
    if before is None or after is None:
        return 0.0
    return (after - before) / (before + SCORE_FLOOR_S)


def _waits(block: ResultBlock, partition: str) -> Waits | None:
    row = next((p for p in block.by_partition if p.partition == partition), None)
    return row.wait_s if row else None


def _tier_waits(block: ResultBlock, tier: str) -> Waits | None:
    row = next((t for t in block.by_tier if t.tier == tier), None)
    return row.wait_s if row else None


def _not_run(block: ResultBlock) -> int:
    """Jobs that could not run, less those cancelled while pending as recorded (a slower
    scenario leaves more of them pending at their cancel: that is the wait, already judged)."""
    return block.jobs_not_run - block.not_run_reasons.get(CANCELLED_PENDING, 0)


def _h(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if abs(seconds) >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


def growth_violations(
    partition: str, before: Waits | None, after: Waits | None, objective: Objective
) -> list[str]:
    """A partition's mean and p95 wait against its growth limit."""
    if before is None or after is None or not before.jobs or not after.jobs:
        return []
    share, slack = objective.growth_limit(partition), objective.max_wait_growth_s
    out = []
    for what, b, a in (("mean", before.mean, after.mean), ("p95", before.p95, after.p95)):
        if b is None or a is None:
            continue
        limit = b * (1 + share) + slack
        if a > limit:
            out.append(
                f"{partition}'s {what} wait grows from {_h(b)} to {_h(a)} "
                f"(limit {_h(limit)}: +{100 * share:g} % and {slack:g} s)"
            )
    return out


def verdict(
    before: ResultBlock, after: ResultBlock, objective: Objective, top_tier: str | None = None
) -> Verdict:
    """Score a scenario against the baseline and list the objective's limits it breaks."""
    score = 0.0
    problems: list[str] = []
    names = [p.partition for p in before.by_partition]
    names += [p.partition for p in after.by_partition if p.partition not in names]
    for name in names:
        b, a = _waits(before, name), _waits(after, name)
        w = objective.partition(name)
        if b is not None and a is not None:
            score += w.mean_wait * _rel(b.mean, a.mean) + w.p95_wait * _rel(b.p95, a.p95)
        problems += growth_violations(name, b, a, objective)
    for w in objective.tiers:
        b, a = _tier_waits(before, w.name), _tier_waits(after, w.name)
        if b is not None and a is not None:
            score += w.mean_wait * _rel(b.mean, a.mean) + w.p95_wait * _rel(b.p95, a.p95)
    if top_tier and objective.p0_max_wait_s is not None:
        b, a = _tier_waits(before, top_tier), _tier_waits(after, top_tier)
        limit = objective.p0_max_wait_s
        over = a is not None and a.p95 is not None and a.p95 > limit
        if over and (b is None or b.p95 is None or a.p95 > max(b.p95, limit)):  # type: ignore[union-attr]
            problems.append(
                f"tier {top_tier}'s p95 wait {_h(a.p95)} is over its limit {_h(limit)}"  # type: ignore[union-attr]
                + (f" (baseline {_h(b.p95)})" if b is not None and b.p95 is not None else "")
            )
    need = objective.min_useful_gpu_hours * before.useful_gpu_hours
    if after.useful_gpu_hours + GPU_HOURS_EPSILON < need:
        problems.append(
            f"useful GPU-hours fall from {before.useful_gpu_hours:,.1f} to "
            f"{after.useful_gpu_hours:,.1f} (at least {need:,.1f} required)"
        )
    if after.gpu_hours_lost > before.gpu_hours_lost + GPU_HOURS_EPSILON:
        problems.append(
            f"GPU-hours lost to preemption grow from {before.gpu_hours_lost:,.1f} to "
            f"{after.gpu_hours_lost:,.1f}"
        )
    b_not, a_not = _not_run(before), _not_run(after)
    if a_not > b_not:
        problems.append(f"jobs that cannot run grow from {b_not} to {a_not}")
    return Verdict(score, tuple(problems))
