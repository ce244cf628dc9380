"""Acting on a MIG decision of an autopilot pass (`autopilot.carve`): propose it (the plan,
the mig-parted configs and each node's new gres.conf with its diff) or apply it (`mig apply`
per node through the world, journaled, one lock per node), undo it on a rollback (the old
layouts applied the same way), and apply an approved MIG proposal after the guardrails again.
`--dry-run` decides and prints; nothing here runs then."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from slurmgpu.autopilot import guardrails
from slurmgpu.autopilot.carve import CarveDecision, decide_carve, label, node_options
from slurmgpu.autopilot.records import ChangeRecord, MigChange, Proposal, iso, new_id
from slurmgpu.autopilot.verify import observe
from slurmgpu.errors import SlurmgpuError, UsageError

NEW, OLD = "mig-parted.yaml", "old.yaml"


def mig_pass(p: Any, trace: Any, ropts: Any, fc: Any) -> Any:
    """This pass's MIG change, or None when there is none (the pass goes on to node moves)."""
    decision = decide_carve(p, trace, ropts)
    if decision is None:
        return None
    if not decision.changes:  # refused: recorded; node moves are still considered
        p.record(
            ChangeRecord(
                iso(p.now), "hold", changes=(decision.carve,) if decision.carve else (),
                score=decision.score, predicted=decision.predicted, reasons=decision.refusals,
            )
        )  # fmt: skip
        p.notes.extend(f"MIG held: {r}" for r in decision.refusals)
        return None
    cid = new_id(p.now)
    kw = dict(
        mig=decision.changes,
        changes=(decision.carve,),
        score=decision.score,
        predicted=decision.predicted,
        refusals=decision.refusals,
        forecast=fc,
        change_id=cid,
    )
    before = observe(trace, 0, p.now.timestamp())
    if p.opts.dry_run:
        p.notes.append("dry run: no MIG layout changed, nothing written")
        return p.result("would-apply" if p.mode == "apply" else "would-propose", **kw)
    if p.mode == "propose":
        return _propose(p, cid, decision, before, kw)
    return _apply(p, cid, decision.changes, (decision.new_yaml, decision.old_yaml), before, kw)


def _write_configs(where: Path, texts: tuple[str, str]) -> list[str]:
    from slurmgpu.util.atomic import write_atomic

    where.mkdir(parents=True, exist_ok=True)
    for name, text in zip((NEW, OLD), texts, strict=True):
        write_atomic(where / name, text, backup=False)
    return [str(where / NEW), str(where / OLD)]


def _apply(p, cid: str, changes, texts: tuple[str, str], before, kw, reasons=()) -> Any:
    """`mig apply` of each node in turn, the apply recorded first (its intent: a pass killed
    midway leaves it for the next to settle); a node's guardrails are read again under its
    lock right before (`_recheck`); a failure or refusal undoes the nodes done before it and
    records the apply aborted."""
    site, where = p.opts.mig, p.state.mig_dir(cid)
    p.written.extend(_write_configs(where, texts))
    p.record(
        ChangeRecord(
            iso(p.now), "apply", id=cid, mig=tuple(changes), changes=kw["changes"],
            score=kw["score"], predicted=kw["predicted"], before=before, reasons=tuple(reasons),
        )
    )  # fmt: skip
    done: list[MigChange] = []
    for change in changes:
        try:
            opts = node_options(site, change, where / NEW, p.state.root)
            p.world.mig_apply(opts, recheck=lambda node=change.node: _recheck(p, node))
        except SlurmgpuError as exc:
            why = [f"mig apply {change.node}: {exc}"]
            for back in reversed(done):
                why.append(_undo_node(p, back, where))
            p.record(ChangeRecord(iso(p.now), "abort", of=cid, mig=tuple(changes),
                                  reasons=tuple(why)))  # fmt: skip
            return p.result("failed", **{**kw, "refusals": (*kw["refusals"], *why)})
        done.append(change)
    return p.result("applied", **kw)


def _recheck(p: Any, node: str) -> list[str | None]:
    """A node's guardrails read again under its lock, right before `mig apply` drains it:
    the kill switch, a P0 or non-preemptible job started on it since the decision."""
    switch = guardrails.kill_switch(p.guard, guardrails.switch_present(p.guard.kill_switch))
    jobs = guardrails.protected_jobs(node, p.world.jobs_on(node), p.opts.policy, p.guard)
    return [switch, jobs]


def abort_killed(p: Any, last: ChangeRecord, node: str, state: str) -> str:
    """A killed pass's MIG change whose `node` `mig apply --recover` rolled back: the nodes
    it had finished go back to their old layouts too, and the change is recorded aborted."""
    from slurmgpu.mig.apply import Journal

    where = p.state.mig_dir(last.id)
    why = [f"a killed pass's carve: mig apply --recover left {node} {state}"]
    for change in last.mig:
        path = p.state.root / f"mig-apply-{change.node}.json"
        if change.node == node or not path.exists():
            continue
        journal = Journal.load(path, change.node)
        if journal.state == "done" and journal.config_name == change.config:
            why.append(_undo_node(p, change, where))
    p.record(ChangeRecord(iso(p.now), "abort", of=last.id, mig=last.mig, reasons=tuple(why)))
    return "; ".join(why)


