"""`slurmgpu rebalance`: move whole idle nodes to partitions whose GPU jobs wait for nodes.

`plan_rebalance` is pure: pending jobs, partitions and nodes in, moves out. Guards against
flapping (hysteresis): a job must have waited `min_pending_s`, a donor node must have been
idle `min_idle_s`, a node moved less than `cooldown_s` ago is not moved again, and every
partition keeps its floor of nodes. `apply_plan` changes partitions with
`scontrol update PartitionName=P Nodes=...` and appends each change, with its reason and the
node lists before it, to a JSON-lines log that `undo_last` reads back.

scontrol's partition changes live in slurmctld's memory: a restart without `-R` or an
`scontrol reconfigure` goes back to slurm.conf (seen on 22.05 in the tests), so the plan also
prints the `PartitionName=` node lists that make it permanent.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from slurmgpu.errors import SlurmgpuError, UsageError
from slurmgpu.model.rebalance import Move, NodeState, Partition, PendingJob, RebalancePlan
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
                and len(members[p]) - 1 >= opts.floor_of(p)
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
                    f"{node.idle_s} s in {source} ({len(members[source]) - 1} node(s) left "
                    f"there, floor {opts.floor_of(source)})",
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


# -- the live cluster --------------------------------------------------------------------------
def _log_entries(log: Path) -> list[dict]:
    try:
        text = log.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise SlurmgpuError(f"cannot read the change log {log}: {exc.strerror}") from exc
    entries = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                entries.append(json.loads(line))
            except ValueError as exc:
                raise SlurmgpuError(f"{log}:{n}: not a rebalance log line: {exc}") from exc
    return entries


def recently_moved(log: Path, now: dt.datetime) -> dict[str, int]:
    """{node: seconds since it was last moved} from the change log."""
    ages: dict[str, int] = {}
    for entry in _log_entries(log):
        if entry.get("action") != "apply":
            continue
        age = int((now - dt.datetime.fromisoformat(entry["time"])).total_seconds())
        for move in entry.get("moves", []):
            ages[move["node"]] = min(age, ages.get(move["node"], age))
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


def _set_partitions(lists: Mapping[str, Sequence[str]], env: Mapping[str, str] | None) -> None:
    from slurmgpu.util.proc import run

    for name, members in lists.items():
        if not members:
            raise UsageError(f"refusing to leave partition {name} without nodes")
        run(
            ["scontrol", "update", f"PartitionName={name}", f"Nodes={compress_hostlist(members)}"],
            env=env,
        )


def _append(log: Path, entry: dict) -> None:
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry, sort_keys=True) + "\n")
    except OSError as exc:
        # before any scontrol change: no move without its log line
        raise SlurmgpuError(f"cannot write the change log {log}: {exc.strerror}") from exc


def apply_plan(plan: RebalancePlan, log: Path, env: Mapping[str, str] | None = None) -> None:
    """Change the partitions the plan moves nodes between; log it first (undo needs it)."""
    changed = sorted({m.source for m in plan.moves} | {m.target for m in plan.moves})
    if not changed:
        return
    _append(
        log,
        {
            "time": dt.datetime.now().isoformat(timespec="seconds"),
            "action": "apply",
            "moves": [asdict(m) for m in plan.moves],
            "before": {p: compress_hostlist(plan.before[p]) for p in changed},
            "after": {p: compress_hostlist(plan.after[p]) for p in changed},
        },
    )
    _set_partitions({p: plan.after[p] for p in changed}, env)


def undo_last(log: Path, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Put back the node lists from before the last apply that was not undone yet."""
    entries = _log_entries(log)
    undone = {e.get("undoes") for e in entries if e.get("action") == "undo"}
    applies = [e for e in entries if e.get("action") == "apply" and e["time"] not in undone]
    if not applies:
        raise UsageError(f"nothing to undo in {log}")
    last = applies[-1]
    _append(
        log,
        {
            "time": dt.datetime.now().isoformat(timespec="seconds"),
            "action": "undo",
            "undoes": last["time"],
            "after": last["before"],
        },
    )
    _set_partitions({p: expand_hostlist(h) for p, h in last["before"].items()}, env)
    return last["before"]
