"""One autopilot pass: guardrails -> verify the last change -> an approved proposal, or
forecast -> advise -> decide -> propose or apply -> record (docs/autopilot.md).

One change at a time: while the last applied change waits for its verification
(`verify_after_min`), a pass makes no new one; a pass that rolls a change back, or applies an
approved proposal, stops there. Every outcome is a `ChangeRecord` in the change log, except
with `dry_run`, which writes nothing anywhere (no state file, journal, lock or scontrol).
"""

from __future__ import annotations

import datetime as dt
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from slurmgpu.autopilot import guardrails
from slurmgpu.autopilot.decide import Decision, decide, rebalance_plan
from slurmgpu.autopilot.measured import measure_sources
from slurmgpu.autopilot.records import (
    ChangeRecord,
    MigChange,
    Observed,
    Proposal,
    StateDir,
    append_change,
    iso,
    new_id,
    read_changes,
)
from slurmgpu.autopilot.verify import judge, observe
from slurmgpu.errors import UsageError
from slurmgpu.model.policy import AutopilotPolicy, Policy
from slurmgpu.model.rebalance import Move

DEFAULT_STATE_DIR = "/var/lib/slurmgpu/autopilot"
MODES = ("propose", "apply")


@dataclass(frozen=True)
class AutopilotOptions:
    advise: Any  # advice.optimize.AdviseOptions (its replay options: the cluster model)
    policy: Policy | None
    state_dir: Path
    sacct_files: tuple[str, ...] = ()
    since: dt.datetime | None = None  # with no files: sacct from then to now
    mode: str | None = None  # None: the policy's [autopilot] mode
    dry_run: bool = False
    forecast: bool = True
    forecast_freq: str = "1h"
    forecast_horizon: str = "1d"
    partitions_conf: Path | None = None  # the include file rebalance owns (durable moves)
    mig: Any = None  # autopilot.carve.MigSite: MIG layouts decided from the forecast


@dataclass(frozen=True)
class PassResult:
    time: str
    mode: str
    dry_run: bool
    status: str  # killed waiting rolled-back applied proposed held would-apply would-propose
    moves: tuple[Move, ...] = ()
    changes: tuple[str, ...] = ()
    score: float = 0.0
    predicted: tuple[Any, ...] = ()
    verification: tuple[str, ...] = ()
    refusals: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    forecast: tuple[tuple[str, float, float], ...] = ()  # partition, mean GPUs, highest high
    change_id: str = ""
    written: tuple[str, ...] = ()
    mig: tuple[MigChange, ...] = ()  # a MIG change's nodes, layouts before and after

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        out = asdict(self)
        out["forecast"] = [
            {"partition": p, "mean_gpus": m, "high_gpus": h} for p, m, h in self.forecast
        ]
        return out


