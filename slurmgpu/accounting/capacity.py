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
    # accelerator kind (`gpu:h100`, `gpu:mi300x_cpx`, `npu:910b`, `shard`) -> devices
    devices: dict[str, float] = field(default_factory=dict)
    # partition -> (NPUs, nodes with NPUs, the NPU type if one): the replay's NPU partitions
    partition_npus: dict[str, tuple[float, int, str | None]] = field(default_factory=dict)


def node_devices(gres: str) -> dict[str, float]:
    """A node Gres string -> devices per accelerator kind (`gpu:h100`, `npu:910b`, `shard`)."""
    from slurmgpu.sources.slurm import parse_gres_string

    out: dict[str, float] = {}
    for item in parse_gres_string(gres):
        if item.name in ("gpu", "npu", "shard"):
            key = f"{item.name}:{item.type}" if item.type and item.name != "shard" else item.name
            out[key] = out.get(key, 0.0) + item.count
    return out


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
    nodes, partitions = list(nodes), list(partitions)  # read more than once
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
    _partition_npus(cap, nodes, partitions)
    for rec in nodes:
        if rec.get("NodeName") in members:
            for key, count in node_devices(rec.get("Gres", "")).items():
                cap.devices[key] = cap.devices.get(key, 0.0) + count
    return cap


def _partition_npus(
    cap: Capacity, nodes: Iterable[Mapping[str, str]], partitions: Iterable[Mapping[str, str]]
) -> None:
    """NPUs per partition from the node Gres (`npu:910b:8`)."""
    per_node = {
        r["NodeName"]: {k: v for k, v in node_devices(r.get("Gres", "")).items() if k[:3] == "npu"}
        for r in nodes
        if r.get("NodeName")
    }
    for rec in partitions:
        text, name = rec.get("Nodes", ""), rec.get("PartitionName")
        names = expand_hostlist(text) if name and text and text != "(null)" else []
        held = [per_node[n] for n in names if per_node.get(n)]
        if held:
            types = {k.partition(":")[2] for d in held for k in d} - {""}
            count = sum(sum(d.values()) for d in held)
            cap.partition_npus[name] = (count, len(held), types.pop() if len(types) == 1 else None)


# 65,536 nodes (the hostlist limit) of 8 GPUs: more is a typo, and replay would build it
MAX_CAPACITY_GPUS = 524_288


def parse_capacity_options(values: Iterable[str], *, whole: bool = False) -> dict[str, float]:
    """`["gpu=64", "mig=1.5"]` -> {"gpu": 64.0, "mig": 1.5}: GPUs per partition (fractions
    for MIG slices; whole GPUs only with `whole`, as replay builds nodes of them), more than
    0 and at most MAX_CAPACITY_GPUS, in plain decimal (no nan, inf, exponent); a partition
    once. Anything else is a UsageError naming the form."""
    from slurmgpu.util import numbers

    out: dict[str, float] = {}
    try:
        for name, num in numbers.partition_pairs(values):
            if whole:
                value = float(numbers.whole(num, 1, MAX_CAPACITY_GPUS, f"{name}="))
            else:
                value = numbers.decimal(num, 0, MAX_CAPACITY_GPUS, f"{name}=")
            if value <= 0:
                raise ValueError(f"{name}=: 0 GPUs (leave the partition out)")
            out[name] = value
    except ValueError as exc:
        form = "PARTITION=GPUS (whole GPUs)" if whole else "PARTITION=GPUS"
        raise ParameterError("capacity", "{flag} " + f"{exc}; use {form}, e.g. gpu=64") from None
    return out
