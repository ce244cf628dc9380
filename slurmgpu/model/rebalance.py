"""Typed inputs and outputs of `slurmgpu rebalance`: queue pressure, partitions, node moves."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PendingJob:
    """A pending job that waits for resources (not held, not on a dependency)."""

    job_id: str
    partitions: tuple[str, ...]
    nodes: int
    gpus_per_node: int
    gpu_type: str | None
    pending_s: int


@dataclass(frozen=True)
class NodeState:
    """What rebalancing needs of a node: is it free, how many GPUs of which type."""

    name: str
    partitions: tuple[str, ...]
    idle: bool  # IDLE, nothing allocated, not drained/down
    gpus: int
    gpu_type: str | None
    idle_s: int  # since its last job ended (LastBusyTime)
    usable: bool = True  # not drained, down, failed or not responding: counts for a floor


@dataclass(frozen=True)
class Partition:
    name: str
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class Move:
    """One whole node taken from one partition and given to another, and why."""

    node: str
    source: str
    target: str
    reason: str


@dataclass(frozen=True)
class RebalancePlan:
    """The moves, the partitions' node lists after them, and why nothing else moved."""

    moves: tuple[Move, ...]
    before: dict[str, tuple[str, ...]]
    after: dict[str, tuple[str, ...]]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class UndoResult:
    """What `rebalance apply --undo` did, partition by partition, from the live state."""

    restored: dict[str, str]  # partition -> the node list set again
    unchanged: dict[str, str]  # partition -> its node list, already as before the apply
    conf_written: bool = False  # the include file was rewritten to the lists before the apply
