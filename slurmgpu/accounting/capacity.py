"""GPU capacity per partition, from `scontrol show node/partition` records or `P=N` options.

A node's Gres (`gpu:h100:8(S:0-1),shard:32`) gives its GPUs; MIG-typed GPUs
(`gpu:1g.10gb:7`) count as slices/7 of a GPU each; `shard:N` with G physical GPUs gives N/G
shards per GPU (used to turn `gres/shard=K` jobs into GPU shares; per partition, over its
nodes that have shards). A node in two partitions counts in both partition capacities but
once in the cluster total.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from slurmgpu.errors import ParameterError
from slurmgpu.model.catalog import mig_compute_slices
from slurmgpu.util.hostlist import expand_hostlist

_MIG = re.compile(r"(?:^|[_:-])([1-7])g\.\d+gb(?:\+me)?$")


@dataclass
class Capacity:
    """GPUs per partition (physical-GPU equivalents) and what is known about the nodes."""

    partition_gpus: dict[str, float] = field(default_factory=dict)
    total_gpus: float | None = None
    shards_per_gpu: dict[str, float] = field(default_factory=dict)  # partition -> shards/GPU
    gpu_types: dict[str, str] = field(default_factory=dict)  # partition -> GPU type (if one)
    gpus_per_node: dict[str, float] = field(default_factory=dict)  # partition -> mean
    source: str = "none"


def node_gpus(gres: str) -> tuple[float, float, float, str | None]:
    """A node Gres string -> (GPU equivalents, physical GPUs, shards, first GPU type)."""
    from slurmgpu.sources.slurm import parse_gres_string

    equiv = physical = shards = 0.0
    gtype = None
    for item in parse_gres_string(gres):
        if item.name == "gpu":
            m = _MIG.search(item.type or "")
            if m:
                equiv += item.count * int(m.group(1)) / mig_compute_slices(item.type or "")
            else:
                equiv += item.count
                physical += item.count
                gtype = gtype or item.type
        elif item.name == "shard":
            shards += item.count
    return equiv, physical, shards, gtype


def capacity_from_scontrol(
    nodes: Iterable[Mapping[str, str]], partitions: Iterable[Mapping[str, str]]
) -> Capacity:
    """Capacity from `scontrol show -o node` and `scontrol show -o partition` records."""
    per_node: dict[str, tuple[float, float, float, str | None]] = {}
    for rec in nodes:
        name = rec.get("NodeName")
        if name:
            per_node[name] = node_gpus(rec.get("Gres", ""))
    cap = Capacity(source="scontrol")
    members: set[str] = set()
    for rec in partitions:
        pname = rec.get("PartitionName")
        node_text = rec.get("Nodes", "")
        if not pname:
            continue
        names = expand_hostlist(node_text) if node_text and node_text != "(null)" else []
        members.update(names)
        gpus = sum(per_node.get(n, (0, 0, 0, None))[0] for n in names)
        # shards per GPU over the nodes that have shards (a shard job runs on one of those)
        sharded = [per_node[n] for n in names if n in per_node and per_node[n][2]]
        physical = sum(x[1] for x in sharded)
        shards = sum(x[2] for x in sharded)
        cap.partition_gpus[pname] = gpus
        if names:
            cap.gpus_per_node[pname] = gpus / len(names)
        if shards and physical:
            cap.shards_per_gpu[pname] = shards / physical
        types = {per_node[n][3] for n in names if n in per_node and per_node[n][3]}
        if len(types) == 1:
            cap.gpu_types[pname] = types.pop()
    cap.total_gpus = sum(per_node[n][0] for n in members if n in per_node)
    return cap


def parse_capacity_options(values: Iterable[str]) -> dict[str, float]:
    """`["gpu=64", "mig=8"]` -> {"gpu": 64.0, "mig": 8.0}; a bad value is a UsageError."""
    out: dict[str, float] = {}
    for text in values:
        name, sep, num = text.partition("=")
        try:
            value = float(num)
        except ValueError:
            value = -1.0
        if not sep or not name or value < 0:
            raise ParameterError(
                "capacity", "{flag} " + f"{text!r}: use PARTITION=GPUS, e.g. gpu=64"
            )
        out[name] = value
    return out
