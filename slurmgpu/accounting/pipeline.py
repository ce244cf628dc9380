"""`analyze()`: the accounting stages wired in order, each a module with one job (and each a
function here that `analyze` lists in order).

read (`read.py`: row sources) -> normalize (`load.py`: typed columns, steps folded into runs,
requeued runs apart, bad rows rejected with file:line:reason) -> runs (`runs.py`: window-
clipped GPU-hours, GPU sizes, measures, need) -> metrics (`metrics.py`) -> recommendations
(`recommend.py`) -> the typed `AnalysisDocument` (`document.py`), whose `to_json()` is the JSON
contract.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from slurmgpu.accounting import document as doc_mod
from slurmgpu.accounting import load as load_mod
from slurmgpu.accounting.capacity import Capacity
from slurmgpu.accounting.columns import codes as column_codes
from slurmgpu.accounting.document import (
    SCHEMA_VERSION,
    AnalysisDocument,
    AnalysisResult,
    ClusterFacts,
)
from slurmgpu.accounting.options import USAGE_SUMS_FROM, AnalysisOptions, parse_version
from slurmgpu.errors import SacctParseError, SlurmCommandError, UsageError

LIVE_DEFAULT_DAYS = 7


def analyze(options: AnalysisOptions) -> AnalysisResult:
    """Analyze saved sacct dumps, or the live cluster when `options.files` is empty."""
    opts = options.validated()
    if opts.store is not None and opts.slurm_version is None:  # as the store was ingested
        from dataclasses import replace

        from slurmgpu.accounting.store import store_slurm_version

        opts = replace(opts, slurm_version=store_slurm_version(opts.store))
    live = _live(opts)
    got, source = _read(opts, live)
    frame, win, outside, raw_partitions = _in_window(got.loaded.frame, live)
    frame, cluster_of = _per_cluster(frame)
    parts = _partitions(opts, live.capacity, cluster_of)
    sizes, r, jobs_need = _runs(opts, frame, win, parts)
    totals = _totals(got.loaded, frame, r.work, parts.total_gpus, win, outside, parts.capacity)
    tables = _group_tables(frame, r, jobs_need, win, parts)
    recommendations = _recommend(frame, r, tables, totals, win, parts)
    doc = AnalysisDocument(
        schema_version=SCHEMA_VERSION,
        generated_at=opts.now,
        window=doc_mod.Window(*win.datetimes()),
        source=source,
        totals=totals,
        utilization_basis=dict(r.util_basis),
        measure_warnings=tuple(
            doc_mod.MeasureWarning(w.source, w.kind, w.message, tuple(w.job_ids))
            for w in r.measure_warnings
        ),
        **tables,
        fit_fraction=_fit_fraction(r, sizes, jobs_need),
        timeseries=_timeseries(opts, frame, r.work, win, parts.total_gpus, parts.capacity),
        rejected=tuple(
            doc_mod.Rejected(str(x.file), int(x.line), str(x.reason)) for x in got.loaded.rejected
        ),
        notes=tuple(_option_notes(opts, raw_partitions | set(cluster_of), parts.capacity))
        + tuple(_gpu_type_notes(frame, parts.types, parts.memory)),
        recommendations=tuple(recommendations),
        by_accelerator=_by_accelerator(opts, frame, r, jobs_need, win, live.capacity),
        **_energy(opts, frame, r.work),
    )
    return AnalysisResult(document=doc, frame=frame, load=got.loaded, cluster=parts.facts(sizes))


@dataclass(frozen=True)
class _Live:
    """What the live cluster says (nothing for dumps), and the window asked."""

    capacity: Capacity
    version: tuple[int, int, int] | None
    capacity_error: str | None
    since: datetime | None
    until: datetime | None


def _live(opts: AnalysisOptions) -> _Live:
    """Slurm's version, the capacity and the default window (7 days to now) when live."""
    if opts.files or opts.store is not None:  # dumps or the accounting store: not live
        return _Live(Capacity(), None, None, opts.since, opts.until)
    assert opts.now is not None
    cap, version, capacity_error = _live_facts(opts)
    since = opts.since or (opts.now - timedelta(days=LIVE_DEFAULT_DAYS))
    return _Live(cap, version, capacity_error, since, opts.until or opts.now)


