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

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from slurmgpu.accounting.columns import codes as column_codes
from slurmgpu.accounting.document import (
    FitFraction,
    FitShare,
    FitShares,
    GroupRow,
    GroupStats,
    TimePoint,
    Timeseries,
    UnknownGpuType,
    Waits,
)
from slurmgpu.accounting.runs import NEED_BASES
from slurmgpu.accounting.window import Window

FIT_FRACTIONS = {"1/7": 1 / 7, "1/4": 1 / 4, "1/2": 1 / 2}
# a job whose measured GPU memory is below this share of what it was given counts as
# "memory far below the slice" (a 1g slice would still hold it with room to spare)
LOW_MEMORY_SHARE = 0.25
# the time series uses hourly buckets for windows up to this long, daily beyond
HOURLY_MAX_DAYS = 3


def _group_percentiles(
    codes: np.ndarray,
    values: np.ndarray,
    n: int,
    qs: Sequence[float],
    value_order: np.ndarray | None = None,
) -> list[np.ndarray]:
    """Per-group percentiles (numpy's default linear interpolation) of non-NaN values, all groups
    at once: sort by (group, value), then index each group's run of sorted values.

    `value_order` (argsort of `values`, shared by every grouping) turns the sort into a
    stable radix sort of the small group codes."""
    if value_order is None:
        value_order = np.argsort(values, kind="stable")
    vo = value_order[~np.isnan(values[value_order])]
    order = vo[np.argsort(codes[vo], kind="stable")]
    c, v = codes[order], values[order]
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
) -> list[GroupStats]:
    """The numbers of each group 0..n-1 (runs labelled by `codes`), computed together.

    `GroupStats` (accounting/document.py) documents each field.
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
    pending_gh = total(w["pending_gpu_hours"].to_numpy())
    pre = w["preempted"].to_numpy()
    req = w["requeued"].to_numpy()
    pre_n, req_n = total(pre.astype(float)), total(req.astype(float))
    lost_pre = total(gh, pre)
    lost_req = total(gh, req & ~pre)
    wait = w["wait_s"].to_numpy()
    order = w["wait_order"].to_numpy() if "wait_order" in w else None
    p50, p95, pmax = _group_percentiles(codes, wait, n, (0.5, 0.95, 1.0), order)
    out = []
    for i in range(n):
        cap = capacity_gpus[i]
        cap_h = cap * window.hours if cap is not None else None
        has_util = n_known[i] > 0
        out.append(
            GroupStats(
                jobs=round(float(jobs[i])),
                gpu_jobs=round(float(gpu_jobs[i])),
                pending_jobs=round(float(pending[i])),
                gpu_hours_allocated=float(alloc[i]),
                gpu_hours_used=float(used[i]) if has_util else None,
                capacity_gpu_hours=cap_h,
                allocation_ratio=float(alloc[i] / cap_h) if cap_h else None,
                idle_gpu_hours=float(max(cap_h - alloc[i], 0.0)) if cap_h else None,
                pending_gpu_hours=float(pending_gh[i]),
                gpu_util_mean=float(100 * used[i] / known_h[i]) if has_util else None,
                util_known_gpu_hours=float(known_h[i]),
                waste_gpu_hours=float(known_h[i] - used[i]) if has_util else None,
                low_memory_gpu_hours=float(low_mem[i]) if n_mem[i] > 0 else None,
                wait_s=Waits(_opt(p50[i]), _opt(p95[i]), _opt(pmax[i])),
                preemptions=int(pre_n[i]),
                requeues=int(req_n[i]),
                gpu_hours_lost_to_preemption=float(lost_pre[i]),
                gpu_hours_lost_to_requeue=float(lost_req[i]),
            )
        )
    return out


def summarize(w: pd.DataFrame, capacity_gpus: float | None, window: Window) -> GroupStats:
    """One group's numbers: all runs of `w` together."""
    return summarize_groups(w, np.zeros(len(w), dtype=np.int64), 1, [capacity_gpus], window)[0]


@dataclass(frozen=True)
class KnownCapacity:
    """The headline ratio over the partitions whose capacity is known."""

    stats: GroupStats  # allocation_ratio / idle_gpu_hours over the known partitions only
    gpu_hours_unknown: float  # allocated GPU-hours in partitions of unknown capacity
    partitions_unknown: tuple[str, ...]


def over_known_capacity(
    stats: GroupStats,
    w: pd.DataFrame,
    partitions: np.ndarray,
    known: Iterable[str],
) -> KnownCapacity:
    """`stats` with its allocation ratio and idle GPU-hours counting only runs in partitions
    of known capacity: runs elsewhere would inflate the ratio (their GPU-hours, not their
    GPUs). Nothing changes when every partition's capacity is known or none is."""
    known = set(known)
    gh = w["gpu_hours"].to_numpy()
    parts = np.asarray(partitions, dtype=object)
    unknown = ~np.isin(parts, list(known)) & (gh > 0)
    lost = float(gh[unknown].sum())
    cap_h = stats.capacity_gpu_hours
    if not cap_h or not known or lost <= 0:
        return KnownCapacity(stats, 0.0, ())
    alloc_known = float(gh[~unknown].sum())
    names = tuple(sorted({str(p) for p in parts[unknown]}))
    adjusted = dataclasses.replace(
        stats,
        allocation_ratio=alloc_known / cap_h,
        idle_gpu_hours=max(cap_h - alloc_known, 0.0),
    )
    return KnownCapacity(adjusted, lost, names)