def _undo_node(p: Any, change: MigChange, where: Path) -> str:
    opts = node_options(p.opts.mig, change, where / OLD, p.state.root, old=True)
    try:
        p.world.mig_apply(opts)
    except SlurmgpuError as exc:
        return f"{change.node}: the old layouts could not be applied back: {exc}"
    return f"{change.node}: back to {' | '.join(change.before)}"


def undo_mig(p: Any, last: ChangeRecord) -> str:
    """Roll a MIG change back: each node's old layouts through `mig apply` (journaled, locked)."""
    if p.opts.mig is None:
        raise UsageError(
            f"change {last.id} re-laid out MIG: give the pass its --mig-* options to roll it back"
        )
    where = p.state.mig_dir(last.id)
    done = [_undo_node(p, c, where) for c in reversed(last.mig)]
    return f"rolled back change {last.id}: " + "; ".join(done)


def _propose(p: Any, cid: str, decision: CarveDecision, before, kw) -> Any:
    """The proposal, the two mig-parted configs, and per node the new gres.conf, its diff
    and the steps (`mig apply --emit`, from the node's inventory snapshot)."""
    from slurmgpu.util.journal import write_record

    same = _open_proposal(p, decision.changes)
    if same is not None:
        p.notes.append(f"already proposed as {same}, waiting for its approval")
        return p.result("proposed", **{**kw, "change_id": same})
    where = p.state.proposal(cid)
    prop = Proposal(
        cid, iso(p.now), (), (decision.carve,), decision.score, decision.predicted, before,
        {}, {}, mig=decision.changes,
    )  # fmt: skip
    write_record(where / "proposal.json", prop)
    p.written.append(str(where / "proposal.json"))
    p.written.extend(_write_configs(where, (decision.new_yaml, decision.old_yaml)))
    for change in decision.changes:
        opts = node_options(p.opts.mig, change, where / NEW, p.state.root)
        p.written.extend(str(x) for x in p.world.mig_emit(p.opts.mig, opts, where / change.node))
    p.notes.append(f"approve with: slurmgpu autopilot approve {cid} --state-dir {p.state.root}")
    p.record(
        ChangeRecord(
            iso(p.now), "propose", id=cid, mig=decision.changes, changes=(decision.carve,),
            score=decision.score, predicted=decision.predicted, before=before,
        )
    )  # fmt: skip
    return p.result("proposed", **kw)


def _open_proposal(p: Any, changes) -> str | None:
    key = {(c.node, c.after) for c in changes}
    approved = {r.of for r in p.records if r.action == "approve"}
    for r in reversed(p.records):
        if r.action != "propose" or r.id in approved or not r.mig:
            continue
        if (p.now - r.when).total_seconds() < 86400 and {(c.node, c.after) for c in r.mig} == key:
            return r.id
    return None


def apply_approved_mig(p: Any, prop: Proposal, trace: Any) -> Any:
    """An approved MIG proposal, after the guardrails again: the nodes' layouts as when it was
    proposed, the hours, cooldown, P0/non-preemptible jobs and budget."""
    if p.opts.mig is None:
        raise UsageError(f"proposal {prop.id} re-lays out MIG: give the pass its --mig-* options")
    live = {inv.node_name: inv for inv in p.world.inventories(p.opts.mig)}
    why = [guardrails.hours(p.guard, p.now)]
    changed = guardrails.last_changed(p.records)
    for c in prop.mig:
        inv = live.get(c.node)
        now = tuple(label(_profiles(g)) for g in inv.gpus) if inv else ()
        if now != c.before:
            why.append(f"{c.node}'s MIG layouts changed since proposal {prop.id}")
        why.append(guardrails.cooldown(p.guard, c.node, changed, p.now))
        why.append(
            guardrails.protected_jobs(c.node, p.world.jobs_on(c.node), p.opts.policy, p.guard)
        )
    why.append(guardrails.budget(p.guard, len(prop.mig), p.today()))
    refusals = tuple(w for w in why if w)
    kw = dict(
        mig=prop.mig, changes=prop.changes, score=prop.score, predicted=prop.predicted,
        change_id=prop.id, refusals=(),
    )  # fmt: skip
    if refusals:
        p.record(ChangeRecord(iso(p.now), "hold", of=prop.id, reasons=refusals))
        return p.result("held", **{**kw, "refusals": refusals})
    if p.opts.dry_run:
        p.notes.append(f"dry run: approved proposal {prop.id} not applied")
        return p.result("would-apply", **kw)
    src = p.state.proposal(prop.id)
    texts = ((src / NEW).read_text(), (src / OLD).read_text())
    before = observe(trace, 0, p.now.timestamp())
    return _apply(p, prop.id, prop.mig, texts, before, kw, (f"approved proposal {prop.id}",))


def _profiles(gpu: Any) -> tuple[str, ...]:
    return tuple(m.profile for m in gpu.mig_devices) if gpu.mig_enabled else ()
