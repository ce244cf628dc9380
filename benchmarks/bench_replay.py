"""Time `slurmgpu replay`'s engine on a synthetic history: 1M jobs, ~8 months, 8,000 GPUs.

Stages, each in its own interpreter so that its peak RSS is its own:
  engine       the full scheduler: multifactor priority, main pass + backfill, QOS preemption
  no-backfill  the same trace with backfill off (main pass + preemption): the reference that
               shows what backfill costs
Both replay the same seeded trace (built column-wise, as the accounting adapter builds it);
loading sacct text is the accounting loader's cost, measured in bench_accounting.py. The
engine is compiled (or loaded from numba's cache) before the clock starts: `jit_cpu_seconds`.

    python benchmarks/bench_replay.py                      # 1M jobs, 8,000 GPUs
    python benchmarks/bench_replay.py --curve              # growth with jobs and with GPUs
    python benchmarks/bench_replay.py --jobs 100000 --stage engine

Results are printed and written as JSON to benchmarks/out/replay.bench.json.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(ROOT))

DAY = 86400.0
PARTITIONS = 4
GPUS_PER_NODE = 8
SIZES = (1, 2, 4, 8, 16, 32)
SIZE_WEIGHTS = (0.50, 0.20, 0.15, 0.10, 0.04, 0.01)
QOS = (("p0", 1000, 0.10), ("p1", 500, 0.30), ("p2", 100, 0.60))
BATCH = 8
TARGET_LOAD = 0.85  # offered GPU-hours / capacity (sites report 50-85 % allocated)


def make_trace(jobs: int, gpus: int, days: float, seed: int = 20261203):
    """A seeded trace: batches of jobs at random times, job sizes up to 4 nodes, lognormal
    durations with a mean that offers TARGET_LOAD of the capacity, time limits 1.2-3x the
    duration (whole hours, at most 7 days), 10/30/60 % in p0/p1/p2, four equal partitions."""
    import numpy as np

    from slurmgpu.replay.jobs import WHOLE, ReplayTrace

    rng = np.random.default_rng(seed)
    span = days * DAY
    # jobs come in batches (arrays, sweeps) of 1-~50, mean BATCH: queues form at moderate load
    batches = rng.uniform(0, span, jobs // BATCH + 1)
    sizes = rng.geometric(1 / BATCH, len(batches))
    submit = np.sort(np.repeat(batches, sizes)[:jobs]).round()
    if len(submit) < jobs:  # rare: the batches fell short
        submit = np.sort(np.concatenate([submit, rng.uniform(0, span, jobs - len(submit))]))
    size = rng.choice(SIZES, jobs, p=SIZE_WEIGHTS).astype(float)
    mean_size = float(np.dot(SIZES, SIZE_WEIGHTS))
    mean_dur = TARGET_LOAD * gpus * span / jobs / mean_size
    sigma = 1.0
    dur = rng.lognormal(np.log(mean_dur) - sigma**2 / 2, sigma, jobs).round().clip(60, 6 * DAY)
    limit = (np.ceil(dur * rng.uniform(1.2, 3.0, jobs) / 3600) * 3600).clip(3600, 7 * DAY)
    qos = rng.choice(len(QOS), jobs, p=[q[2] for q in QOS]).astype(np.int32)
    nan = np.full(jobs, np.nan)
    return ReplayTrace(
        epoch_s=0,
        job_id=np.arange(jobs).astype(str).astype(object),
        partition=rng.integers(0, PARTITIONS, jobs).astype(np.int32),
        qos=qos,
        tier=qos.copy(),
        submit_s=submit,
        duration_s=dur,
        timelimit_s=np.maximum(limit, dur),
        gpus=size,
        kind=np.full(jobs, WHOLE, np.int8),
        mig_profile=np.full(jobs, -1, np.int32),
        need_gpu=nan,
        need_mib=nan,
        gpu_equiv=size.copy(),
        recorded_start_s=nan,
        recorded_end_s=nan,
        recorded_preemptions=np.zeros(jobs, np.int32),
        partitions=[f"part{k}" for k in range(PARTITIONS)],
        qos_names=[q[0] for q in QOS],
        tier_names=[q[0] for q in QOS],
        profiles=[],
    )


def run_stage(stage: str, jobs: int, gpus: int, days: float) -> dict:
    """One replay in this process; its time, peak RSS and what it produced."""
    import numpy as np

    from slurmgpu.replay.cluster import QosSpec, from_capacity
    from slurmgpu.replay.engine import SchedConfig, replay, warm_up

    trace = make_trace(jobs, gpus, days)
    per = gpus // PARTITIONS
    model = from_capacity(
        {p: per for p in trace.partitions},
        gpus_per_node=dict.fromkeys(trace.partitions, GPUS_PER_NODE),
        qos=(QosSpec("p0", 1000, ("p2",)), QosSpec("p1", 500), QosSpec("p2", 100, (), 300)),
    )
    config = SchedConfig(backfill=stage != "no-backfill")
    jit = warm_up()  # the compiled engine (or numba's cache of it), outside the clock
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0, c0 = time.perf_counter(), time.process_time()
    out = replay(trace, model, config)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    waits = out.start_s - trace.submit_s
    busy = float(np.dot(np.array(out.runs.equiv), np.subtract(out.runs.end, out.runs.start)))
    return {
        "stage": stage,
        "jobs": jobs,
        "gpus": gpus,
        "days": days,
        "seconds": round(seconds, 2),
        "cpu_seconds": round(cpu, 2),  # the machine is shared: CPU time is the steadier number
        "jit_cpu_seconds": round(jit, 2),  # compiling the engine, or loading it from the cache
        "jobs_per_second": round(jobs / seconds),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "rss_before_replay_mib": round(rss_before),
        "allocation_ratio": round(busy / (gpus * days * DAY), 3),
        "wait_p50_s": float(np.nanpercentile(waits[np.isfinite(waits)], 50)),
        "wait_p95_s": float(np.nanpercentile(waits[np.isfinite(waits)], 95)),
        "preemptions": out.preemptions,
        "runs": len(out.runs.job),
    }


def in_subprocess(stage: str, jobs: int, gpus: int, days: float) -> dict:
    argv = [sys.executable, __file__, "--stage", stage, "--jobs", str(jobs), "--gpus",
            str(gpus), "--days", str(days), "--json"]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=3600)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--gpus", type=int, default=8000)
    ap.add_argument("--days", type=float, default=240.0)
    ap.add_argument("--stage", choices=["engine", "no-backfill"])
    ap.add_argument("--curve", action="store_true", help="growth with jobs and with GPUs")
    ap.add_argument("--json", action="store_true", help="(internal) one stage, JSON out")
    args = ap.parse_args()
    if args.stage:
        result = run_stage(args.stage, args.jobs, args.gpus, args.days)
        print(json.dumps(result) if args.json else result)
        return
    results = []
    if args.curve:
        # jobs grow with the months at a fixed rate and cluster; then GPUs grow at 250k jobs
        # with the load kept (durations scale with GPUs)
        for frac in (0.125, 0.25, 0.5):
            jobs = int(args.jobs * frac)
            results.append(in_subprocess("engine", jobs, args.gpus, args.days * frac))
            print(results[-1], flush=True)
        for gpus in (2000, 4000, 16000):
            results.append(in_subprocess("engine", args.jobs // 4, gpus, args.days / 4))
            print(results[-1], flush=True)
    else:
        for stage in ("engine", "no-backfill"):
            results.append(in_subprocess(stage, args.jobs, args.gpus, args.days))
            print(results[-1], flush=True)
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    name = "replay-curve.bench.json" if args.curve else "replay.bench.json"
    (out / name).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
