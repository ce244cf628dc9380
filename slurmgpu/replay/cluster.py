"""The replay's cluster model: partitions -> nodes -> GPUs, each whole, MIG-carved or sharded.

A partition holds nodes of whole GPUs (a node is its GPU count), plus pools of GPUs carved into
MIG instances by a per-GPU layout, or shared as N shards each. The model is what the scheduler
places jobs on; `apply_change` returns a new model for a what-if. QOS settings (priority,
preemption, grace time) live beside it in `QosSpec`, since `tier:` changes alter them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from slurmgpu.errors import UsageError
from slurmgpu.model.catalog import MigProfile, model_for_type
from slurmgpu.model.changes import (
    Carve,
    Change,
    IdleReclaim,
    Move,
    Shard,
    TierChange,
    Together,
)

DEFAULT_GPUS_PER_NODE = 8
MIG_MEMORY_SLICES = 8  # A100/H100/H200: profiles are placed on an 8-memory-slice grid


@dataclass(frozen=True)
class SlicePool:
    """`gpus` GPUs, each carved into `layout` ((profile, count) per GPU)."""

    gpus: int
    layout: tuple[tuple[str, int], ...]
    memory_mib: tuple[tuple[str, int], ...] = ()  # profile -> instance memory (MiB)

    def instances(self) -> dict[str, int]:
        return {p: n * self.gpus for p, n in self.layout}


@dataclass(frozen=True)
class ShardPool:
    """`gpus` GPUs, each shared as `per_gpu` shards."""

    gpus: int
    per_gpu: int


@dataclass(frozen=True)
class PartitionModel:
    """One partition: whole-GPU nodes (GPU count per node) and the carved/sharded pools."""

    name: str
    nodes: tuple[int, ...]
    gpu_type: str | None = None
    gpu_memory_mib: float | None = None
    slices: tuple[SlicePool, ...] = ()
    shards: tuple[ShardPool, ...] = ()

    @property
    def whole_gpus(self) -> int:
        return sum(self.nodes)

    @property
    def total_gpus(self) -> int:
        """Physical GPUs: whole ones plus every carved or sharded GPU."""
        return self.whole_gpus + sum(p.gpus for p in self.slices) + sum(p.gpus for p in self.shards)


@dataclass(frozen=True)
class QosSpec:
    """A QOS as Slurm holds it: Priority, Preempt (QOS it may preempt), and the PreemptMode
    and GraceTime that apply when a job OF this QOS is preempted."""

    name: str
    priority: int = 0
    preempts: tuple[str, ...] = ()
    grace_s: int = 0
    mode: str = "requeue"


@dataclass(frozen=True)
class ClusterModel:
    """The partitions and QOS a replay schedules on."""

    partitions: tuple[PartitionModel, ...]
    qos: tuple[QosSpec, ...] = ()

    def partition(self, name: str) -> PartitionModel:
        for p in self.partitions:
            if p.name == name:
                return p
        known = ", ".join(p.name for p in self.partitions) or "none"
        raise UsageError(f"partition {name!r} is not in the cluster model (known: {known})")

    @property
    def total_gpus(self) -> int:
        return sum(p.total_gpus for p in self.partitions)

    def qos_spec(self, name: str) -> QosSpec:
        return next((q for q in self.qos if q.name == name), QosSpec(name))

    def with_partition(self, part: PartitionModel) -> ClusterModel:
        others = tuple(p for p in self.partitions if p.name != part.name)
        return replace(self, partitions=tuple(sorted((*others, part), key=lambda p: p.name)))


def from_capacity(
    capacity: Mapping[str, float],
    *,
    gpus_per_node: Mapping[str, int] | None = None,
    gpu_types: Mapping[str, str] | None = None,
    gpu_memory_mib: Mapping[str, float] | None = None,
    qos: Iterable[QosSpec] = (),
) -> ClusterModel:
    """{partition: whole GPUs} -> a model of nodes of `gpus_per_node` (8 unless told)."""
    parts = []
    for name, gpus in sorted(capacity.items()):
        per_node = int((gpus_per_node or {}).get(name, DEFAULT_GPUS_PER_NODE))
        total = round(gpus)
        if total <= 0 or per_node <= 0:
            raise UsageError(f"--capacity {name}={gpus:g}: needs a positive number of GPUs")
        full, rest = divmod(total, per_node)
        nodes = (per_node,) * full + ((rest,) if rest else ())
        gtype = (gpu_types or {}).get(name)
        mem = _memory_for(name, gtype, gpu_memory_mib or {})
        parts.append(PartitionModel(name, nodes, gtype, mem))
    return ClusterModel(tuple(parts), tuple(qos))


def qos_from_policy(policy) -> tuple[QosSpec, ...]:
    """Tiers of a site policy (`slurmgpu.model.policy.Policy`) as QOS specs.

    The policy writes grace time and mode on the preempting tier ("P0 preempts P2 with 120 s
    grace"); Slurm applies them from the QOS of the preempted job, so, as `qos plan` renders
    them, a preempted QOS gets the longest grace of the tiers preempting it.
    """
    by_tier = {t.name: t.qos for t in policy.tiers}
    out = []
    for t in policy.tiers:
        by = [p for p in policy.tiers if t.name in p.preempts]
        mode = next((p.preempt_mode for p in by), "requeue")
        out.append(
            QosSpec(
                t.qos,
                int(t.priority),
                tuple(by_tier.get(n, n) for n in t.preempts),
                max((int(p.grace_time_s) for p in by), default=0),
                mode if mode in ("requeue", "cancel") else "requeue",
            )
        )
    return tuple(out)


def _memory_for(partition: str, gtype: str | None, given: Mapping[str, float]) -> float | None:
    """A partition's GPU memory: given for the partition, else for its GPU type (any name the
    catalogue knows it by, as analyze's --gpu-memory TYPE=SIZE), else the catalogue's."""
    if partition in given:
        return float(given[partition])
    if not gtype:
        return None
    model = model_for_type(gtype)
    names = {gtype, gtype.lower()}
    if model is not None:
        names |= {model.key, model.short_type, model.autodetect_type}
    for name, mib in given.items():
        if name in names or name.lower() in names:
            return float(mib)
    return float(model.memory_mib) if model is not None else None


# ------------------------------------------------------------------------------- changes


def apply_change(model: ClusterModel, change: Change) -> ClusterModel:
    """The model after one what-if change; UsageError when the change does not fit it."""
    if isinstance(change, Move):
        return _move(model, change)
    if isinstance(change, Carve):
        return _carve(model, change)
    if isinstance(change, Shard):
        part, _ = _take_gpus(model, change.partition, change.gpus, change.format())
        return model.with_partition(
            replace(part, shards=(*part.shards, ShardPool(change.gpus, change.per_gpu)))
        )
    if isinstance(change, TierChange):
        return _tier(model, change)
    if isinstance(change, IdleReclaim):
        return model  # it changes the jobs (replay/idle_reclaim.py), not the cluster
    if isinstance(change, Together):
        for one in change.changes:
            model = apply_change(model, one)
        return model
    raise TypeError(change)


def _move(model: ClusterModel, change: Move) -> ClusterModel:
    src = model.partition(change.source)
    try:
        dst = model.partition(change.target)
    except UsageError:  # a new partition of the same GPUs
        dst = PartitionModel(change.target, (), src.gpu_type, src.gpu_memory_mib)
    moved: list[int] = []
    left = list(src.nodes)
    # whole nodes, largest first (a node belongs to one partition in this model)
    for gpus in sorted(left, reverse=True):
        if sum(moved) >= change.gpus:
            break
        moved.append(gpus)
        left.remove(gpus)
    if sum(moved) != change.gpus:
        raise UsageError(
            f"change {change.format()!r}: {change.source} has {src.whole_gpus} whole GPUs in "
            f"nodes of {sorted(set(src.nodes))}; GPUS must be a sum of whole nodes"
        )
    model = model.with_partition(replace(src, nodes=tuple(left)))
    return model.with_partition(replace(dst, nodes=(*dst.nodes, *moved)))


def _take_gpus(
    model: ClusterModel, name: str, gpus: int, text: str
) -> tuple[PartitionModel, ClusterModel]:
    """Remove `gpus` whole GPUs from partition `name`'s nodes (last nodes first)."""
    part = model.partition(name)
    if gpus > part.whole_gpus:
        raise UsageError(f"change {text!r}: {name} has only {part.whole_gpus} whole GPUs")
    nodes = list(part.nodes)
    need = gpus
    while need:
        take = min(need, nodes[-1])
        nodes[-1] -= take
        need -= take
        if nodes[-1] == 0:
            nodes.pop()
    part = replace(part, nodes=tuple(nodes))
    return part, model.with_partition(part)


def _carve(model: ClusterModel, change: Carve) -> ClusterModel:
    text = change.format()
    part = model.partition(change.partition)
    gpu_model = model_for_type(part.gpu_type or "")
    if gpu_model is None or not gpu_model.supports_mig:
        raise UsageError(
            f"change {text!r}: partition {part.name} has GPU type {part.gpu_type or 'unknown'}"
            ", which offers no MIG profiles (give --gpu-type PARTITION=TYPE)"
        )
    profiles = []
    for name, count in change.layout:
        profile = gpu_model.profile(name)
        if profile is None:
            offered = ", ".join(p.name for p in gpu_model.mig_profiles)
            raise UsageError(f"change {text!r}: {gpu_model.key} has no {name} (offers {offered})")
        profiles += [profile] * count
    if mig_placement(profiles) is None:
        raise UsageError(f"change {text!r}: that layout has no valid MIG placement on one GPU")
    part, model = _take_gpus(model, change.partition, change.gpus, text)
    memory = tuple((p, gpu_model.profile(p).memory_mib) for p, _ in change.layout)  # type: ignore[union-attr]
    pool = SlicePool(change.gpus, change.layout, memory)
    return model.with_partition(replace(part, slices=(*part.slices, pool)))


def mig_placement(profiles: list[MigProfile]) -> list[int] | None:
    """Start slices for `profiles` on one GPU with none overlapping, or None when impossible.

    Each profile may start only at its catalogue placements and covers `placement_size`
    memory slices of 8 (NVIDIA's MIG User Guide placement table). Larger profiles go first;
    a small backtracking search (at most 7 instances) finds a packing if one exists.
    """
    order = sorted(range(len(profiles)), key=lambda i: -profiles[i].placement_size)
    used = [False] * MIG_MEMORY_SLICES
    starts = [0] * len(profiles)

    def place(k: int) -> bool:
        if k == len(order):
            return True
        prof = profiles[order[k]]
        for start in prof.placements:
            span = range(start, start + prof.placement_size)
            if span.stop <= MIG_MEMORY_SLICES and not any(used[s] for s in span):
                for s in span:
                    used[s] = True
                starts[order[k]] = start
                if place(k + 1):
                    return True
                for s in span:
                    used[s] = False
        return False

    compute = sum(p.gpu_slices for p in profiles)
    # the GPU's compute slices: 7 on A100/H100/H200, 4 on A30 (placements bound the memory)
    limit = profiles[0].compute_slices_of_gpu if profiles else 7
    return starts if compute <= limit and place(0) else None


def _tier(model: ClusterModel, change: TierChange) -> ClusterModel:
    old = model.qos_spec(change.qos)
    new = QosSpec(
        change.qos,
        old.priority if change.priority is None else change.priority,
        old.preempts if change.preempts is None else change.preempts,
        old.grace_s if change.grace_s is None else change.grace_s,
        old.mode if change.mode is None else change.mode,
    )
    others = tuple(q for q in model.qos if q.name != change.qos)
    return replace(model, qos=(*others, new))
