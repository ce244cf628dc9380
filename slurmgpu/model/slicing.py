"""Which GPU slice fits a memory ask, from the GRES a cluster's nodes offer (pure)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from slurmgpu.model.catalog import model_for_type
from slurmgpu.model.policy import (
    SLICE_GPU,
    SLICE_MIG,
    SLICE_SHARD,
    Slice,
    mig_profile_for_type,
    slice_memory_mib,
)

# When two slices have the same memory, prefer isolation: MIG, then whole GPUs, then shards.
_PREFERENCE = {SLICE_MIG: 0, SLICE_GPU: 1, SLICE_SHARD: 2}


@dataclass(frozen=True)
class NodeGres:
    """One node's GRES as `sinfo -N -o %G` prints it, parsed: [(name, type, count)]."""

    node: str
    items: tuple[tuple[str, str | None, int], ...]


@dataclass(frozen=True)
class Candidate:
    """A slice a job could ask for, and the GPU memory it gets."""

    slice: Slice
    memory_mib: float


def candidates(
    nodes: Iterable[NodeGres], memory_mib: float, shards_per_gpu: int | None = None
) -> list[Candidate]:
    """Every slice on these nodes with at least `memory_mib` of GPU memory (smallest first)."""
    found: dict[str, Candidate] = {}
    for node in nodes:
        whole: list[tuple[str, int]] = []
        shards = 0
        for name, gtype, count in node.items:
            if name == "shard":
                shards += count
            elif name == "gpu" and gtype:
                mig = mig_profile_for_type(gtype)
                if mig is not None:
                    model, profile = mig
                    if profile.memory_mib >= memory_mib:
                        s = Slice(SLICE_MIG, 1, profile.name, gtype, model.key)
                        found.setdefault(s.gres, Candidate(s, float(profile.memory_mib)))
                    continue
                model = model_for_type(gtype)
                if model is None:
                    continue
                whole.append((gtype, count))
                need = max(1, math.ceil(memory_mib / model.memory_mib))
                if need <= count:
                    s = Slice(SLICE_GPU, need, None, gtype, model.key)
                    found.setdefault(s.gres, Candidate(s, float(need * model.memory_mib)))
        gpu_count = sum(c for _, c in whole)
        if shards and gpu_count:
            per_gpu = shards_per_gpu or shards // gpu_count
            models = {model_for_type(t) for t, _ in whole}
            if per_gpu and len(models) == 1:
                model = models.pop()
                assert model is not None
                per_shard = model.memory_mib / per_gpu
                need = max(1, math.ceil(memory_mib / per_shard))
                if need <= per_gpu:
                    s = Slice(SLICE_SHARD, need, None, None, model.key)
                    found.setdefault(s.gres, Candidate(s, need * per_shard))
    return sorted(
        found.values(), key=lambda c: (c.memory_mib, _PREFERENCE[c.slice.kind], c.slice.gres)
    )


def policy_candidates(
    slices: Sequence[Slice], memory_mib: float, shards_per_gpu: int | None
) -> list[Candidate]:
    """The policy's own slices that hold `memory_mib` (when the cluster cannot be asked)."""
    out = []
    for s in slices:
        mem = slice_memory_mib(s, shards_per_gpu)
        if mem is not None and mem >= memory_mib:
            out.append(Candidate(s, mem))
    return sorted(out, key=lambda c: (c.memory_mib, _PREFERENCE[c.slice.kind], c.slice.gres))


def largest(nodes: Sequence[NodeGres], shards_per_gpu: int | None = None) -> Candidate | None:
    """The biggest single slice on offer (for the 'nothing fits' message)."""
    best = None
    for c in candidates(nodes, 0, shards_per_gpu):
        if c.slice.kind == SLICE_GPU:
            count = max(
                (
                    n
                    for node in nodes
                    for name, t, n in node.items
                    if name == "gpu" and t == c.slice.gres_type
                ),
                default=1,
            )
            c = Candidate(
                Slice(SLICE_GPU, count, None, c.slice.gres_type, c.slice.gpu_model),
                c.memory_mib * count,
            )
        if best is None or c.memory_mib > best.memory_mib:
            best = c
    return best
