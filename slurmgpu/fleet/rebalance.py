"""`slurmgpu rebalance`: move whole idle nodes to partitions whose GPU jobs wait for nodes.

`plan_rebalance` is pure: pending jobs, partitions and nodes in, moves out. Guards against
flapping (hysteresis): a job must have waited `min_pending_s`, a donor node must have been
idle `min_idle_s`, a node moved less than `cooldown_s` ago is not moved again, and every
partition keeps its floor of nodes. `apply_plan` changes partitions with
`scontrol update PartitionName=P Nodes=...` and appends each change, with its reason and the
node lists before it, to a JSON-lines log that `undo_last` reads back.

scontrol's partition changes live in slurmctld's memory: a restart without `-R` or an
`scontrol reconfigure` goes back to slurm.conf (seen on 22.05 in the tests). With
`partitions_conf` (a slurm.conf include file rebalance owns) every change is also written
there, so a reconfigure keeps it; without, the plan prints the `PartitionName=` node lists
to put in slurm.conf. The log is the journal of `util.journal` (typed, sealed, validated);
moved nodes are locked (`util.lock`); `undo_last` starts from the live partitions.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from slurmgpu.errors import SlurmgpuError, UsageError
from slurmgpu.model.rebalance import (
    Move,
    NodeState,
    Partition,
    PendingJob,
    RebalancePlan,
    UndoResult,
)
from slurmgpu.util.hostlist import compress_hostlist, expand_hostlist


@dataclass(frozen=True)
class RebalanceOptions:
    """Thresholds (the CLI options map one to one)."""

    floor: int = 1
    floors: Mapping[str, int] = field(default_factory=dict)
    min_pending_s: int = 300
    min_idle_s: int = 600
    cooldown_s: int = 1800
    max_moves: int = 4

    def floor_of(self, partition: str) -> int:
        return self.floors.get(partition, self.floor)


def _fits(node: NodeState, job: PendingJob) -> bool:
    return node.gpus >= job.gpus_per_node and (
        job.gpu_type is None or node.gpu_type == job.gpu_type
    )


def _usable(names: Sequence[str], by_name: Mapping[str, NodeState]) -> int:
    """The nodes of a partition that can run jobs: a drained or down node keeps no floor."""
    return sum(1 for n in names if n in by_name and by_name[n].usable)


def plan_rebalance(
    jobs: Sequence[PendingJob],
    partitions: Sequence[Partition],
    nodes: Sequence[NodeState],
    opts: RebalanceOptions,
    recently_moved: Mapping[str, int] | None = None,
) -> RebalancePlan:
    """Which idle nodes to move where, oldest waiting GPU job first.

    Why it is long: one greedy pass whose state (`members`, `taken`, `moves`) each job's
    decision changes for the next (a node moved for one job counts against its partition's
    floor for the next); the pass reads top to bottom as the policy: wait long enough, use
    idle members first, then idle nodes of unstarved partitions above their floor, never a
    partial allocation.
    """
    recently_moved = recently_moved or {}
    members = {p.name: list(p.nodes) for p in partitions}
    before = {name: tuple(ns) for name, ns in members.items()}
    by_name = {n.name: n for n in nodes}
    waiting = sorted(
        (j for j in jobs if j.gpus_per_node > 0 and j.partitions[0] in members),
        key=lambda j: -j.pending_s,
    )
    starved = {j.partitions[0] for j in waiting}
    taken: set[str] = set()
    moves: list[Move] = []
    notes: list[str] = []
    for job in waiting:
        target = job.partitions[0]
        if job.pending_s < opts.min_pending_s:
            notes.append(
                f"job {job.job_id} ({target}) has waited {job.pending_s} s, less than "
                f"{opts.min_pending_s} s: not yet"
            )
            continue
        have = [
            n
            for n in members[target]
            if n in by_name and by_name[n].idle and n not in taken and _fits(by_name[n], job)
        ]
        need = job.nodes - len(have)
        taken.update(have[: job.nodes])
        found: list[Move] = []
        for node in sorted(nodes, key=lambda n: (-n.idle_s, n.name)):
            if len(found) >= need or len(moves) + len(found) >= opts.max_moves:
                break
            if node.name in taken or node.name in members[target] or not node.idle:
                continue
            if not _fits(node, job) or node.idle_s < opts.min_idle_s:
                continue
            if recently_moved.get(node.name, opts.cooldown_s) < opts.cooldown_s:
                continue
            donors = [
                p
                for p in node.partitions
                if p in members
                and p not in starved
                and _usable(members[p], by_name) - 1 >= opts.floor_of(p)
                and node.name in members[p]
            ]
            if not donors:
                continue
            source = donors[0]
            found.append(
                Move(
                    node.name,
                    source,
                    target,
                    f"job {job.job_id} in {target} has waited {job.pending_s} s for "
                    f"{job.nodes} node(s) x {job.gpus_per_node} GPU(s); {node.name} was idle "
                    f"{node.idle_s} s in {source} ({_usable(members[source], by_name) - 1} "
                    f"usable node(s) left there, floor {opts.floor_of(source)})",
                )
            )
            members[source].remove(node.name)  # so the floor counts this move
        if need > 0 and len(found) < need:
            for m in found:  # a partial allocation helps nobody: put them back
                members[m.source].append(m.node)
            notes.append(
                f"job {job.job_id} ({target}) needs {need} more node(s) with "
                f"{job.gpus_per_node} GPU(s); only {len(found)} can move (floors, cooldown, "
                "idle time, GPU type)"
            )
            continue
        for m in found:
            members[target].append(m.node)
            taken.add(m.node)
        moves += found
    after = {name: tuple(sorted(ns)) for name, ns in members.items()}
    return RebalancePlan(tuple(moves), before, after, tuple(notes))


# -- the change log (util.journal: typed, sealed, validated when read back) ---------------------
ACTIONS = ("intent", "apply", "undo")


@dataclass(frozen=True)
class LogEntry:
    """One line of the change log: the intent of a move, written before anything is changed
    (its moves with reasons, the changed partitions' node lists before and after, the include
    file it also rewrites, who made it), the apply that completes it once scontrol has done it
    (the same fields and time), or the undo of one (`undoes`: the apply's or a killed run's
    intent's time; `after`: the lists it set again). An intent without its apply or undo is
    a run killed midway: `recover_pending` finishes or undoes it."""

    time: str
    action: str  # intent | apply | undo
    moves: tuple[Move, ...] = ()
    before: dict[str, str] = field(default_factory=dict)
    after: dict[str, str] = field(default_factory=dict)
    undoes: str = ""
    partitions_conf: str = ""
    by: str = ""  # the command that made it ("rebalance apply", "autopilot ap-...")

    def check(self) -> str | None:
        if self.action not in ACTIONS:
            return f"action {self.action!r:.30} is none of {', '.join(ACTIONS)}"
        for label, stamp in (("time", self.time), ("undoes", self.undoes)):
            if stamp or label == "time":
                try:
                    dt.datetime.fromisoformat(stamp)
                except ValueError:
                    return f"{label} {stamp!r:.40} is not an ISO time"
        for label, lists in (("before", self.before), ("after", self.after)):
            for name, hostlist in lists.items():
                try:
                    nodes = expand_hostlist(hostlist)
                except ValueError:
                    nodes = []
                if not nodes:
                    return (
                        f"{label}: partition {name!r:.30} has no valid node list {hostlist!r:.40}"
                    )
        if self.action in ("intent", "apply"):
            if not self.moves or set(self.before) != set(self.after):
                return "an apply without moves, or with other partitions before than after"
            for m in self.moves:
                if not {m.source, m.target} <= set(self.before):
                    return f"move of {m.node!r:.30}: its partitions are not in the node lists"
        elif not self.undoes:
            return "an undo that names no apply"
        return None


def entries(log: Path) -> list[LogEntry]:
    """The change log's entries, each validated (none yet: [])."""
    from slurmgpu.util.journal import read_records

    return read_records(log, LogEntry)


_entries = entries


def _now() -> str:
    return dt.datetime.now().isoformat(timespec="seconds")


def recently_moved(log: Path, now: dt.datetime) -> dict[str, int]:
    """{node: seconds since it was last moved} from the change log."""
    ages: dict[str, int] = {}
    for entry in _entries(log):
        if entry.action != "apply":
            continue
        age = int((now - dt.datetime.fromisoformat(entry.time)).total_seconds())
        for move in entry.moves:
            ages[move.node] = min(age, ages.get(move.node, age))
    return ages


def current_plan(
    opts: RebalanceOptions, log: Path, env: Mapping[str, str] | None = None
) -> RebalancePlan:
    """The plan for the cluster as it is now (nothing changed)."""
    from slurmgpu.sources import queue

    now = dt.datetime.now()
    return plan_rebalance(
        queue.pending_jobs(env, now),
        queue.partitions(env),
        queue.nodes(env, now),
        opts,
        recently_moved(log, now),
    )


# -- the include file rebalance owns (durable moves) --------------------------------------------
def partitions_conf_text(text: str, lists: Mapping[str, Sequence[str]], path: Path) -> str:
    """The include file's text with `Nodes=` of each partition in `lists` set (every other
    word and line as it was); a partition it has no `PartitionName=` line for is an error."""
    out, seen = [], set()
    for line in text.splitlines(keepends=True):
        words = line.split()
        key, _, name = words[0].partition("=") if words else ("", "", "")
        if key.lower() == "partitionname" and name in lists:
            seen.add(name)
            kept = [w for w in words[1:] if not w.lower().startswith("nodes=")]
            hostlist = compress_hostlist(lists[name])
            line = " ".join([words[0], f"Nodes={hostlist}", *kept]) + "\n"
        out.append(line)
    missing = sorted(set(lists) - seen)
    if missing:
        raise UsageError(
            f"{path}: no PartitionName= line for {', '.join(missing)}; move the lines of the "
            "partitions rebalance may change from slurm.conf into this file (docs/rebalance.md)"
        )
    return "".join(out)


def _include_change(path: Path, lists: Mapping[str, Sequence[str]]):
    from slurmgpu.util.emit import change_of

    old = change_of(path, "").old
    if old is None:
        raise UsageError(
            f"--partitions-conf {path}: no such file; create it with the PartitionName= lines "
            "of the partitions rebalance may change and `Include` it from slurm.conf"
        )
    return change_of(path, partitions_conf_text(old, lists, path))


def _set_partitions(lists: Mapping[str, Sequence[str]], env: Mapping[str, str] | None) -> None:
    from slurmgpu.util.proc import run

    for name, members in lists.items():
        if not members:
            raise UsageError(f"refusing to leave partition {name} without nodes")
        run(
            ["scontrol", "update", f"PartitionName={name}", f"Nodes={compress_hostlist(members)}"],
            env=env,
        )


def _change_live(
    lists: Mapping[str, Sequence[str]], conf: Path | None, env: Mapping[str, str] | None
) -> None:
    """The include file (when there is one) and slurmctld's partitions to `lists`; the file
    goes back to what it held when scontrol fails."""
    from slurmgpu.util.atomic import write_atomic

    change = _include_change(conf, lists) if conf is not None else None
    if change is not None and change.changed:
        write_atomic(change.path, change.new)
    try:
        _set_partitions(lists, env)
    except BaseException:
        if change is not None and change.changed and change.old is not None:
            write_atomic(change.path, change.old, backup=False)
        raise


class MoveRefused(SlurmgpuError):
    """A move not made: under the nodes' locks, the live partitions or nodes are no longer
    what the plan read, or a guardrail refuses now."""


def _live_partitions(env: Mapping[str, str] | None, live=None) -> dict[str, set[str]]:
    from slurmgpu.sources import queue

    return {p.name: set(p.nodes) for p in (live or queue.partitions)(env)}


def _drifted(plan: RebalancePlan, changed: Sequence[str], now: Mapping[str, set[str]]) -> list[str]:
    """The partitions whose live node list is not the one the plan was made from."""
    out = []
    for name in changed:
        have = now.get(name, set())
        if have != set(plan.before[name]):
            out.append(
                f"partition {name} has Nodes={compress_hostlist(sorted(have)) or '(none)'} now, "
                f"not {compress_hostlist(plan.before[name])} as the plan read: changed since "
                "(by an admin or another command); not moved"
            )
    return out


def node_problems(moves: Sequence[Move], nodes: Sequence[NodeState]) -> list[str]:
    """A moved node that is gone, drained, down or busy now (a fresh read under its lock)."""
    by_name = {n.name: n for n in nodes}
    out = []
    for m in moves:
        node = by_name.get(m.node)
        if node is None:
            out.append(f"{m.node} is no longer a node slurmctld knows: not moved")
        elif not node.usable:
            out.append(f"{m.node} is drained or down now: not moved")
        elif not node.idle:
            out.append(f"{m.node} runs a job now: not moved")
    return out


def apply_plan(
    plan: RebalancePlan,
    log: Path,
    env: Mapping[str, str] | None = None,
    *,
    partitions_conf: Path | None = None,
    recheck: Callable[[], Sequence[str | None]] | None = None,
    live: Callable[[Mapping[str, str] | None], Sequence[Partition]] | None = None,
    by: str = "rebalance apply",
    stamp: str | None = None,
) -> str:
    """Change the partitions the plan moves nodes between, holding the moved nodes' locks
    (`util.lock.lock_dir()`, shared with every acting command). Under the locks, right
    before acting: the live partitions must still be the plan's `before` (an admin's edit
    since is never reverted: MoveRefused) and `recheck` (the caller's guardrails read again
    now: node state, jobs, kill switch) must find nothing; then the intent is logged (undo
    and recovery need it), the include file and scontrol changed, and the apply logged.
    Returns the entry's time (`stamp`, or now)."""
    from slurmgpu.util.journal import append_record
    from slurmgpu.util.lock import lock_dir, node_locks

    changed = sorted({m.source for m in plan.moves} | {m.target for m in plan.moves})
    if not changed:
        return ""
    lists = {p: plan.after[p] for p in changed}
    for name, members in lists.items():  # before anything is logged (a log line needs nodes)
        if not members:
            raise UsageError(f"refusing to leave partition {name} without nodes")
    if partitions_conf is not None:
        _include_change(partitions_conf, lists)  # refuses before anything is logged or set
    with node_locks(lock_dir(), [m.node for m in plan.moves], by):
        why = _drifted(plan, changed, _live_partitions(env, live))
        why += [w for w in (recheck() if recheck is not None else ()) if w]
        if why:
            raise MoveRefused("; ".join(why))
        entry = LogEntry(
            time=stamp or _now(),
            action="intent",
            moves=plan.moves,
            before={p: compress_hostlist(plan.before[p]) for p in changed},
            after={p: compress_hostlist(plan.after[p]) for p in changed},
            partitions_conf=str(partitions_conf or ""),
            by=by,
        )
        append_record(log, entry)
        _change_live(lists, partitions_conf, env)
        append_record(log, replace(entry, action="apply"))
    return entry.time


def pending_intents(log: Path) -> list[LogEntry]:
    """The intents of runs killed before their apply or undo was logged. Recovery acts from
    them: an intent line without its checksum (written by hand) is refused, never acted on."""
    from slurmgpu.util.journal import read_records

    entries = read_records(log, LogEntry, sealed_only=lambda e: e.action == "intent")
    closed = {e.time for e in entries if e.action == "apply"}
    closed |= {e.undoes for e in entries if e.action == "undo"}
    return [e for e in entries if e.action == "intent" and e.time not in closed]


def recover_pending(
    log: Path,
    env: Mapping[str, str] | None = None,
    *,
    partitions_conf: Path | None = None,
    live=None,
) -> list[str]:
    """Finish or undo what a killed run left between its intent and its apply, under the
    nodes' locks, so the live partitions, the include file and the log agree; returns what
    was done (one line each; none: nothing pending).

    Every partition live at the intent's `after`: the move was made, it is finished (the
    include file set to it too, the apply logged). Otherwise (killed before or between the
    scontrol updates: a node in two partitions, or the include file ahead of the live
    partitions) it is undone: the partitions at `after` set back to `before`, the include
    file too, the undo logged. A partition at neither (changed by hand since) stops it with
    one line: a person puts it right."""
    from slurmgpu.util.atomic import write_atomic
    from slurmgpu.util.journal import append_record
    from slurmgpu.util.lock import lock_dir, node_locks

    done = []
    for intent in pending_intents(log):
        conf = partitions_conf or (Path(intent.partitions_conf) if intent.partitions_conf else None)
        nodes = [m.node for m in intent.moves]
        with node_locks(lock_dir(), nodes, f"recover the killed {intent.by or 'move'}"):
            now = _live_partitions(env, live)
            before = {p: expand_hostlist(h) for p, h in intent.before.items()}
            after = {p: expand_hostlist(h) for p, h in intent.after.items()}
            at_after = {p for p in after if now.get(p, set()) == set(after[p])}
            at_before = {p for p in before if now.get(p, set()) == set(before[p])}
            other = sorted(set(before) - at_after - at_before)
            what = ", ".join(f"{m.node} {m.source} -> {m.target}" for m in intent.moves)
            if other:
                raise SlurmgpuError(
                    f"{log}: the move of {intent.time} ({what}) by a killed "
                    f"{intent.by or 'run'} is pending, and partition {other[0]} is now neither "
                    f"Nodes={intent.before[other[0]]} (before) nor Nodes={intent.after[other[0]]}"
                    " (after): set it to one of them by hand, then run again"
                )
            if at_after == set(after):
                if conf is not None:
                    change = _include_change(conf, after)
                    if change.changed:
                        write_atomic(conf, change.new)
                append_record(log, replace(intent, action="apply"))
                done.append(f"finished the move of {intent.time} a killed run had made ({what})")
                continue
            _change_live({p: before[p] for p in sorted(at_after)}, conf, env)
            if conf is not None:
                change = _include_change(conf, before)
                if change.changed:
                    write_atomic(conf, change.new)
            append_record(
                log, LogEntry(time=_now(), action="undo", undoes=intent.time, after=intent.before)
            )
            done.append(
                f"undid the move of {intent.time} a killed run left half made ({what}): "
                + ", ".join(f"{p}={h}" for p, h in sorted(intent.before.items()))
            )
    return done


def emit_plan(plan: RebalancePlan, directory: Path, partitions_conf: Path | None) -> list[Path]:
    """`rebalance apply --emit DIR`: the include file with the plan's node lists and its diff
    into DIR, nothing live touched; installing it and one `scontrol reconfigure` on the
    controller give the state `apply` gives."""
    from slurmgpu.util.emit import emit_files

    if partitions_conf is None:
        raise UsageError("--emit needs --partitions-conf FILE (the include file rebalance owns)")
    changed = sorted({m.source for m in plan.moves} | {m.target for m in plan.moves})
    change = _include_change(partitions_conf, {p: plan.after[p] for p in changed})
    steps = (
        f"install {change.path.name} as {partitions_conf} on the controller",
        "scontrol reconfigure",
    )
    return emit_files(directory, [change], steps if change.changed else ())


def rebalance_apply(
    opts: RebalanceOptions,
    log: Path,
    *,
    partitions_conf: Path | None = None,
    dry_run: bool = False,
    emit_dir: Path | None = None,
    transient: bool = False,
    env: Mapping[str, str] | None = None,
    notes: list[str] | None = None,
) -> RebalancePlan:
    """`slurmgpu rebalance apply`: plan from the live queue, then apply it, or with `dry_run`
    only plan it, or with `emit_dir` hand the include file and its diff over.

    A live apply is durable: it needs `partitions_conf` (the include file, so the next
    `scontrol reconfigure` keeps the moves), or `transient` (moves slurmctld forgets at its
    next reconfigure or restart, asked for by name). It first finishes or undoes what a
    killed run left pending (what it did goes into `notes`), and re-reads the moved nodes
    under their locks: one drained, down or busy since the plan is not moved."""
    from slurmgpu.sources import queue

    if not dry_run and emit_dir is None and partitions_conf is None and not transient:
        raise UsageError(
            "a live rebalance apply needs --partitions-conf FILE (the include file, so the "
            "next `scontrol reconfigure` keeps the moves), or --transient for moves slurmctld "
            "forgets at its next reconfigure (docs/rebalance.md)"
        )
    if not dry_run and emit_dir is None:
        found = recover_pending(log, env, partitions_conf=partitions_conf)
        if notes is not None:
            notes.extend(found)
    plan = current_plan(opts, log, env)
    if dry_run and partitions_conf is not None:  # what apply would refuse, a dry run says
        changed = {m.source for m in plan.moves} | {m.target for m in plan.moves}
        _include_change(partitions_conf, {p: plan.after[p] for p in changed})
    if emit_dir is not None:
        emit_plan(plan, emit_dir, partitions_conf)
    elif not dry_run:

        def recheck() -> list[str]:
            return node_problems(plan.moves, queue.nodes(env))

        apply_plan(plan, log, env, partitions_conf=partitions_conf, recheck=recheck)
    return plan


def undo_last(
    log: Path,
    env: Mapping[str, str] | None = None,
    *,
    partitions_conf: Path | None = None,
    live=None,
    time: str | None = None,
) -> UndoResult:
    """Put back the node lists from before the last apply not undone yet, where the live
    partitions still have the apply's lists; one already as before (a reconfigure or restart
    undid the move) is reported unchanged; one changed since by someone else stops the undo.
    The undo is logged once scontrol has done it. `time`: undo that apply, not the last one
    (the autopilot's rollback of its own move in the journal it shares with rebalance)."""
    from slurmgpu.sources import queue
    from slurmgpu.util.journal import append_record
    from slurmgpu.util.lock import lock_dir, node_locks

    recover_pending(log, env, partitions_conf=partitions_conf, live=live)
    entries = _entries(log)
    undone = {e.undoes for e in entries if e.action == "undo"}
    applies = [e for e in entries if e.action == "apply" and e.time not in undone]
    if time is not None:  # one given apply (the autopilot's own, in a shared log)
        applies = [e for e in applies if e.time == time]
    if not applies:
        raise UsageError(f"nothing to undo in {log}" + (f" at {time}" if time else ""))
    last = applies[-1]
    conf = partitions_conf or (Path(last.partitions_conf) if last.partitions_conf else None)
    with node_locks(lock_dir(), [m.node for m in last.moves], "rebalance apply --undo"):
        now = {p.name: set(p.nodes) for p in (live or queue.partitions)(env)}
        restore, unchanged = {}, {}
        for name, hostlist in sorted(last.before.items()):
            have = now.get(name, set())
            if have == set(expand_hostlist(hostlist)):
                unchanged[name] = hostlist
            elif have == set(expand_hostlist(last.after[name])):
                restore[name] = hostlist
            else:
                raise SlurmgpuError(
                    f"partition {name} has Nodes={compress_hostlist(sorted(have)) or '(none)'} "
                    f"now, neither {hostlist} (before the apply of {last.time}) nor "
                    f"{last.after[name]} (after it): changed since; not undone"
                )
        before = {p: expand_hostlist(h) for p, h in last.before.items()}
        if restore:
            _change_live({p: before[p] for p in restore}, conf, env)
        written = False
        if conf is not None:  # the file as before for every partition (also the unchanged)
            from slurmgpu.util.atomic import write_atomic

            change = _include_change(conf, before)
            if change.changed:
                write_atomic(conf, change.new)
                written = True
        append_record(
            log, LogEntry(time=_now(), action="undo", undoes=last.time, after=last.before)
        )
    return UndoResult(restore, unchanged, written)
