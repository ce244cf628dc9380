"""What `analyze`'s recommendations would have done, replayed on the analysis' own runs.

A recommendation's rule-of-thumb estimate ("carving frees 3 GPUs in a median hour") is not
what an admin acts on; a replay of the same window with and without its `change` is. Given the
runs (the accounting frame `analyze` holds, or an already-built `ReplayTrace`) and the cluster
model (`ReplayOptions`: capacity per partition at least), `estimate_effects` replays the
baseline once and each recommendation's change(s) once, and returns a typed `Effect` per
recommendation: allocation ratio, waits p50/p95 overall and per partition and tier, GPU-hours
lost to preemption and jobs that could not run, each as `before` / `after`.

A recommendation made of several changes (a carve in two layouts) is replayed with all of
them applied together; its key is `effect_key(changes)` (the changes joined by " + "). A
change that does not fit the model is an `EffectUnavailable` saying why, never an exception
that would sink the whole analysis.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from slurmgpu.accounting.document import ReplayedEffect
from slurmgpu.advice.calibrate import Calibration, calibration_of, not_advised_text, tolerance_of
from slurmgpu.advice.candidates import partitions_touched
from slurmgpu.advice.explain import owners_from_frame
from slurmgpu.advice.objective import verdict
from slurmgpu.errors import UsageError
from slurmgpu.model.changes import Change, Together, format_change, parse_change
from slurmgpu.model.policy import Objective
from slurmgpu.replay import ReplayOptions, _gpus_by_partition, build_model
from slurmgpu.replay.cluster import ClusterModel, apply_change
from slurmgpu.replay.engine import SchedConfig, warm_up
from slurmgpu.replay.engine import replay as run_engine
from slurmgpu.replay.jobs import ReplayTrace
from slurmgpu.replay.results import (
    ResultBlock,
    Window,
    block_from_outcome,
    recorded_block,
    window_of,
)
from slurmgpu.util.json_safe import json_safe


@dataclass(frozen=True)
class Delta:
    """One measure without (`before`: the baseline replay) and with the change (`after`)."""

    before: float | None
    after: float | None

    @property
    def difference(self) -> float | None:
        if self.before is None or self.after is None:
            return None
        return self.after - self.before


@dataclass(frozen=True)
class PartitionEffect:
    partition: str
    gpus: Delta
    allocation_ratio: Delta
    wait_p50_s: Delta
    wait_p95_s: Delta


@dataclass(frozen=True)
class TierEffect:
    tier: str
    wait_p50_s: Delta
    wait_p95_s: Delta


@dataclass(frozen=True)
class PartitionFidelityNote:
    """Whether the baseline replay reproduces a partition a recommendation touches
    (`advice.calibrate`, the same judgement and words as `slurmgpu advise`)."""

    partition: str
    calibrated: bool
    why: str | None  # what is off (None: calibrated)
    note: str | None  # `calibrate.not_advised_text` (None: calibrated)
    explanation: dict[str, Any] | None = None  # `explain.Explanation.to_dict()`, by_hour left out


@dataclass(frozen=True)
class Effect:
    """A recommendation's replayed effect over the analysis window."""

    changes: tuple[str, ...]
    jobs: int
    window_hours: float
    allocation_ratio: Delta
    gpu_hours_allocated: Delta
    useful_gpu_hours: Delta  # measured need, where known
    wait_p50_s: Delta
    wait_p95_s: Delta
    preemptions: Delta
    gpu_hours_lost: Delta  # thrown away by preemption (requeued work)
    jobs_not_run: Delta
    jobs_on_slices: Delta  # whole-GPU jobs that fitted a MIG slice or shards
    by_partition: tuple[PartitionEffect, ...]
    by_tier: tuple[TierEffect, ...]
    # every limit of the site's objective the change breaks in this replay (`advice.objective`
    # `verdict`): a recommendation with any is marked "replay shows harm: ...", never advised
    harm: tuple[str, ...] = ()
    # the baseline's fidelity on each partition the change touches: a recommendation on one
    # the replay does not reproduce is printed "not advised: partition X's baseline is off ..."
    fidelity: tuple[PartitionFidelityNote, ...] = ()

    @property
    def not_reproduced(self) -> tuple[str, ...]:
        """The `not advised` notes of the partitions the replay does not reproduce."""
        return tuple(f.note for f in self.fidelity if not f.calibrated and f.note)

    def to_dict(self) -> dict[str, Any]:
        return json_safe({"basis": "replay", **asdict(self)})


@dataclass(frozen=True)
class EffectUnavailable:
    """Why a recommendation's effect could not be replayed (the change does not fit)."""

    changes: tuple[str, ...]
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"basis": "replay", "changes": list(self.changes), "unavailable": self.reason}


