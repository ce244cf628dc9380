"""The changes `advise` tries, in the replay's change grammar (`model.changes`).

- **moves**: every number of whole nodes (1 to all but one) from every partition to every
  other partition whose baseline jobs wait (mean wait over `TAKER_MIN_MEAN_WAIT_S`), as long
  as the donor keeps the GPUs its baseline kept busy on average;
- **carves**: per partition of a MIG-capable GPU type with measured 1-GPU jobs, the layouts
  `mig plan` would choose (`mig.plan.fewest_layouts`) for the p95 concurrency of the jobs
  each slice size would hold (`mig.demand.slice_need`, `p95_concurrency`: the same measure
  `mig plan --sacct-file` takes), on the recorded runs;
- **shards**: per partition with measured small 1-GPU jobs and a known GPU size, as many
  shards per GPU as hold their p95 memory (2 to 8), on enough GPUs for their p95 concurrency;
- **grace**: each QOS another QOS preempts, with no grace time, gets `grace_s=300`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from slurmgpu.model.changes import Carve, Move, Shard, TierChange, Together
from slurmgpu.replay.cluster import ClusterModel
from slurmgpu.replay.jobs import WHOLE, ReplayTrace
from slurmgpu.replay.results import ResultBlock

TAKER_MIN_MEAN_WAIT_S = 60.0  # a partition whose jobs wait less has nothing to gain
GRACE_CANDIDATE_S = 300
MAX_SHARDS = 8


def candidate_changes(trace: ReplayTrace, model: ClusterModel, base: ResultBlock) -> list[str]:
    """Candidate change strings, moves first (each distinct once).

    A move is tried only while the donor keeps at least the GPUs its baseline kept busy on
    average (allocation ratio x GPUs): a smaller donor cannot carry its own jobs, its queue
    would grow without bound (such a move could only be rejected)."""
    out: list[str] = []
    waits = {p.partition: p.wait_s.mean for p in base.by_partition}
    busy = {p.partition: (p.allocation_ratio or 0.0) * p.gpus for p in base.by_partition}
    for donor in model.partitions:
        sizes = sorted(donor.nodes, reverse=True)
        for taker in model.partitions:
            if taker.name == donor.name or (waits.get(taker.name) or 0) <= TAKER_MIN_MEAN_WAIT_S:
                continue
            total = 0
            for k in range(len(sizes) - 1):
                total += sizes[k]
                if donor.total_gpus - total < busy.get(donor.name, 0.0):
                    break
                out.append(Move(donor.name, taker.name, total).format())
    for part in model.partitions:
        out += _carves(trace, part)
        out += _shards(trace, part)
    for q in model.qos:
        preempted = any(q.name in other.preempts for other in model.qos)
        if preempted and q.grace_s == 0 and q.mode != "off":
            out.append(TierChange(q.name, grace_s=GRACE_CANDIDATE_S).format())
    return list(dict.fromkeys(out))


def _small_jobs(trace: ReplayTrace, name: str) -> np.ndarray:
    if name not in trace.partitions:
        return np.zeros(len(trace), bool)
    k = trace.partitions.index(name)
    return (
        (trace.partition == k)
        & (trace.kind == WHOLE)
        & (trace.gpus == 1)
        & np.isfinite(trace.need_mib)
        & np.isfinite(trace.recorded_start_s)
        & np.isfinite(trace.recorded_end_s)
    )


def _carves(trace: ReplayTrace, part: Any) -> list[str]:
    from slurmgpu.mig.demand import p95_concurrency, slice_need
    from slurmgpu.mig.plan import fewest_layouts
    from slurmgpu.model.catalog import model_for_type

    gpu = model_for_type(part.gpu_type or "")
    mine = _small_jobs(trace, part.name)
    if gpu is None or not gpu.mig_profiles or not mine.any() or not part.whole_gpus:
        return []
    spans: dict[str, list[tuple[float, float]]] = {}
    for mib, s, e in zip(trace.need_mib[mine], trace.recorded_start_s[mine],
                         trace.recorded_end_s[mine], strict=True):  # fmt: skip
        prof = slice_need(gpu, float(mib))
        if prof is not None and prof.gpu_slices < gpu.compute_slices:
            spans.setdefault(prof.name, []).append((float(s), float(e)))
    need = {p: n for p, sp in spans.items() if (n := p95_concurrency(sp)) > 0}
    if not need:
        return []
    layouts = fewest_layouts(gpu, need, most=part.whole_gpus - 1)
    if not layouts:
        return []
    counts: dict[tuple[tuple[str, int], ...], int] = {}
    for lay in layouts:
        key = tuple(sorted(lay.counts.items()))
        counts[key] = counts.get(key, 0) + 1
    carves = tuple(Carve(part.name, n, layout) for layout, n in sorted(counts.items()))
    return [carves[0].format() if len(carves) == 1 else Together(carves).format()]


def _shards(trace: ReplayTrace, part: Any) -> list[str]:
    from slurmgpu.mig.demand import p95_concurrency

    mine = _small_jobs(trace, part.name)
    mem = part.gpu_memory_mib
    if not mem or not mine.any() or part.slices or part.shards or part.whole_gpus < 2:
        return []
    need = trace.need_mib[mine]
    small = need * 1.1 <= mem / 2
    if small.sum() < 20:
        return []
    p95_need = float(np.percentile(need[small], 95)) * 1.1
    per_gpu = min(MAX_SHARDS, int(mem // p95_need))
    if per_gpu < 2:
        return []
    spans = list(
        zip(trace.recorded_start_s[mine][small], trace.recorded_end_s[mine][small], strict=True)
    )
    conc = p95_concurrency([(float(s), float(e)) for s, e in spans])
    gpus = min(part.whole_gpus - 1, max(1, math.ceil(conc / per_gpu)))
    return [Shard(part.name, gpus, per_gpu).format()]


def partitions_touched(change: Any, trace: ReplayTrace) -> list[str]:
    """The partitions whose jobs a change can affect (a tier change: every partition its
    QOS's jobs run in)."""
    if isinstance(change, Together):
        out: list[str] = []
        for c in change.changes:
            out += [p for p in partitions_touched(c, trace) if p not in out]
        return out
    if isinstance(change, Move):
        return [change.source, change.target]
    if isinstance(change, Carve | Shard):
        return [change.partition]
    if isinstance(change, TierChange) and change.qos in trace.qos_names:
        q = trace.qos_names.index(change.qos)
        used = np.unique(trace.partition[trace.qos == q])
        return [trace.partitions[int(k)] for k in used]
    return []
