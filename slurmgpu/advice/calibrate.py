"""Calibration: how far the baseline replay is from the recorded history, per partition.

`advise` trusts a replay's *difference* (scenario - baseline) only where the baseline itself
reproduces what sacct recorded. This module replays the recorded window once and compares,
per partition: the allocation ratio, the mean, p50 and p95 wait, and how many of the jobs
started in the recorded order (`replay.fidelity.same_order_fraction`). A partition is
*calibrated* when its baseline mean wait is within `Tolerance.wait_factor` of the recorded
(or within `wait_slack_s` of it: waits shorter than a scheduler cycle are noise) and its
allocation ratio within `allocation_points`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from slurmgpu.advice.explain import (
    Explanation,
    OwnersSource,
    explain,
    owners_from_history,
    resolve_owners,
)
from slurmgpu.replay import ReplayOptions, build_model, load_for_replay
from slurmgpu.replay.engine import ReplayOutcome
from slurmgpu.replay.engine import replay as run_engine
from slurmgpu.replay.fidelity import same_order_fraction
from slurmgpu.replay.jobs import ReplayTrace
from slurmgpu.replay.results import ResultBlock, block_from_outcome, recorded_block, window_of


@dataclass(frozen=True)
class Tolerance:
    """How far a partition's baseline may be from the recorded history and still be trusted
    (the policy's `[objective]` `calibration_wait_factor` / `calibration_allocation_points`)."""

    wait_factor: float = 2.0  # baseline mean wait within x2 / /2 of the recorded
    wait_slack_s: float = 60.0  # ... or within a minute of it (a backfill cycle or two)
    allocation_points: float = 5.0  # allocation ratio within 5 points


@dataclass(frozen=True)
class WaitSummary:
    mean: float | None
    p50: float | None
    p95: float | None


@dataclass(frozen=True)
class Side:
    """One side of the comparison (recorded or baseline) for one partition."""

    allocation_ratio: float | None
    wait_s: WaitSummary

    def to_dict(self) -> dict[str, Any]:
        w = self.wait_s
        return {
            "allocation_ratio": self.allocation_ratio,
            "wait_s": {"mean": w.mean, "p50": w.p50, "p95": w.p95},
        }


@dataclass(frozen=True)
class PartitionFidelity:
    partition: str
    jobs: int  # jobs that started in both
    recorded: Side
    baseline: Side
    same_order_fraction: float | None
    mean_wait_factor: float | None  # baseline / recorded mean wait (None: a side has none)
    calibrated: bool
    why: str  # what is off, "" when calibrated
    # why it misses (`advice.explain`): only for a partition that is not calibrated (with
    # inferred load: the miss that load was inferred from)
    explanation: Explanation | None = None
    # "recorded" or "inferred load": the baseline held the explanation's unseen GPU-hours
    # as background load (`advice.background`, `--inferred-load`)
    calibrated_on: str = "recorded"
    inferred_gpu_hours: float = 0.0  # the background load held on this partition

    def to_dict(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "jobs": self.jobs,
            "recorded": self.recorded.to_dict(),
            "baseline": self.baseline.to_dict(),
            "same_order_fraction": self.same_order_fraction,
            "mean_wait_factor": self.mean_wait_factor,
            "calibrated": self.calibrated,
            "why": self.why or None,
            "explanation": self.explanation.to_dict() if self.explanation else None,
            "calibrated_on": self.calibrated_on,
            "inferred_gpu_hours": self.inferred_gpu_hours,
        }


@dataclass(frozen=True)
class Calibration:
    by_partition: tuple[PartitionFidelity, ...]
    tolerance: Tolerance
    baseline: ResultBlock  # the baseline replay's block (advise compares scenarios with it)
    recorded: ResultBlock | None

    def partition(self, name: str) -> PartitionFidelity | None:
        return next((p for p in self.by_partition if p.partition == name), None)

    def calibrated(self, name: str) -> bool:
        """Whether a partition's baseline may be trusted (a partition with no jobs, such as
        the new partition of a move, has nothing to be off by)."""
        p = self.partition(name)
        return p is None or p.calibrated

    def to_dict(self) -> dict[str, Any]:
        from slurmgpu.util.json_safe import json_safe

        t = self.tolerance
        return json_safe(
            {
                "tolerance": {
                    "wait_factor": t.wait_factor,
                    "wait_slack_s": t.wait_slack_s,
                    "allocation_points": t.allocation_points,
                },
                "by_partition": [p.to_dict() for p in self.by_partition],
            }
        )


def tolerance_of(objective: Any) -> Tolerance:
    """The calibration tolerance of the site's objective (`model.policy.Objective`)."""
    return Tolerance(
        wait_factor=objective.calibration_wait_factor,
        allocation_points=objective.calibration_allocation_points,
    )


def not_advised_text(partition: str, why: str) -> str:
    """The one wording for a change on a partition the replay cannot reproduce: `advise`
    rejects its candidates with it, `analyze` and `report` print it beside a recommendation."""
    return (
        f"not advised: partition {partition}'s baseline is off by more than the policy's "
        f"tolerance ({why})"
    )


def _summary(waits: np.ndarray) -> WaitSummary:
    w = waits[np.isfinite(waits)]
    if not len(w):
        return WaitSummary(None, None, None)
    p50, p95 = np.percentile(w, [50, 95])
    return WaitSummary(float(w.mean()), float(p50), float(p95))


def _ratio(block: ResultBlock | None, name: str) -> float | None:
    if block is None:
        return None
    row = next((p for p in block.by_partition if p.partition == name), None)
    return row.allocation_ratio if row else None


def _judge(rec: Side, base: Side, tol: Tolerance) -> tuple[float | None, str]:
    """(baseline / recorded mean wait, what is off or "")."""
    why = []
    factor = None
    r, b = rec.wait_s.mean, base.wait_s.mean
    if r is None:
        why.append("no recorded starts to compare with")
    elif b is None:
        why.append("no job started in the baseline replay")
    else:
        factor = b / r if r > 0 else (1.0 if b == 0 else float("inf"))
        close = abs(b - r) <= tol.wait_slack_s
        if not close and not (1 / tol.wait_factor <= factor <= tol.wait_factor):
            why.append(
                f"baseline mean wait {b:,.0f} s against {r:,.0f} s recorded "
                f"(x{factor:.2f}, tolerance x{tol.wait_factor:g})"
            )
    ra, ba = rec.allocation_ratio, base.allocation_ratio
    if ra is not None and ba is not None:
        points = 100 * abs(ba - ra)
        if points > tol.allocation_points:
            why.append(
                f"baseline allocation {100 * ba:.1f} % against {100 * ra:.1f} % recorded "
                f"({points:.1f} points, tolerance {tol.allocation_points:g})"
            )
    return factor, "; ".join(why)


def calibration_of(
    trace: ReplayTrace,
    outcome: ReplayOutcome,
    baseline: ResultBlock,
    recorded: ResultBlock | None,
    tolerance: Tolerance,
    owners: OwnersSource = None,
) -> Calibration:
    """Compare a baseline replay's outcome with the trace's recorded starts; each partition
    that is not calibrated gets its `Explanation` (`advice.explain`; `owners`: the jobs' users
    and accounts, or a loader of them called only then)."""
    rows = []
    rec_wait = trace.recorded_start_s - trace.submit_s
    base_wait = np.where(np.isfinite(outcome.start_s), outcome.start_s - trace.submit_s, np.nan)
    # a job cancelled while pending has no recorded wait to compare with
    base_wait[trace.cancelled_pending()] = np.nan
    for k, name in enumerate(trace.partitions):
        mine = trace.partition == k
        both = mine & np.isfinite(trace.recorded_start_s) & np.isfinite(outcome.start_s)
        rec = Side(_ratio(recorded, name), _summary(rec_wait[mine]))
        base = Side(_ratio(baseline, name), _summary(base_wait[mine]))
        order = (
            same_order_fraction(trace.recorded_start_s[both], outcome.start_s[both])
            if both.any()
            else None
        )
        factor, why = _judge(rec, base, tolerance)
        rows.append(
            PartitionFidelity(name, int(both.sum()), rec, base, order, factor, not why, why)
        )
    off = [p.partition for p in rows if not p.calibrated]
    if off:
        gpus = {p.partition: p.gpus for p in baseline.by_partition}
        found = explain(
            trace, outcome.start_s, off, gpus, resolve_owners(owners), tolerance.wait_slack_s
        )
        rows = [replace(p, explanation=found.get(p.partition)) for p in rows]
    return Calibration(tuple(rows), tolerance, baseline, recorded)


def calibrate_trace(
    trace: ReplayTrace,
    options: ReplayOptions,
    tolerance: Tolerance | None = None,
    owners: OwnersSource = None,
    inferred_load: bool = False,
) -> Calibration:
    """Replay the recorded window once (the baseline) and compare it with the record
    (`inferred_load`: then again holding each miss's unseen GPU-hours as background load)."""
    tolerance = tolerance or Tolerance()
    model = build_model(options)
    outcome = run_engine(trace, model, options.config)
    window = window_of(trace, outcome)
    gpus = {p.name: p.total_gpus for p in model.partitions}
    baseline = block_from_outcome("baseline", trace, outcome, gpus, window)
    recorded = recorded_block(trace, gpus, window)
    cal = calibration_of(trace, outcome, baseline, recorded, tolerance, owners)
    if inferred_load:
        cal = hold_inferred_load(trace, options, cal, owners)[2]
    return cal


def hold_inferred_load(
    trace: ReplayTrace, options: ReplayOptions, cal: Calibration, owners: OwnersSource = None
) -> tuple[ReplayTrace, ReplayOptions, Calibration]:
    """The trace with the unseen GPU-hours of each explained miss as background jobs
    (`advice.background`), the options whose model holds their QOS, and the calibration of
    the baseline replayed with them (their partitions marked `calibrated_on="inferred load"`,
    with the explanation the load came from). Unchanged when there is nothing to hold."""
    from slurmgpu.advice.background import background_qos, load_of, strip, with_background

    # where the replay is the slower one, more load would only take it further off
    explained = {
        p.partition: p.explanation
        for p in cal.by_partition
        if p.explanation and p.explanation.cause not in ("more-capacity", "replay-slower")
    }
    model = build_model(options)
    chunk = {p.name: max(p.nodes) for p in model.partitions if p.nodes}
    load = load_of(explained, chunk)
    if not load.hours:
        return trace, options, cal
    held = with_background(trace, load)
    options = replace(options, qos=background_qos(tuple(options.qos)))
    model = build_model(options)
    real, outcome = strip(held, run_engine(held, model, options.config))
    window = window_of(real, outcome)
    gpus = {p.name: p.total_gpus for p in model.partitions}
    baseline = block_from_outcome("baseline", real, outcome, gpus, window)
    recorded = recorded_block(real, gpus, window)
    again = calibration_of(real, outcome, baseline, recorded, cal.tolerance, owners)
    per = load.gpu_hours()
    rows = []
    for p in again.by_partition:
        if p.partition in per:
            first = cal.partition(p.partition)
            p = replace(
                p,
                calibrated_on="inferred load",
                inferred_gpu_hours=per[p.partition],
                explanation=first.explanation if first else p.explanation,
            )
        rows.append(p)
    return held, options, replace(again, by_partition=tuple(rows))


def calibrate(
    sacct_files: Sequence[str | os.PathLike[str]],
    options: ReplayOptions,
    tolerance: Tolerance | None = None,
    inferred_load: bool = False,
) -> Calibration:
    """`slurmgpu replay --calibrate`: load the dumps and calibrate the baseline on them."""
    options, trace = load_for_replay(sacct_files, options)
    return calibrate_trace(
        trace,
        options,
        tolerance,
        functools.cache(lambda: owners_from_history(trace, sacct_files, options)),
        inferred_load,
    )