def replayed_effect(effect: Effect | EffectUnavailable) -> ReplayedEffect:
    """The analysis document's `ReplayedEffect` of a replayed `Effect` (or of why it could
    not be replayed): the pairs an admin weighs first, typed, and the whole effect's JSON."""
    if isinstance(effect, EffectUnavailable):
        unknown = (None, None)
        return ReplayedEffect(
            changes=tuple(effect.changes),
            allocation_ratio=unknown,
            wait_p95_s=unknown,
            gpu_hours_lost=unknown,
            jobs_not_run=unknown,
            full=effect.to_dict(),
            unavailable=effect.reason,
        )

    def pair(delta: Delta) -> tuple[float | None, float | None]:
        return (json_safe(delta.before), json_safe(delta.after))

    return ReplayedEffect(
        changes=tuple(effect.changes),
        allocation_ratio=pair(effect.allocation_ratio),
        wait_p95_s=pair(effect.wait_p95_s),
        gpu_hours_lost=pair(effect.gpu_hours_lost),
        jobs_not_run=pair(effect.jobs_not_run),
        full=effect.to_dict(),
        harm=tuple(effect.harm),
    )


def effect_key(changes: str | Sequence[str]) -> str:
    """The key of a recommendation's effect: its change, or its changes joined by " + "."""
    return changes if isinstance(changes, str) else " + ".join(changes)


def analysis_replay_options(
    capacity: Mapping[str, float],
    *,
    gpus_per_node: Mapping[str, float] | None = None,
    gpu_types: Mapping[str, str] | None = None,
    tiers: Any = None,
    processes: int = 1,
) -> ReplayOptions:
    """The cluster model from what `analyze` knows: GPUs per partition, GPUs per node (its
    mean, rounded), GPU types per partition, and the site policy's QOS (when `tiers` is a
    policy). The analysis' `gpu_memory_mib` is keyed by GPU type, not partition: the replay
    takes each partition's memory from its type."""
    from slurmgpu.replay.cluster import qos_from_policy

    return ReplayOptions(
        capacity=dict(capacity),
        gpus_per_node={p: round(n) for p, n in (gpus_per_node or {}).items() if n},
        gpu_types=dict(gpu_types or {}),
        qos=qos_from_policy(tiers) if hasattr(tiers, "tiers") else (),
        tiers=tiers,
        processes=processes,
    )


def estimate_effects(
    runs: Any,
    options: ReplayOptions,
    changes: Sequence[str | Sequence[str]],
    *,
    gpu_memory_mib: np.ndarray | None = None,
    objective: Objective | None = None,
    top_tier: str | None = None,
    owners: Any = None,
) -> dict[str, Effect | EffectUnavailable]:
    """Replay the baseline and each entry of `changes` (a change string, or a recommendation's
    list of changes applied together) on `runs`; `{effect_key(entry): Effect}`.

    Each effect is judged by the site's objective (`objective`, else the policy's
    `[objective]` when `options.tiers` is a policy, else the defaults; `top_tier` is the tier
    its P0 wait limit applies to): the limits it breaks are its `harm`.

    `runs` is the accounting frame (one row per run, as `analyze` holds it; `gpu_memory_mib`
    its per-run GPU memory, so small whole-GPU jobs may use slices) or a `ReplayTrace`.
    Each effect carries the baseline's fidelity on the partitions its change touches
    (`advice.calibrate` against the runs' recorded starts, the objective's tolerance; `owners`:
    the jobs' users and accounts for the explanation of one that is not calibrated, read from
    the frame when `runs` is one).

    Returns {} when the cluster model is unknown (`options.capacity` empty).
    """
    if not options.capacity or not any(changes):
        return {}
    trace = runs if isinstance(runs, ReplayTrace) else _trace(runs, gpu_memory_mib)
    groups: dict[str, tuple[str, ...]] = {}
    for entry in changes:
        if not entry:  # a recommendation without a change ("none", tier advice)
            continue
        groups.setdefault(effect_key(entry), (entry,) if isinstance(entry, str) else tuple(entry))
    try:
        model = build_model(options)
    except UsageError as exc:
        return {k: EffectUnavailable(g, f"the cluster model: {exc}") for k, g in groups.items()}
    baseline = run_engine(trace, model, options.config)
    window = window_of(trace, baseline)
    gpus = _gpus_by_partition(model)
    before = block_from_outcome("baseline", trace, baseline, gpus, window)
    judge = objective or getattr(options.tiers, "objective", None) or Objective()
    if owners is None and not isinstance(runs, ReplayTrace):
        owners = lambda: owners_from_frame(trace, runs)  # noqa: E731
    cal = calibration_of(
        trace, baseline, before, recorded_block(trace, gpus, window), tolerance_of(judge), owners
    )
    out: dict[str, Effect | EffectUnavailable] = {}
    todo = []
    for key, group in groups.items():
        try:
            parsed = tuple(parse_change(c) for c in group)
            changed = model
            for change in parsed:
                changed = apply_change(changed, change)
        except UsageError as exc:
            out[key] = EffectUnavailable(group, str(exc))
            continue
        todo.append((key, (trace, changed, parsed, options.config, window)))
    blocks = _replay_all([job for _, job in todo], options.processes)
    for (key, job), block in zip(todo, blocks, strict=True):
        harm = verdict(before, block, judge, top_tier).violations
        fidelity = _fidelity_notes(cal, partitions_touched(Together(job[2]), trace))
        out[key] = replace(
            effect_of(before, block, tuple(format_change(c) for c in job[2])),
            harm=harm,
            fidelity=fidelity,
        )
    return {k: out[k] for k in groups}  # in the order asked


