"""The ONE place the replay depends on the accounting package: its per-run frame -> a trace.

`slurmgpu.accounting` (load -> normalized per-allocation frame) is the replay's input. Only this
module names its functions and columns (submit, start, end, elapsed_s, timelimit_s, partition,
qos, tier, state, gpu_count, gpu_equiv, mig_slices, mig_profile, shards, gpu_mem_used_mib,
gpu_type, job_id_raw, cluster, npus), so a change in accounting is retargeted here alone.

An NPU job (`gres/npu`, no GPUs) is replayed as a job of whole accelerators of its
partition: a partition of NPU nodes is replayed with its NPUs as the devices (its capacity
from `--capacity`, or the live nodes' NPUs where it has no GPUs). A job with both GPUs and
NPUs is replayed by its GPUs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from slurmgpu.replay.jobs import MIG, SHARD, WHOLE, RecordedRuns, ReplayTrace

# the state of a run ended by preemption (as analyze counts preemptions); a REQUEUED run (an
# admin's or a node failure's requeue) is a requeue, not a preemption
_PREEMPTED_STATES = ("PREEMPTED",)


def load_trace(
    sacct_files: Sequence[str | os.PathLike[str]],
    *,
    tier_for_qos: Callable[[str], str | None] | None = None,
    timezone: str = "UTC",
    shards_per_gpu: Mapping[str, float] | None = None,
    gpu_types: Mapping[str, str] | None = None,
    gpu_memory_mib: Mapping[str, float] | None = None,
) -> ReplayTrace:
    """Read sacct dumps through the accounting loader and turn its frame into a trace."""
    loaded = load_history(
        sacct_files, tier_for_qos=tier_for_qos, timezone=timezone, shards_per_gpu=shards_per_gpu
    )
    return trace_for(loaded.frame, gpu_types, gpu_memory_mib, loaded)


def load_history(
    sacct_files: Sequence[str | os.PathLike[str]],
    *,
    tier_for_qos: Callable[[str], str | None] | None = None,
    timezone: str = "UTC",
    shards_per_gpu: Mapping[str, float] | None = None,
    store: str | os.PathLike[str] | None = None,
    clusters: Sequence[str] = (),
    keep_admin_comment: bool = False,
) -> Any:
    """The accounting loader's result (`accounting.load.LoadResult`: the frame, and every
    rejected row with file, line and reason) for the dumps, or for the runs of an
    accounting store (`store`, of `clusters`; the frame the dumps ingested give)."""
    from slurmgpu.accounting import load as load_mod
    from slurmgpu.sources.sacct import json_dump_records

    options = load_mod.Options(
        timezone=timezone,
        tier_for_qos=tier_for_qos,
        shards_per_gpu=dict(shards_per_gpu or {}),
        keep_admin_comment=keep_admin_comment,  # the measure sources read summaries there
    )
    if store is not None:
        from dataclasses import replace

        from slurmgpu.accounting import store as store_mod

        # gres/gpuutil as the store read it (a replay uses no utilization)
        sums = store_mod.store_usage_sums(store)
        options = replace(options, usage_sums_gpus=sums)
        return store_mod.read_store(store, options=options, clusters=clusters)
    return load_mod.load_files(sacct_files, options=options, json_reader=json_dump_records)


def trace_for(
    frame: Any,
    gpu_types: Mapping[str, str] | None,
    gpu_memory_mib: Mapping[str, float] | None,
    loaded: Any = None,
) -> ReplayTrace:
    """The trace of a loaded frame, each run's GPU size from its type; rows the loader
    rejected are counted in `skipped` ("rejected row"), never dropped silently."""
    from slurmgpu.accounting import runs

    sizes = runs.gpu_sizes(frame, dict(gpu_types or {}), dict(gpu_memory_mib or {}))
    trace = trace_from_frame(frame, sizes.per_run_mib)
    if loaded is not None and loaded.rows_rejected:
        trace.skipped["rejected rows of the dumps"] = int(loaded.rows_rejected)
        rejected = tuple((str(x.file), int(x.line), str(x.reason)) for x in loaded.rejected)
        trace = replace(trace, rejected=rejected)
    return trace


def partition_gpu_types(frame: Any) -> dict[str, str]:
    """{partition: the GPU type its runs name most often in their typed GRES} -- what the
    dump says of a partition's GPUs when `--gpu-type` does not (MIG profiles excluded)."""
    from collections import Counter

    if "gpu_type" not in frame.columns or not len(frame):
        return {}
    parts = _col(frame, "partition", object, "")
    types = _col(frame, "gpu_type", object, None)
    mig = np.nan_to_num(_col(frame, "mig_slices")) > 0
    counts: dict[str, Counter[str]] = {}
    for part, gtype, is_mig in zip(parts, types, mig, strict=True):
        if isinstance(gtype, str) and gtype and part and not is_mig:
            counts.setdefault(str(part), Counter())[gtype] += 1
    return {p: c.most_common(1)[0][0] for p, c in sorted(counts.items())}


