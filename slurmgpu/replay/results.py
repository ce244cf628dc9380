"""What a replay (or the recorded history) amounts to: typed result blocks, side by side.

Every block is measured over the same window (the trace's: first submit to last recorded end,
else the baseline's last end), so scenarios compare on equal terms; GPU-hours outside the window
are reported separately, not dropped.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from slurmgpu.replay.engine import CANCELLED, DONE, UNRUNNABLE, ReplayOutcome
from slurmgpu.replay.jobs import ReplayTrace

TIMESERIES_POINTS = 96


@dataclass(frozen=True)
class Waits:
    """Queue waits (seconds) of the jobs that started."""

    p50: float | None
    p95: float | None
    max: float | None
    mean: float | None
    jobs: int

    @classmethod
    def of(cls, waits: np.ndarray) -> Waits:
        w = waits[~np.isnan(waits)]
        if not len(w):
            return cls(None, None, None, None, 0)
        p50, p95 = np.percentile(w, [50, 95])
        return cls(float(p50), float(p95), float(w.max()), float(w.mean()), len(w))


@dataclass(frozen=True)
class PartitionResult:
    partition: str
    gpus: int
    gpu_hours_allocated: float
    allocation_ratio: float | None
    wait_s: Waits


@dataclass(frozen=True)
class TierResult:
    tier: str
    wait_s: Waits


@dataclass(frozen=True)
class ResultBlock:
    """One column of the comparison: recorded history, the baseline, or a scenario."""

    label: str
    gpus: int
    window_hours: float
    gpu_hours_allocated: float
    allocation_ratio: float | None
    useful_gpu_hours: float
    gpu_hours_after_window: float
    wait_s: Waits
    jobs: int
    jobs_started: int
    jobs_not_run: int
    not_run_reasons: dict[str, int]
    preemptions: int
    gpu_hours_lost: float
    jobs_on_slices: int
    by_partition: tuple[PartitionResult, ...]
    by_tier: tuple[TierResult, ...]
    utilization: tuple[float, ...] = field(default=(), repr=False)  # share of GPUs, per bucket
    change: str | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        if self.change is None:
            d.pop("change")
        return d


@dataclass(frozen=True)
class Window:
    since_s: float
    until_s: float

    @property
    def hours(self) -> float:
        return max(self.until_s - self.since_s, 0.0) / 3600.0


def window_of(trace: ReplayTrace, baseline: ReplayOutcome | None = None) -> Window:
    """First submit to the last recorded end (or the baseline's last end)."""
    if not len(trace):
        return Window(0.0, 0.0)
    since = float(np.nanmin(trace.submit_s))
    ends = trace.recorded_end_s[~np.isnan(trace.recorded_end_s)]
    if len(ends):
        until = float(ends.max())
    elif baseline is not None and np.isfinite(baseline.end_s).any():
        until = float(baseline.end_s[np.isfinite(baseline.end_s)].max())
    else:
        until = since
    return Window(since, max(until, since))


def _clip_hours(start, end, equiv, window: Window) -> tuple[np.ndarray, np.ndarray]:
    s = np.clip(start, window.since_s, window.until_s)
    e = np.clip(end, window.since_s, window.until_s)
    inside = np.maximum(e - s, 0) * equiv / 3600.0
    total = np.maximum(end - start, 0) * equiv / 3600.0
    return inside, total


def _utilization(start, end, equiv, window: Window, gpus: int) -> tuple[float, ...]:
    """Share of the GPUs allocated in each of TIMESERIES_POINTS equal buckets of the window."""
    if window.hours <= 0 or gpus <= 0 or not len(start):
        return ()
    edges = np.linspace(window.since_s, window.until_s, TIMESERIES_POINTS + 1)
    width = edges[1] - edges[0]
    busy = np.zeros(TIMESERIES_POINTS)
    s = np.clip(start, window.since_s, window.until_s)
    e = np.clip(end, window.since_s, window.until_s)
    # integral of allocated GPUs up to each edge = sum over runs of equiv * overlap(0, edge)
    order_s, order_e = np.argsort(s), np.argsort(e)
    cs = np.concatenate([[0.0], np.cumsum((equiv * s)[order_s])])
    ce = np.concatenate([[0.0], np.cumsum((equiv * e)[order_e])])
    ws = np.concatenate([[0.0], np.cumsum(equiv[order_s])])
    we = np.concatenate([[0.0], np.cumsum(equiv[order_e])])
    ks = np.searchsorted(s[order_s], edges, side="right")
    ke = np.searchsorted(e[order_e], edges, side="right")
    # started before x: contributes min(e, x) - s; split by whether it already ended
    integral = (ce[ke] - cs[ks]) + edges * (ws[ks] - we[ke])
    busy = np.diff(integral) / (width * gpus)
    return tuple(float(round(v, 4)) for v in busy)


def block_from_outcome(
    label: str,
    trace: ReplayTrace,
    outcome: ReplayOutcome,
    gpus_by_partition: dict[str, int],
    window: Window,
    change: str | None = None,
) -> ResultBlock:
    """A replay's result block."""
    runs = outcome.runs
    start, end = np.array(runs.start, float), np.array(runs.end, float)
    equiv = np.array(runs.equiv, float)
    part = np.array(runs.partition, np.int64)
    preempted = np.array(runs.preempted, bool)
    inside, total = _clip_hours(start, end, equiv, window)
    job = np.array(runs.job, np.int64)
    rate = _useful_rate(trace, job, equiv)
    useful = float((inside * rate)[~preempted].sum())
    waits = outcome.start_s - trace.submit_s
    waits[~np.isfinite(outcome.start_s)] = np.nan
    started = np.isfinite(outcome.start_s)
    not_run = int(np.isin(outcome.state, (UNRUNNABLE, CANCELLED)).sum())
    reasons = dict(outcome.unrunnable_reasons)
    unfinished = int((~np.isin(outcome.state, (DONE, UNRUNNABLE, CANCELLED))).sum())
    if unfinished:
        reasons["never finished in the replay"] = unfinished
        not_run += unfinished
    by_part = []
    for k, name in enumerate(trace.partitions):
        gpus = gpus_by_partition.get(name, 0)
        hours = float(inside[part == k].sum())
        by_part.append(
            PartitionResult(
                name,
                gpus,
                hours,
                hours / (gpus * window.hours) if gpus and window.hours else None,
                Waits.of(waits[trace.partition == k]),
            )
        )
    for name, gpus in sorted(gpus_by_partition.items()):  # partitions with no jobs (a move)
        if name not in trace.partitions:
            by_part.append(PartitionResult(name, gpus, 0.0, 0.0, Waits.of(np.array([]))))
    total_gpus = sum(gpus_by_partition.values())
    allocated = float(inside.sum())
    return ResultBlock(
        label=label,
        gpus=total_gpus,
        window_hours=window.hours,
        gpu_hours_allocated=allocated,
        allocation_ratio=allocated / (total_gpus * window.hours)
        if total_gpus and window.hours
        else None,
        useful_gpu_hours=useful,
        gpu_hours_after_window=float(total.sum() - inside.sum()),
        wait_s=Waits.of(waits),
        jobs=len(trace),
        jobs_started=int(started.sum()),
        jobs_not_run=not_run,
        not_run_reasons=reasons,
        preemptions=outcome.preemptions,
        gpu_hours_lost=float(total[preempted].sum()),
        jobs_on_slices=int(outcome.on_slice.sum()),
        by_partition=tuple(by_part),
        by_tier=tuple(
            TierResult(name, Waits.of(waits[trace.tier == k]))
            for k, name in enumerate(trace.tier_names)
        ),
        utilization=_utilization(start, end, equiv, window, total_gpus),
        change=change,
    )


def _useful_rate(trace: ReplayTrace, job: np.ndarray, equiv: np.ndarray) -> np.ndarray | float:
    """Per run: the share of the run's allocation its job's measured need fills, <= 1. The
    need is in GPU equivalents (a 5 GB job on an 80 GB GPU: 0.06 of a GPU), so a job the
    replay puts on a 1/7 slice fills that slice, not 0.06 of it); unmeasured: all of it."""
    if not len(job):
        return 1.0
    need = np.asarray(trace.need_gpu, float)[np.maximum(job, 0)]
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(equiv > 0, need / equiv, 1.0)
    rate = np.clip(np.nan_to_num(rate, nan=1.0), 0.0, 1.0)
    return np.where(job >= 0, rate, 1.0)


def recorded_block(
    trace: ReplayTrace, gpus_by_partition: dict[str, int], window: Window
) -> ResultBlock | None:
    """The recorded history as a block (None when the trace has no recorded starts)."""
    from slurmgpu.replay.engine import RunLog

    start, end = trace.recorded_start_s, trace.recorded_end_s
    ran = ~np.isnan(start)
    if not ran.any():
        return None
    rec = trace.recorded_runs
    if rec is None:  # records without their runs: one run each, start to end
        idx = np.flatnonzero(ran & ~np.isnan(end))
        equiv = np.where(np.isnan(trace.gpu_equiv), trace.gpus, trace.gpu_equiv)
        runs = RunLog(
            job=idx.tolist(),
            start=start[idx].tolist(),
            end=end[idx].tolist(),
            equiv=equiv[idx].tolist(),
            partition=trace.partition[idx].tolist(),
            preempted=[False] * len(idx),
        )
    else:
        ok = ~np.isnan(rec.end_s) & (rec.partition >= 0)
        jobs = rec.job[ok].tolist() if rec.job is not None else [-1] * int(ok.sum())
        runs = RunLog(
            job=jobs,
            start=rec.start_s[ok].tolist(),
            end=rec.end_s[ok].tolist(),
            equiv=rec.equiv[ok].tolist(),
            partition=rec.partition[ok].tolist(),
            preempted=rec.preempted[ok].tolist(),
        )
    state = np.where(ran, DONE, CANCELLED).astype(np.int8)
    outcome = ReplayOutcome(
        start_s=np.where(ran, start, np.inf),
        end_s=np.where(ran, end, np.inf),
        state=state,
        on_slice=np.zeros(len(trace), bool),
        runs=runs,
        preemptions=int(trace.recorded_preemptions.sum()),
        unrunnable_reasons={"never started in the recorded history": int((~ran).sum())}
        if (~ran).any()
        else {},
    )
    return block_from_outcome("recorded", trace, outcome, gpus_by_partition, window)