@dataclass
class _Pass:
    opts: AutopilotOptions
    guard: AutopilotPolicy
    mode: str
    state: StateDir
    world: Any
    now: dt.datetime
    records: list[ChangeRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    scratch: Any = None  # a dry run's temporary directory for the sacct dump
    files: list[str] = field(default_factory=list)  # the history's files
    calibration: Any = None  # the last replay's Calibration (for the textfile)

    def record(self, rec: ChangeRecord) -> None:
        if not self.opts.dry_run:
            append_change(self.state, rec)
            self.records.append(rec)

    def result(self, status: str, **kw: Any) -> PassResult:
        res = PassResult(
            time=iso(self.now),
            mode=self.mode,
            dry_run=self.opts.dry_run,
            status=status,
            notes=tuple(self.notes),
            **kw,
        )
        if not self.opts.dry_run:
            from slurmgpu.autopilot.prom import write_prom

            write_prom(self.state.prom, res, self.records, self.calibration)
            self.written.append(str(self.state.prom))
        return replace(res, written=tuple(self.written))


def _guard(policy: Policy | None) -> AutopilotPolicy:
    return policy.autopilot if policy is not None and policy.autopilot else AutopilotPolicy()


def autopilot(opts: AutopilotOptions, world: Any = None, now: dt.datetime | None = None):
    """One pass; returns what it did (`PassResult`)."""
    from slurmgpu.autopilot.world import LiveWorld

    guard = _guard(opts.policy)
    p = _Pass(
        opts, guard, opts.mode or guard.mode, StateDir(Path(opts.state_dir)),
        world or LiveWorld(opts.advise.replay.env, opts.partitions_conf),
        now or dt.datetime.now(dt.UTC).replace(microsecond=0),
    )  # fmt: skip
    try:
        return _one_pass(p)
    finally:
        if p.scratch is not None:
            p.scratch.cleanup()


def _one_pass(p: _Pass) -> PassResult:
    opts, guard, mode = p.opts, p.guard, p.mode

    if mode not in MODES:
        raise UsageError(f"--mode {mode!r}: use propose or apply")
    stop = guardrails.kill_switch(guard, Path(guard.kill_switch).exists())
    if stop:
        return p.result("killed", refusals=(stop,))
    p.records = read_changes(p.state)
    ropts, trace = _history(p)
    done = _verify(p, trace)
    if done is not None:
        return done
    approved = _approved(p)
    if approved is not None:
        return _apply_approved(p, approved, trace)
    hour = guardrails.hours(guard, p.now)
    if hour:
        p.record(ChangeRecord(iso(p.now), "hold", reasons=(hour,)))
        return p.result("held", refusals=(hour,))
    fc = _forecast(p) if opts.forecast else ()
    if opts.mig is not None:
        from slurmgpu.autopilot.mig_act import mig_pass

        done = mig_pass(p, trace, ropts, fc)
        if done is not None:
            return done
    from slurmgpu.advice.optimize import advise_trace

    aopts = replace(opts.advise, replay=ropts)
    if aopts.candidates is None:
        aopts = replace(aopts, candidates=_move_candidates(trace, ropts))
    try:
        advice = advise_trace(trace, aopts) if aopts.candidates else None
    except UsageError as exc:  # e.g. a given move the live cluster cannot make any more
        p.record(ChangeRecord(iso(p.now), "hold", reasons=(f"advise: {exc}",)))
        return p.result("held", refusals=(f"advise: {exc}",), forecast=fc)
    p.calibration = advice.fidelity if advice is not None else None
    if advice is None:
        p.record(ChangeRecord(iso(p.now), "hold", reasons=("no node move to try",)))
        return p.result("held", refusals=("advise generates no node move to try",), forecast=fc)
    p.notes.extend(advice.notes)
    decision = decide(p, advice, fc)
    if not decision.moves:
        p.record(
            ChangeRecord(
                iso(p.now),
                "hold",
                changes=decision.changes,
                score=decision.score,
                reasons=decision.refusals,
            )
        )
        return p.result(
            "held",
            changes=decision.changes,
            score=decision.score,
            predicted=decision.predicted,
            refusals=decision.refusals,
            forecast=fc,
        )
    before = observe(trace, 0, p.now.timestamp())
    if mode == "propose":
        return _propose(p, decision, before, fc)
    return _apply(p, decision, before, fc)


def _history(p: _Pass):
    """(replay options, trace) of the history: the files, or sacct since `since`."""
    from slurmgpu.replay import load_for_replay

    files = list(p.opts.sacct_files)
    if not files:
        if p.opts.since is None:
            raise UsageError("autopilot needs --sacct-file FILE... or --since WHEN")
        text = p.world.sacct_text(p.opts.since, p.now)
        if p.opts.dry_run:  # removed when the pass ends (`autopilot`)
            p.scratch = tempfile.TemporaryDirectory(prefix="slurmgpu-autopilot-")
            target = Path(p.scratch.name) / "history.sacct"
        else:
            target = p.state.history
            target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8", errors="surrogateescape")
        files = [str(target)]
    p.files = files
    ropts = replace(p.opts.advise.replay, measure_sources=measure_sources())
    ropts, trace = load_for_replay(files, ropts)
    p.notes.extend(f"measures: {n}" for n in trace.measure_notes)
    return ropts, trace


def _open_apply(records: list[ChangeRecord]) -> ChangeRecord | None:
    """The last apply not yet verified or rolled back."""
    judged = {r.of for r in records if r.action in ("verify", "rollback")}
    applies = [r for r in records if r.action == "apply" and r.id not in judged]
    return applies[-1] if applies else None


def _verify(p: _Pass, trace: Any) -> PassResult | None:
    """Judge the last change once it is old enough; roll it back when it made things worse.
    None: nothing to judge, the pass goes on."""
    last = _open_apply(p.records)
    if last is None:
        return None
    age_min = (p.now - last.when).total_seconds() / 60
    if age_min < p.guard.verify_after_min:
        p.notes.append(
            f"change {last.id} is {age_min:.0f} min old; verified after "
            f"{p.guard.verify_after_min:g} min: no new change until then"
        )
        return p.result("waiting", change_id=last.id, moves=last.moves, mig=last.mig)
    after = observe(trace, last.when.timestamp(), p.now.timestamp())
    groups = [f"partition:{x}" for x in last.partitions]
    if last.mig and p.opts.policy is not None:  # a relayout can shift waits between tiers
        groups += [f"tier:{t.name}" for t in p.opts.policy.tiers]
    elif top := _top_tier(p.opts.policy):
        groups.append(f"tier:{top}")
    verdict = judge(last.before, after, groups, p.guard)
    if verdict.compared == 0:
        p.notes.append(f"change {last.id}: no jobs to compare yet; verified at a later pass")
        return p.result("waiting", change_id=last.id, verification=verdict.reasons)
    if not verdict.worse:
        p.record(
            ChangeRecord(iso(p.now), "verify", of=last.id, after=after, reasons=verdict.reasons)
        )
        p.notes.append(f"change {last.id} kept")
        return None
    return _rollback(p, last, after, verdict.reasons)


def _rollback(p: _Pass, last: ChangeRecord, after: tuple[Observed, ...], reasons) -> PassResult:
    if p.opts.dry_run:
        p.notes.append(f"dry run: change {last.id} would be rolled back")
    elif last.mig:
        from slurmgpu.autopilot.mig_act import undo_mig

        p.notes.append(undo_mig(p, last))
        p.record(
            ChangeRecord(
                iso(p.now), "rollback", of=last.id, mig=last.mig, after=after,
                reasons=tuple(reasons),
            )
        )  # fmt: skip
    else:
        undone = p.world.undo(p.state.rebalance_log)
        restored = ", ".join(f"{k}={v}" for k, v in sorted(undone.restored.items()))
        p.notes.append(f"rolled back change {last.id}: {restored or 'nothing left to restore'}")
        p.record(
            ChangeRecord(
                iso(p.now),
                "rollback",
                of=last.id,
                moves=last.moves,
                after=after,
                reasons=tuple(reasons),
            )
        )
    return p.result(
        "rolled-back", change_id=last.id, moves=last.moves, mig=last.mig, verification=reasons
    )


def _top_tier(policy: Policy | None) -> str | None:
    if policy is None or not policy.tiers:
        return None
    return max(policy.tiers, key=lambda t: t.priority).name


def _forecast(p: _Pass) -> tuple[tuple[str, float, float], ...]:
    """Mean and highest forecast GPUs per partition over the horizon; a failing forecast is
    a note, never the end of the pass."""
    from slurmgpu.accounting.options import AnalysisOptions
    from slurmgpu.errors import SlurmgpuError
    from slurmgpu.forecast import ForecastOptions, forecast

    analysis = AnalysisOptions(
        files=p.files,
        tiers=p.opts.policy,
        replay_effects="never",
        measure_sources=measure_sources(),
    )
    try:
        fc = forecast(ForecastOptions(analysis, p.opts.forecast_freq, p.opts.forecast_horizon))
    except SlurmgpuError as exc:
        p.notes.append(f"forecast: {exc}")
        return ()
    p.notes.extend(f"forecast: {n}" for n in fc.notes)
    out = []
    for part in fc.by_partition:
        if part.points:
            mean = sum(x.gpus for x in part.points) / len(part.points)
            out.append((part.partition, round(mean, 2), round(max(x.high for x in part.points), 2)))
    return tuple(out)


def _move_candidates(trace: Any, ropts: Any) -> tuple[str, ...]:
    """advise's generated candidates, node moves only (what autopilot acts on)."""
    from slurmgpu.advice.candidates import candidate_changes
    from slurmgpu.replay import build_model
    from slurmgpu.replay.engine import replay as run_engine
    from slurmgpu.replay.results import block_from_outcome, window_of

    model = build_model(ropts)
    outcome = run_engine(trace, model, ropts.config)
    gpus = {x.name: x.total_gpus for x in model.partitions}
    base = block_from_outcome("baseline", trace, outcome, gpus, window_of(trace, outcome))
    return tuple(c for c in candidate_changes(trace, model, base) if c.startswith("move:"))


def _planned(p: _Pass, decision: Decision, fc) -> tuple:
    """The rebalance plan of the decision's moves, a new change id, and the result's fields."""
    cid = new_id(p.now)
    kw = dict(
        moves=decision.moves,
        changes=decision.changes,
        score=decision.score,
        predicted=decision.predicted,
        refusals=decision.refusals,
        forecast=fc,
        change_id=cid,
    )
    return rebalance_plan(p.world.partitions(), decision.moves), cid, kw


def _apply(p: _Pass, decision: Decision, before: tuple[Observed, ...], fc) -> PassResult:
    plan, cid, kw = _planned(p, decision, fc)
    if p.opts.dry_run:
        p.notes.append("dry run: nothing applied")
        return p.result("would-apply", **kw)
    stamp = p.world.apply(plan, p.state.rebalance_log)
    p.record(
        ChangeRecord(
            iso(p.now),
            "apply",
            id=cid,
            moves=decision.moves,
            changes=decision.changes,
            score=decision.score,
            predicted=decision.predicted,
            before=before,
            rebalance_time=stamp,
        )
    )
    return p.result("applied", **kw)


def _propose(p: _Pass, decision: Decision, before: tuple[Observed, ...], fc) -> PassResult:
    """The plan, the include file and its diff (with --partitions-conf), the steps."""
    from slurmgpu.util.atomic import write_atomic
    from slurmgpu.util.hostlist import compress_hostlist
    from slurmgpu.util.journal import write_record

    plan, cid, kw = _planned(p, decision, fc)
    if p.opts.dry_run:
        p.notes.append("dry run: no proposal written")
        return p.result("would-propose", **kw)
    same = _open_proposal(p, decision.moves)
    if same is not None:  # one proposal per change: no new one each pass
        p.notes.append(f"already proposed as {same}, waiting for its approval")
        return p.result("proposed", **{**kw, "change_id": same})
    where = p.state.proposal(cid)
    prop = Proposal(
        cid,
        iso(p.now),
        decision.moves,
        decision.changes,
        decision.score,
        decision.predicted,
        before,
        dict(plan.before),
        dict(plan.after),
    )
    write_record(where / "proposal.json", prop)
    p.written.append(str(where / "proposal.json"))
    if p.opts.partitions_conf is not None:
        p.written.extend(str(x) for x in p.world.emit(plan, where))
    else:
        steps = [
            f"scontrol update PartitionName={k} Nodes={compress_hostlist(v)}"
            for k, v in plan.after.items()
        ]
        write_atomic(where / "steps.txt", "".join(s + "\n" for s in steps), backup=False)
        p.written.append(str(where / "steps.txt"))
    p.notes.append(f"approve with: slurmgpu autopilot approve {cid} --state-dir {p.state.root}")
    p.record(
        ChangeRecord(
            iso(p.now),
            "propose",
            id=cid,
            moves=decision.moves,
            changes=decision.changes,
            score=decision.score,
            predicted=decision.predicted,
            before=before,
        )
    )
    return p.result("proposed", **kw)


def _open_proposal(p: _Pass, moves: tuple[Move, ...]) -> str | None:
    """The id of a proposal of the same moves, younger than a day, not approved yet."""
    key = {(m.node, m.source, m.target) for m in moves}
    approved = {r.of for r in p.records if r.action == "approve"}
    for r in reversed(p.records):
        if r.action != "propose" or r.id in approved:
            continue
        if (p.now - r.when).total_seconds() < 86400 and {
            (m.node, m.source, m.target) for m in r.moves
        } == key:
            return r.id
    return None


def _approved(p: _Pass) -> Proposal | None:
    """The oldest approved proposal not applied yet (one older than a day expires)."""
    from slurmgpu.util.journal import read_record

    applied = {r.id for r in p.records if r.action == "apply"}
    approved = [r.of for r in p.records if r.action == "approve" and r.of not in applied]
    for pid in approved:
        where = p.state.proposal(pid)
        if not (where / "approved").exists():
            continue
        prop = read_record(where / "proposal.json", Proposal, sealed_only=True)
        if (p.now - dt.datetime.fromisoformat(prop.time)).total_seconds() > 86400:
            p.notes.append(f"proposal {pid} is older than a day: expired, not applied")
            continue
        return prop
    return None


def _apply_approved(p: _Pass, prop: Proposal, trace: Any) -> PassResult:
    """Apply an approved proposal after the guardrails again, on the cluster as it is now."""
    if prop.mig:
        from slurmgpu.autopilot.mig_act import apply_approved_mig

        return apply_approved_mig(p, prop, trace)
    live = {x.name: tuple(x.nodes) for x in p.world.partitions()}
    refusals = [guardrails.hours(p.guard, p.now)]
    for name, nodes in prop.partitions_before.items():
        if tuple(sorted(live.get(name, ()))) != tuple(sorted(nodes)):
            refusals.append(f"partition {name} changed since proposal {prop.id}")
    changed = guardrails.last_changed(p.records)
    for m in prop.moves:
        refusals.append(guardrails.cooldown(p.guard, m.node, changed, p.now))
        refusals.append(
            guardrails.protected_jobs(m.node, p.world.jobs_on(m.node), p.opts.policy, p.guard)
        )
    refusals.append(
        guardrails.budget(p.guard, len(prop.moves), guardrails.nodes_today(p.records, p.now))
    )
    why = tuple(r for r in refusals if r)
    kw = dict(
        moves=prop.moves,
        changes=prop.changes,
        score=prop.score,
        predicted=prop.predicted,
        change_id=prop.id,
    )
    if why:
        p.record(ChangeRecord(iso(p.now), "hold", of=prop.id, reasons=why))
        return p.result("held", refusals=why, **kw)
    if p.opts.dry_run:
        p.notes.append(f"dry run: approved proposal {prop.id} not applied")
        return p.result("would-apply", **kw)
    plan = rebalance_plan([_Part(k, v) for k, v in live.items()], prop.moves)
    stamp = p.world.apply(plan, p.state.rebalance_log)
    before = observe(trace, 0, p.now.timestamp())
    p.record(
        ChangeRecord(
            iso(p.now),
            "apply",
            id=prop.id,
            moves=prop.moves,
            changes=prop.changes,
            score=prop.score,
            predicted=prop.predicted,
            before=before,
            rebalance_time=stamp,
            reasons=(f"approved proposal {prop.id}",),
        )
    )
    return p.result("applied", **kw)


@dataclass(frozen=True)
class _Part:
    name: str
    nodes: tuple[str, ...]


def approve(state_dir: Path, pid: str, who: str) -> Path:
    """`slurmgpu autopilot approve ID`: mark a proposal approved; the next pass applies it."""
    from slurmgpu.util.atomic import write_atomic
    from slurmgpu.util.journal import read_record

    state = StateDir(Path(state_dir))
    where = state.proposal(pid)
    if "/" in pid or pid.startswith(".") or not (where / "proposal.json").is_file():
        raise UsageError(f"no proposal {pid!r} in {state.proposals}")
    read_record(where / "proposal.json", Proposal, sealed_only=True)  # refuses a forged one
    if (where / "approved").exists():
        raise UsageError(f"proposal {pid} is already approved")
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    write_atomic(where / "approved", f"approved by {who} at {iso(now)}\n", backup=False)
    append_change(state, ChangeRecord(iso(now), "approve", of=pid, reasons=(f"by {who}",)))
    return where / "approved"