def by_group(
    frame: pd.DataFrame,
    work: pd.DataFrame,
    column: str,
    window: Window,
    capacity: Mapping[str, float] | None = None,
    extra: Sequence[str] = (),
    need: np.ndarray | None = None,
    jobs_need: np.ndarray | None = None,
) -> tuple[GroupRow, ...]:
    """The numbers per value of `column` (sorted by GPU-hours, then name).

    Partitions with known capacity and no run in the window are listed too (idle is news).
    With `need` (per-run share of a GPU), each row gets its own `fit_fraction`. `extra`
    (only "tier", for by_qos) names the values of that column among the group's runs.
    """
    codes, uniques = column_codes(frame, column)
    names = list(uniques)
    names += sorted(set(capacity or {}) - set(names))
    n = len(names)
    caps = [capacity.get(v) if capacity is not None else None for v in names]
    stats = summarize_groups(work, codes.astype(np.int64), n, caps, window)
    out = []
    for i, (name, entry) in enumerate(zip(names, stats, strict=True)):
        fit = None
        if need is not None:
            sel = codes == i
            gpu_job = sel & work["gpu_job"].to_numpy() & (work["gpus"].to_numpy() > 0)
            fit = fit_shares(
                gpu_job,
                need,
                work["gpu_hours"].to_numpy(),
                work["job_weight"].to_numpy(),
                jobs_need,
            )
        tier = None
        for col in extra:
            if col != "tier":
                raise ValueError(f"by_group: no row field for extra column {col!r}")
            tier = ""
            if i < len(uniques):
                extra_vals = frame[col].to_numpy(dtype=object, na_value="")
                vals = pd.unique(extra_vals[codes == i])
                tier = vals[0] if len(vals) == 1 else ",".join(sorted(map(str, vals)))
        out.append(GroupRow(**entry.as_fields(), name=str(name), tier=tier, fit_fraction=fit))
    out.sort(key=lambda e: (-e.gpu_hours_allocated, e.name))
    return tuple(out)