def _read(opts: AnalysisOptions, live: _Live) -> tuple[Any, doc_mod.Source]:
    """Stage read + normalize: the rows from the source `opts` names, and where they came
    from."""
    from slurmgpu.accounting import read

    reading = _usage_reading(opts.slurm_version, live.version)
    normalize = normalize_options(opts, live)
    request = read.ReadRequest(opts, normalize, live.since, live.until, live.version)
    got = read.source_for(opts).read(request)
    version = live.version
    source = doc_mod.Source(
        kind=got.kind if not opts.files else "file",
        files=tuple(os.fspath(p) for p in (opts.files or (got.loaded.files if opts.store else ()))),
        slurm_version="{}.{:02d}.{}".format(*version) if version else opts.slurm_version,
        usage_reading=reading["text"],
        capacity_error=live.capacity_error,
        backend_note=got.note if not (opts.files or opts.store is not None) else None,
    )
    return got, source


def normalize_options(opts: AnalysisOptions, live: _Live) -> load_mod.Options:
    """What the normalizer is told (the store's reader too: `trend.store_month_frames`)."""
    return load_mod.Options(
        timezone=opts.timezone,
        tier_for_qos=opts.tier_function(),
        shards_per_gpu={**live.capacity.shards_per_gpu, **opts.shards_per_gpu},
        usage_sums_gpus=_usage_reading(opts.slurm_version, live.version)["sums"],
        keep_admin_comment=bool(opts.measure_sources),
    )


def _in_window(frame: Any, live: _Live) -> tuple[Any, Any, int, set[str]]:
    """Stage window: the runs active in the window, how many rows were outside it, and the
    partitions seen (before several clusters' partitions are labelled)."""
    from slurmgpu.accounting import window

    win = window.window_for(frame, live.since, live.until)
    inside = window.active_in(frame, win)
    outside = int((~inside).sum())
    frame = frame[inside].reset_index(drop=True)
    return frame, win, outside, set(column_codes(frame, "partition")[1])


@dataclass(frozen=True)
class _Partitions:
    """The per-partition settings, keyed by the window's partition labels."""

    capacity: dict[str, float]  # GPUs per partition
    types: dict[str, str]  # GPU type per partition
    gpus_per_node: dict[str, float]
    memory: dict[str, float]  # GPU type -> memory MiB
    total_gpus: float | None
    cluster_of: dict[str, str]

    def facts(self, sizes: Any) -> ClusterFacts:
        """What the replay needs of the cluster (`AnalysisResult.cluster`)."""
        return ClusterFacts(
            capacity=dict(self.capacity),
            gpus_per_node=dict(self.gpus_per_node),
            gpu_types=dict(self.types),
            clusters=frozenset(self.cluster_of.values()),
            gpu_memory_mib=sizes.per_run_mib,
        )


def _partitions(opts: AnalysisOptions, cap: Capacity, cluster_of: dict[str, str]) -> _Partitions:
    """The options' and the live cluster's capacity, GPU types, GPUs per node and memory."""
    part_gpus = _by_label(
        {**cap.partition_gpus, **(opts.capacity or {})}, cluster_of, "capacity", strict=True
    )
    types = _by_label({**cap.gpu_types, **opts.gpu_types}, cluster_of, "GPU type")
    gpus_per_node = _by_label(
        {**cap.gpus_per_node, **opts.gpus_per_node}, cluster_of, "GPUs per node"
    )
    if "*" in gpus_per_node:  # one size for every partition not named
        every = gpus_per_node.pop("*")
        gpus_per_node = {p: gpus_per_node.get(p, every) for p in {*cluster_of, *part_gpus}}
    memory = {**_inventory_memory(opts.inventories), **opts.gpu_memory_mib}
    total_gpus = cap.total_gpus if not opts.capacity else sum(part_gpus.values())
    if not part_gpus:
        total_gpus = None
    return _Partitions(part_gpus, types, gpus_per_node, memory, total_gpus, cluster_of)


