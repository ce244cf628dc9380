"""Verification: what sacct recorded since a change against what it recorded before, and the
decision to keep the change or roll it back (pure; `autopilot.run` does the undo).

`observe` reads the replay trace of the history (the recorded starts of `from_accounting`):
for each partition and tier, the jobs submitted in a window that started, their mean and
p95 wait, preemptions and allocated GPU-hours. Jobs still pending when sacct was read are
not in it (they have no start yet), so a window's waits are those of the jobs that got to
run: a pass that verifies early sees fewer, shorter waits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from slurmgpu.autopilot.records import Observed
from slurmgpu.model.policy import AutopilotPolicy


def observe(trace: Any, since_s: float, until_s: float) -> tuple[Observed, ...]:
    """Per `partition:NAME` and `tier:NAME`: what the jobs submitted in [since, until) got."""
    submit = trace.epoch_s + np.asarray(trace.submit_s, float)
    start = trace.epoch_s + np.asarray(trace.recorded_start_s, float)
    end = trace.epoch_s + np.asarray(trace.recorded_end_s, float)
    ran = np.isfinite(start) & (submit >= since_s) & (submit < until_s)
    gpus = np.asarray(trace.gpu_equiv, float)
    run_s = np.where(ran, np.clip(np.minimum(end, until_s) - start, 0, None), 0)
    hours = run_s * gpus / 3600
    need = np.asarray(getattr(trace, "need_gpu", np.full(len(gpus), np.nan)), float)
    out = []
    for label, codes, names in (
        ("partition", trace.partition, trace.partitions),
        ("tier", trace.tier, trace.tier_names),
    ):
        codes = np.asarray(codes)
        for i, name in enumerate(names):
            sel = ran & (codes == i)
            if not sel.any() or not name:
                continue
            waits = (start - submit)[sel]
            out.append(
                Observed(
                    group=f"{label}:{name}",
                    jobs=int(sel.sum()),
                    mean_wait_s=round(float(waits.mean()), 1),
                    p95_wait_s=round(float(np.percentile(waits, 95)), 1),
                    preemptions=int(np.asarray(trace.recorded_preemptions)[sel].sum()),
                    gpu_hours=round(float(hours[sel].sum()), 4),
                    need_share=_need_share(need[sel], gpus[sel], run_s[sel]),
                )
            )
    return tuple(out)


def _need_share(need: np.ndarray, gpus: np.ndarray, run_s: np.ndarray) -> float | None:
    """Measured need over allocation, GPU-seconds, of the runs whose need was measured."""
    ok = np.isfinite(need) & (gpus > 0) & (run_s > 0)
    held = float((gpus[ok] * run_s[ok]).sum())
    if not ok.any() or held <= 0:
        return None
    return round(float((np.minimum(need[ok], gpus[ok]) * run_s[ok]).sum()) / held, 4)


@dataclass(frozen=True)
class Judgement:
    worse: bool
    reasons: tuple[str, ...]  # each group compared, and why it is (not) worse
    compared: int  # groups with jobs on both sides


def judge(
    before: Sequence[Observed],
    after: Sequence[Observed],
    groups: Sequence[str],
    guard: AutopilotPolicy,
) -> Judgement:
    """Worse when a group the change touched (its partitions, the top tier; every tier for a
    MIG change) waits longer on average after it than before by more than
    `rollback_tolerance` and `rollback_slack_s`, or when its measured-need allocation (both
    sides measured) fell by more than `rollback_tolerance` of what it was."""
    old = {o.group: o for o in before}
    new = {o.group: o for o in after}
    reasons, worse, compared = [], False, 0
    for group in groups:
        b, a = old.get(group), new.get(group)
        if b is None or a is None or not b.jobs or not a.jobs:
            reasons.append(f"{group}: no jobs on one side; not compared")
            continue
        compared += 1
        limit = b.mean_wait_s * (1 + guard.rollback_tolerance) + guard.rollback_slack_s
        grew = a.mean_wait_s > limit
        fell = (
            b.need_share is not None
            and a.need_share is not None
            and a.need_share < b.need_share * (1 - guard.rollback_tolerance)
        )
        worse = worse or grew or fell
        share = ""
        if b.need_share is not None or a.need_share is not None:
            share = f"; measured-need allocation {b.need_share} -> {a.need_share}" + (
                " WORSE" if fell else ""
            )
        reasons.append(
            f"{group}: mean wait {b.mean_wait_s:.0f} s ({b.jobs} jobs) -> {a.mean_wait_s:.0f} s "
            f"({a.jobs} jobs), limit {limit:.0f} s: {'WORSE' if grew else 'ok'}; preemptions "
            f"{b.preemptions} -> {a.preemptions}{share}"
        )
    return Judgement(worse, tuple(reasons), compared)
