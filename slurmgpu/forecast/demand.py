"""GPU demand per partition as a time series: running + pending GPUs, bucket-averaged.

Demand at an instant = GPUs held by running jobs + GPUs requested by pending jobs. A run
holds its GPUs over [Start, End) (a running job: Start + Elapsed, the normalized `run_end`);
a job is pending over [Submit, Start), or [Submit, End) for one that never started (cancelled
while pending), or [Submit, the history's end) while still pending. Each `--freq` bucket gets
the exact time-weighted average of that step function: the integral over the bucket / its
length, computed from the intervals' cumulative integral at the bucket edges (no sampling).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from slurmgpu.accounting.runs import num
from slurmgpu.accounting.window import dt_column

SECOND = np.timedelta64(1, "s")


@dataclass(frozen=True)
class Intervals:
    """GPUs over [start, end) per interval, as seconds since the epoch (float arrays)."""

    partition: np.ndarray  # object: a label per interval
    start: np.ndarray
    end: np.ndarray
    gpus: np.ndarray
    pending: np.ndarray  # bool: a pending (requested) interval, not a running one


@dataclass(frozen=True)
class DemandSeries:
    """Bucket-averaged demand per partition on one time grid (bucket starts, UTC)."""

    times: np.ndarray  # datetime64[s], bucket starts
    freq_s: int
    running: dict[str, np.ndarray]
    pending: dict[str, np.ndarray]

    def demand(self, partition: str) -> np.ndarray:
        return self.running[partition] + self.pending[partition]

    @property
    def partitions(self) -> list[str]:
        return sorted(self.running)


def _seconds(t: np.ndarray) -> np.ndarray:
    out = (t - np.datetime64(0, "s")) / SECOND
    return np.where(np.isnat(t), np.nan, out.astype(float))


def intervals_of(frame: pd.DataFrame, until: np.datetime64) -> Intervals:
    """The run frame's running and pending intervals (`until`: the end of still-pending ones)."""
    submit, start = dt_column(frame, "submit"), dt_column(frame, "start")
    run_end, end = dt_column(frame, "run_end"), dt_column(frame, "end")
    held = np.nan_to_num(num(frame, "gpu_equiv"))
    tasks = num(frame, "array_pending_tasks")
    weight = np.where(np.isnan(tasks), 1.0, tasks)
    requested = np.where(held > 0, held, np.nan_to_num(num(frame, "req_gpus")) * weight)
    part = frame["partition"].to_numpy(dtype=object, na_value="")
    ran = ~np.isnat(start) & ~np.isnat(run_end) & (held > 0)
    wait_end = np.where(np.isnat(start), np.where(np.isnat(end), until, end), start)
    waited = ~np.isnat(submit) & (requested > 0)
    return Intervals(
        partition=np.concatenate([part[ran], part[waited]]),
        start=np.concatenate([_seconds(start[ran]), _seconds(submit[waited])]),
        end=np.concatenate([_seconds(run_end[ran]), _seconds(wait_end[waited])]),
        gpus=np.concatenate([held[ran], requested[waited]]),
        pending=np.concatenate([np.zeros(int(ran.sum()), bool), np.ones(int(waited.sum()), bool)]),
    )


def bucket_average(
    start: np.ndarray, end: np.ndarray, gpus: np.ndarray, edges: np.ndarray
) -> np.ndarray:
    """Exact time-weighted average of sum(gpus over [start, end)) in each [edges[k], edges[k+1]).

    F(t) = sum g * clip(t - s, 0, e - s) is the demand's integral up to t; a bucket's average is
    (F(right) - F(left)) / width. F at every edge: sort the +g/-g events, accumulate the rate and
    the integral at the events, then interpolate linearly to the edges (F is piecewise linear).
    """
    keep = (end > start) & (gpus != 0) & np.isfinite(start) & np.isfinite(end)
    s, e, g = start[keep], end[keep], gpus[keep]
    if len(s) == 0:
        return np.zeros(len(edges) - 1)
    t = np.concatenate([s, e])
    dg = np.concatenate([g, -g])
    order = np.argsort(t, kind="stable")
    t, dg = t[order], dg[order]
    rate = np.cumsum(dg)  # demand just after each event
    integral = np.concatenate([[0.0], np.cumsum(rate[:-1] * np.diff(t))])  # F at each event
    idx = np.searchsorted(t, edges, side="right") - 1
    before = idx < 0
    i = np.maximum(idx, 0)
    f = np.where(before, 0.0, integral[i] + rate[i] * (edges - t[i]))
    return np.diff(f) / np.diff(edges)


def demand_series(
    frame: pd.DataFrame, since: np.datetime64, until: np.datetime64, freq_s: int
) -> DemandSeries:
    """Demand per partition over the whole buckets of [since, until), the grid aligned to UTC
    multiples of `freq_s` (the first bucket starts at or after `since`)."""
    lo = int(np.ceil(((since - np.datetime64(0, "s")) / SECOND) / freq_s)) * freq_s
    hi = int(((until - np.datetime64(0, "s")) / SECOND) // freq_s) * freq_s
    n = max((hi - lo) // freq_s, 0)
    edges = lo + freq_s * np.arange(n + 1, dtype=float)
    iv = intervals_of(frame, until)
    running: dict[str, np.ndarray] = {}
    pending: dict[str, np.ndarray] = {}
    for part in sorted(set(iv.partition.tolist())):
        mine = iv.partition == part
        for pend, out in ((False, running), (True, pending)):
            m = mine & (iv.pending == pend)
            out[part] = (
                bucket_average(iv.start[m], iv.end[m], iv.gpus[m], edges) if n else np.zeros(0)
            )
    times = (np.datetime64(0, "s") + (edges[:-1].astype(np.int64)) * SECOND).astype("datetime64[s]")
    return DemandSeries(times=times, freq_s=freq_s, running=running, pending=pending)
