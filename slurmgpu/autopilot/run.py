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
    JUDGED,
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
    # the node-move journal shared with `rebalance apply` (None: STATE_DIR/rebalance.jsonl)
    rebalance_log: Path | None = None
    transient: bool = False  # without partitions_conf: moves slurmctld forgets, asked by name
    mig: Any = None  # autopilot.carve.MigSite: MIG layouts decided from the forecast


# the statuses of a pass that changed the cluster or, dry, would (the exit status 3)
CHANGED_STATUSES = frozenset({"applied", "failed", "rolled-back", "would-apply"})


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

    @property
    def changed(self) -> bool:
        """Whether the pass changed the cluster (or, dry, would): nodes moved or carved
        (`applied`; `failed`: a carve began, its nodes undone and left drained), a change
        rolled back, or what a killed pass left pending finished or undone. A proposal, a
        hold, a wait or a verification changes nothing (docs/acting.md, exit codes)."""
        if self.status in CHANGED_STATUSES:
            return True
        mark = "dry run: a killed pass" if self.dry_run else "recovered: "
        return any(n.startswith(mark) for n in self.notes)

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

    @property
    def log(self) -> Path:
        """The node-move journal (`fleet.rebalance`), shared with `rebalance apply`."""
        return Path(self.opts.rebalance_log or self.state.rebalance_log)

    def today(self) -> int:
        """Nodes changed in the last 24 hours: this autopilot's applies, and the moves that
        others (`rebalance apply`) logged in the shared journal (the daily budget)."""
        return guardrails.nodes_today(self.records, self.now) + guardrails.moved_by_others(
            self.log, self.records, self.now
        )

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
    stop = guardrails.kill_switch(guard, guardrails.switch_present(guard.kill_switch))
    if stop:
        return p.result("killed", refusals=(stop,))
    p.records = read_changes(p.state)
    stuck = _recover(p)
    if stuck is not None:
        return stuck
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
    """The last apply not yet verified, rolled back, aborted or found reverted by hand."""
    judged = {r.of for r in records if r.action in JUDGED}
    applies = [r for r in records if r.action == "apply" and r.id not in judged]
    return applies[-1] if applies else None


def _recover(p: _Pass) -> PassResult | None:
    """Put right what a killed pass left, before this pass reads the cluster: a half-made
    node move (finished or undone by `fleet.rebalance.recover_pending`, its change recorded
    aborted when it did not take effect), a `mig apply` journal left running (recovered as
    `mig apply --recover` does with the pass's --mig-* options, else the pass refuses with
    one line naming it: its half-carved GPUs are no current layout). A dry run only says."""
    from slurmgpu.fleet.rebalance import pending_intents

    log = p.log
    if p.opts.dry_run:
        p.notes.extend(
            f"dry run: a killed pass's move of {e.time} is pending in {log}; a pass finishes "
            "or undoes it first"
            for e in pending_intents(log)
        )
    else:
        p.notes.extend(f"recovered: {line}" for line in p.world.recover(log))
        last = _open_apply(p.records)
        state = "applied"
        if last is not None and last.moves:
            state = _move_state(_log_of(p, last.rebalance_time), last.rebalance_time)
        if last is not None and state != "applied":
            why = {
                "undone": "a killed pass's half-made move, undone",
                "none": "the pass was killed before it moved anything",
            }[state]
            p.record(
                ChangeRecord(iso(p.now), "abort", of=last.id, moves=last.moves, reasons=(why,))
            )
            p.notes.append(f"change {last.id}: {why}")
    return _recover_mig(p)


def _log_of(p: _Pass, stamp: str) -> Path:
    """The journal that holds the move at `stamp`: the shared one, or STATE_DIR's own where
    a release before the shared journal logged it."""
    from slurmgpu.fleet.rebalance import entries

    own = p.state.rebalance_log
    if p.log == own or not own.exists() or any(e.time == stamp for e in entries(p.log)):
        return p.log
    return own if any(e.time == stamp for e in entries(own)) else p.log


def _move_state(log: Path, stamp: str) -> str:
    """applied | undone | none: what the rebalance journal says of the move at `stamp`."""
    from slurmgpu.fleet.rebalance import entries

    found = entries(log)
    if any(e.action == "apply" and e.time == stamp for e in found):
        return "applied"
    return "undone" if any(e.action == "undo" and e.undoes == stamp for e in found) else "none"


def _recover_mig(p: _Pass) -> PassResult | None:
    from slurmgpu.mig.apply import Journal
    from slurmgpu.util.journal import JournalError

    for path in sorted(p.state.root.glob("mig-apply-*.json")):
        try:
            journal = Journal.load(path)
        except JournalError as exc:
            why = f"{exc}: fix or remove it (docs/mig.md, recovery); no MIG layout read"
            return _stuck(p, why)
        if journal.state != "running":
            continue
        if p.opts.mig is None or p.opts.dry_run:
            return _stuck(
                p,
                f"{path}: a killed mig apply of {journal.node} is pending (its GPUs are half "
                f"carved): run `slurmgpu mig apply --recover --node {journal.node} "
                f"--journal-dir {p.state.root}` (or give the pass its --mig-* options)",
            )
        from slurmgpu.autopilot.carve import recover_options

        done = p.world.mig_recover(recover_options(p.opts.mig, journal, p.state.root))
        p.notes.append(f"recovered: the killed mig apply of {journal.node}: {done.state}")
        last = _open_apply(p.records)
        if done.state != "done" and last is not None and journal.node in last.nodes:
            from slurmgpu.autopilot.mig_act import abort_killed

            p.notes.append(f"change {last.id}: " + abort_killed(p, last, journal.node, done.state))
    return None