def _npus(frame: Any) -> np.ndarray:
    """NPUs per run (0 without; a frame from before the column: none)."""
    if "npus" not in frame.columns:
        return np.zeros(len(frame))
    return np.nan_to_num(_col(frame, "npus"))


def _col(frame: Any, name: str, dtype: Any = float, na: Any = np.nan) -> np.ndarray:
    if name not in frame.columns:
        return np.full(len(frame), na, dtype=dtype)
    return frame[name].to_numpy(dtype=dtype, na_value=na)


def _seconds(frame: Any, name: str) -> np.ndarray:
    t = frame[name].to_numpy(dtype="datetime64[s]", na_value=np.datetime64("NaT"))
    out = t.astype("int64").astype(float)
    out[np.isnat(t)] = np.nan
    return out


def trace_from_frame(frame: Any, gpu_memory_mib: np.ndarray | None = None) -> ReplayTrace:
    """The accounting frame (one row per run) -> one replay job per Slurm job.

    A requeued job's runs share its JobIDRaw: the job is replayed once, with its earliest
    submit, the duration of its last run (the one that did the work) and the count of its
    preempted runs; the replay decides its own preemptions. Runs that are not GPU jobs, or that
    never started, are counted in `skipped`, never dropped silently.
    """
    submit, start = _seconds(frame, "submit"), _seconds(frame, "start")
    skipped: dict[str, int] = {}
    keep = _gpu_runs(frame, submit, skipped)
    key = _job_keys(frame)
    jobs = _last_runs(frame, keep, key, submit, start, skipped)
    if not len(jobs.rows):
        return ReplayTrace.from_jobs([], skipped=skipped)
    sizes = _job_sizes(frame, jobs, start, gpu_memory_mib)
    return _trace(frame, keep, key, start, jobs, sizes, skipped)


def _gpu_runs(frame: Any, submit: np.ndarray, skipped: dict[str, int]) -> np.ndarray:
    """The runs a replay takes: GPU jobs with a submit time (the others counted in
    `skipped` by reason)."""
    gpu_job = _col(frame, "gpu_job", bool, False)
    # a job that never started has no AllocTRES: its requested GPUs make it a GPU job
    gpu_job |= np.nan_to_num(_col(frame, "req_gpus")) > 0
    gpu_job |= _npus(frame) > 0  # an NPU job: the partition's accelerators are NPUs

    def skip(mask: np.ndarray, reason: str) -> np.ndarray:
        if mask.any():
            skipped[reason] = skipped.get(reason, 0) + int(mask.sum())
        return ~mask

    keep = skip(~gpu_job, "not a GPU job")
    keep &= skip(keep & np.isnan(submit), "no submit time")
    return keep


def _job_keys(frame: Any) -> np.ndarray:
    """One key per Slurm job: runs grouped by (cluster, JobID) -- a requeued job keeps its
    JobID; an array's pending range (`123_[3-5]`) shares the JobIDRaw of a task that ran but
    is not that task."""
    cluster = _col(frame, "cluster", object, "")
    raw = _col(frame, "job_id_raw", float)
    printed = _col(frame, "job_id", object, "")
    return np.array([f"{c}/{j}" if j else (f"{c}/{int(r)}" if r == r else f"row{i}")
                     for i, (c, j, r) in enumerate(zip(cluster, printed, raw, strict=True))],
                    dtype=object)  # fmt: skip


@dataclass(frozen=True)
class _LastRuns:
    """Per replayed job: the row of its last run and what its runs say together."""

    rows: np.ndarray
    submit: np.ndarray  # earliest submit of its runs
    first_start: np.ndarray
    preemptions: np.ndarray
    cancelled: np.ndarray  # cancelled while pending: replayed waiting until its cancel time