def timeseries(
    work: pd.DataFrame,
    window: Window,
    capacity_gpus: float | None,
    freq: str | None = None,
    partitions: np.ndarray | None = None,
    known_partitions: Iterable[str] | None = None,
) -> Timeseries:
    """GPU-hours per bucket, each run split across the buckets it spans (exactly, vectorized).

    With `known_partitions` (those whose capacity is known) and `partitions` (each run's),
    the allocation ratio and measured use compare only those partitions' runs with the
    capacity, as the totals' headline ratio does (`over_known_capacity`).

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

    def integral(mask: np.ndarray, weight: np.ndarray | None = None) -> np.ndarray:
        return _bucket_integral(s, e, g, edges, window.since, mask, weight)

    total = integral(ok)
    in_known = ok
    if known_partitions is not None and partitions is not None and capacity_gpus is not None:
        known_set = list(set(known_partitions))
        if known_set:
            in_known = ok & np.isin(np.asarray(partitions, dtype=object), known_set)
    total_known = total if in_known is ok else integral(in_known)
    # measured use: runs with a utilization (clipped to 0..100), weighted by it
    util = work["util"].to_numpy(dtype=float) if "util" in work else np.full(len(work), np.nan)
    measured = in_known & ~np.isnan(util)
    used = integral(measured, np.clip(np.nan_to_num(util), 0.0, 100.0) / 100.0)
    measured_h = integral(measured)
    has_measure = measured.any()
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
            TimePoint(
                t=t,
                gpu_hours_allocated=alloc,
                capacity_gpu_hours=cap,
                allocation_ratio=float(total_known[i]) / cap if cap else None,
                by_partition={p: float(v[i]) for p, v in sorted(per_part.items())},
                hours=float(bucket_h[i]),
                gpu_hours_used=float(used[i]) if has_measure and measured_h[i] > 0 else None,
                util_known_gpu_hours=float(measured_h[i]) if has_measure else None,
            )
        )
    return Timeseries(freq, tuple(points))


def _bucket_integral(
    s: np.ndarray,
    e: np.ndarray,
    g: np.ndarray,
    edges: np.ndarray,
    since: np.datetime64,
    mask: np.ndarray,
    weight: np.ndarray | None = None,
) -> np.ndarray:
    """GPU-hours (times `weight`) of the masked runs [s, e) on g GPUs in each bucket between
    consecutive `edges`: differences of G(t) = sum_j g_j * |[s_j, e_j] ∩ (-inf, t]|."""
    origin = since.astype("int64")  # small numbers keep the sums exact
    ss = (s[mask].astype("int64") - origin).astype(float)
    ee = (e[mask].astype("int64") - origin).astype(float)
    gg = g[mask] if weight is None else (g * weight)[mask]
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


def job_need(frame: pd.DataFrame, need: np.ndarray) -> np.ndarray:
    """Per run: the need of its JOB, the largest known need among the job's runs (NaN when
    none is known).

    A requeued job's runs share (cluster, JobIDRaw, JobID); an aborted first run that
    used little memory must not make the job "fit" when the run that did the work needed
    more. Only the job's counted row (`job_weight` > 0) is read for the jobs share.
    """
    if not len(frame):
        return need.copy()
    key = np.zeros(len(frame), dtype=np.int64)
    for col in ("cluster", "job_id_raw", "job_id"):  # one int64 key (mixed radix) per job
        codes, names = column_codes(frame, col)
        key = key * max(len(names), 1) + codes
    _, group = np.unique(key, return_inverse=True)
    group = group.reshape(-1)
    most = np.full(int(group.max()) + 1, np.nan)
    np.fmax.at(most, group, need)  # fmax ignores NaN: unknown runs do not hide known ones
    return most[group]


def fit_shares(
    gpu_job: np.ndarray,
    need: np.ndarray,
    gh: np.ndarray,
    weight: np.ndarray,
    jobs_need: np.ndarray | None = None,
) -> FitShares:
    """Share of GPU jobs and GPU-hours whose need fits 1/7, 1/4, 1/2 of one GPU.

    Shares are over needs that are KNOWN; runs with an unknown need (still running, no
    usage recorded, GPU size unknown) are counted apart, never as "does not fit". The jobs
    share counts each job once (`weight`, on its counted row) by its job's need
    (`jobs_need`, `job_need()`; the run's own need when not given), over `known_jobs`; the
    GPU-hours share weighs each run by its own need and GPU-hours.
    """
    if jobs_need is None:
        jobs_need = need
    known = gpu_job & ~np.isnan(need)
    unknown = gpu_job & np.isnan(need)
    w, h = np.maximum(weight, 0), gh
    job_known = gpu_job & (w > 0) & ~np.isnan(jobs_need)
    n_jobs, total_h = w[job_known].sum(), h[known].sum()
    shares = {}
    for label, frac in FIT_FRACTIONS.items():
        fits = known & (np.nan_to_num(need, nan=np.inf) <= frac + 1e-9)
        job_fits = job_known & (np.nan_to_num(jobs_need, nan=np.inf) <= frac + 1e-9)
        shares[label] = FitShare(
            jobs=float(w[job_fits].sum() / n_jobs) if n_jobs else None,
            gpu_hours=float(h[fits].sum() / total_h) if total_h else None,
        )
    return FitShares(
        shares=shares,
        known_runs=int(known.sum()),
        unknown_runs=int(unknown.sum()),
        unknown_gpu_hours=float(h[unknown].sum()),
        known_jobs=round(float(n_jobs)),
    )


def fit_fraction(
    work: pd.DataFrame,
    need: np.ndarray,
    basis: np.ndarray,
    unknown_types: Mapping[str, int] | None = None,
    jobs_need: np.ndarray | None = None,
    unknown_partitions: Mapping[str, int] | None = None,
    type_partitions: Mapping[str, Sequence[str]] | None = None,
) -> FitFraction:
    """Cluster-wide fit shares, the basis of each run's need, and what would fix unknowns."""
    gpu_job = work["gpu_job"].to_numpy() & (work["gpus"].to_numpy() > 0)
    shares = fit_shares(
        gpu_job, need, work["gpu_hours"].to_numpy(), work["job_weight"].to_numpy(), jobs_need
    )
    counts = {name: int((basis[gpu_job] == i).sum()) for i, name in enumerate(NEED_BASES)}
    text = (
        f"of {int(gpu_job.sum())} GPU runs: {counts['measured_gpumem']} measured GPU memory; "
        f"{counts['requested_slice']} requested a MIG/shard slice; "
        f"{counts['multi_gpu_request']} held more than one GPU (fit no fraction); "
        f"{counts['unknown_not_measured']} unknown (nothing measured); "
        f"{counts['unknown_gpu_size']} unknown (memory measured, GPU size unknown)"
    )
    missing = {t: n for t, n in (unknown_types or {}).items() if n}
    where = type_partitions or {}
    unknowns = [
        UnknownGpuType(
            type=t,
            gpu_runs=n,
            fix=f"give its size: --gpu-memory {t}=SIZE (or gpu_memory in the site policy, "
            "or an --inventory snapshot)"
            + (
                f", or the type of partition {', '.join(where[t])}: --gpu-type {where[t][0]}=TYPE"
                if where.get(t)
                else ""
            ),
        )
        for t, n in sorted(missing.items())
    ]
    unknowns += [
        UnknownGpuType(
            type="",
            gpu_runs=n,
            fix=f"partition {p}: {n} GPU runs name no GPU type: give --gpu-type {p}=TYPE or "
            f"--gpu-memory TYPE=SIZE (or --gpu-memory {p}=SIZE)",
            partition=p,
        )
        for p, n in sorted((unknown_partitions or {}).items())
        if n
    ]
    return FitFraction(
        **shares.as_fields(),
        basis_counts=counts,
        basis=text,
        unknown_gpu_types=tuple(unknowns),
    )
