"""Metrics over the normalized allocation frame: per group, over the window and in time.

Definitions (docs/accounting.md is the reference):

- GPU-hours allocated: physical-GPU equivalents (MIG slices and shards as fractions) x run time,
  clipped to the analysis window, on allocation rows (steps never add GPU-hours).
- Utilization: the highest `gres/gpuutil` over a run's steps (a high-water mark, not a time
  average; Slurm >= 24.05 sums over a step's GPUs, so values > 100 are divided by the GPU
  count). Unknown (null) when no step reported it: never 0.
- Waste: allocated GPU-hours x (1 - utilization) where utilization is known; null otherwise.
- Waits: Start - Submit of runs that started (a requeued run's Submit is its requeue time).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import pandas as pd

from slurmgpu.model.catalog import model_for_type

FIT_FRACTIONS = {"1/7": 1 / 7, "1/4": 1 / 4, "1/2": 1 / 2}
# a job whose measured GPU memory is below this share of what it was given counts as
# "memory far below the slice" (a 1g slice would still hold it with room to spare)
LOW_MEMORY_SHARE = 0.25
# the time series uses hourly buckets for windows up to this long, daily beyond
HOURLY_MAX_DAYS = 3


@dataclass(frozen=True)
class Window:
    """The analysis window [since, until) as naive-UTC numpy datetimes."""

    since: np.datetime64
    until: np.datetime64

    @property
    def hours(self) -> float:
        return float((self.until - self.since) / np.timedelta64(1, "s")) / 3600.0

    def iso(self) -> dict[str, str]:
        def fmt(t: np.datetime64) -> str:
            ts = pd.Timestamp(t).to_pydatetime().replace(tzinfo=UTC)
            return ts.isoformat().replace("+00:00", "Z")

        return {"since": fmt(self.since), "until": fmt(self.until)}


def window_for(frame: pd.DataFrame, since: datetime | None, until: datetime | None) -> Window:
    """The given window, or (for files) the span the data covers."""

    def to64(t: datetime) -> np.datetime64:
        if t.tzinfo is not None:
            t = t.astimezone(UTC).replace(tzinfo=None)
        return np.datetime64(t, "s")

    starts = _dt(frame, "start")
    ends = _dt(frame, "run_end")
    submits = _dt(frame, "submit")
    known = np.concatenate([starts[~np.isnat(starts)], submits[~np.isnat(submits)]])
    lo = to64(since) if since else (known.min() if len(known) else np.datetime64(0, "s"))
    ends_known = ends[~np.isnat(ends)]
    hi = to64(until) if until else (ends_known.max() if len(ends_known) else lo)
    if hi <= lo:
        hi = lo + np.timedelta64(1, "s")
    return Window(lo, hi)


def _dt(frame: pd.DataFrame, col: str) -> np.ndarray:
    return frame[col].to_numpy(dtype="datetime64[s]", na_value=np.datetime64("NaT"))


def _num(frame: pd.DataFrame, col: str) -> np.ndarray:
    return frame[col].to_numpy(dtype=float, na_value=np.nan)


def prepare(
    frame: pd.DataFrame, window: Window, gpu_mem_mib: np.ndarray | None = None
) -> pd.DataFrame:
    """Per-run working columns: window-clipped GPU-hours, normalized utilization, flags.

    `gpu_mem_mib` (memory of one GPU of each run's type) gives `mem_share`, the measured GPU
    memory over the memory the run was given (NaN when either is unknown).
    """
    f = pd.DataFrame(index=frame.index)
    start, end = _dt(frame, "start"), _dt(frame, "run_end")
    s = np.maximum(start, window.since)
    e = np.minimum(end, window.until)
    overlap = (e - s) / np.timedelta64(1, "s")
    overlap = np.where(np.isnat(start) | np.isnat(end), 0.0, np.maximum(overlap.astype(float), 0))
    gpus = np.nan_to_num(_num(frame, "gpu_equiv"))
    f["gpu_hours"] = gpus * overlap / 3600.0
    util = _num(frame, "gpu_util_pct")
    count = np.maximum(np.nan_to_num(_num(frame, "gpu_count")), 1)
    f["util"] = np.minimum(np.where(util > 100, util / count, util), 100.0)
    state = frame["state"].to_numpy(dtype=object, na_value="")
    key = ["cluster", "job_id_raw", "job_id"]
    later_run = frame.duplicated(key, keep="last").to_numpy(dtype=bool)
    rerun = frame.duplicated(key, keep="first").to_numpy(dtype=bool)
    f["preempted"] = state == "PREEMPTED"
    f["requeued"] = (state == "REQUEUED") | later_run
    pending_tasks = _num(frame, "array_pending_tasks")
    weight = np.where(np.isnan(pending_tasks), 1.0, pending_tasks)
    counts = frame["counts_as_job"].to_numpy(dtype=bool, na_value=True) & ~rerun
    f["job_weight"] = np.where(counts, weight, 0.0)
    f["pending"] = np.where(state == "PENDING", weight, 0.0)
    f["gpu_job"] = frame["gpu_job"].to_numpy(dtype=bool, na_value=False)
    f["wait_s"] = np.where(np.isnat(start), np.nan, _num(frame, "wait_s"))
    f["start"] = start
    f["end"] = end
    f["gpus"] = gpus
    if gpu_mem_mib is None:
        gpu_mem_mib = np.full(len(frame), np.nan)
    given = gpu_mem_mib * np.where(gpus > 0, gpus, np.nan)
    f["mem_share"] = _num(frame, "gpu_mem_used_mib") / given
    return f


def _group_percentiles(
    codes: np.ndarray, values: np.ndarray, n: int, qs: Sequence[float]
) -> list[np.ndarray]:
    """Per-group percentiles (numpy's default linear interpolation) of non-NaN values, all groups
    at once: sort by (group, value), then index each group's run of sorted values."""
    ok = ~np.isnan(values)
    c, v = codes[ok], values[ok]
    order = np.lexsort((v, c))
    c, v = c[order], v[order]
    count = np.bincount(c, minlength=n)
    start = np.concatenate([[0], np.cumsum(count)[:-1]])
    out = []
    for q in qs:
        pos = start + q * np.maximum(count - 1, 0)
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, start + np.maximum(count - 1, 0))
        frac = pos - lo
        if len(v):
            lo_c, hi_c = np.clip(lo, 0, len(v) - 1), np.clip(hi, 0, len(v) - 1)
            val = v[lo_c] + (v[hi_c] - v[lo_c]) * frac
        else:
            val = np.zeros(n)
        out.append(np.where(count > 0, val, np.nan))
    return out


def _opt(x: float) -> float | None:
    return None if np.isnan(x) else float(x)


def summarize_groups(
    w: pd.DataFrame,
    codes: np.ndarray,
    n: int,
    capacity_gpus: Sequence[float | None],
    window: Window,
) -> list[dict]:
    """The numbers of each group 0..n-1 (runs labelled by `codes`), computed together.

    The keys of a by_* entry; docs/accounting.md defines each.
    """
    gh = w["gpu_hours"].to_numpy()
    util = w["util"].to_numpy()

    def total(weights: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        if mask is not None:
            weights = np.where(mask, weights, 0.0)
        return np.bincount(codes, weights=weights, minlength=n)

    known = ~np.isnan(util) & (gh > 0)
    n_known = total(known.astype(float))
    u = np.nan_to_num(util)
    used = total(gh * u / 100, known)
    known_h = total(gh, known)
    share = w["mem_share"].to_numpy() if "mem_share" in w else np.full(len(w), np.nan)
    mem_known = ~np.isnan(share) & (gh > 0)
    n_mem = total(mem_known.astype(float))
    low_mem = total(gh, mem_known & (np.nan_to_num(share, nan=1.0) < LOW_MEMORY_SHARE))
    jobs = total(w["job_weight"].to_numpy())
    gpu_jobs = total(w["job_weight"].to_numpy(), w["gpu_job"].to_numpy())
    pending = total(w["pending"].to_numpy())
    alloc = total(gh)
    pre = w["preempted"].to_numpy()
    req = w["requeued"].to_numpy()
    pre_n, req_n = total(pre.astype(float)), total(req.astype(float))
    lost_pre = total(gh, pre)
    lost_req = total(gh, req & ~pre)
    wait = w["wait_s"].to_numpy()
    p50, p95, pmax = _group_percentiles(codes, wait, n, (0.5, 0.95, 1.0))
    out = []
    for i in range(n):
        cap = capacity_gpus[i]
        cap_h = cap * window.hours if cap is not None else None
        has_util = n_known[i] > 0
        out.append(
            {
                "jobs": round(float(jobs[i])),
                "gpu_jobs": round(float(gpu_jobs[i])),
                "pending_jobs": round(float(pending[i])),
                "gpu_hours_allocated": float(alloc[i]),
                "gpu_hours_used": float(used[i]) if has_util else None,
                "capacity_gpu_hours": cap_h,
                "allocation_ratio": float(alloc[i] / cap_h) if cap_h else None,
                "gpu_util_mean": float(100 * used[i] / known_h[i]) if has_util else None,
                "util_known_gpu_hours": float(known_h[i]),
                "waste_gpu_hours": float(known_h[i] - used[i]) if has_util else None,
                "low_memory_gpu_hours": float(low_mem[i]) if n_mem[i] > 0 else None,
                "wait_s": {"p50": _opt(p50[i]), "p95": _opt(p95[i]), "max": _opt(pmax[i])},
                "preemptions": int(pre_n[i]),
                "requeues": int(req_n[i]),
                "gpu_hours_lost_to_preemption": float(lost_pre[i]),
                "gpu_hours_lost_to_requeue": float(lost_req[i]),
            }
        )
    return out


def summarize(w: pd.DataFrame, capacity_gpus: float | None, window: Window) -> dict:
    """One group's numbers: all runs of `w` together."""
    return summarize_groups(w, np.zeros(len(w), dtype=np.int64), 1, [capacity_gpus], window)[0]


def by_group(
    frame: pd.DataFrame,
    work: pd.DataFrame,
    column: str,
    window: Window,
    capacity: Mapping[str, float] | None = None,
    extra: Sequence[str] = (),
) -> list[dict]:
    """The numbers per value of `column` (sorted by GPU-hours, then name).

    Partitions with known capacity and no run in the window are listed too (idle is news).
    """
    keys = frame[column].to_numpy(dtype=object, na_value="")
    codes, uniques = pd.factorize(keys)
    names = [str(u) for u in uniques]
    names += sorted(set(capacity or {}) - set(names))
    n = len(names)
    caps = [capacity.get(v) if capacity is not None else None for v in names]
    stats = summarize_groups(work, codes.astype(np.int64), n, caps, window)
    out = []
    for i, (name, entry) in enumerate(zip(names, stats, strict=True)):
        entry = {column: name, **entry}
        for col in extra:
            if i < len(uniques):
                vals = pd.unique(frame[col].to_numpy(dtype=object, na_value="")[codes == i])
                entry[col] = vals[0] if len(vals) == 1 else ",".join(sorted(map(str, vals)))
            else:
                entry[col] = ""
        out.append(entry)
    out.sort(key=lambda e: (-e["gpu_hours_allocated"], str(e[column])))
    return out


def timeseries(
    work: pd.DataFrame,
    window: Window,
    capacity_gpus: float | None,
    freq: str | None = None,
    partitions: np.ndarray | None = None,
) -> dict:
    """GPU-hours per bucket, each run split across the buckets it spans (exactly, vectorized).

    With G(t) = sum_j g_j * |[s_j, e_j] ∩ (-inf, t]|, a bucket's GPU-hours is G(b1) - G(b0);
    G is evaluated at every edge from cumulative sums over runs sorted by start and by end.
    """
    if freq is None:
        freq = "1h" if window.hours <= HOURLY_MAX_DAYS * 24 else "1D"
    step = np.timedelta64(1, "h") if freq == "1h" else np.timedelta64(1, "D")
    first = window.since.astype(f"datetime64[{'h' if freq == '1h' else 'D'}]").astype(
        "datetime64[s]"
    )
    edges = np.arange(first, window.until + step, step).astype("datetime64[s]")
    edges = np.clip(edges, window.since, window.until)
    edges = np.unique(edges)
    s = np.maximum(work["start"].to_numpy(), window.since)
    e = np.minimum(work["end"].to_numpy(), window.until)
    g = work["gpus"].to_numpy()
    ok = ~np.isnat(s) & ~np.isnat(e) & (e > s) & (g > 0)

    def integral(mask: np.ndarray) -> np.ndarray:
        origin = window.since.astype("int64")  # small numbers keep the sums exact
        ss = (s[mask].astype("int64") - origin).astype(float)
        ee = (e[mask].astype("int64") - origin).astype(float)
        gg = g[mask]
        t = (edges.astype("int64") - origin).astype(float)

        def ramp(points: np.ndarray) -> np.ndarray:  # sum_j g_j * max(0, t - p_j)
            order = np.argsort(points)
            p, w = points[order], gg[order]
            cw = np.concatenate([[0.0], np.cumsum(w)])
            cwp = np.concatenate([[0.0], np.cumsum(w * p)])
            k = np.searchsorted(p, t, side="right")
            return t * cw[k] - cwp[k]

        big = ramp(ss) - ramp(ee)
        return np.diff(big) / 3600.0

    total = integral(ok)
    per_part: dict[str, np.ndarray] = {}
    if partitions is not None:
        for p in pd.unique(partitions[ok]):
            per_part[str(p)] = integral(ok & (partitions == p))
    points = []
    bucket_h = np.diff(edges.astype("int64")).astype(float) / 3600.0
    for i in range(len(edges) - 1):
        cap = capacity_gpus * bucket_h[i] if capacity_gpus is not None else None
        alloc = float(total[i])
        t = pd.Timestamp(edges[i]).isoformat() + "Z"
        points.append(
            {
                "t": t,
                "gpu_hours_allocated": alloc,
                "capacity_gpu_hours": cap,
                "allocation_ratio": alloc / cap if cap else None,
                "by_partition": {p: float(v[i]) for p, v in sorted(per_part.items())},
            }
        )
    return {"freq": freq, "points": points}


def gpu_memory_mib(
    frame: pd.DataFrame,
    partition_types: Mapping[str, str],
    type_memory_mib: Mapping[str, float] | None = None,
) -> np.ndarray:
    """Memory of ONE GPU of each run's type (typed TRES, else the partition's type); NaN unknown.

    `type_memory_mib` (from inventory snapshots: what NVML reported) wins over the catalogue.
    """
    types = frame["gpu_type"].to_numpy(dtype=object, na_value=None)
    parts = frame["partition"].to_numpy(dtype=object, na_value="")
    out = np.full(len(frame), np.nan)
    cache: dict[str, float] = {}
    measured = type_memory_mib or {}
    for i_type in pd.unique(np.concatenate([types, list(partition_types.values())])):
        if isinstance(i_type, str) and i_type not in cache:
            model = model_for_type(i_type)
            if i_type in measured:
                cache[i_type] = float(measured[i_type])
            else:
                cache[i_type] = float(model.memory_mib) if model else np.nan
    for t, mem in cache.items():
        out[types == t] = mem
    for p, t in partition_types.items():
        out[(parts == p) & np.isnan(out)] = cache.get(t, np.nan)
    return out


def run_need(
    frame: pd.DataFrame, work: pd.DataFrame, gpu_mem_mib: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per run: (share of one GPU it needs, measured-basis mask, slice-basis mask).

    Need = measured gres/gpumem / GPU memory when known (runs of at most one GPU; MIG never
    reports gpumem), else the requested slice (MIG profile or shard share), else the whole-GPU
    request (1.0 or more: fits no fraction).
    """
    equiv = work["gpus"].to_numpy()
    mem = _num(frame, "gpu_mem_used_mib")
    cap = gpu_mem_mib
    measured = (equiv > 0) & (equiv <= 1.0) & ~np.isnan(mem) & ~np.isnan(cap) & (cap > 0)
    sliced = ~measured & (equiv > 0) & (equiv < 1.0)
    need = np.where(measured, mem / np.where(cap > 0, cap, 1), equiv)
    return need, measured, sliced


def fit_fraction(work: pd.DataFrame, need: np.ndarray, measured: np.ndarray,
                 sliced: np.ndarray) -> dict:  # fmt: skip
    """Share of GPU jobs and GPU-hours whose need fits 1/7, 1/4, 1/2 of one GPU."""
    sel = work["gpu_job"].to_numpy() & (work["gpus"].to_numpy() > 0)
    need, measured, sliced = need[sel], measured[sel], sliced[sel]
    gh = work["gpu_hours"].to_numpy()[sel]
    weight = np.maximum(work["job_weight"].to_numpy()[sel], 0)
    n_jobs = weight.sum()
    total_h = gh.sum()
    out: dict = {}
    for label, frac in FIT_FRACTIONS.items():
        fits = need <= frac + 1e-9
        out[label] = {
            "jobs": float(weight[fits].sum() / n_jobs) if n_jobs else None,
            "gpu_hours": float(gh[fits].sum() / total_h) if total_h else None,
        }
    n_meas, n_slice = int(measured.sum()), int(sliced.sum())
    n_whole = int(len(need) - n_meas - n_slice)
    out["basis"] = (
        f"measured gres/gpumem for {n_meas} of {len(need)} GPU runs; requested MIG/shard slice "
        f"for {n_slice}; whole-GPU request (counted as not fitting) for {n_whole}"
    )
    out["basis_counts"] = {
        "measured_gpumem": n_meas,
        "requested_slice": n_slice,
        "whole_gpu_request": n_whole,
    }
    return out