def _last_runs(
    frame: Any,
    keep: np.ndarray,
    key: np.ndarray,
    submit: np.ndarray,
    start: np.ndarray,
    skipped: dict[str, int],
) -> _LastRuns:
    """Each job's last run by start time, with its runs' earliest submit and start and their
    preempted count; jobs that never started are counted in `skipped`."""
    state = _col(frame, "state", object, "")
    idx = np.flatnonzero(keep)
    # a job's last run is its latest STARTED one (a pending rerun sorts first: a job that
    # ran and waits again is replayed from the run that did the work)
    order = idx[np.lexsort((np.nan_to_num(start[idx], nan=-np.inf), key[idx]))]
    keys = key[order]
    last = np.ones(len(order), bool)
    last[:-1] = keys[1:] != keys[:-1]
    first = np.ones(len(order), bool)
    first[1:] = keys[1:] != keys[:-1]
    group = np.cumsum(first) - 1
    rows = order[last]
    g_submit = np.full(len(rows), np.inf)
    np.minimum.at(g_submit, group, submit[order])
    g_first_start = np.full(len(rows), np.inf)
    np.minimum.at(g_first_start, group, np.nan_to_num(start[order], nan=np.inf))
    preempted = np.isin(np.array([str(s).split(" ")[0] for s in state[order]]), _PREEMPTED_STATES)
    g_preempt = np.zeros(len(rows), np.int32)
    np.add.at(g_preempt, group, preempted.astype(np.int32))
    never = np.isnan(start[rows])
    # cancelled while pending (CANCELLED, no Start, its End the cancel time): replayed as a
    # job that waits in the queue until then (it holds its place in the priority order and its
    # backfill reservation, as in slurmctld) and is cancelled unless it has started
    end = _seconds(frame, "end")
    first_word = np.array([str(s).split(" ")[0] for s in state[rows]])
    cancelled = never & (first_word == "CANCELLED") & np.isfinite(end[rows])
    cancelled &= end[rows] >= np.nan_to_num(g_submit, nan=np.inf)
    pending = never & ~cancelled
    if pending.any():
        skipped["never started (pending when the dump was taken)"] = int(pending.sum())
    sel = ~pending
    return _LastRuns(rows[sel], g_submit[sel], g_first_start[sel], g_preempt[sel], cancelled[sel])


def _job_sizes(
    frame: Any, jobs: _LastRuns, start: np.ndarray, gpu_memory_mib: np.ndarray | None
) -> dict[str, np.ndarray]:
    """Per job (its last run's row): duration, time limit, GPUs and their kind (whole, MIG,
    shard), GPU equivalents and the measured need of one-GPU jobs."""
    rows, cancelled = jobs.rows, jobs.cancelled
    end = _seconds(frame, "end")
    duration = _col(frame, "elapsed_s")[rows]
    duration = np.where(np.isnan(duration), np.nan_to_num(end[rows] - start[rows]), duration)
    duration = np.maximum(np.nan_to_num(duration), 0.0)
    limit = _col(frame, "timelimit_s")[rows]
    # a job cancelled while pending did no work: if the replay starts it, it runs until its
    # cancel time (the user's scancel) or its limit; without a limit, until the cancel
    until_cancel = np.maximum(end[rows] - jobs.submit, 1.0)
    known_limit = np.isfinite(limit) & (limit > 0)
    duration = np.where(cancelled, np.where(known_limit, limit, until_cancel), duration)
    limit = np.where(np.isnan(limit) | (limit <= 0), duration, limit)
    limit = np.maximum(limit, duration)  # a run never outlives its limit in Slurm
    gpu_count = np.nan_to_num(_col(frame, "gpu_count")[rows])
    mig = np.nan_to_num(_col(frame, "mig_slices")[rows])
    shards = np.nan_to_num(_col(frame, "shards")[rows])
    kind = np.where(mig > 0, MIG, np.where((gpu_count <= 0) & (shards > 0), SHARD, WHOLE))
    npu_only = (gpu_count <= 0) & (shards <= 0) & (_npus(frame)[rows] > 0)
    gpu_count = np.where(npu_only, _npus(frame)[rows], gpu_count)
    gpus = np.where(kind == MIG, mig, np.where(kind == SHARD, shards, gpu_count))
    equiv = _col(frame, "gpu_equiv")[rows]
    equiv = np.where(npu_only, gpu_count, equiv)
    mem_used = _col(frame, "gpu_mem_used_mib")[rows]
    cap = gpu_memory_mib[rows] if gpu_memory_mib is not None else np.full(len(rows), np.nan)
    one = (kind == WHOLE) & (gpu_count == 1)
    return {
        "duration": duration,
        "limit": limit,
        "gpus": gpus,
        "kind": kind,
        "gpu_equiv": equiv,
        "need_gpu": np.where(one & (cap > 0), mem_used / np.where(cap > 0, cap, 1.0), np.nan),
        "need_mib": np.where(one, mem_used, np.nan),
        "end": end[rows],
    }


