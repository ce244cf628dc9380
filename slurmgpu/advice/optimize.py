"""`slurmgpu advise`: search candidate changes with the calibrated replay as the judge.

1. Calibrate (`advice.calibrate`): replay the recorded window; a partition whose baseline is
   off by more than the objective's tolerance is not advised on (each candidate touching it
   is rejected with the reason).
2. Candidates (`advice.candidates`): node moves of every size between every donor and every
   taker that waits, MIG carves sized from the measured demand, shard counts, grace times.
3. Each candidate is replayed (in processes) and judged by `advice.objective.verdict`
   against the baseline: rejected with every limit it breaks, or with "no gain".
4. Greedy: the best accepted candidate starts the plan; each further step (up to
   `max_changes`) replays the plan with each of the best remaining accepted candidates
   (`BEAM`) together and keeps the one that improves the score most while breaking no limit.
5. Uncertainty: the baseline and the plan are replayed again on `uncertainty_replays`
   perturbed copies of the trace (durations and submit times, seeded); each partition's
   effect is reported as the range over them, and a limit broken in any of them is said.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from slurmgpu.advice.background import BackgroundTrace, rebuild, strip
from slurmgpu.advice.calibrate import (
    Calibration,
    calibration_of,
    hold_inferred_load,
    not_advised_text,
    tolerance_of,
)
from slurmgpu.advice.candidates import candidate_changes, partitions_touched
from slurmgpu.advice.explain import OwnersSource, owners_from_history
from slurmgpu.advice.objective import Verdict, verdict
from slurmgpu.errors import UsageError
from slurmgpu.model.changes import Together, format_change, parse_change
from slurmgpu.model.policy import Objective
from slurmgpu.replay import ReplayOptions, build_model, check_changes, load_for_replay
from slurmgpu.replay.cluster import ClusterModel, apply_change
from slurmgpu.replay.engine import replay as run_engine
from slurmgpu.replay.engine import warm_up
from slurmgpu.replay.jobs import ReplayTrace
from slurmgpu.replay.results import (
    ResultBlock,
    Window,
    block_from_outcome,
    recorded_block,
    window_of,
)

MIN_GAIN = 0.01  # a score must fall by at least this (1 % of a weighted wait) to count
BEAM = 8  # accepted candidates tried together with the plan at each greedy step


@dataclass(frozen=True)
class AdviseOptions:
    replay: ReplayOptions
    objective: Objective = field(default_factory=Objective)
    max_changes: int = 3
    top_tier: str | None = None  # the tier `p0_max_wait_s` applies to (the policy's highest)
    candidates: tuple[str, ...] | None = None  # None: generated from the trace and model
    seed: int = 0
    # the candidates' first round as one Slurm job array (`replay --via-slurm`'s sweep);
    # the greedy steps and the perturbed replays run here
    slurm: Any = None  # replay.sweep.SlurmSweepOptions
    # hold the unseen occupancy each uncalibrated partition's explanation infers as
    # background load in every replay (`advice.background`): the plan is then marked
    # "calibrated on inferred load", its ranges wider; autopilot never sets it
    inferred_load: bool = False


@dataclass(frozen=True)
class Side:
    allocation_ratio: float | None
    mean: float | None
    p50: float | None
    p95: float | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "allocation_ratio": self.allocation_ratio,
            "wait_s": {"mean": self.mean, "p50": self.p50, "p95": self.p95},
        }


@dataclass(frozen=True)
class Range:
    low: float | None
    high: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"low": self.low, "high": self.high}


@dataclass(frozen=True)
class PartitionPlanEffect:
    partition: str
    gpus_before: int
    gpus_after: int
    before: Side
    after: Side
    # the change of the mean / p95 wait (after - before) over the perturbed replays
    mean_wait_change_s: Range
    p95_wait_change_s: Range
    calibration_miss: float = 0.0  # |baseline / recorded mean wait - 1|: widens the ranges

    def to_dict(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "gpus": {"before": self.gpus_before, "after": self.gpus_after},
            "before": self.before.to_dict(),
            "after": self.after.to_dict(),
            "uncertainty": {
                "mean_wait_change_s": self.mean_wait_change_s.to_dict(),
                "p95_wait_change_s": self.p95_wait_change_s.to_dict(),
                "calibration_miss": self.calibration_miss,
            },
        }


@dataclass(frozen=True)
class Plan:
    changes: tuple[str, ...]
    score: float
    by_partition: tuple[PartitionPlanEffect, ...]
    useful_gpu_hours: tuple[float, float]  # before, after
    gpu_hours_lost: tuple[float, float]
    perturbed_replays: int
    # limits the plan breaks in some perturbed replay (the nominal replay breaks none)
    perturbed_violations: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "changes": list(self.changes),
            "score": self.score,
            "useful_gpu_hours": dict(zip(("before", "after"), self.useful_gpu_hours, strict=True)),
            "gpu_hours_lost": dict(zip(("before", "after"), self.gpu_hours_lost, strict=True)),
            "perturbed_replays": self.perturbed_replays,
            "perturbed_violations": list(self.perturbed_violations),
            "by_partition": [p.to_dict() for p in self.by_partition],
        }


@dataclass(frozen=True)
class Rejected:
    change: str
    why: str

    def to_dict(self) -> dict[str, Any]:
        return {"change": self.change, "why": self.why}


@dataclass(frozen=True)
class Considered:
    change: str
    score: float


@dataclass(frozen=True)
class Advice:
    fidelity: Calibration
    plan: Plan
    rejected: tuple[Rejected, ...]
    accepted: tuple[Considered, ...]  # candidates that passed alone, best first
    candidates: int
    replays: int
    notes: tuple[str, ...] = ()
    # "recorded", or "inferred load" when some partition's baseline held background load
    calibrated_on: str = "recorded"
    inferred_load: tuple[tuple[str, float], ...] = ()  # (partition, GPU-hours held)

    def to_dict(self) -> dict[str, Any]:
        from slurmgpu.util.json_safe import json_safe

        return json_safe(
            {
                "calibrated_on": self.calibrated_on,
                "inferred_load": [{"partition": p, "gpu_hours": h} for p, h in self.inferred_load],
                "fidelity": self.fidelity.to_dict(),
                "plan": self.plan.to_dict(),
                "rejected": [r.to_dict() for r in self.rejected],
                "accepted": [{"change": c.change, "score": c.score} for c in self.accepted],
                "candidates": self.candidates,
                "replays": self.replays,
                "notes": list(self.notes),
            }
        )


# --------------------------------------------------------------------------- replays
def _block(args: tuple) -> ResultBlock:
    trace, model, change, config, window = args
    changed = apply_change(model, change) if change is not None else model
    # a trace with inferred background load: its result is the real jobs' alone
    trace, outcome = strip(trace, run_engine(trace, changed, config))
    gpus = {p.name: p.total_gpus for p in changed.partitions}
    label = format_change(change) if change is not None else "baseline"
    return block_from_outcome(label, trace, outcome, gpus, window)


def _replay_many(jobs: list[tuple], processes: int) -> list[ResultBlock]:
    if processes > 1 and len(jobs) > 1:
        import multiprocessing

        warm_up()  # compiled once here, not in each worker
        with multiprocessing.get_context("fork").Pool(min(processes, len(jobs))) as pool:
            return pool.map(_block, jobs)
    return [_block(j) for j in jobs]


def perturbed(trace: ReplayTrace, rng: np.random.Generator, objective: Objective) -> ReplayTrace:
    """A copy of the trace with durations x lognormal(0, perturb_duration) (never past the
    limit) and submits + normal(0, perturb_submit_s) (never before 0), re-sorted by submit.
    A trace with inferred background load: its real jobs perturbed, the same load again."""
    if isinstance(trace, BackgroundTrace) and trace.real is not None:
        return rebuild(trace, perturbed(trace.real, rng, objective))
    n = len(trace)
    dur = trace.duration_s * rng.lognormal(0.0, objective.perturb_duration, n)
    dur = np.minimum(np.floor(dur), trace.timelimit_s)
    dur[trace.cancelled_pending()] = trace.duration_s[trace.cancelled_pending()]
    sub = np.maximum(np.floor(trace.submit_s + rng.normal(0.0, objective.perturb_submit_s, n)), 0)
    order = np.argsort(sub, kind="stable")
    per_job = ("job_id", "partition", "qos", "tier", "timelimit_s", "gpus", "kind",
               "mig_profile", "need_gpu", "need_mib", "gpu_equiv", "recorded_start_s",
               "recorded_end_s", "recorded_preemptions")  # fmt: skip
    cols = {name: getattr(trace, name)[order] for name in per_job}
    if trace.cancel_s is not None:  # a pending job's cancel moves with its submit
        cols["cancel_s"] = (trace.cancel_s + (sub - trace.submit_s))[order]
    return replace(trace, submit_s=sub[order], duration_s=dur[order], recorded_runs=None, **cols)


# --------------------------------------------------------------------------- search
def advise(sacct_files: Sequence[str | os.PathLike[str]], options: AdviseOptions) -> Advice:
    """Load the dumps and advise on them."""
    replay_opts, trace = load_for_replay(sacct_files, options.replay)
    return advise_trace(
        trace,
        replace(options, replay=replay_opts),
        owners=functools.cache(lambda: owners_from_history(trace, sacct_files, replay_opts)),
    )


def advise_trace(trace: ReplayTrace, options: AdviseOptions, owners: OwnersSource = None) -> Advice:
    """Calibrate, generate and judge candidates, search a plan, measure its uncertainty
    (`owners`: the jobs' users and accounts, or their loader, for the explanation of a
    partition that is not calibrated)."""
    if not len(trace):
        raise UsageError("advise: the dumps hold no GPU job that ran: nothing to replay")
    obj = options.objective
    ropts = options.replay
    model = build_model(ropts)
    config = ropts.config
    outcome = run_engine(trace, model, config)
    window = window_of(trace, outcome)
    gpus = {p.name: p.total_gpus for p in model.partitions}
    base = block_from_outcome("baseline", trace, outcome, gpus, window)
    tolerance = tolerance_of(obj)
    recorded = recorded_block(trace, gpus, window)
    cal = calibration_of(trace, outcome, base, recorded, tolerance, owners)
    real = trace
    if options.inferred_load:
        if options.slurm is not None:
            raise UsageError("--inferred-load runs the candidates here: drop --via-slurm")
        trace, ropts, cal = hold_inferred_load(trace, ropts, cal, owners)
        model, base = build_model(ropts), cal.baseline
    if options.candidates is None:
        texts = candidate_changes(real, model, base)
    else:
        texts = list(options.candidates)
    changes = [parse_change(t) for t in texts]
    check_changes(model, real, changes)
    rejected, runnable = _calibrated_only(changes, real, cal)
    blocks, failed = _first_round(trace, model, runnable, options, window)
    rejected += failed
    replays = 1 + len(runnable)
    judged = _judge(base, runnable, blocks, obj, options.top_tier, rejected)
    plan_changes: list[Any] = []
    plan_block, plan_score = base, 0.0
    if judged:
        plan_score, first, plan_block = judged[0]
        plan_changes = [first]
        rest = [c for _, c, _ in judged[1:]]
        plan_changes, plan_block, plan_score, more = _grow_plan(
            trace, model, options, base, plan_changes, plan_block, plan_score, rest, window
        )
        replays += more
    plan, extra = _plan(trace, model, options, base, plan_block, plan_changes, plan_score, cal)
    held = tuple(
        (p.partition, p.inferred_gpu_hours)
        for p in cal.by_partition
        if p.calibrated_on == "inferred load"
    )
    notes = _notes(cal, bool(judged), held)
    return Advice(
        calibrated_on="inferred load" if held else "recorded",
        inferred_load=held,
        fidelity=cal,
        plan=plan,
        rejected=tuple(rejected),
        accepted=tuple(Considered(format_change(c), s) for s, c, _ in judged),
        candidates=len(changes),
        replays=replays + extra,
        notes=tuple(notes),
    )


def _judge(
    base: ResultBlock,
    runnable: list[Any],
    blocks: list[ResultBlock | None],
    obj: Any,
    top_tier: Any,
    rejected: list[Rejected],
) -> list[tuple[float, Any, ResultBlock]]:
    """Each replayed change judged against the baseline by the objective: the ones that gain,
    best first; the others appended to `rejected` with why."""
    judged: list[tuple[float, Any, ResultBlock]] = []
    for change, block in zip(runnable, blocks, strict=True):
        if block is None:
            continue  # its sweep task failed: rejected above with the task's fate
        v = verdict(base, block, obj, top_tier)
        if v.violations:
            rejected.append(
                Rejected(format_change(change), "replay shows harm: " + "; ".join(v.violations))
            )
        elif v.score > -MIN_GAIN:
            rejected.append(Rejected(format_change(change), f"no gain: score {v.score:+.3f}"))
        else:
            judged.append((v.score, change, block))
    judged.sort(key=lambda x: x[0])
    return judged


def _notes(cal: Any, any_gain: bool, held: tuple[tuple[str, float], ...]) -> list[str]:
    """What the advice says beside its plan: no gain, the partitions not advised on and why
    each misses, the load held where it was calibrated on inferred load."""
    notes = []
    if not any_gain:
        notes.append("no candidate improves the objective without breaking a limit: no change")
    off = [p for p in cal.by_partition if not p.calibrated]
    if off:
        notes.append(
            "not advised on (baseline off by more than the policy's tolerance): "
            + ", ".join(p.partition for p in off)
        )
        notes += [f"why {p.partition} misses: {p.explanation.text()}" for p in off if p.explanation]
    if held:
        notes.append(
            "calibrated on inferred load: the baseline held "
            + ", ".join(f"{h:,.1f} GPU-hours on {p}" for p, h in held)
            + " as background (what the explanation of each miss infers, not what the dump "
            "shows): the plan's ranges are wider by the load's share; autopilot does not act "
            "on such a plan"
        )
    return notes


def _calibrated_only(
    changes: list[Any], trace: ReplayTrace, cal: Any
) -> tuple[list[Rejected], list[Any]]:
    """Changes that touch only calibrated partitions; the others rejected with why."""
    rejected: list[Rejected] = []
    runnable = []
    for change in changes:
        off = [p for p in partitions_touched(change, trace) if not cal.calibrated(p)]
        if off:
            why = cal.partition(off[0]).why  # type: ignore[union-attr]
            rejected.append(Rejected(format_change(change), not_advised_text(off[0], why)))
        else:
            runnable.append(change)
    return rejected, runnable


def _grow_plan(trace, model, options, base, plan_changes, plan_block, plan_score, rest, window):
    """Greedy beam growth: add the best compatible candidate while it lowers the score."""
    obj, config, processes = (
        options.objective,
        options.replay.config,
        max(1, options.replay.processes),
    )
    replays = 0
    while len(plan_changes) < options.max_changes and rest:
        trial = [c for c in rest[:BEAM] if _compatible(model, plan_changes, c)]
        if not trial:
            break
        jobs = [(trace, model, Together((*plan_changes, c)), config, window) for c in trial]
        results = _replay_many(jobs, processes)
        replays += len(results)
        best = None
        for c, block in zip(trial, results, strict=True):
            v = verdict(base, block, obj, options.top_tier)
            better = v.accepted and v.score < plan_score - MIN_GAIN
            if better and (best is None or v.score < best[0]):
                best = (v.score, c, block)
        if best is None:
            break
        plan_score, c, plan_block = best
        plan_changes.append(c)
        rest = [r for r in rest if r != c]
    return plan_changes, plan_block, plan_score, replays


def _first_round(
    trace: ReplayTrace, model: ClusterModel, changes: list[Any], options: AdviseOptions,
    window: Window,
) -> tuple[list[ResultBlock | None], list[Rejected]]:  # fmt: skip
    """Each candidate replayed alone: in processes, or as one Slurm job array (a failed task's
    candidate is rejected with its task's fate, never dropped)."""
    ropts = options.replay
    if options.slurm is None or not changes:
        jobs = [(trace, model, c, ropts.config, window) for c in changes]
        return list(_replay_many(jobs, max(1, ropts.processes))), []
    from slurmgpu.replay.sweep import sweep_trace_via_slurm

    result = sweep_trace_via_slurm(trace, replace(ropts, what_if=tuple(changes)), options.slurm)
    done = {b.change: b for b in result.report.scenarios}
    failed = [Rejected(t.change, "not replayed: " + t.message()) for t in result.failed]
    return [done.get(format_change(c)) for c in changes], failed


def _compatible(model: ClusterModel, plan: list[Any], change: Any) -> bool:
    """Whether `change` applies after the plan's changes (and is not the same move again)."""
    from slurmgpu.model.changes import Move

    if isinstance(change, Move) and any(
        isinstance(p, Move) and (p.source, p.target) == (change.source, change.target) for p in plan
    ):
        return False  # a bigger move of the same pair is its own candidate
    try:
        apply_change(model, Together((*plan, change)))
    except UsageError:
        return False
    return True


def _side(block: ResultBlock, name: str) -> tuple[Side, int]:
    row = next((p for p in block.by_partition if p.partition == name), None)
    if row is None:
        return Side(None, None, None, None), 0
    w = row.wait_s
    return Side(row.allocation_ratio, w.mean, w.p50, w.p95), row.gpus


def _inferred_share(cal: Calibration, name: str, held: float) -> float:
    """The inferred load's share of the partition's GPU-hours (held / (held + recorded
    allocated)): how much of its baseline rests on what the dump does not show."""
    row = None
    if cal.recorded is not None:
        row = next((p for p in cal.recorded.by_partition if p.partition == name), None)
    allocated = row.gpu_hours_allocated if row is not None else 0.0
    return held / (held + allocated) if held + allocated > 0 else 0.0


def _range(changes: list[float], before, after, miss: float) -> Range:
    """The perturbed replays' range of a change, widened by `miss` x the nominal change."""
    if not changes or before is None or after is None:
        return Range(None, None)
    widen = miss * abs(after - before)
    return Range(min(changes) - widen, max(changes) + widen)


def _plan(
    trace: ReplayTrace,
    model: ClusterModel,
    options: AdviseOptions,
    base: ResultBlock,
    after: ResultBlock,
    changes: list[Any],
    score: float,
    cal: Calibration,
) -> tuple[Plan, int]:
    """The plan's effect per partition, with its range over perturbed replays, widened by
    the partition's calibration miss: where the baseline's mean wait is off the recorded by
    m (|baseline / recorded - 1|), the range grows by m x the nominal change each way."""
    obj = options.objective
    names = [p.partition for p in base.by_partition]
    names += [p.partition for p in after.by_partition if p.partition not in names]
    deltas: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    problems: list[str] = []
    replays = 0
    if changes and obj.uncertainty_replays:
        change = Together(tuple(changes))
        jobs = []
        rng = np.random.default_rng(options.seed)
        for _ in range(obj.uncertainty_replays):
            t = perturbed(trace, rng, obj)
            w = window_of(t.real if isinstance(t, BackgroundTrace) and t.real else t)
            jobs += [(t, model, None, options.replay.config, w),
                     (t, model, change, options.replay.config, w)]  # fmt: skip
        blocks = _replay_many(jobs, max(1, options.replay.processes))
        replays = len(blocks)
        for b, a in zip(blocks[::2], blocks[1::2], strict=True):
            v: Verdict = verdict(b, a, obj, options.top_tier)
            problems += [p for p in v.violations if p not in problems]
            for n in names:
                sb, sa = _side(b, n)[0], _side(a, n)[0]
                if None not in (sb.mean, sa.mean, sb.p95, sa.p95):
                    deltas[n].append((sa.mean - sb.mean, sa.p95 - sb.p95))  # type: ignore[operator]
    rows = []
    for n in names:
        (sb, gb), (sa, ga) = _side(base, n), _side(after, n)
        d = deltas[n]
        fid = cal.partition(n)
        factor = fid.mean_wait_factor if fid is not None else None
        miss = abs(factor - 1) if factor is not None and np.isfinite(factor) else 0.0
        if fid is not None and fid.calibrated_on == "inferred load":
            miss += _inferred_share(cal, n, fid.inferred_gpu_hours)
        mean_r = _range([x for x, _ in d], sb.mean, sa.mean, miss)
        p95_r = _range([y for _, y in d], sb.p95, sa.p95, miss)
        rows.append(PartitionPlanEffect(n, gb, ga, sb, sa, mean_r, p95_r, miss))
    plan = Plan(
        changes=tuple(format_change(c) for c in changes),
        score=score,
        by_partition=tuple(rows),
        useful_gpu_hours=(base.useful_gpu_hours, after.useful_gpu_hours),
        gpu_hours_lost=(base.gpu_hours_lost, after.gpu_hours_lost),
        perturbed_replays=replays // 2,
        perturbed_violations=tuple(problems),
    )
    return plan, replays