def _runs(opts: AnalysisOptions, frame: Any, win: Any, parts: _Partitions) -> tuple[Any, ...]:
    """Stage runs: GPU sizes per run, window-clipped GPU-hours, measures and need (per run,
    and per job)."""
    from slurmgpu.accounting import metrics, runs

    sizes = runs.gpu_sizes(frame, parts.types, parts.memory)
    r = runs.build_runs(frame, win, sizes, opts.measure_sources)
    return sizes, r, metrics.job_need(frame, r.need)


def _totals(
    loaded: Any,
    frame: Any,
    work: Any,
    total_gpus: float | None,
    win: Any,
    outside: int,
    part_gpus: dict[str, float],
) -> doc_mod.Totals:
    """Stage metrics, the totals: the window's numbers and the row accounting (which must
    reconcile)."""
    from slurmgpu.accounting import metrics

    if loaded.rows_read != loaded.rows_analyzed + loaded.rows_rejected:
        raise SacctParseError("internal: row accounting does not reconcile")
    headline = metrics.over_known_capacity(
        metrics.summarize(work, total_gpus, win),
        work,
        frame["partition"].to_numpy(dtype=object, na_value=""),
        part_gpus,
    )
    return doc_mod.Totals(
        **headline.stats.as_fields(),
        gpu_hours_capacity_unknown=headline.gpu_hours_unknown,
        partitions_capacity_unknown=headline.partitions_unknown,
        rows_read=loaded.rows_read,
        rows_analyzed=loaded.rows_analyzed,
        rows_rejected=loaded.rows_rejected,
        step_rows=loaded.step_rows,
        allocation_rows=len(frame) + outside,
        rows_outside_window=outside,
        rows_overlap_skipped=loaded.rows_overlap,
        blank_lines=loaded.blank_lines,
        rows_latin1_decoded=loaded.latin1_lines,
        rejected_reasons=dict(loaded.rejected_reasons),
        shard_runs_unknown_fraction=int(
            (~frame["shard_fraction_known"].to_numpy(dtype=bool, na_value=True)).sum()
        ),
        steps_gpu_usage_over_100=loaded.usage_over_100,
    )


def _group_tables(
    frame: Any, r: Any, jobs_need: Any, win: Any, parts: _Partitions
) -> dict[str, Any]:
    """Stage metrics, the by_* tables of the document."""
    from slurmgpu.accounting import metrics

    work = r.work
    by_partition = metrics.by_group(
        frame, work, "partition", win, parts.capacity, need=r.need, jobs_need=jobs_need
    )
    return {
        "by_partition": by_partition,
        "by_cluster": _by_cluster(frame, work, win, parts.capacity, parts.cluster_of),
        "by_qos": metrics.by_group(frame, work, "qos", win, None, extra=("tier",)),
        "by_tier": metrics.by_group(frame, work, "tier", win, None),
        "by_account": metrics.by_group(frame, work, "account", win, None),
        "by_user": metrics.by_group(frame, work, "user", win, None),
        "by_kind": metrics.by_group(frame, work, "kind", win, None),
    }


def _energy(opts: AnalysisOptions, frame: Any, work: Any) -> dict[str, Any]:
    """Stage metrics, energy: the `energy` block and its cost by the policy (energy.py)."""
    from slurmgpu.accounting.energy import cost_of, energy_of

    energy = energy_of(frame, work, opts.idle_util_pct)
    return {"energy": energy, "energy_cost": cost_of(energy, opts.energy)}