def _trace(
    frame: Any,
    keep: np.ndarray,
    key: np.ndarray,
    start: np.ndarray,
    jobs: _LastRuns,
    sizes: dict[str, np.ndarray],
    skipped: dict[str, int],
) -> ReplayTrace:
    """The jobs column-wise, in submit order, names coded, with their recorded runs."""
    rows = jobs.rows
    epoch = int(np.nanmin(jobs.submit))
    part = _col(frame, "partition", object, "")[rows]
    qos = _col(frame, "qos", object, "")[rows]
    tier = _col(frame, "tier", object, "")[rows]
    profile = _col(frame, "mig_profile", object, None)[rows]
    job_id = _col(frame, "job_id", object, "")[rows]
    order2 = np.lexsort((_col(frame, "job_id_raw", float)[rows], jobs.submit))

    def codes(values: np.ndarray) -> tuple[np.ndarray, list[str]]:
        names, inv = np.unique(values.astype(str), return_inverse=True)
        return inv.astype(np.int32), [str(x) for x in names]

    p_codes, partitions = codes(part[order2])
    q_codes, qos_names = codes(qos[order2])
    t_codes, tier_names = codes(np.where(tier == "", qos, tier)[order2])
    prof = profile[order2]
    profiles = sorted({str(p) for p in prof if isinstance(p, str) and p})
    ppos = {p: k for k, p in enumerate(profiles)}
    cancelled = jobs.cancelled
    rec_end = np.where(cancelled, np.nan, sizes["end"])
    cancel_at = np.where(cancelled, sizes["end"] - epoch, np.nan)
    first_start = jobs.first_start - epoch
    first_start[~np.isfinite(first_start)] = np.nan
    runs = _recorded_runs(frame, keep, start, epoch, partitions)
    # each run's job: its key's position in the trace (the last run of a key is its row)
    position = {k: i for i, k in enumerate(key[rows][order2])}
    run_keys = key[keep & ~np.isnan(start)]
    runs = replace(runs, job=np.array([position.get(k, -1) for k in run_keys], dtype=np.int64))
    return ReplayTrace(
        epoch_s=epoch,
        job_id=job_id[order2],
        partition=p_codes,
        qos=q_codes,
        tier=t_codes,
        submit_s=(jobs.submit - epoch)[order2],
        duration_s=sizes["duration"][order2],
        timelimit_s=sizes["limit"][order2],
        gpus=sizes["gpus"][order2].astype(float),
        kind=sizes["kind"][order2].astype(np.int8),
        mig_profile=np.array(
            [ppos.get(p, -1) if isinstance(p, str) else -1 for p in prof], dtype=np.int32
        ),
        need_gpu=sizes["need_gpu"][order2],
        need_mib=sizes["need_mib"][order2],
        gpu_equiv=sizes["gpu_equiv"][order2],
        recorded_start_s=first_start[order2],
        recorded_end_s=(rec_end - epoch)[order2],
        recorded_preemptions=jobs.preemptions[order2],
        partitions=partitions,
        qos_names=qos_names,
        tier_names=tier_names,
        profiles=profiles,
        skipped=skipped,
        recorded_runs=runs,
        cancel_s=cancel_at[order2] if cancelled.any() else None,
    )


def _recorded_runs(
    frame: Any, keep: np.ndarray, start: np.ndarray, epoch: int, partitions: list[str]
) -> RecordedRuns:
    """Every started run of the kept jobs, preempted ones included (their GPU-hours lost)."""
    sel = keep & ~np.isnan(start)
    run_end = _seconds(frame, "run_end") if "run_end" in frame.columns else _seconds(frame, "end")
    equiv = _col(frame, "gpu_equiv")
    npus = _npus(frame)
    equiv = np.where(np.isnan(equiv) & (npus > 0), npus, equiv)
    equiv = np.where(np.isnan(equiv), np.nan_to_num(_col(frame, "gpu_count")), equiv)
    state = _col(frame, "state", object, "")[sel]
    part = _col(frame, "partition", object, "")[sel].astype(str)
    pos = {p: k for k, p in enumerate(partitions)}
    return RecordedRuns(
        start_s=start[sel] - epoch,
        end_s=run_end[sel] - epoch,
        equiv=equiv[sel],
        partition=np.array([pos.get(p, -1) for p in part], dtype=np.int64),
        preempted=np.isin(np.array([str(s).split(" ")[0] for s in state]), _PREEMPTED_STATES),
    )


def capacity_from_live(env: Mapping[str, str] | None = None):
    """(partition GPUs, GPUs per node, GPU types) from the live `scontrol show node/partition`."""
    from slurmgpu.accounting.capacity import capacity_from_scontrol
    from slurmgpu.sources import slurm as slurm_src

    cap = capacity_from_scontrol(
        slurm_src.scontrol_show("node", env=env), slurm_src.scontrol_show("partition", env=env)
    )
    per_node = {p: round(v) for p, v in cap.gpus_per_node.items()}
    parts, types = dict(cap.partition_gpus), dict(cap.gpu_types)
    for name, (npus, nodes, npu_type) in cap.partition_npus.items():
        if not parts.get(name) and npus:  # an NPU partition: its NPUs are its devices
            parts[name], per_node[name] = float(npus), round(npus / max(nodes, 1))
            if npu_type:
                types[name] = npu_type
    return parts, per_node, types