def _fidelity_notes(cal: Calibration, names: Sequence[str]) -> tuple[PartitionFidelityNote, ...]:
    notes = []
    for name in names:
        p = cal.partition(name)
        if p is None:  # no jobs there (the new partition of a move): nothing to be off by
            continue
        explanation = None
        if p.explanation is not None:
            explanation = {k: v for k, v in p.explanation.to_dict().items() if k != "by_hour"}
        notes.append(
            PartitionFidelityNote(
                name,
                p.calibrated,
                p.why or None,
                None if p.calibrated else not_advised_text(name, p.why),
                explanation,
            )
        )
    return tuple(notes)


def _trace(frame: Any, gpu_memory_mib: np.ndarray | None) -> ReplayTrace:
    from slurmgpu.replay.from_accounting import trace_from_frame

    return trace_from_frame(frame, gpu_memory_mib)


def _replay_one(args: tuple[ReplayTrace, ClusterModel, tuple[Change, ...], SchedConfig, Window]):
    trace, model, changes, config, window = args
    label = effect_key([format_change(c) for c in changes])
    outcome = run_engine(trace, model, config)
    return block_from_outcome(
        label, trace, outcome, _gpus_by_partition(model), window, change=label
    )


def _replay_all(jobs: list, processes: int) -> list[ResultBlock]:
    if processes > 1 and len(jobs) > 1:
        import multiprocessing

        warm_up()  # compiled once here, not in each worker
        with multiprocessing.get_context("fork").Pool(min(processes, len(jobs))) as pool:
            return pool.map(_replay_one, jobs)
    return [_replay_one(j) for j in jobs]


def effect_of(before: ResultBlock, after: ResultBlock, changes: tuple[str, ...]) -> Effect:
    """The `Effect` of going from the baseline block to a scenario's block."""

    def d(name: str) -> Delta:
        return Delta(getattr(before, name), getattr(after, name))

    parts_b = {p.partition: p for p in before.by_partition}
    parts_a = {p.partition: p for p in after.by_partition}
    by_partition = []
    for name in [*parts_b, *(n for n in parts_a if n not in parts_b)]:
        b, a = parts_b.get(name), parts_a.get(name)
        by_partition.append(
            PartitionEffect(
                name,
                Delta(b.gpus if b else 0, a.gpus if a else 0),
                Delta(b.allocation_ratio if b else None, a.allocation_ratio if a else None),
                Delta(b.wait_s.p50 if b else None, a.wait_s.p50 if a else None),
                Delta(b.wait_s.p95 if b else None, a.wait_s.p95 if a else None),
            )
        )
    tiers_a = {t.tier: t for t in after.by_tier}
    by_tier = tuple(
        TierEffect(
            t.tier,
            Delta(t.wait_s.p50, tiers_a[t.tier].wait_s.p50 if t.tier in tiers_a else None),
            Delta(t.wait_s.p95, tiers_a[t.tier].wait_s.p95 if t.tier in tiers_a else None),
        )
        for t in before.by_tier
    )
    return Effect(
        changes=changes,
        jobs=before.jobs,
        window_hours=before.window_hours,
        allocation_ratio=d("allocation_ratio"),
        gpu_hours_allocated=d("gpu_hours_allocated"),
        useful_gpu_hours=d("useful_gpu_hours"),
        wait_p50_s=Delta(before.wait_s.p50, after.wait_s.p50),
        wait_p95_s=Delta(before.wait_s.p95, after.wait_s.p95),
        preemptions=d("preemptions"),
        gpu_hours_lost=d("gpu_hours_lost"),
        jobs_not_run=d("jobs_not_run"),
        jobs_on_slices=d("jobs_on_slices"),
        by_partition=tuple(by_partition),
        by_tier=by_tier,
    )