def _by_accelerator(
    opts: AnalysisOptions, frame: Any, r: Any, jobs_need: Any, win: Any, cap: Capacity
):
    """The by_accelerator table: every vendor's GPUs, slices and NPUs (accelerators.py)."""
    from slurmgpu.accounting.accelerators import by_accelerator

    devices = {**cap.devices, **opts.accelerator_devices}
    return by_accelerator(frame, r.work, r.need, win, devices, jobs_need)


def _recommend(
    frame: Any, r: Any, tables: dict[str, Any], totals: Any, win: Any, parts: _Partitions
) -> list[Any]:
    """Stage recommendations (candidates; `advice/` replays their changes)."""
    from slurmgpu.accounting import recommend

    return recommend.recommend(
        frame,
        r.work,
        need=r.need,
        need_basis=r.need_basis,
        by_partition=tables["by_partition"],
        by_tier=tables["by_tier"],
        totals=totals,
        window=win,
        partition_types=parts.types,
        gpus_per_node=parts.gpus_per_node,
        cluster_of=parts.cluster_of,
    )


def _fit_fraction(r: Any, sizes: Any, jobs_need: Any) -> Any:
    from slurmgpu.accounting import metrics

    return metrics.fit_fraction(
        r.work,
        r.need,
        r.need_basis,
        sizes.unknown_types,
        jobs_need=jobs_need,
        unknown_partitions=sizes.unknown_partitions,
        type_partitions=sizes.type_partitions,
    )


def _timeseries(
    opts: AnalysisOptions,
    frame: Any,
    work: Any,
    win: Any,
    total_gpus: float | None,
    part_gpus: dict[str, float],
) -> Any:
    from slurmgpu.accounting import metrics

    return metrics.timeseries(
        work,
        win,
        total_gpus,
        opts.freq,
        partitions=frame["partition"].to_numpy(dtype=object, na_value=""),
        known_partitions=part_gpus,
    )


