"""The replay's cluster model from inventory snapshots: what each node really holds.

`--capacity` says how many whole GPUs a partition has; a snapshot (`slurmgpu inventory`) says
what one node holds GPU by GPU: its model and memory, and for a MIG GPU the instances it is
carved into today. `--inventory PARTITION=SNAPSHOT` (repeatable, one file per node; a
directory stands for every `*.json` in it) builds the partition from those nodes: the GPUs not
in MIG mode make the node's whole-GPU count, and the MIG GPUs become slice pools grouped by
their layout, so the baseline replays today's carving rather than an assumption.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from slurmgpu.errors import UsageError
from slurmgpu.model.catalog import resolve
from slurmgpu.replay.cluster import PartitionModel, SlicePool


@dataclass(frozen=True)
class NodeFacts:
    """One node's GPUs as the replay needs them."""

    partition: str
    host: str
    whole_gpus: int
    gpu_type: str | None  # the catalogue's short type (`a100`), or NVML's name when unknown
    gpu_memory_mib: float | None
    layouts: tuple[tuple[tuple[str, int], ...], ...]  # one per MIG GPU: (profile, count)
    profile_memory_mib: tuple[tuple[str, int], ...]


def snapshot_files(spec: str | os.PathLike[str]) -> list[Path]:
    """A snapshot file, or every `*.json` in a directory (sorted); an error when none."""
    path = Path(spec)
    if path.is_dir():
        files = sorted(p for p in path.glob("*.json") if p.is_file())
        if not files:
            raise UsageError(f"--inventory {spec}: the directory holds no *.json snapshot")
        return files
    return [path]


def node_facts(partition: str, path: str | os.PathLike[str]) -> NodeFacts:
    """Read one snapshot (validated by the snapshot loader) into the replay's node facts."""
    from slurmgpu.sources import snapshot

    inv = snapshot.load(path)
    if not inv.gpus:
        raise UsageError(f"--inventory {partition}={path}: the snapshot lists no GPU")
    names = {g.name for g in inv.gpus}
    if len(names) > 1:
        raise UsageError(
            f"--inventory {partition}={path}: GPUs of several models ({', '.join(sorted(names))}); "
            "the replay models one GPU type per partition"
        )
    model = resolve(inv.gpus[0].name)
    gtype = model.short_type if model else inv.gpus[0].name
    whole = [g for g in inv.gpus if not g.mig_mode_current]
    layouts = []
    memory: dict[str, int] = {}
    for gpu in inv.gpus:
        if not gpu.mig_mode_current:
            continue
        counts = Counter(m.profile for m in gpu.mig_devices)
        for m in gpu.mig_devices:
            memory[m.profile] = m.memory_mib
        if counts:  # a MIG GPU with no instance offers nothing to jobs
            layouts.append(tuple(sorted(counts.items())))
    return NodeFacts(
        partition=partition,
        host=inv.host.hostname,
        whole_gpus=len(whole),
        gpu_type=gtype,
        gpu_memory_mib=float(inv.gpus[0].memory_mib),
        layouts=tuple(layouts),
        profile_memory_mib=tuple(sorted(memory.items())),
    )


def partitions_from_inventory(specs: Iterable[tuple[str, str]]) -> tuple[PartitionModel, ...]:
    """`(partition, snapshot file or directory)` pairs -> one `PartitionModel` per partition."""
    by_part: dict[str, list[NodeFacts]] = {}
    for part, spec in specs:
        for path in snapshot_files(spec):
            by_part.setdefault(part, []).append(node_facts(part, path))
    return tuple(_partition(name, nodes) for name, nodes in sorted(by_part.items()))


def _partition(name: str, nodes: Sequence[NodeFacts]) -> PartitionModel:
    types = {n.gpu_type for n in nodes}
    if len(types) > 1:
        kinds = ", ".join(sorted(map(str, types)))
        raise UsageError(
            f"--inventory {name}: nodes with different GPU types ({kinds}); "
            "the replay models one GPU type per partition"
        )
    hosts = Counter(n.host for n in nodes)
    twice = sorted(h for h, c in hosts.items() if c > 1)
    if twice:
        raise UsageError(f"--inventory {name}: node {twice[0]} is given twice")
    pools: Counter[tuple[tuple[str, int], ...]] = Counter()
    memory: dict[str, int] = {}
    for node in nodes:
        pools.update(node.layouts)
        memory.update(node.profile_memory_mib)
    slices = tuple(
        SlicePool(count, layout, tuple((p, memory[p]) for p, _ in layout))
        for layout, count in sorted(pools.items())
    )
    return PartitionModel(
        name=name,
        nodes=tuple(n.whole_gpus for n in nodes if n.whole_gpus),
        gpu_type=nodes[0].gpu_type,
        gpu_memory_mib=min(n.gpu_memory_mib or 0.0 for n in nodes) or None,
        slices=slices,
    )
