"""Time the replay engine on a BACKLOGGED site, next to a baseline engine from git, same run.

The trace is bench_replay.py's (1M jobs over ~8 months offered for 8,000 GPUs), replayed on
fewer GPUs so that a real queue forms: 7,200 GPUs (offered 0.94 of them: allocation ~90 %)
and 6,400 (offered 1.06: the queue grows through the trace). The first N jobs of the trace
(N/1M of its 240 days) give the smaller sizes. Each stage runs in its own interpreter; the
baseline stage imports `slurmgpu` from `git archive REF` (default: where this branch left
main) unpacked under
benchmarks/out/, the trace is built by this checkout's `make_trace` in both. Per stage: CPU
and wall seconds of the replay alone, jobs/s, allocation, mean wait, the queue depth seen
by jobs at their submit (mean, p95, max), and a digest of every job's start: equal digests
mean equal schedules.

    python benchmarks/bench_replay_backlog.py                       # the default plan, ~8 min
    python benchmarks/bench_replay_backlog.py --plan new:1000000:7200  # > 13 min (README)
    python benchmarks/bench_replay_backlog.py --plan baseline:20000:6400,new:20000:6400

Results are printed and written as JSON to benchmarks/out/replay-backlog.bench.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TRACE_JOBS = 1_000_000  # the full trace; smaller sizes are its first jobs
TRACE_DAYS = 240.0
OFFERED_FOR = 8000
PLAN = (
    "baseline:20000:7200,new:20000:7200,baseline:20000:6400,new:20000:6400,"
    "new:100000:7200,new:100000:6400,baseline:100000:8000,new:100000:8000"
)


def run_stage(jobs: int, gpus: int) -> dict:
    """One replay in this process (whichever `slurmgpu` is first on sys.path: imported
    before bench_replay, which puts this checkout on the path)."""
    import numpy as np
    from bench_replay import GPUS_PER_NODE, PARTITIONS, make_trace

    import slurmgpu
    from slurmgpu.replay.cluster import QosSpec, from_capacity
    from slurmgpu.replay.engine import SchedConfig, replay

    trace = make_trace(jobs, OFFERED_FOR, TRACE_DAYS * jobs / TRACE_JOBS)
    per = gpus // PARTITIONS
    model = from_capacity(
        {p: per for p in trace.partitions},
        gpus_per_node=dict.fromkeys(trace.partitions, GPUS_PER_NODE),
        qos=(QosSpec("p0", 1000, ("p2",)), QosSpec("p1", 500), QosSpec("p2", 100, (), 300)),
    )
    t0, c0 = time.perf_counter(), time.process_time()
    out = replay(trace, model, SchedConfig())
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    start = out.start_s
    waits = (start - trace.submit_s)[np.isfinite(start)]
    # the queue each job found at its submit: submitted before it and not started yet
    sub = trace.submit_s
    depth = np.arange(len(sub)) - np.searchsorted(np.sort(start[np.isfinite(start)]), sub)
    lo, hi = float(sub.min()), float(sub.max())  # allocation over the submit window
    held = np.clip(out.runs.end, lo, hi) - np.clip(out.runs.start, lo, hi)
    busy, span = float(np.dot(np.array(out.runs.equiv), held)), (hi - lo) or 1.0
    return {
        "jobs": jobs,
        "gpus": gpus,
        "offered_load": round(OFFERED_FOR * 0.85 / gpus, 3),
        "seconds": round(seconds, 2),
        "cpu_seconds": round(cpu, 2),
        "jobs_per_second": round(jobs / seconds),
        "allocation_ratio": round(busy / (gpus * span), 3),
        "wait_mean_s": round(float(waits.mean()), 1),
        "queue_mean": round(float(depth.mean()), 1),
        "queue_p95": int(np.percentile(depth, 95)),
        "queue_max": int(depth.max()),
        "engine_from": str(Path(slurmgpu.__file__).parent.parent),
        "starts_digest": hashlib.sha256(np.asarray(start, dtype=float).tobytes()).hexdigest()[:16],
    }


def baseline_root(ref: str) -> Path:
    """`git archive REF slurmgpu` unpacked under benchmarks/out/ (once per commit)."""
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", ref], check=True,
                         capture_output=True, text=True).stdout.strip()  # fmt: skip
    dest = HERE / "out" / f"baseline-{sha}"
    if not (dest / "slurmgpu").is_dir():
        dest.mkdir(parents=True, exist_ok=True)
        tar = dest / "src.tar"
        subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(tar), ref, "slurmgpu"],
                       check=True)  # fmt: skip
        with tarfile.open(tar) as f:
            f.extractall(dest, filter="data")
        tar.unlink()
    return dest


def in_subprocess(engine: str, jobs: int, gpus: int, ref: str) -> dict:
    src = baseline_root(ref) if engine == "baseline" else ROOT
    env = dict(os.environ, PYTHONPATH=f"{src}{os.pathsep}{HERE}")
    argv = [sys.executable, __file__, "--stage", f"{jobs}:{gpus}"]
    proc = subprocess.run(argv, capture_output=True, text=True, check=True, env=env,
                          cwd=str(src), timeout=3600)  # fmt: skip
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["engine_from"] == str(src), result["engine_from"]  # the engine it meant
    return {"engine": engine if engine == "new" else f"baseline ({ref})", **result}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plan", default=PLAN, help="ENGINE:JOBS:GPUS,... (ENGINE new|baseline)")
    ap.add_argument("--baseline-ref", help="baseline's git ref (default: where HEAD left main)")
    ap.add_argument("--stage", help="(internal) JOBS:GPUS, one replay, JSON out")
    args = ap.parse_args()
    if args.stage:
        jobs, gpus = map(int, args.stage.split(":"))
        print(json.dumps(run_stage(jobs, gpus)))
        return
    ref = args.baseline_ref or subprocess.run(
        ["git", "-C", str(ROOT), "merge-base", "HEAD", "main"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()[:12]  # fmt: skip
    results = []
    for item in args.plan.split(","):
        engine, jobs, gpus = item.split(":")
        results.append(in_subprocess(engine, int(jobs), int(gpus), ref))
        print(json.dumps(results[-1]), flush=True)
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "replay-backlog.bench.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