def _per_cluster(frame: Any) -> tuple[Any, dict[str, str]]:
    """Partitions per (cluster, partition) when the window holds more than one cluster.

    Two clusters may both have a partition `v100`: merged, their GPU-hours would add up
    against one capacity and a node move could cross clusters. With several clusters each
    run's partition becomes `CLUSTER/PARTITION`; with one cluster the frame is unchanged.
    Returns the frame and {partition label: its cluster}.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    names = column_codes(frame, "cluster")[1]
    if len(names) <= 1:  # (the common case, without touching a string per row)
        only = next(iter(names), "")
        return frame, {p: only for p in column_codes(frame, "partition")[1]}
    clusters = frame["cluster"].to_numpy(dtype=object, na_value="")
    parts = frame["partition"].to_numpy(dtype=object, na_value="")
    cl = pc.fill_null(pa.array(clusters, pa.string()), "")
    pt = pc.fill_null(pa.array(parts, pa.string()), "")
    label = pc.binary_join_element_wise(cl, pt, "/")
    frame = frame.copy()
    frame["partition"] = _arrow_column(pc.dictionary_encode(label))
    labels = label.to_numpy(zero_copy_only=False)
    return frame, {str(k): str(c) for k, c in set(zip(labels, clusters, strict=True))}


def _arrow_column(array: Any) -> Any:
    """A pyarrow array as a pandas column keeping its Arrow type (as load.py builds them)."""
    import pandas as pd

    return pd.arrays.ArrowExtensionArray(array)


def _by_label(
    given: dict[str, Any], cluster_of: dict[str, str], what: str, strict: bool = False
) -> dict[str, Any]:
    """Per-partition settings keyed by the window's partition labels.

    With one cluster the labels are the partition names and `given` is returned as is. With
    several, a key `CLUSTER/PARTITION` names one partition; a plain `PARTITION` names it in
    every cluster that has it (for a capacity, `strict`, that must be exactly one cluster).
    A key matching no partition is kept (a partition idle over the whole window).
    """
    if len(set(cluster_of.values())) <= 1:
        return dict(given)
    out: dict[str, Any] = {}
    for key, value in given.items():
        if key in cluster_of:
            out[key] = value
            continue
        hits = sorted(label for label in cluster_of if label.split("/", 1)[1] == key)
        if strict and len(hits) > 1:
            raise UsageError(
                f"{what} of partition {key!r}: clusters {', '.join(h.split('/')[0] for h in hits)}"
                f" all have a partition {key!r}; name it as CLUSTER/PARTITION"
            )
        for label in hits or [key]:
            out.setdefault(label, value)
    return out


def _by_cluster(
    frame: Any, work: Any, win: Any, part_gpus: dict[str, float], cluster_of: dict[str, str]
) -> tuple[doc_mod.GroupRow, ...]:
    """The numbers per cluster; a cluster's capacity is known when every partition of it
    seen in the window has a known capacity."""
    from slurmgpu.accounting import metrics

    clusters = set(cluster_of.values())
    caps: dict[str, float] = {}
    for cluster in clusters:
        seen = [p for p, c in cluster_of.items() if c == cluster]
        idle = [p for p in part_gpus if p not in cluster_of]
        mine = set(seen) | {p for p in idle if len(clusters) == 1 or p.startswith(cluster + "/")}
        if seen and all(p in part_gpus for p in seen):
            caps[cluster] = float(sum(part_gpus[p] for p in mine))
    return metrics.by_group(frame, work, "cluster", win, caps)


def _gpu_type_notes(frame: Any, types: dict[str, str], memory: dict[str, float]) -> list[str]:
    """What a partition's given GPU type did: a type of unknown size is said out loud (not
    silence), and so is a given type standing in for a typed name nobody knows."""
    from slurmgpu.model.catalog import resolve

    known = {k.lower() for k in memory}

    def sized(name: str) -> bool:
        return name.lower() in known or resolve(name) is not None

    parts = frame["partition"].to_numpy(dtype=object, na_value="")
    seen_types = frame["gpu_type"].to_numpy(dtype=object, na_value=None)
    notes = []
    for part, gtype in sorted(types.items()):
        mine = parts == part
        if not mine.any():
            continue
        if not sized(gtype):
            notes.append(
                f"GPU type {gtype!r} given for partition {part!r} is neither in the catalogue "
                f"nor given a size: its GPUs' memory stays unknown (give --gpu-memory "
                f"{gtype}=SIZE, or a type the catalogue knows)"
            )
            continue
        odd = sorted(
            {str(t) for t in _unique(seen_types[mine]) if isinstance(t, str) and not sized(t)}
        )
        if odd:
            notes.append(
                f"runs of partition {part!r} name GPU type(s) {', '.join(map(repr, odd))}, "
                f"which the catalogue does not know: sized as {gtype!r}, the type given for "
                "the partition"
            )
    return notes


def _unique(values: Any) -> Any:
    import pandas as pd

    return pd.unique(values)


def _option_notes(
    opts: AnalysisOptions, seen_partitions: set[str], part_gpus: dict[str, float]
) -> list[str]:
    """Options that had no effect, said out loud (never silently ignored)."""
    from slurmgpu.model.catalog import resolve

    seen = set(seen_partitions) | set(part_gpus) | {p.split("/", 1)[-1] for p in part_gpus}
    notes = []
    for part, gtype in sorted(opts.gpu_types.items()):
        if part not in seen:
            hint = ""
            if resolve(part) is not None or part.lower() in {
                k.lower() for k in opts.gpu_memory_mib
            }:
                hint = f" ({part!r} is a GPU type: for its memory give gpu_memory {part}=SIZE)"
            notes.append(
                f"GPU type {gtype!r} was given for partition {part!r}, which no run in the "
                f"window used: it had no effect{hint}"
            )
    return notes


def _live_facts(
    opts: AnalysisOptions,
) -> tuple[Capacity, tuple[int, int, int] | None, str | None]:
    """Slurm's version and the partitions' capacity, asked from the live cluster (and why
    capacity is unknown, when scontrol failed)."""
    from slurmgpu.accounting import capacity as cap_mod
    from slurmgpu.sources import slurm as slurm_src

    try:
        version = slurm_src.slurm_version(opts.env)
    except SlurmCommandError:
        version = None
    cap, capacity_error = Capacity(), None
    try:
        cap = cap_mod.capacity_from_scontrol(
            slurm_src.scontrol_show("node", env=opts.env),
            slurm_src.scontrol_show("partition", env=opts.env),
        )
    except SlurmCommandError as exc:
        capacity_error = str(exc)
    return cap, version, capacity_error


def _usage_reading(given: str | None, live: tuple[int, int, int] | None) -> dict[str, Any]:
    """How a step's gres/gpuutil and gres/gpumem are read: per GPU, or sums (24.05+)."""
    version = live[:2] if live else (parse_version(given) if given else None)
    if version is None:
        return {
            "sums": False,
            "text": "Slurm version unknown: gres/gpuutil and gres/gpumem read as one GPU's "
            "value (Slurm < 24.05); give the dump's Slurm version if it is 24.05 or later",
        }
    label = f"{version[0]}.{version[1]:02d}"
    if version >= USAGE_SUMS_FROM:
        return {
            "sums": True,
            "text": f"Slurm {label}: a step's gres/gpuutil and gres/gpumem are sums over its "
            "GPUs, divided by the step's GPU count",
        }
    return {
        "sums": False,
        "text": f"Slurm {label}: a step's gres/gpuutil and gres/gpumem are one GPU's value",
    }


