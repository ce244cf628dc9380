"""What-if replay: a site's own job history re-scheduled on its cluster, then on each change.

Library entry point: `replay(sacct_files, ReplayOptions(...)) -> ReplayReport`. The report's
`to_dict()` is the JSON contract (docs/replay.md): `{"baseline": {...}, "scenarios": [...]}`.
The layers: `from_accounting` (the accounting frame -> a `ReplayTrace`), `cluster` (the model
and what changes do to it), `engine` (the scheduler), `results` (what it amounts to).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from slurmgpu.errors import UsageError
from slurmgpu.model.changes import Change, format_change, parse_change
from slurmgpu.replay.cluster import ClusterModel, QosSpec, apply_change, from_capacity
from slurmgpu.replay.engine import SchedConfig
from slurmgpu.replay.engine import replay as run_engine
from slurmgpu.replay.jobs import ReplayJob, ReplayTrace
from slurmgpu.replay.results import ResultBlock, block_from_outcome, recorded_block, window_of

__all__ = [
    "ClusterModel",
    "ReplayJob",
    "ReplayOptions",
    "ReplayReport",
    "ReplayTrace",
    "SchedConfig",
    "parse_change",
    "replay",
    "replay_trace",
]


@dataclass(frozen=True)
class ReplayOptions:
    """Everything a replay needs besides the sacct dumps (the CLI fills it from its options)."""

    capacity: Mapping[str, float] = field(default_factory=dict)  # partition -> whole GPUs
    # (partition, snapshot file or directory): nodes as `slurmgpu inventory` recorded them
    inventories: tuple[tuple[str, str], ...] = ()
    gpus_per_node: Mapping[str, int] = field(default_factory=dict)
    gpu_types: Mapping[str, str] = field(default_factory=dict)
    gpu_memory_mib: Mapping[str, float] = field(default_factory=dict)
    shards_per_gpu: Mapping[str, float] = field(default_factory=dict)
    qos: tuple[QosSpec, ...] = ()
    tiers: Any = None  # a Policy, mapping or function QOS -> tier name (as analyze takes)
    baseline_changes: tuple[Change, ...] = ()  # what the cluster is today beyond --capacity
    what_if: tuple[Change, ...] = ()
    config: SchedConfig = field(default_factory=SchedConfig)
    timezone: str = "UTC"
    processes: int = 1
    live: bool = False  # read capacity (if not given), QOS and settings from the live cluster
    env: Mapping[str, str] | None = None
    store: str | None = None  # an accounting store (`slurmgpu ingest`) instead of dumps
    clusters: tuple[str, ...] = ()  # with `store`: only these clusters of it
    # measure sources (`measure.build_measure_sources`): a run's measured GPU memory (the
    # collector's / jobstats' summaries) over sacct's gres/gpumem, so jobs that fit a MIG
    # slice by what they used are replayed as such where Slurm records no gres/gpumem
    measure_sources: tuple[Any, ...] = ()


@dataclass(frozen=True)
class ReplayReport:
    """The recorded history (where known), the baseline replay and one block per change."""

    baseline: ResultBlock
    recorded: ResultBlock | None
    scenarios: tuple[ResultBlock, ...]
    skipped: Mapping[str, int]
    config: SchedConfig
    rejected: tuple[tuple[str, int, str], ...] = ()  # rows of the dumps the loader rejected

    def to_dict(self) -> dict[str, Any]:
        from slurmgpu.util.json_safe import json_safe

        base = self.baseline.to_dict()
        base["recorded"] = self.recorded.to_dict() if self.recorded else None
        base["skipped"] = dict(self.skipped)
        base["rejected"] = [{"file": f, "line": n, "reason": r} for f, n, r in self.rejected]
        return json_safe({"baseline": base, "scenarios": [s.to_dict() for s in self.scenarios]})


def _tier_function(tiers: Any):
    if tiers is None:
        return None
    if hasattr(tiers, "tier_for_qos"):
        return lambda q: getattr(tiers.tier_for_qos(q), "name", None)
    if isinstance(tiers, Mapping):
        return tiers.get
    return tiers


def replay(sacct_files: Sequence[str | os.PathLike[str]], options: ReplayOptions) -> ReplayReport:
    """Load the dumps, build the cluster model, replay the baseline and every what-if."""
    options, trace = load_for_replay(sacct_files, options)
    return replay_trace(trace, options)


def load_for_replay(
    sacct_files: Sequence[str | os.PathLike[str]], options: ReplayOptions
) -> tuple[ReplayOptions, ReplayTrace]:
    """The options with the live cluster's facts filled in (`--live`), and the dumps' trace.

    The cluster model is built first, so a missing --capacity fails before a long load.
    """
    from slurmgpu.replay.from_accounting import load_history, partition_gpu_types, trace_for

    if not sacct_files and options.store is None:
        raise UsageError("replay needs --sacct-file or --store (the history to replay)")
    if sacct_files and options.store is not None:
        raise UsageError("--store and --sacct-file: give one of them")
    options = _with_live(options) if options.live else options
    build_model(options)  # a missing cluster fails before a long load
    loaded = load_history(
        sacct_files,
        tier_for_qos=_tier_function(options.tiers),
        timezone=options.timezone,
        shards_per_gpu=options.shards_per_gpu,
        store=options.store,
        clusters=options.clusters,
        keep_admin_comment=bool(options.measure_sources),
    )
    frame, measure_notes = _measured(loaded.frame, options.measure_sources)
    # a partition's GPU type: --gpu-type, else what its runs' typed GRES say (as analyze reads
    # it), so a carve that analyze recommends on the same dump replays without --gpu-type
    from_dump = partition_gpu_types(frame)
    options = replace(options, gpu_types={**from_dump, **options.gpu_types})
    model = build_model(options)
    # a partition's GPU type as the model knows it (--gpu-type, or its snapshots' GPUs)
    types = {p.name: p.gpu_type for p in model.partitions if p.gpu_type}
    memory = {
        p.gpu_type: p.gpu_memory_mib for p in model.partitions if p.gpu_type and p.gpu_memory_mib
    }
    trace = trace_for(
        frame, {**types, **options.gpu_types}, {**memory, **options.gpu_memory_mib}, loaded
    )
    return options, replace(trace, measure_notes=measure_notes)


def _measured(frame: Any, sources: Sequence[Any]) -> tuple[Any, tuple[str, ...]]:
    """The frame with the sources' measured GPU memory (none: as loaded), and one line per
    thing a source could not measure."""
    if not sources:
        return frame, ()
    from slurmgpu.accounting.runs import with_measured_memory

    measured, warnings = with_measured_memory(frame, sources)
    return measured, tuple(str(w) for w in warnings)


def _with_live(options: ReplayOptions) -> ReplayOptions:
    """Fill what the options leave open from scontrol and sacctmgr."""
    from slurmgpu.replay.from_accounting import capacity_from_live
    from slurmgpu.replay.slurm_config import sched_config
    from slurmgpu.sources import sacctmgr
    from slurmgpu.sources.slurm import scontrol_show_config

    changes: dict[str, Any] = {
        "config": sched_config(scontrol_show_config(options.env), options.config)
    }
    if not options.capacity and not options.inventories:
        caps, per_node, types = capacity_from_live(options.env)
        changes.update(
            capacity=caps,
            gpus_per_node={**per_node, **options.gpus_per_node},
            gpu_types={**types, **options.gpu_types},
        )
    if not options.qos:
        changes["qos"] = tuple(
            QosSpec(
                q.name,
                q.priority,
                q.preempt,
                q.grace_time_s,
                q.preempt_mode if q.preempt_mode in ("requeue", "cancel", "off") else "requeue",
            )
            for q in sacctmgr.show_qos(options.env)
        )
    return replace(options, **changes)


def build_model(options: ReplayOptions) -> ClusterModel:
    """The baseline cluster: --inventory and --capacity nodes, the QOS, then the baseline
    changes. A partition given by snapshots takes its nodes from them, not from --capacity."""
    from slurmgpu.replay.inventory import partitions_from_inventory

    if not options.capacity and not options.inventories:
        raise UsageError(
            "replay needs the cluster: give --capacity PARTITION=GPUS or --inventory "
            "PARTITION=SNAPSHOT (repeatable), or --live"
        )
    from_snapshots = partitions_from_inventory(options.inventories)
    given = {p.name for p in from_snapshots}
    both = sorted(given & set(options.capacity))
    if both:
        raise UsageError(
            f"partition {both[0]} is given by both --capacity and --inventory: give one"
        )
    model = from_capacity(
        options.capacity,
        gpus_per_node=options.gpus_per_node,
        gpu_types=options.gpu_types,
        gpu_memory_mib=options.gpu_memory_mib,
        qos=options.qos,
    )
    model = replace(
        model, partitions=tuple(sorted((*model.partitions, *from_snapshots), key=lambda p: p.name))
    )
    for change in options.baseline_changes:
        model = apply_change(model, change)
    return model


def _gpus_by_partition(model: ClusterModel) -> dict[str, int]:
    return {p.name: p.total_gpus for p in model.partitions}


def _scenario(args: tuple) -> ResultBlock:
    from slurmgpu.replay.idle_reclaim import reclaim

    trace, model, change, config, window = args
    changed = apply_change(model, change)
    trace, _cut = reclaim(trace, change)  # idle:FILE changes the jobs, not the cluster
    outcome = run_engine(trace, changed, config)
    return block_from_outcome(
        format_change(change), trace, outcome, _gpus_by_partition(changed), window,
        change=format_change(change),
    )  # fmt: skip


def replay_trace(trace: ReplayTrace, options: ReplayOptions) -> ReplayReport:
    """Replay an already-loaded trace (the baseline, then each what-if change)."""
    model = build_model(options)
    check_changes(model, trace, options.what_if)
    baseline = run_engine(trace, model, options.config)
    window = window_of(trace, baseline)
    gpus = _gpus_by_partition(model)
    base_block = block_from_outcome("baseline", trace, baseline, gpus, window)
    jobs = [(trace, model, c, options.config, window) for c in options.what_if]
    if options.processes > 1 and len(jobs) > 1:
        import multiprocessing

        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(min(options.processes, len(jobs))) as pool:
            scenarios = pool.map(_scenario, jobs)
    else:
        scenarios = [_scenario(j) for j in jobs]
    return ReplayReport(
        baseline=base_block,
        recorded=recorded_block(trace, gpus, window),
        scenarios=tuple(scenarios),
        skipped=dict(trace.skipped),
        config=options.config,
        rejected=trace.rejected,
    )


def check_changes(model: ClusterModel, trace: ReplayTrace, changes: Sequence[Change]) -> None:
    """Each change fits the model and names what the site has (UsageError otherwise): checked
    before any long replay or any submission, not after."""
    from slurmgpu.replay.idle_reclaim import idle_files, read_cuts

    for change in changes:
        apply_change(model, change)
        _check_qos(change, model, trace)
        for path in idle_files(change):
            read_cuts(path)  # readable and the JSON of `slurmgpu idle`, before any replay


def _check_qos(change: Change, model: ClusterModel, trace: ReplayTrace) -> None:
    """A `tier:` change must name a QOS the policy or the dumps know (a typo replays to "no
    difference", which would read as "no effect")."""
    from slurmgpu.model.changes import TierChange, Together

    if isinstance(change, Together):
        for one in change.changes:
            _check_qos(one, model, trace)
        return
    if not isinstance(change, TierChange):
        return
    known = {q.name for q in model.qos} | set(trace.qos_names)
    if change.qos not in known:
        names = ", ".join(sorted(known)) or "none"
        raise UsageError(
            f"change {format_change(change)!r}: QOS {change.qos!r} is neither in the policy nor "
            f"in the dumps (known: {names})"
        )


def read_sweep(path: str | os.PathLike[str]) -> tuple[Change, ...]:
    """A sweep file: one change per line (`#` comments and blank lines ignored)."""
    try:
        with open(path, encoding="utf-8-sig") as fh:  # a UTF-8 byte order mark is dropped
            lines = fh.read().splitlines()
    except OSError as exc:
        raise UsageError(f"--sweep {os.fspath(path)}: {exc.strerror}") from None
    out = []
    for number, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].strip()
        if text:
            try:
                out.append(parse_change(text))
            except UsageError as exc:
                raise UsageError(f"{os.fspath(path)}:{number}: {exc}") from None
    if not out:
        raise UsageError(f"--sweep {os.fspath(path)}: no change in the file")
    return tuple(out)
