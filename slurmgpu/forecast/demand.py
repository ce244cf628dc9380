"""GPU demand per partition as a time series: running + pending GPUs, bucket-averaged.

Demand at an instant = GPUs held by running jobs + GPUs requested by pending jobs. A run
holds its GPUs over [Start, End) (a running job: Start + Elapsed, the normalized `run_end`);
a job is pending over [Submit, Start), or [Submit, End) for one that never started (cancelled
while pending), or [Submit, the history's end) while still pending. Each `--freq` bucket gets
the exact time-weighted average of that step function: the integral over the bucket / its
length, computed from the intervals' cumulative integral at the bucket edges (no sampling).

By slice (`--by slice`), each interval also carries the slice size it holds or asks for:
`gpu` (whole GPUs), `Ng` (a MIG instance of N compute slices, from the run's MIG GRES type),
`shard` (gres/shard). Values stay GPU equivalents, so a partition's slices sum to its demand.

With `need_models` ({partition: MIG-capable GpuModel}, what autopilot passes), a whole-GPU
run on one GPU whose measured GPU memory (`gpu_mem_used_mib`, x 1.10 headroom as
`mig plan`'s measured demand) fits a smaller MIG slice of its partition's model counts as that
slice, at the slice's GPU equivalents (N / the model's compute slices): the demand it would
make on slices, not the whole GPU it was given. Such a partition's series then sum to less
than the GPUs it held.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from slurmgpu.accounting.columns import objects
from slurmgpu.accounting.runs import num
from slurmgpu.accounting.window import dt_column

SECOND = np.timedelta64(1, "s")
WHOLE, SHARD = "gpu", "shard"
_MIG_SIZE = re.compile(r"^([1-7])g\.")


@dataclass(frozen=True)
class Intervals:
    """GPUs over [start, end) per interval, as seconds since the epoch (float arrays)."""

    partition: np.ndarray  # object: a label per interval
    start: np.ndarray
    end: np.ndarray
    gpus: np.ndarray
    pending: np.ndarray  # bool: a pending (requested) interval, not a running one
    slice: np.ndarray  # object: `gpu`, `1g`..`7g`, `shard` (see `slice_of`)


@dataclass(frozen=True)
class DemandSeries:
    """Bucket-averaged demand on one time grid (bucket starts, UTC), per key: a partition,
    or (partition, slice) for a series by slice."""

    times: np.ndarray  # datetime64[s], bucket starts
    freq_s: int
    running: dict[Key, np.ndarray]
    pending: dict[Key, np.ndarray]

    def demand(self, key: Key) -> np.ndarray:
        return self.running[key] + self.pending[key]

    @property
    def partitions(self) -> list[Key]:
        """The keys in order: partitions by name; slices `gpu`, `1g`..`7g`, `shard` in each."""
        return sorted(self.running, key=_order)


Key = str | tuple[str, str]


def slice_order(name: str) -> tuple[int, int]:
    m = re.fullmatch(r"([1-7])g", name)
    return (1, int(m.group(1))) if m else ((0, 0) if name == WHOLE else (2, 0))


def _order(key: Key) -> tuple:
    return (key, (0, 0)) if isinstance(key, str) else (key[0], slice_order(key[1]))


def _seconds(t: np.ndarray) -> np.ndarray:
    out = (t - np.datetime64(0, "s")) / SECOND
    return np.where(np.isnat(t), np.nan, out.astype(float))


def fraction_slice(per_task: np.ndarray) -> np.ndarray:
    """The slice a request of `per_task` GPU equivalents asks for (pending jobs: the frame
    keeps only ReqTRES's GPU equivalents, a MIG slice being N/7 of a GPU, N/4 on an A30):
    a whole number (or nothing) -> `gpu`, k/7 or k/4 -> `kg`, any other fraction -> `shard`."""
    out = np.full(len(per_task), WHOLE, dtype=object)
    frac = (per_task > 0) & (per_task < 1.0 - 1e-9)
    open_ = frac.copy()
    for per_gpu in (7, 4):
        k = per_task * per_gpu
        hit = open_ & (np.abs(k - np.round(k)) < 1e-6)
        out[hit] = np.char.add(np.round(k[hit]).astype(int).astype(str), "g").astype(object)
        open_ &= ~hit
    out[open_] = SHARD
    return out


def slice_of(frame: pd.DataFrame, requested_per_task: np.ndarray) -> np.ndarray:
    """Per run: the slice size it held, else the one it asked for. A MIG GRES type
    (`1g.10gb`, `nvidia_a100_3g.40gb`) -> `Ng`; shards only -> `shard`; else `gpu`; a run that
    never started -> from its requested GPU equivalents (`fraction_slice`)."""
    mig = pd.Series(objects(frame, "mig_profile", None), dtype="string")
    size = mig.str.extract(_MIG_SIZE)[0].to_numpy(dtype=object, na_value=None)
    shards = np.nan_to_num(num(frame, "shards"))
    count = np.nan_to_num(num(frame, "gpu_count"))
    held = np.nan_to_num(num(frame, "gpu_equiv")) > 0
    out = np.where(held, WHOLE, fraction_slice(np.nan_to_num(requested_per_task))).astype(object)
    out[held & (shards > 0) & (count == 0)] = SHARD
    mig_held = held & pd.notna(size)
    out[mig_held] = np.char.add(size[mig_held].astype(str), "g").astype(object)
    return out


NEED_HEADROOM = 1.10  # as mig.demand.MEMORY_MARGIN (mig/ is above forecast/ in the floors)


def need_slices(
    frame: pd.DataFrame, need_models: Mapping[str, Any]
) -> tuple[np.ndarray, np.ndarray]:
    """(slice size or None, GPU equivalents) per run: a whole 1-GPU run of a partition in
    `need_models` whose measured memory fits a smaller MIG slice of that model."""
    n = len(frame)
    size = np.full(n, None, dtype=object)
    equiv = np.full(n, np.nan)
    mem = num(frame, "gpu_mem_used_mib")
    count = np.nan_to_num(num(frame, "gpu_count"))
    mig = objects(frame, "mig_profile", None)
    part = frame["partition"].to_numpy(dtype=object, na_value="")
    for i in np.flatnonzero((count == 1) & np.isfinite(mem) & (mem > 0)):
        model = need_models.get(part[i])
        if model is None or (isinstance(mig[i], str) and mig[i]):
            continue
        fits = [
            p
            for p in model.mig_profiles
            if not p.media_extensions and p.memory_mib >= mem[i] * NEED_HEADROOM
        ]
        best = min(fits, key=lambda p: (p.gpu_slices, p.memory_slices), default=None)
        if best is not None and best.gpu_slices < model.compute_slices:
            size[i] = f"{best.gpu_slices}g"
            equiv[i] = best.gpu_slices / model.compute_slices
    return size, equiv


def intervals_of(
    frame: pd.DataFrame, until: np.datetime64, need_models: Mapping[str, Any] | None = None
) -> Intervals:
    """The run frame's running and pending intervals (`until`: the end of still-pending ones;
    `need_models`: slices by measured need, see the module's doc)."""
    submit, start = dt_column(frame, "submit"), dt_column(frame, "start")
    run_end, end = dt_column(frame, "run_end"), dt_column(frame, "end")
    held = np.nan_to_num(num(frame, "gpu_equiv"))
    tasks = num(frame, "array_pending_tasks")
    weight = np.where(np.isnan(tasks), 1.0, tasks)
    per_task = np.nan_to_num(num(frame, "req_gpus"))
    requested = np.where(held > 0, held, per_task * weight)
    sizes = slice_of(frame, per_task)
    if need_models:
        need, equiv = need_slices(frame, need_models)
        hit = pd.notna(need) & (held > 0)
        sizes = np.where(hit, need, sizes).astype(object)
        held = np.where(hit, equiv, held)
        requested = np.where(hit, equiv, requested)
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
        slice=np.concatenate([sizes[ran], sizes[waited]]),
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
    frame: pd.DataFrame,
    since: np.datetime64,
    until: np.datetime64,
    freq_s: int,
    by_slice: bool = False,
    need_models: Mapping[str, Any] | None = None,
    check: Callable[[int, int], None] | None = None,
) -> DemandSeries:
    """Demand per partition (or per (partition, slice)) over the whole buckets of
    [since, until), the grid aligned to UTC multiples of `freq_s` (the first bucket starts at
    or after `since`). `check(buckets, series)` is called before the grid is allocated (the
    forecast's memory bound raises there)."""
    lo = int(np.ceil(((since - np.datetime64(0, "s")) / SECOND) / freq_s)) * freq_s
    hi = int(((until - np.datetime64(0, "s")) / SECOND) // freq_s) * freq_s
    n = max((hi - lo) // freq_s, 0)
    iv = intervals_of(frame, until, need_models if by_slice else None)
    running: dict[Key, np.ndarray] = {}
    pending: dict[Key, np.ndarray] = {}
    if by_slice:
        groups = sorted(set(zip(iv.partition.tolist(), iv.slice.tolist(), strict=True)))
        masks = [((p, k), (iv.partition == p) & (iv.slice == k)) for p, k in groups]
    else:
        masks = [(p, iv.partition == p) for p in sorted(set(iv.partition.tolist()))]
    if check is not None:
        check(n, len(masks))
    edges = lo + freq_s * np.arange(n + 1, dtype=float)
    for part, mine in masks:
        for pend, out in ((False, running), (True, pending)):
            m = mine & (iv.pending == pend)
            out[part] = (
                bucket_average(iv.start[m], iv.end[m], iv.gpus[m], edges) if n else np.zeros(0)
            )
    times = (np.datetime64(0, "s") + (edges[:-1].astype(np.int64)) * SECOND).astype("datetime64[s]")
    return DemandSeries(times=times, freq_s=freq_s, running=running, pending=pending)