def _inventory_memory(paths: Sequence[str | os.PathLike[str]]) -> dict[str, float]:
    """{GPU type name: memory MiB} from inventory snapshots (every name Slurm may use)."""
    if not paths:
        return {}
    from slurmgpu.model.catalog import resolve
    from slurmgpu.sources import snapshot

    out: dict[str, float] = {}
    for path in paths:
        for gpu in snapshot.load(path).gpus:
            model = resolve(gpu.name)
            names = {gpu.name, gpu.name.strip().lower().replace(" ", "_")}
            if model:
                names |= {model.short_type, model.autodetect_type, model.key}
            for name in names:
                out[name] = float(gpu.memory_mib)
            for mig in gpu.mig_devices:
                out[mig.profile] = float(mig.memory_mib)
    return out


@dataclass(frozen=True)
class WindowTables:
    """The runs of one sub-window (a trend's month) and their tables, by the analysis'
    own stages: `frame` and `work` row-aligned, `by_partition` and `totals` as in the
    document of an analysis of that window."""

    frame: Any
    work: Any
    window: Any
    by_partition: tuple[Any, ...]
    totals: Any  # GroupStats over every partition (ratio over the known capacity)


def window_tables(opts: AnalysisOptions, frame: Any, since: datetime, until: datetime) -> Any:
    """Stages window -> runs -> metrics on normalized runs `frame` for [since, until): the
    numbers `analyze(since=, until=)` gives for its by_partition table (`accounting/trend`)."""
    from slurmgpu.accounting import metrics

    live = _Live(Capacity(), None, None, since, until)
    frame, win, _, _ = _in_window(frame, live)
    frame, cluster_of = _per_cluster(frame)
    parts = _partitions(opts, live.capacity, cluster_of)
    _, r, jobs_need = _runs(opts, frame, win, parts)
    rows = metrics.by_group(
        frame, r.work, "partition", win, parts.capacity, need=r.need, jobs_need=jobs_need
    )
    headline = metrics.over_known_capacity(
        metrics.summarize(r.work, parts.total_gpus, win),
        r.work,
        frame["partition"].to_numpy(dtype=object, na_value=""),
        parts.capacity,
    )
    return WindowTables(frame, r.work, win, rows, headline.stats)