def _stuck(p: _Pass, why: str) -> PassResult:
    p.record(ChangeRecord(iso(p.now), "hold", reasons=(why,)))
    return p.result("held", refusals=(why,))


def _not_in_place(p: _Pass, last: ChangeRecord) -> str | None:
    """Why the moves of `last` are no longer live (undone by hand or by a reconfigure)."""
    if not last.moves:
        return None
    live = {x.name: set(x.nodes) for x in p.world.partitions()}
    for m in last.moves:
        if m.node not in live.get(m.target, set()) or m.node in live.get(m.source, set()):
            return f"{m.node} is no longer moved from {m.source} to {m.target}"
    return None


def _verify(p: _Pass, trace: Any) -> PassResult | None:
    """Judge the last change once it is old enough; roll it back when it made things worse.
    None: nothing to judge, the pass goes on."""
    last = _open_apply(p.records)
    if last is None:
        return None
    gone = _not_in_place(p, last)
    if gone:
        p.record(
            ChangeRecord(iso(p.now), "reverted", of=last.id, moves=last.moves, reasons=(gone,))
        )
        p.notes.append(f"change {last.id}: {gone}: recorded as reverted by hand, not verified")
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
        undone = p.world.undo(_log_of(p, last.rebalance_time), last.rebalance_time)
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


def _decided(
    p: _Pass,
    action: str,
    cid: str,
    decision: Decision | Proposal,
    before: tuple[Observed, ...],
    reasons: tuple[str, ...] = (),
) -> ChangeRecord:
    """The change record of a decision (or an approved proposal) this pass applies or
    proposes (`action`)."""
    return ChangeRecord(
        iso(p.now),
        action,
        id=cid,
        moves=decision.moves,
        changes=decision.changes,
        score=decision.score,
        predicted=decision.predicted,
        before=before,
        reasons=reasons,
    )


def _apply(p: _Pass, decision: Decision, before: tuple[Observed, ...], fc) -> PassResult:
    plan, cid, kw = _planned(p, decision, fc)
    if p.opts.dry_run:
        p.notes.append("dry run: nothing applied")
        return p.result("would-apply", **kw)
    record = _decided(p, "apply", cid, decision, before)
    refused = _act(p, plan, record)
    if refused:
        return p.result("held", **{**kw, "refusals": (*decision.refusals, refused)})
    return p.result("applied", **kw)


def _act(p: _Pass, plan: Any, record: ChangeRecord) -> str | None:
    """Record the apply first (its intent: a killed pass leaves it for the next to settle),
    then move under the nodes' locks, the guardrails read again there (`_recheck`). A move
    refused there is recorded aborted; returns why (None: moved)."""
    from slurmgpu.fleet.rebalance import MoveRefused
    from slurmgpu.util.lock import NodeLocked

    if p.opts.partitions_conf is None and not p.opts.transient:
        why = (
            "a live move needs --partitions-conf FILE (the include file, so the next `scontrol "
            "reconfigure` keeps it) or --transient (moves slurmctld forgets): not moved"
        )
        p.record(ChangeRecord(iso(p.now), "hold", moves=record.moves, reasons=(why,)))
        return why
    stamp = p.now.astimezone().replace(tzinfo=None).isoformat(timespec="seconds")
    p.record(replace(record, rebalance_time=stamp))
    try:
        p.world.apply(
            plan,
            p.log,
            recheck=lambda: _recheck(p, record.moves),
            by=f"autopilot {record.id}",
            stamp=stamp,
        )
    except (MoveRefused, NodeLocked) as exc:
        why = f"not applied: {exc}"
        p.record(
            ChangeRecord(iso(p.now), "abort", of=record.id, moves=record.moves, reasons=(why,))
        )
        return why
    return None


def _recheck(p: _Pass, moves: tuple[Move, ...]) -> list[str | None]:
    """The guardrails read again under the nodes' locks, right before the move: the kill
    switch, each node's state (drained or down since) and its jobs (a P0 or non-preemptible
    job started on it since)."""
    why = [guardrails.kill_switch(p.guard, guardrails.switch_present(p.guard.kill_switch))]
    nodes = {n.name: n for n in p.world.nodes()}
    for m in moves:
        node = nodes.get(m.node)
        if node is None or not node.usable:
            why.append(f"{m.node} is drained or down now")
        why.append(
            guardrails.protected_jobs(m.node, p.world.jobs_on(m.node), p.opts.policy, p.guard)
        )
    return why


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
    p.record(_decided(p, "propose", cid, decision, before))
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
    refusals.append(guardrails.budget(p.guard, len(prop.moves), p.today()))
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
    before = observe(trace, 0, p.now.timestamp())
    record = _decided(p, "apply", prop.id, prop, before, (f"approved proposal {prop.id}",))
    refused = _act(p, plan, record)
    if refused:
        return p.result("held", refusals=(refused,), **kw)
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
