"""Stage 3, runs: per-run working columns over the window, GPU sizes, measures and need.

Input: the normalized frame (`load.py`: one row per run, steps folded, requeued runs apart).
Output: a `Runs` object whose columns every metric and recommendation reads:

- `gpu_hours`: **allocated** GPU-hours inside the window (physical-GPU equivalents x run time
  clipped to the window). This is the only meaning of `gpu_hours` in slurmgpu.
- `util`: mean GPU utilization of the run in percent. A time-averaged measure source wins
  over Slurm's own `gres/gpuutil` (a per-step high-water mark); unknown is NaN, never 0.
- `gpu_mem_mib`: the memory of ONE of the run's GPUs: a measure that carries the GPU's size,
  else an inventory snapshot, else `gpu_memory_mib` given for its type, else the catalogue.
- `need`: the share of one GPU the run needs (NaN = unknown), with its basis.
- `energy_kwh`: the energy the run's GPUs drew inside the window, kWh (NaN = not measured):
  a measure source's energy (collector, Prometheus) over Slurm's own (`energy_j`, sacct's
  ConsumedEnergyRaw), times the share of the run inside the window (docs/energy.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd

from slurmgpu.accounting.columns import duplicated, objects
from slurmgpu.accounting.window import Window, dt_column
from slurmgpu.measure.warnings import MeasureWarning
from slurmgpu.model.catalog import resolve
from slurmgpu.model.measure import MeasureSource, RunRef

# basis of a run's need (per run, as small integer codes; names are what the JSON reports)
NEED_BASES = (
    "measured_gpumem",  # measured memory / GPU size
    "requested_slice",  # a MIG profile or shard share: the slice it asked for
    "multi_gpu_request",  # more than one whole GPU: fits no fraction of one
    "unknown_not_measured",  # whole GPU, no memory measured (running, no usage recorded)
    "unknown_gpu_size",  # memory measured, but the GPU's size is unknown
)


@dataclass
class GpuSizes:
    """Memory of one GPU per run, and what is still unknown: GPU type names whose size is
    unknown (type -> GPU runs) and untyped partitions with no type or size given
    (partition -> GPU runs)."""

    per_run_mib: np.ndarray
    unknown_types: dict[str, int] = field(default_factory=dict)  # type -> runs
    unknown_partitions: dict[str, int] = field(default_factory=dict)  # partition -> runs
    # typed names whose size is unknown -> the partitions their runs were in
    type_partitions: dict[str, tuple[str, ...]] = field(default_factory=dict)


def num(frame: pd.DataFrame, col: str) -> np.ndarray:
    return frame[col].to_numpy(dtype=float, na_value=np.nan)


def gpu_sizes(
    frame: pd.DataFrame,
    partition_types: Mapping[str, str],
    type_memory_mib: Mapping[str, float],
) -> GpuSizes:
    """One GPU's memory for each run, the first known of:

    1. the run's typed GRES name (`gres/gpu:TYPE`);
    2. its partition's type as the admin gave it (`partition_types`): for untyped runs, and
       for typed runs whose type name is unknown (the admin's type is the size of the
       partition's GPUs then);
    3. a size given for its partition (`type_memory_mib` keyed by a partition name, or by
       the PARTITION part of a CLUSTER/PARTITION label): a key matching a partition sizes
       that partition's GPUs when their type is unknown.

    A type name is looked up in `type_memory_mib` (given sizes and inventory snapshots, by
    exact name, then case-insensitively), then in the catalogue through `resolve()`.
    """
    types = objects(frame, "gpu_type", None)
    parts = objects(frame, "partition", "")
    given = {str(k).lower(): float(v) for k, v in type_memory_mib.items()}

    def size(name: str) -> float:
        if name.lower() in given:
            return given[name.lower()]
        model = resolve(name)
        return float(model.memory_mib) if model else np.nan

    out = np.full(len(frame), np.nan)
    names = {t for t in pd.unique(types) if isinstance(t, str)} | set(partition_types.values())
    cache = {t: size(t) for t in names}
    for t, mem in cache.items():
        out[types == t] = mem
    for p in {str(p) for p in pd.unique(parts)}:
        in_part = (parts == p) & np.isnan(out)
        if not in_part.any():
            continue
        if p in partition_types:
            out[in_part] = cache[partition_types[p]]
            in_part &= np.isnan(out)
        for key in (p.lower(), p.split("/", 1)[-1].lower()):
            if key in given and in_part.any():
                out[in_part] = given[key]
                in_part &= np.isnan(out)
    gpus = np.nan_to_num(num(frame, "gpu_count")) > 0
    unsized = gpus & np.isnan(out)
    unknown: dict[str, int] = {}
    where: dict[str, tuple[str, ...]] = {}
    untyped: dict[str, int] = {}
    typed = np.array([isinstance(t, str) for t in types], dtype=bool)
    for p in {str(p) for p in pd.unique(parts[unsized])}:
        sel = unsized & (parts == p)
        name = partition_types.get(p)
        if name is not None:  # the admin's type is unknown too: name that type
            unknown[name] = unknown.get(name, 0) + int(sel.sum())
            where[name] = tuple(sorted({*where.get(name, ()), p}))
        elif (sel & ~typed).any():
            untyped[p] = int((sel & ~typed).sum())
    for t in {t for t in pd.unique(types[unsized & typed]) if isinstance(t, str)}:
        sel = unsized & (types == t) & ~np.isin(parts, list(partition_types))
        if sel.any():
            unknown[t] = unknown.get(t, 0) + int(sel.sum())
            where[t] = tuple(sorted({*where.get(t, ()), *map(str, pd.unique(parts[sel]))}))
    return GpuSizes(out, unknown, untyped, where)


@dataclass
class Runs:
    """The per-run working columns (numpy arrays of equal length) and their provenance."""

    work: pd.DataFrame
    need: np.ndarray
    need_basis: np.ndarray  # int codes into NEED_BASES; -1 for runs without GPUs
    util_basis: dict[str, int]  # source -> runs whose utilization it gave
    unknown_gpu_types: dict[str, int]
    measure_warnings: tuple[MeasureWarning, ...] = ()


def prepare(frame: pd.DataFrame, window: Window, gpu_mem_mib: np.ndarray) -> pd.DataFrame:
    """Per-run working columns: window-clipped GPU-hours, utilization, flags, memory share."""
    f = pd.DataFrame(index=frame.index)
    start, end = dt_column(frame, "start"), dt_column(frame, "run_end")
    s = np.maximum(start, window.since)
    e = np.minimum(end, window.until)
    overlap = (e - s) / np.timedelta64(1, "s")
    overlap = np.where(np.isnat(start) | np.isnat(end), 0.0, np.maximum(overlap.astype(float), 0))
    gpus = np.nan_to_num(num(frame, "gpu_equiv"))
    f["gpu_hours"] = gpus * overlap / 3600.0
    run_s = ((end - start) / np.timedelta64(1, "s")).astype(float)
    run_s = np.where(np.isnat(start) | np.isnat(end), np.nan, run_s)
    # the share of the run inside the window, to clip a whole run's energy like its hours
    f["window_share"] = np.where(run_s > 0, overlap / np.where(run_s > 0, run_s, 1.0), 0.0)
    f["energy_j"] = num(frame, "energy_j") if "energy_j" in frame else np.full(len(frame), np.nan)
    f["util"] = np.minimum(num(frame, "gpu_util_pct"), 100.0)
    f["mem_used_mib"] = num(frame, "gpu_mem_used_mib")
    state = objects(frame, "state", "")
    key = ["cluster", "job_id_raw", "job_id"]
    later_run = duplicated(frame, key, keep="last")
    rerun = duplicated(frame, key, keep="first")
    f["preempted"] = state == "PREEMPTED"
    f["requeued"] = (state == "REQUEUED") | later_run
    pending_tasks = num(frame, "array_pending_tasks")
    weight = np.where(np.isnan(pending_tasks), 1.0, pending_tasks)
    counts = frame["counts_as_job"].to_numpy(dtype=bool, na_value=True) & ~rerun
    f["job_weight"] = np.where(counts, weight, 0.0)
    f["pending"] = np.where(state == "PENDING", weight, 0.0)
    req = np.nan_to_num(num(frame, "req_gpus"))
    f["pending_gpu_hours"] = _pending_gpu_hours(frame, window, state, req * weight)
    f["gpu_job"] = frame["gpu_job"].to_numpy(dtype=bool, na_value=False)
    f["wait_s"] = np.where(np.isnat(start), np.nan, num(frame, "wait_s"))
    # one sort of the waits serves every group's percentiles (metrics._group_percentiles)
    f["wait_order"] = np.argsort(f["wait_s"].to_numpy(), kind="stable")
    f["start"] = start
    f["end"] = end
    f["gpus"] = gpus
    f["gpu_mem_mib"] = gpu_mem_mib
    return f


def _pending_gpu_hours(
    frame: pd.DataFrame, window: Window, state: np.ndarray, req_gpus: np.ndarray
) -> np.ndarray:
    """Unmet demand: GPUs requested x time waited inside the window (Submit -> Start, or
    -> End/window end for jobs that never started)."""
    submit, start = dt_column(frame, "submit"), dt_column(frame, "start")
    fin = dt_column(frame, "end")
    gpus = np.nan_to_num(num(frame, "gpu_equiv"))
    gpus = np.where(gpus > 0, gpus, req_gpus)
    until = np.where(np.isnat(start), np.where(np.isnat(fin), window.until, fin), start)
    a = np.maximum(submit, window.since)
    b = np.minimum(until, window.until)
    secs = ((b - a) / np.timedelta64(1, "s")).astype(float)
    secs = np.where(np.isnat(a) | np.isnat(b), 0.0, np.maximum(secs, 0.0))
    return gpus * secs / 3600.0


def apply_measures(
    frame: pd.DataFrame, work: pd.DataFrame, sources: Sequence[MeasureSource]
) -> tuple[dict[str, int], tuple[MeasureWarning, ...]]:
    """Apply time-averaged measures to runs (they win over Slurm's high-water marks).

    The sources are asked in order through `measure.apply.measure_runs` (a later source only
    about runs still unmeasured). Returns the runs each source measured (`slurm_gpuutil`
    counts runs whose utilization is still Slurm's own) and what the sources could not do.
    """
    from slurmgpu.measure.apply import measure_runs

    util = work["util"].to_numpy().copy()
    mem = work["mem_used_mib"].to_numpy().copy()
    size = work["gpu_mem_mib"].to_numpy().copy()
    energy = work["energy_j"].to_numpy().copy()
    slurm_measured = ~np.isnan(util)
    counts: dict[str, int] = {}
    warnings: tuple[MeasureWarning, ...] = ()
    if sources:
        refs, rows = run_refs(frame, work, _admin_comment_markers(sources))
        result = measure_runs(refs, sources)
        for key, m in result.by_run.items():
            row = rows[key]
            slurm_measured[row] = False
            if m.util_mean_pct is not None:
                util[row] = min(float(m.util_mean_pct), 100.0)
            if m.mem_used_max_mib is not None:
                mem[row] = float(m.mem_used_max_mib)
            if m.gpu_memory_mib:
                size[row] = float(m.gpu_memory_mib)
            if m.energy_j is not None:
                energy[row] = float(m.energy_j)
        counts, warnings = dict(result.measured), result.warnings
    work["util"], work["mem_used_mib"], work["gpu_mem_mib"] = util, mem, size
    work["energy_kwh"] = energy / 3.6e6 * work["window_share"].to_numpy()
    if sources:
        # the frame carries the best measure too: what the forecast by slice, `mig plan`'s
        # demand and the replay of recommendations read (not only this stage's need)
        frame["gpu_mem_used_mib"] = _float_column(mem)
    counts["slurm_gpuutil"] = int(slurm_measured.sum())
    return counts, warnings


def _float_column(values: np.ndarray) -> Any:
    import pyarrow as pa

    return pd.array(values, dtype=pd.ArrowDtype(pa.float64()))


def with_measured_memory(
    frame: pd.DataFrame, sources: Sequence[MeasureSource]
) -> tuple[pd.DataFrame, tuple[MeasureWarning, ...]]:
    """A copy of the loaded frame whose `gpu_mem_used_mib` (one GPU's high-water mark) is
    what the measure sources measured where they measured a run (the collector's or
    jobstats' summaries win over sacct's own `gres/gpumem`, as in `apply_measures`), and what
    the sources could not do. The replay reads it so that a job whose measured memory fits a
    MIG slice is replayed as fitting one on a Slurm that records no `gres/gpumem`."""
    from slurmgpu.measure.apply import measure_runs

    out = frame.copy()
    if not sources or not len(frame):
        return out, ()
    work = pd.DataFrame(
        {"gpus": np.nan_to_num(num(frame, "gpu_equiv")), "start": dt_column(frame, "start")},
        index=frame.index,
    )
    refs, rows = run_refs(frame, work, _admin_comment_markers(sources))
    result = measure_runs(refs, sources)
    mem = num(frame, "gpu_mem_used_mib").astype(float).copy()
    for key, m in result.by_run.items():
        if m.mem_used_max_mib is not None:
            mem[rows[key]] = float(m.mem_used_max_mib)
    out["gpu_mem_used_mib"] = _float_column(mem)
    return out, result.warnings


def _admin_comment_markers(sources: Sequence[MeasureSource]) -> tuple[str, ...] | None:
    """When every source reads only AdminComment summaries, the markers they look for (so
    only runs carrying one get a RunRef); None when some source must see every run."""
    markers: list[str] = []
    for source in sources:
        own = getattr(source, "admin_comment_markers", ())
        if not own:
            return None
        markers.extend(own)
    return tuple(markers)


def run_refs(
    frame: pd.DataFrame, work: pd.DataFrame, markers: tuple[str, ...] | None = None
) -> tuple[list[RunRef], dict[tuple[str, str, datetime | None], int]]:
    """A RunRef per GPU run (only those whose AdminComment holds one of `markers`, any case,
    when given), and each run's key (cluster, job id, start) -> its row."""
    import pyarrow as pa
    import pyarrow.compute as pc

    admin = (
        frame["admin_comment"].to_numpy(dtype=object, na_value="")
        if "admin_comment" in frame
        else np.full(len(frame), "", dtype=object)
    )
    keep = work["gpus"].to_numpy() > 0
    if markers is not None:
        text = pa.array(admin, type=pa.string())
        hit = np.zeros(len(frame), dtype=bool)
        for marker in markers:
            found = pc.match_substring(text, marker, ignore_case=True)
            hit |= found.to_numpy(zero_copy_only=False)
        keep &= hit
    sel = np.flatnonzero(keep)
    raw = frame["job_id_raw"].to_numpy(dtype=object, na_value=None)
    cluster = frame["cluster"].to_numpy(dtype=object, na_value="")
    nodes = frame["node_list"].to_numpy(dtype=object, na_value="")
    start, fin, gpus = work["start"].to_numpy(), dt_column(frame, "end"), work["gpus"].to_numpy()
    refs: list[RunRef] = []
    rows: dict[tuple[str, str, datetime | None], int] = {}
    for i in sel.tolist():
        ref = RunRef(
            job_id=str(raw[i]),
            cluster=str(cluster[i]),
            start=_py(start[i]),
            end=_py(fin[i]),
            nodes=str(nodes[i]),
            gpus=float(gpus[i]),
            admin_comment=str(admin[i]),
        )
        refs.append(ref)
        rows[(ref.cluster, ref.job_id, ref.start)] = i
    return refs, rows


def _py(t: np.datetime64) -> datetime | None:
    return None if np.isnat(t) else pd.Timestamp(t).to_pydatetime()


def need_of_runs(work: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per run: (share of one GPU it needs, NaN = unknown; basis code into NEED_BASES)."""
    equiv = work["gpus"].to_numpy()
    mem = work["mem_used_mib"].to_numpy()
    cap = work["gpu_mem_mib"].to_numpy()
    gpu = equiv > 0
    single = gpu & (equiv <= 1.0)
    measured = single & ~np.isnan(mem) & (np.nan_to_num(cap) > 0)
    sliced = gpu & ~measured & (equiv < 1.0)
    multi = gpu & (equiv > 1.0)
    no_size = single & ~measured & ~sliced & ~np.isnan(mem)
    not_measured = single & ~measured & ~sliced & np.isnan(mem)
    need = np.full(len(equiv), np.nan)
    need[measured] = mem[measured] / cap[measured]
    need[sliced | multi] = equiv[sliced | multi]
    basis = np.full(len(equiv), -1, dtype=np.int64)
    for code, mask in enumerate((measured, sliced, multi, not_measured, no_size)):
        basis[mask] = code
    return need, basis


def build_runs(
    frame: pd.DataFrame,
    window: Window,
    sizes: GpuSizes,
    sources: Sequence[MeasureSource] = (),
) -> Runs:
    """The runs stage: working columns, measures applied, need per run."""
    work = prepare(frame, window, sizes.per_run_mib)
    util_basis, measure_warnings = apply_measures(frame, work, sources)
    need, basis = need_of_runs(work)
    # mem_used_mib is already one GPU's value (load.py divides 24.05+ sums by the step's
    # GPUs): its share is of ONE GPU's memory, whatever the run's GPU count
    work["mem_share"] = work["mem_used_mib"].to_numpy() / np.where(
        work["gpus"] > 0, work["gpu_mem_mib"].to_numpy(), np.nan
    )
    return Runs(work, need, basis, util_basis, sizes.unknown_types, measure_warnings)
