"""Time the replay engine on a BACKLOGGED site, next to a baseline engine from git, same run.

The trace is bench_replay.py's (1M jobs over ~8 months offered for 8,000 GPUs), replayed on
fewer GPUs so that a real queue forms: 7,450 GPUs (offered 0.91: allocation ~0.95, queues of
a thousand or two), 7,200 (offered 0.94: the queue grows to ten thousand) and 6,400 (offered
1.06: it grows through the trace to a hundred thousand). The first N jobs of the trace (N/1M
of its 240 days) give the smaller sizes. Each stage runs in its own interpreter; the
baseline stage imports `slurmgpu` from `git archive REF` (default: where this branch left
main) unpacked under benchmarks/out/, the trace is built by this checkout's `make_trace` in
both. Per stage: CPU and wall seconds of the replay alone (the compiled engine is compiled,
or loaded from numba's cache, before the clock: `jit_cpu_seconds`), jobs/s, allocation, mean
wait, the queue depth seen by jobs at their submit (mean, p95, max), backfill passes, CPU per
job by queue depth (`cpu_by_queue`: the new engine's replay stepped in chunks of loop
turns), and a digest of every job's start: equal digests mean equal schedules. `--jit`
times the compile itself: cold (an empty numba cache) and warm (loaded from it).

    python benchmarks/bench_replay_backlog.py --jit        # the default plan, ~10 min
    python benchmarks/bench_replay_backlog.py --plan new:1000000:7450,new:1000000:7200
    python benchmarks/bench_replay_backlog.py --plan baseline:20000:6400,new:20000:6400
    python benchmarks/bench_replay_backlog.py --carve 1600 --plan new:1000000:6400

`--carve N` carves N of the GPUs (spread evenly over the partitions) 1g.10gb x 7 in the
baseline, as `--baseline carve:PARTITION:GPUS:1g.10gb=7` does (GPU type H100), and gives a
third of the 1-GPU jobs a measured GPU memory (0-80 GB, as gen_sacct.py draws it;
`--measured` sets the share), so that the slice rule moves some of them onto the slices
while the whole-GPU jobs queue on the rest (issue 38 item 3).

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
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TRACE_JOBS = 1_000_000  # the full trace; smaller sizes are its first jobs
TRACE_DAYS = 240.0
OFFERED_FOR = 8000
PLAN = ",".join(
    f"{engine}:{jobs}:{gpus}"
    for jobs in (20000, 100000)
    for gpus in (7200, 6400, 8000)
    for engine in ("baseline", "new")
)
TURNS = 50_000  # loop turns per chunk of the stepped replay (the queue-depth curve)


def carved(trace, model, carve: int, measured: float):
    """The model with `carve` GPUs carved 1g.10gb x 7 (evenly over the partitions) and the
    trace with a measured GPU memory on `measured` of its 1-GPU jobs (seeded)."""
    from slurmgpu.model.changes import parse_change
    from slurmgpu.replay.cluster import apply_change

    each = carve // len(trace.partitions)
    for name in trace.partitions:
        model = apply_change(model, parse_change(f"carve:{name}:{each}:1g.10gb=7"))
    rng = np.random.default_rng(20261207)
    pick = (trace.gpus == 1) & (rng.random(len(trace.gpus)) < measured)
    trace.need_mib = np.where(pick, rng.uniform(0, 80_000, len(trace.gpus)), np.nan)
    return trace, model


def run_stage(jobs: int, gpus: int, carve: int = 0, measured: float = 1 / 3) -> dict:
    """One replay in this process (whichever `slurmgpu` is first on sys.path: imported
    before bench_replay, which puts this checkout on the path). The compiled engine is warmed
    up first (compiled, or loaded from numba's cache) and its replay stepped in chunks of
    loop turns, to see how CPU per job grows with the queue."""
    import numpy as np

    import slurmgpu  # first: bench_replay puts this checkout on sys.path when it has none

    from bench_replay import GPUS_PER_NODE, PARTITIONS, make_trace  # isort: skip
    from slurmgpu.replay.cluster import QosSpec, from_capacity
    from slurmgpu.replay.engine import SchedConfig, replay

    trace = make_trace(jobs, OFFERED_FOR, TRACE_DAYS * jobs / TRACE_JOBS)
    per = gpus // PARTITIONS
    model = from_capacity(
        {p: per for p in trace.partitions},
        gpus_per_node=dict.fromkeys(trace.partitions, GPUS_PER_NODE),
        gpu_types=dict.fromkeys(trace.partitions, "h100") if carve else None,
        qos=(QosSpec("p0", 1000, ("p2",)), QosSpec("p1", 500), QosSpec("p2", 100, (), 300)),
    )
    if carve:
        trace, model = carved(trace, model, carve, measured)
    try:  # the compiled engine
        from slurmgpu.replay.engine import outcome, warm_up
        from slurmgpu.replay.loop import advance
        from slurmgpu.replay.state import C_NEXT, C_PASSES, build
    except ImportError:  # an engine before it: one call
        jit, chunks, passes = 0.0, [], None
        t0, c0 = time.perf_counter(), time.process_time()
        out = replay(trace, model, SchedConfig())
    else:
        jit = warm_up()
        t0, c0 = time.perf_counter(), time.process_time()
        state, done, chunks = build(trace, model, SchedConfig()), False, []
        while not done:
            c = time.process_time()
            done, state = advance(state, TURNS)
            # (jobs submitted so far, jobs pending now, CPU s of the chunk)
            chunks.append((int(state[5].count[C_NEXT]), int(state[3].pending.sum()),
                           time.process_time() - c))  # fmt: skip
        out, passes = outcome(state), int(state[5].count[C_PASSES])
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
        "carved_gpus": carve,
        "measured_share": measured if carve else None,
        "jobs_on_slices": int(np.count_nonzero(np.asarray(out.runs.equiv) < 1)),
        "offered_load": round(OFFERED_FOR * 0.85 / gpus, 3),
        "seconds": round(seconds, 2),
        "cpu_seconds": round(cpu, 2),
        "jit_cpu_seconds": round(jit, 2),
        "jobs_per_second": round(jobs / seconds),
        "jobs_per_cpu_second": round(jobs / cpu),
        "allocation_ratio": round(busy / (gpus * span), 3),
        "wait_mean_s": round(float(waits.mean()), 1),
        "queue_mean": round(float(depth.mean()), 1),
        "queue_p95": int(np.percentile(depth, 95)),
        "queue_max": int(depth.max()),
        "backfill_passes": passes,
        "cpu_by_queue": growth(chunks),
        "engine_from": str(Path(slurmgpu.__file__).parent.parent),
        "starts_digest": hashlib.sha256(np.asarray(start, dtype=float).tobytes()).hexdigest()[:16],
    }


def growth(chunks: list[tuple[int, int, float]]) -> list[dict]:
    """CPU per job by queue depth: the chunks of the stepped replay (jobs submitted, pending
    at its end, CPU s) grouped by the pending count at their end, in decades."""
    bins: dict[int, list[float]] = {}
    before = 0
    for submitted, pending, cpu in chunks:
        key = 0 if pending < 10 else int(np.log10(pending) * 2)  # half decades: 10, 31, 100...
        got = bins.setdefault(key, [0.0, 0.0, 0, 0])
        got[0] += cpu
        got[1] += submitted - before
        got[2] += 1
        got[3] = max(got[3], pending)
        before = submitted
    return [{"queue_from": 0 if k == 0 else round(10 ** (k / 2)), "queue_below":
             round(10 ** ((k + 1) / 2)) if k else 10, "chunks": v[2], "jobs": int(v[1]),
             "cpu_s": round(v[0], 2), "us_per_job": round(1e6 * v[0] / v[1], 1) if v[1] else None}
            for k, v in sorted(bins.items())]  # fmt: skip


def jit_stage() -> dict:
    """The engine's compile in this process: with an empty NUMBA_CACHE_DIR (cold), then a
    second process on the same directory (warm: loaded from numba's cache)."""
    from slurmgpu.replay.engine import warm_up

    t0, c0 = time.perf_counter(), time.process_time()
    warm_up()
    return {"seconds": round(time.perf_counter() - t0, 2),
            "cpu_seconds": round(time.process_time() - c0, 2)}  # fmt: skip


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


def in_subprocess(engine: str, jobs: int, gpus: int, ref: str, carve: int = 0,
                  measured: float = 1 / 3) -> dict:  # fmt: skip
    src = baseline_root(ref) if engine == "baseline" else ROOT
    env = dict(os.environ, PYTHONPATH=f"{src}{os.pathsep}{HERE}")
    argv = [sys.executable, __file__, "--stage", f"{jobs}:{gpus}:{carve}:{measured}"]
    proc = subprocess.run(argv, capture_output=True, text=True, check=True, env=env,
                          cwd=str(src), timeout=3600)  # fmt: skip
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["engine_from"] == str(src), result["engine_from"]  # the engine it meant
    return {"engine": engine if engine == "new" else f"baseline ({ref})", **result}


def jit_runs() -> list[dict]:
    """Cold and warm compile, each in its own interpreter, on a fresh numba cache dir."""
    out = []
    with tempfile.TemporaryDirectory(prefix="numba-cache-") as cache:
        env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{HERE}", NUMBA_CACHE_DIR=cache)
        for label in ("cold", "warm"):
            proc = subprocess.run([sys.executable, __file__, "--jit-stage"], capture_output=True,
                                  text=True, check=True, env=env, timeout=1800)  # fmt: skip
            out.append({"engine": f"jit ({label})", **json.loads(proc.stdout.splitlines()[-1])})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plan", default=PLAN, help="ENGINE:JOBS:GPUS,... (ENGINE new|baseline)")
    ap.add_argument("--baseline-ref", help="baseline's git ref (default: where HEAD left main)")
    ap.add_argument("--jit", action="store_true", help="also time the compile, cold and warm")
    ap.add_argument("--output", default="replay-backlog.bench.json", help="under benchmarks/out")
    ap.add_argument("--carve", type=int, default=0, help="GPUs carved 1g.10gb x 7 (baseline)")
    ap.add_argument("--measured", type=float, default=1 / 3,
                    help="with --carve: share of 1-GPU jobs with a measured memory")  # fmt: skip
    ap.add_argument("--stage", help="(internal) JOBS:GPUS[:CARVE:MEASURED], one replay, JSON out")
    ap.add_argument("--jit-stage", action="store_true", help="(internal) the compile, JSON out")
    args = ap.parse_args()
    if args.jit_stage:
        print(json.dumps(jit_stage()))
        return
    if args.stage:
        jobs, gpus, *rest = args.stage.split(":")
        carve, measured = (int(rest[0]), float(rest[1])) if rest else (0, 1 / 3)
        print(json.dumps(run_stage(int(jobs), int(gpus), carve, measured)))
        return
    ref = args.baseline_ref or subprocess.run(
        ["git", "-C", str(ROOT), "merge-base", "HEAD", "main"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()[:12]  # fmt: skip
    results = []
    if args.jit:
        for row in jit_runs():
            results.append(row)
            print(json.dumps(row), flush=True)
    for item in filter(None, args.plan.split(",")):
        engine, jobs, gpus = item.split(":")
        results.append(in_subprocess(engine, int(jobs), int(gpus), ref, args.carve, args.measured))
        print(json.dumps(results[-1]), flush=True)
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / args.output).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
