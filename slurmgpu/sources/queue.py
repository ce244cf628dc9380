"""Queue pressure and partitions from the live controller (squeue, scontrol), for rebalance."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

from slurmgpu.model.rebalance import NodeState, Partition, PendingJob
from slurmgpu.sources.slurm import parse_gres_string, scontrol_show
from slurmgpu.util.hostlist import expand_hostlist
from slurmgpu.util.proc import run

# pending reasons that more nodes would cure; held jobs, dependencies, limits would not
WAITING_FOR_NODES = frozenset(
    {
        "Resources",
        "Priority",
        "Nodes_required_for_job_are_DOWN,_DRAINED_or_reserved_for_jobs_in_higher_priority_partitions",
    }
)
_FORMAT = "%i|%P|%D|%b|%r|%V"


# node state flags (`scontrol show node` State=A+B) of a node no job can start on
UNUSABLE = frozenset({"DRAIN", "DOWN", "FAIL", "NOT_RESPONDING", "FUTURE", "INVALID_REG"})


def _age_s(stamp: str, now: dt.datetime) -> int:
    try:
        return max(0, int((now - dt.datetime.fromisoformat(stamp)).total_seconds()))
    except ValueError:
        return 0


def _gpus(gres: str) -> tuple[int, str | None]:
    try:
        items = [i for i in parse_gres_string(gres) if i.name == "gpu"]
    except ValueError:
        return 0, None
    if not items:
        return 0, None
    return sum(i.count for i in items), items[0].type


def pending_jobs(env: Mapping[str, str] | None = None, now: dt.datetime | None = None):
    """Pending jobs that wait for nodes, with their GPU demand per node."""
    now = now or dt.datetime.now()
    out = run(["squeue", "-h", "-t", "PENDING", "-o", _FORMAT], env=env, timeout=30).stdout
    jobs = []
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) != 6 or parts[4] not in WAITING_FOR_NODES:
            continue
        gpus, gtype = _gpus(parts[3])
        jobs.append(
            PendingJob(
                job_id=parts[0],
                partitions=tuple(parts[1].split(",")),
                nodes=int(parts[2]) if parts[2].isdigit() else 1,
                gpus_per_node=gpus,
                gpu_type=gtype,
                pending_s=_age_s(parts[5], now),
            )
        )
    return jobs


def partitions(env: Mapping[str, str] | None = None) -> list[Partition]:
    return [
        Partition(r["PartitionName"], tuple(expand_hostlist(r.get("Nodes", "") or "")))
        for r in scontrol_show("partition", env=env)
        if r.get("Nodes", "(null)") != "(null)"
    ]


def nodes(env: Mapping[str, str] | None = None, now: dt.datetime | None = None):
    """Every node's rebalance view."""
    now = now or dt.datetime.now()
    out = []
    for r in scontrol_show("node", env=env):
        flags = set(r.get("State", "").split("+"))
        gpus, gtype = _gpus(r.get("Gres", ""))
        out.append(
            NodeState(
                name=r["NodeName"],
                partitions=tuple(p for p in r.get("Partitions", "").split(",") if p),
                idle="IDLE" in flags and not flags & UNUSABLE,
                gpus=gpus,
                gpu_type=gtype,
                idle_s=_age_s(r.get("LastBusyTime", ""), now),
                usable=not flags & UNUSABLE,
            )
        )
    return out
