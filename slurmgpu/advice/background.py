"""Calibrate on inferred load: hold the unseen occupancy `explain` inferred as background jobs.

Where a partition is not calibrated because something outside the model held its GPUs (its
`Explanation.by_hour` unseen GPU-hours), `advise --inferred-load` and `replay --calibrate
--inferred-load` add, per such partition and hour, round(unseen GPU-hours) jobs of one GPU that
run that whole hour (submitted at its start, in a QOS of the model's highest priority, named
`BACKGROUND_QOS`). The replay then schedules the recorded jobs around that load; every result
(calibration, the judge's blocks, the perturbed replays) is computed with the background jobs
left out (`strip`): they are load, not jobs. A plan advised this way is marked "calibrated on
inferred load" (`Advice.calibrated_on`) and its ranges widened (`optimize._plan`).

The background is pinned to its partition: a change that moves GPUs away leaves it there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from slurmgpu.advice.explain import SLOT_S
from slurmgpu.replay.cluster import QosSpec
from slurmgpu.replay.engine import ReplayOutcome, RunLog
from slurmgpu.replay.jobs import WHOLE, ReplayTrace

BACKGROUND_QOS = "slurmgpu-inferred-load"


@dataclass(frozen=True)
class Load:
    """Background jobs: (partition name, start in trace seconds, GPUs), each `SLOT_S` long."""

    hours: tuple[tuple[str, float, int], ...]

    def gpu_hours(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for name, _, gpus in self.hours:
            out[name] = out.get(name, 0.0) + gpus * SLOT_S / 3600
        return out


@dataclass
class BackgroundTrace(ReplayTrace):
    """A trace with background jobs among its own (`background`: per job, True for one);
    `real`: the trace without them, `load`: what was added."""

    background: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    real: ReplayTrace | None = None
    load: Load = field(default_factory=lambda: Load(()))


def load_of(explanations: Mapping[str, Any], chunk: Mapping[str, int]) -> Load:
    """The background to hold: each explained partition's `Explanation.hold` (GPUs per
    `SLOT_S` slot), as jobs of at most `chunk[partition]` GPUs (a node's)."""
    jobs = []
    for name, e in explanations.items():
        size = max(1, int(chunk.get(name, 8)))
        for t0, gpus in getattr(e, "hold", ()):
            while gpus > 0:
                jobs.append((name, float(t0), min(size, gpus)))
                gpus -= size
    return Load(tuple(jobs))


def with_background(trace: ReplayTrace, load: Load) -> ReplayTrace:
    """`trace` with `load` as 1-GPU, one-hour jobs of `BACKGROUND_QOS` (the trace itself when
    the load is empty)."""
    if not load.hours:
        return trace
    part = [trace.partitions.index(name) for name, _, _ in load.hours]
    start = [t0 for _, t0, _ in load.hours]
    size = np.array([g for _, _, g in load.hours], float)
    n = len(part)
    qos_names = [*trace.qos_names, BACKGROUND_QOS]
    tier_names = [*trace.tier_names, BACKGROUND_QOS]
    nan = np.full(n, np.nan)
    extra = {
        "job_id": np.array([f"background-{i}" for i in range(n)], dtype=object),
        "partition": np.array(part, dtype=trace.partition.dtype),
        "qos": np.full(n, len(qos_names) - 1, dtype=trace.qos.dtype),
        "tier": np.full(n, len(tier_names) - 1, dtype=trace.tier.dtype),
        "submit_s": np.array(start, float),
        "duration_s": np.full(n, SLOT_S),
        "timelimit_s": np.full(n, SLOT_S),
        "gpus": size,
        "kind": np.full(n, WHOLE, dtype=trace.kind.dtype),
        "mig_profile": np.full(n, -1, dtype=trace.mig_profile.dtype),
        "need_gpu": nan,
        "need_mib": nan,
        "gpu_equiv": size,
        "recorded_start_s": nan,
        "recorded_end_s": nan,
        "recorded_preemptions": np.zeros(n, dtype=trace.recorded_preemptions.dtype),
    }
    # background first: at the same second it is submitted (and started) before the jobs
    cols = {k: np.concatenate([v, getattr(trace, k)]) for k, v in extra.items()}
    order = np.argsort(cols["submit_s"], kind="stable")
    cols = {k: v[order] for k, v in cols.items()}
    background = np.concatenate([np.ones(n, bool), np.zeros(len(trace), bool)])[order]
    cancel = None
    if trace.cancel_s is not None:
        cancel = np.concatenate([nan, trace.cancel_s])[order]
    base = {f: getattr(trace, f) for f in ReplayTrace.__dataclass_fields__}
    base.update(cols, qos_names=qos_names, tier_names=tier_names, recorded_runs=None,
                cancel_s=cancel)  # fmt: skip
    return BackgroundTrace(**base, background=background, real=trace, load=load)


def strip(trace: ReplayTrace, outcome: ReplayOutcome) -> tuple[ReplayTrace, ReplayOutcome]:
    """The real trace and the outcome of its own jobs (background jobs and their runs left
    out); a trace without background as it is."""
    if not isinstance(trace, BackgroundTrace) or trace.real is None:
        return trace, outcome
    real = ~trace.background
    new_index = np.cumsum(real) - 1
    runs = outcome.runs
    keep = [i for i, j in enumerate(runs.job) if j < 0 or real[j]]
    log = RunLog(
        job=[int(new_index[runs.job[i]]) if runs.job[i] >= 0 else -1 for i in keep],
        start=[runs.start[i] for i in keep],
        end=[runs.end[i] for i in keep],
        equiv=[runs.equiv[i] for i in keep],
        partition=[runs.partition[i] for i in keep],
        preempted=[runs.preempted[i] for i in keep],
    )
    return trace.real, ReplayOutcome(
        start_s=outcome.start_s[real],
        end_s=outcome.end_s[real],
        state=outcome.state[real],
        on_slice=outcome.on_slice[real],
        runs=log,
        preemptions=outcome.preemptions,
        unrunnable_reasons=outcome.unrunnable_reasons,
    )


def background_qos(qos: tuple[QosSpec, ...]) -> tuple[QosSpec, ...]:
    """The model's QOS with the background's: the highest priority there is (not above it:
    Slurm normalizes every QOS's priority by the largest), preempting nothing."""
    top = max((q.priority for q in qos), default=0)
    return (*qos, QosSpec(BACKGROUND_QOS, priority=top if top > 0 else 1))


def rebuild(trace: ReplayTrace, real: ReplayTrace) -> ReplayTrace:
    """`real` (e.g. a perturbed copy of the real trace) with `trace`'s background again."""
    if not isinstance(trace, BackgroundTrace):
        return real
    return with_background(real, trace.load)
