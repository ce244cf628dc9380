"""Measure sources at scale, each next to its baseline in one run.

1. Prometheus (a real server, Debian's package, fed by promtool backfill): N one-GPU runs of
   one hour each with DCGM exporter series (one sample a minute), measured with one run per
   request (what a per-job tool such as jobstats does: its queries name one job) against the
   batched requests of `PrometheusSource` (40 and 200 runs per request). The answers must be
   equal; wall time and request counts are printed.
2. jobstats: `JobstatsSource` over R runs whose AdminComment holds an 8-GPU `JS1:` summary,
   against the floor of decoding alone (`json.loads(gzip.decompress(b64decode(...)))`).
3. Collector spool: `CollectorSource` over S runs with one summary file each, against a
   glob per run (the obvious way) on the same directory.

Run: python benchmarks/bench_measure.py [--runs 2000] [--jobstats 100000] [--spool 20000]
"""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slurmgpu.measure.jobstats import JobstatsSource  # noqa: E402
from slurmgpu.measure.prometheus import PrometheusSource  # noqa: E402
from slurmgpu.measure.summary import (  # noqa: E402
    CollectorSource,
    GpuSummary,
    JobSummary,
    decode,
    write_spool,
)
from slurmgpu.model.measure import RunRef  # noqa: E402
from tests.harness.prometheus import PrometheusServer  # noqa: E402


def at(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, UTC).replace(tzinfo=None)


def clock(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def bench_prometheus(n: int, work: Path) -> None:
    t0 = int(time.time()) // 3600 * 3600 - 30 * 3600
    lines: dict[str, list[str]] = {
        m: [] for m in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE")
    }
    runs = []
    for j in range(n):
        start = t0 + (j * 37) % (24 * 3600)
        labels = f'gpu="{j % 8}",Hostname="n{j // 8 % 500}",hpc_job="{1000 + j}"'
        for i in range(60):
            t = start + 30 + 60 * i
            lines["DCGM_FI_DEV_GPU_UTIL"].append(
                f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {(j + i) % 100} {t}"
            )
            lines["DCGM_FI_DEV_FB_USED"].append(
                f"DCGM_FI_DEV_FB_USED{{{labels}}} {1000 + j % 5000} {t}"
            )
            lines["DCGM_FI_DEV_FB_FREE"].append(
                f"DCGM_FI_DEV_FB_FREE{{{labels}}} {80000 - j % 5000} {t}"
            )
        runs.append(RunRef(str(1000 + j), "c", at(start), at(start + 3600), "n", 1))
    text = (
        "".join(f"# TYPE {m} gauge\n" + "\n".join(v) + "\n" for m, v in lines.items()) + "# EOF\n"
    )
    (server, t_fill) = clock(lambda: PrometheusServer(work / "prom", text).up(timeout=300))
    print(f"prometheus: {n} runs, {3 * 60 * n:,} samples backfilled + started in {t_fill:.1f} s")
    try:
        results = {}
        for batch in (1, 40, 200):
            source = PrometheusSource(server.url, batch_size=batch)
            measures, seconds = clock(lambda s=source: s.measures(runs))
            results[batch] = measures
            label = "one run per request (baseline)" if batch == 1 else f"{batch} runs per request"
            print(
                f"  {label:32s} {seconds:7.2f} s  {source.requests:6d} requests  "
                f"{len(measures)} measured  {len(source.warnings)} warnings"
            )
        same = all(
            sorted(results[b], key=lambda m: m.job_id) == sorted(results[1], key=lambda m: m.job_id)
            for b in results
        )
        print(f"  batched answers equal to one-per-request: {same}")
    finally:
        server.down()


def js1(i: int) -> str:
    gpus = {str(g): 10.5 * g + i % 7 for g in range(8)}
    mem = {str(g): 2**30 * (g + 1) for g in range(8)}
    total = {str(g): 85899345920 for g in range(8)}
    node = {"cpus": 64, "total_time": 3600, "used_memory": 2**34, "total_memory": 2**36,
            "gpu_utilization": gpus, "gpu_used_memory": mem, "gpu_total_memory": total}  # fmt: skip
    data = json.dumps(
        {"nodes": {f"n{i % 100}": node}, "total_time": 3600, "gpus": 8}, separators=(",", ":")
    )
    return "JS1:" + base64.b64encode(gzip.compress(data.encode())).decode()


def bench_jobstats(n: int) -> None:
    tokens = [js1(i) for i in range(min(n, 1000))]
    runs = [
        RunRef(str(i), "c", at(0), at(3600), "n", 8, "slurmgpu tier=P1 " + tokens[i % len(tokens)])
        for i in range(n)
    ]

    def floor():
        return [
            json.loads(gzip.decompress(base64.b64decode(r.admin_comment.split("JS1:")[1])))
            for r in runs
        ]

    _, t_floor = clock(floor)
    source = JobstatsSource()
    measures, t_src = clock(lambda: source.measures(runs))
    print(f"jobstats: {n:,} runs with 8-GPU JS1: summaries")
    print(f"  decode only (floor)               {t_floor:7.2f} s  {n / t_floor:10,.0f} runs/s")
    print(
        f"  JobstatsSource.measures           {t_src:7.2f} s  {n / t_src:10,.0f} runs/s"
        f"  ({len(measures):,} measured)"
    )


def bench_spool(n: int, work: Path) -> None:
    spool = work / "spool"
    g = (GpuSummary(0, None, None, "GPU-0", 81559.0, 1000.0, 50.0, 10, 10),)
    runs = []
    for i in range(n):
        first = 1_767_600_000 + i
        write_spool(spool, JobSummary(str(i), "c", "n1", first, first + 600, 10, g))
        runs.append(RunRef(str(i), "c", at(first - 10), at(first + 700), "n1", 1))
    measures, t_src = clock(lambda: CollectorSource(spool).measures(runs))
    sample = runs[: min(n, 2000)]

    def per_run_glob():
        for r in sample:
            for p in (spool / "c").glob(f"{r.job_id}.*.sg1"):
                decode(p.read_text().strip())

    _, t_glob = clock(per_run_glob)
    print(f"collector spool: {n:,} summary files")
    print(
        f"  CollectorSource (one listing)     {t_src:7.2f} s  {n / t_src:10,.0f} runs/s"
        f"  ({len(measures):,} measured)"
    )
    print(
        f"  a glob per run (baseline, {len(sample)} runs) {t_glob:7.2f} s"
        f"  {len(sample) / t_glob:10,.0f} runs/s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--jobstats", type=int, default=100_000)
    parser.add_argument("--spool", type=int, default=20_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-measure-") as tmp:
        bench_prometheus(args.runs, Path(tmp))
        bench_jobstats(args.jobstats)
        bench_spool(args.spool, Path(tmp))


if __name__ == "__main__":
    main()
