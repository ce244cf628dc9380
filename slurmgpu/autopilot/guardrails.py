"""The guardrails of an autopilot pass (`[autopilot]`, `model.policy.AutopilotPolicy`): pure
checks, each returning the reason it refuses (or None), so that a pass records why it did
not act. The pass (`autopilot.run`) gathers the facts; nothing here touches the world."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from slurmgpu.autopilot.records import ChangeRecord
from slurmgpu.model.policy import AutopilotPolicy, Policy


def switch_present(path: str) -> bool:
    """Whether anything is at the kill switch's path: a file, a directory, or a symlink,
    dangling or not (lstat: a link to nowhere still says "stop")."""
    import os

    return os.path.lexists(path)


def kill_switch(guard: AutopilotPolicy, exists: bool) -> str | None:
    if exists:
        return f"kill switch {guard.kill_switch} exists: autopilot does nothing"
    return None


def _aborted(records: Sequence[ChangeRecord]) -> set[str]:
    """The ids of applies that never took effect (refused under the locks, undone at once)."""
    return {r.of for r in records if r.action == "abort"}


def hours(guard: AutopilotPolicy, now: dt.datetime) -> str | None:
    hour = now.astimezone().hour
    if guard.hour_allowed(hour):
        return None
    start, end = guard.allowed_hours
    return f"{hour:02d}:xx is outside the allowed hours [{start}, {end})"


def gain(guard: AutopilotPolicy, plan: Any, objective: Any = None) -> str | None:
    """The replayed gain must beat `min_gain`, and its uncertainty: no limit broken in a
    perturbed replay, and the pessimistic score - each partition's mean-wait change at the
    worst end of its range over the perturbed replays, weighted as the objective's score
    weighs it - must still be a gain (below zero)."""
    from slurmgpu.advice.objective import SCORE_FLOOR_S
    from slurmgpu.model.policy import Objective

    objective = objective or Objective()
    if not plan.changes:
        return "the replay proves no change (advise's plan is empty)"
    got = -plan.score
    if got < guard.min_gain:
        return f"replayed gain {got:.3f} is below the threshold {guard.min_gain:.3f}"
    if plan.perturbed_violations:
        return "a perturbed replay breaks a limit: " + "; ".join(plan.perturbed_violations)
    worst = 0.0
    for e in plan.by_partition:
        if e.before.mean is None and e.after.mean is None:
            continue  # no jobs there: nothing to gain or lose
        high = e.mean_wait_change_s.high
        if high is None or e.before.mean is None:
            return f"the uncertainty of the gain is unknown ({e.partition} has no range)"
        weight = objective.partition(e.partition).mean_wait
        worst += weight * high / (e.before.mean + SCORE_FLOOR_S)
    if worst >= 0:
        return (
            f"within its uncertainty: the pessimistic score over the perturbed replays is "
            f"{worst:+.3f}, not a gain"
        )
    return None


def protected_qos(policy: Policy | None, guard: AutopilotPolicy) -> set[str]:
    """QOS names whose jobs pin their node: the top tier's, those no tier preempts, and
    `protect_tiers`'. A job of a QOS no tier names is protected too (see `protected_jobs`)."""
    if policy is None or not policy.tiers:
        return set()
    preempted = {name for t in policy.tiers for name in t.preempts}
    top = max(policy.tiers, key=lambda t: t.priority)
    out = {top.qos.lower()}
    out |= {t.qos.lower() for t in policy.tiers if t.name not in preempted}
    out |= {t.qos.lower() for t in policy.tiers if t.name in guard.protect_tiers}
    return out


def protected_jobs(
    node: str, jobs: Iterable[Any], policy: Policy | None, guard: AutopilotPolicy
) -> str | None:
    """A node running a P0 or non-preemptible job (or any job, without tiers) is not touched."""
    jobs = list(jobs)
    if not jobs:
        return None
    if policy is None or not policy.tiers:
        return f"{node} runs job {jobs[0].job_id} and the policy names no preemptible tier"
    known = {t.qos.lower() for t in policy.tiers}
    pinned = protected_qos(policy, guard)
    for job in jobs:
        qos = (job.qos or "").lower()
        if qos in pinned or qos not in known:
            return f"{node} runs job {job.job_id} (QOS {job.qos or '?'}): P0 or not preemptible"
    return None


def last_changed(records: Sequence[ChangeRecord]) -> dict[str, dt.datetime]:
    """{node: when autopilot last applied or rolled back a change of it (a move or MIG)}."""
    aborted = _aborted(records)
    by_id = {r.id: r for r in records if r.action == "apply"}
    out: dict[str, dt.datetime] = {}
    for r in records:
        nodes = r.nodes if r.action == "apply" and r.id not in aborted else ()
        if r.action == "rollback" and r.of in by_id:
            nodes = by_id[r.of].nodes
        for node in nodes:
            out[node] = max(out.get(node, r.when), r.when)
    return out


def cooldown(
    guard: AutopilotPolicy, node: str, changed: Mapping[str, dt.datetime], now: dt.datetime
) -> str | None:
    when = changed.get(node)
    if when is None:
        return None
    age_h = (now - when).total_seconds() / 3600
    if age_h < guard.cooldown_h:
        return f"{node} was changed {age_h:.1f} h ago (cooldown {guard.cooldown_h:g} h)"
    return None


def nodes_today(records: Sequence[ChangeRecord], now: dt.datetime) -> int:
    """Nodes autopilot changed (applied: moved or re-laid out) in the 24 hours before `now`."""
    day = now - dt.timedelta(days=1)
    aborted = _aborted(records)
    return sum(
        len(r.nodes)
        for r in records
        if r.action == "apply" and r.when > day and r.id not in aborted
    )


def moved_by_others(log: Any, records: Sequence[ChangeRecord], now: dt.datetime) -> int:
    """Nodes moved in the 24 hours before `now` by other commands (`rebalance apply`), from
    the node-move journal the autopilot shares with them: its applies that no autopilot
    record names."""
    from slurmgpu.fleet.rebalance import entries

    ours = {r.rebalance_time for r in records if r.action == "apply" and r.rebalance_time}
    day = (now - dt.timedelta(days=1)).astimezone().replace(tzinfo=None)
    return sum(
        len(e.moves)
        for e in entries(log)
        if e.action == "apply"
        and e.time not in ours
        and not e.by.startswith("autopilot")
        and dt.datetime.fromisoformat(e.time).replace(tzinfo=None) > day
    )


def budget(guard: AutopilotPolicy, wanted: int, today: int) -> str | None:
    """Refuses a change of `wanted` nodes that breaks the per-pass or the per-day limit."""
    if wanted > guard.max_nodes_per_pass:
        return (
            f"{wanted} node(s) in one pass: more than max_nodes_per_pass {guard.max_nodes_per_pass}"
        )
    if today + wanted > guard.max_nodes_per_day:
        return (
            f"{today} node(s) changed in the last 24 h + {wanted}: more than max_nodes_per_day "
            f"{guard.max_nodes_per_day}"
        )
    return None
