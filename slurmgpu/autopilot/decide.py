"""From advise's plan to concrete node moves the guardrails allow (pure but for the world's
read-only calls: partitions, nodes, jobs on a node).

advise proves `move:FROM:TO:GPUS` (whole nodes' GPUs); autopilot picks the nodes: members of
FROM not in TO, usable, idle ones first (idle longest first), skipping every node the
guardrails pin (a P0 or non-preemptible job, the cooldown), until GPUS are covered; FROM
keeps at least one usable node (a drained or down one does not count). A plan with a
change autopilot does not act on (a carve, shard or tier change: `mig apply` and `qos apply`
are run by a person) is not acted on at all: the moves alone are not what the replay proved.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from slurmgpu.autopilot import guardrails
from slurmgpu.autopilot.records import Predicted
from slurmgpu.model.changes import Move as ChangeMove
from slurmgpu.model.changes import parse_change
from slurmgpu.model.rebalance import Move, RebalancePlan


@dataclass(frozen=True)
class Decision:
    moves: tuple[Move, ...]
    changes: tuple[str, ...]
    score: float
    predicted: tuple[Predicted, ...]
    refusals: tuple[str, ...]


def predicted_of(plan: Any) -> tuple[Predicted, ...]:
    return tuple(
        Predicted(
            e.partition,
            e.before.mean,
            e.after.mean,
            e.mean_wait_change_s.low,
            e.mean_wait_change_s.high,
        )
        for e in plan.by_partition
    )


def _pick(
    p: Any,
    change: ChangeMove,
    parts: Mapping[str, list[str]],
    nodes: Mapping[str, Any],
    changed: Mapping[str, Any],
    refusals: list[str],
) -> list[str] | None:
    """The nodes of FROM that carry `change.gpus` GPUs over, or None (reasons in refusals)."""
    donor, taker = parts.get(change.source, []), parts.get(change.target, [])
    if change.target not in parts:
        refusals.append(f"{change.format()}: no live partition {change.target}")
        return None
    pool = [nodes[n] for n in donor if n in nodes and n not in taker and nodes[n].usable]
    pool.sort(key=lambda n: (not n.idle, -n.idle_s, n.name))
    picked, gpus = [], 0
    for node in pool:
        if gpus >= change.gpus:
            break
        why = guardrails.cooldown(p.guard, node.name, changed, p.now)
        why = why or guardrails.protected_jobs(
            node.name, p.world.jobs_on(node.name), p.opts.policy, p.guard
        )
        if why:
            refusals.append(why)
            continue
        picked.append(node.name)
        gpus += node.gpus
    if gpus < change.gpus:
        refusals.append(
            f"{change.format()}: only {gpus} of {change.gpus} GPUs of {change.source} can move"
        )
        return None
    # the floor counts the nodes that can run jobs: a drained or down node keeps none
    left = [n for n in donor if n in nodes and nodes[n].usable and n not in picked]
    if len(left) < 1:
        refusals.append(f"{change.format()}: {change.source} would keep no usable node")
        return None
    return picked


def decide(p: Any, advice: Any, forecast: Sequence[tuple[str, float, float]]) -> Decision:
    """The moves of advise's plan that every guardrail allows (all of them, or none)."""
    plan = advice.plan
    changes, score, predicted = tuple(plan.changes), float(plan.score), predicted_of(plan)

    def refuse(*why: str) -> Decision:
        return Decision((), changes, score, predicted, tuple(why))

    objective = p.opts.policy.objective if p.opts.policy is not None else None
    why = guardrails.gain(p.guard, plan, objective)
    if why:
        return refuse(why)
    parsed = [parse_change(t) for t in changes]
    other = [t for t, c in zip(changes, parsed, strict=True) if not isinstance(c, ChangeMove)]
    if other:
        return refuse(
            f"the plan holds {', '.join(other)}: autopilot acts on node moves only (MIG "
            "layouts: `slurmgpu mig plan/apply`); the moves alone are not what was replayed"
        )
    parts = {x.name: list(x.nodes) for x in p.world.partitions()}
    nodes = {n.name: n for n in p.world.nodes()}
    changed = guardrails.last_changed(p.records)
    refusals: list[str] = []
    moves: list[Move] = []
    fc = {name: (mean, high) for name, mean, high in forecast}
    for text, change in zip(changes, parsed, strict=True):
        picked = _pick(p, change, parts, nodes, changed, refusals)
        if picked is None:
            return refuse(*refusals)
        ahead = fc.get(change.target)
        note = f"; forecast {change.target}: {ahead[0]:g} GPUs on average" if ahead else ""
        for name in picked:
            moves.append(
                Move(
                    name,
                    change.source,
                    change.target,
                    f"advise {text} (replayed score {score:+.3f}){note}",
                )
            )
            parts[change.source].remove(name)
            parts[change.target].append(name)
    why = guardrails.budget(p.guard, len(moves), p.today())
    if why:
        return refuse(*refusals, why)
    return Decision(tuple(moves), changes, score, predicted, tuple(refusals))


def rebalance_plan(partitions: Sequence[Any], moves: Sequence[Move]) -> RebalancePlan:
    """`fleet.rebalance`'s plan for the moves, from the live partitions."""
    before = {x.name: tuple(x.nodes) for x in partitions}
    after = {k: list(v) for k, v in before.items()}
    for m in moves:
        after[m.source].remove(m.node)
        after[m.target].append(m.node)
    touched = {m.source for m in moves} | {m.target for m in moves}
    return RebalancePlan(
        tuple(moves),
        {k: before[k] for k in sorted(touched)},
        {k: tuple(sorted(after[k])) for k in sorted(touched)},
    )
