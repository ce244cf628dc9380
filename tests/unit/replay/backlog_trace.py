"""A small backlogged site for the engine's equivalence test (test_backlog_equivalence.py).

Seeded: batches of jobs at random times offered ~1.3x the partitions' GPUs, sizes 1-32 GPUs,
lognormal durations, limits of whole hours, QOS p0/p1/p2 with p0 preempting p2, so that
queues of hundreds of jobs form. `mixed=True` adds MIG, shard and slice-fitting 1-GPU jobs
and cancels while pending on partitions carved and sharded for them.
"""

from __future__ import annotations

import numpy as np

from slurmgpu.model.changes import parse_change
from slurmgpu.replay.cluster import ClusterModel, QosSpec, apply_change, from_capacity
from slurmgpu.replay.jobs import MIG, SHARD, WHOLE, ReplayTrace

QOS = (QosSpec("p0", 1000, ("p2",)), QosSpec("p1", 500), QosSpec("p2", 100, (), 300))
SIZES = (1, 2, 4, 8, 16, 32)
WEIGHTS = (0.5, 0.2, 0.15, 0.1, 0.04, 0.01)


def backlog(jobs: int = 1500, gpus: int = 384, load: float = 1.3, seed: int = 3,
            mixed: bool = False, carve: int = 0) -> tuple[ReplayTrace, ClusterModel]:  # fmt: skip
    """The trace and its cluster model (three partitions of 8-GPU H100 nodes). `carve`:
    that many GPUs of every partition carved 1g.10gb x 7 (as `--baseline carve:...`), and a
    third of the 1-GPU whole jobs measured (0-80 GB, as gen_sacct draws it), so that the
    slice rule moves some of them onto slices while whole jobs queue beside them."""
    rng = np.random.default_rng(seed)
    parts = 3
    span = 2 * 86400.0
    batches = rng.uniform(0, span, jobs // 6 + 1)
    submit = np.sort(np.repeat(batches, rng.geometric(1 / 6, len(batches)))[:jobs]).round()
    jobs = len(submit)
    size = rng.choice(SIZES, jobs, p=WEIGHTS).astype(float)
    mean = load * gpus * span / jobs / float(np.dot(SIZES, WEIGHTS))
    dur = rng.lognormal(np.log(mean) - 0.5, 1.0, jobs).round().clip(60, 3 * 86400)
    limit = np.maximum((np.ceil(dur * rng.uniform(1.2, 3.0, jobs) / 3600) * 3600), dur)
    qos = rng.choice(3, jobs, p=[0.1, 0.3, 0.6]).astype(np.int32)
    part = rng.integers(0, parts, jobs).astype(np.int32)
    kind = np.full(jobs, WHOLE, np.int8)
    mig = np.full(jobs, -1, np.int32)
    need = np.full(jobs, np.nan)
    cancel = None
    names = [f"part{k}" for k in range(parts)]
    types = dict.fromkeys(names, "h100")
    model = from_capacity(dict.fromkeys(names, gpus // parts), gpu_types=types, qos=QOS)
    if mixed:
        model = apply_change(model, parse_change("carve:part0:8:1g.10gb=7"))
        model = apply_change(model, parse_change("shard:part1:8:4"))
        sel = (part == 0) & (rng.random(jobs) < 0.2)
        kind[sel], mig[sel], size[sel] = MIG, 0, rng.integers(1, 4, int(sel.sum()))
        sel = (part == 1) & (rng.random(jobs) < 0.2)
        kind[sel], size[sel] = SHARD, rng.integers(1, 3, int(sel.sum()))
        one = (size == 1) & (kind == WHOLE) & (rng.random(jobs) < 0.5)
        need = np.where(one, rng.uniform(2000, 60000, jobs), np.nan)
        cancel = np.where(rng.random(jobs) < 0.03, submit + rng.uniform(0, 20000, jobs), np.nan)
    if carve:
        for name in names:
            model = apply_change(model, parse_change(f"carve:{name}:{carve}:1g.10gb=7"))
        one = (size == 1) & (kind == WHOLE) & (rng.random(jobs) < 1 / 3)
        need = np.where(one, rng.uniform(0, 80000, jobs), need)
    nan = np.full(jobs, np.nan)
    trace = ReplayTrace(
        epoch_s=0, job_id=np.arange(jobs).astype(str).astype(object), partition=part, qos=qos,
        tier=qos.copy(), submit_s=submit, duration_s=dur, timelimit_s=limit, gpus=size,
        kind=kind, mig_profile=mig, need_gpu=nan, need_mib=need, gpu_equiv=size.copy(),
        recorded_start_s=nan, recorded_end_s=nan, recorded_preemptions=np.zeros(jobs, np.int32),
        partitions=names, qos_names=["p0", "p1", "p2"], tier_names=["p0", "p1", "p2"],
        profiles=["1g.10gb"] if mixed else [], cancel_s=cancel,
    )  # fmt: skip
    return trace, model
