"""Reports over many stored rows: `report --store --trend monthly` (a month at a time) and
`report --store` (one window, the whole frame), on stores of 1x, 2x, ... the runs of an
ingested dump, side by side in one run.

A store of k x the runs is made from an ingested one (`bench_accounting.py --stages ingest`
writes FILE.store) without parsing text again: copy j of every partition gets its job ids
shifted by j x 10^9 and its times by j x the dump's span rounded up to whole months (so the
copies follow each other in time, as a longer history would), written under the shifted
month's folder; the manifest lists the copies and the ingested file ledger once per copy.
Each measurement runs in a fresh interpreter (its peak RSS its own).

    python benchmarks/gen_sacct.py --jobs 1000000 --output benchmarks/out/sacct-1m.txt
    python benchmarks/bench_accounting.py benchmarks/out/sacct-1m.txt --stages ingest
    python benchmarks/bench_store_scale.py benchmarks/out/sacct-1m.store --copies 1,4
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _month_shift(month: str, months: int) -> str:
    y, m = int(month[:4]), int(month[5:])
    i = y * 12 + m - 1 + months
    return f"{i // 12:04d}-{i % 12 + 1:02d}"


def scaled_store(src: Path, dst: Path, copies: int) -> dict:
    """`copies` x the runs of store `src` in `dst` (see the module docstring)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from slurmgpu.accounting import store

    manifest = store.read_manifest(src)
    months = sorted(p["month"] for p in manifest["partitions"] if p["month"] != "unknown")
    span = (
        (int(months[-1][:4]) * 12 + int(months[-1][5:]))
        - (int(months[0][:4]) * 12 + int(months[0][5:]))
        + 1
    )
    shutil.rmtree(dst, ignore_errors=True)
    dst.mkdir(parents=True)
    parts, files = [], []
    for j in range(copies):
        shift_s = 0
        for part in manifest["partitions"]:
            table = store._read_part(src, part)
            month = part["month"]
            if month != "unknown":
                month = _month_shift(month, j * span)
            if j:
                # the same wall-clock shift for every row: whole months of the first copy
                first = months[0]
                t0 = pc.strptime(pa.scalar(first + "-01"), format="%Y-%m-%d", unit="s")
                t1 = pc.strptime(pa.scalar(_month_shift(first, j * span) + "-01"),
                                 format="%Y-%m-%d", unit="s")  # fmt: skip
                shift_s = t1.cast(pa.int64()).as_py() - t0.cast(pa.int64()).as_py()
                cols = {}
                for name in table.column_names:
                    col = table.column(name)
                    if pa.types.is_timestamp(col.type):
                        unit = col.type.unit
                        mul = {"s": 1, "ms": 1000, "us": 10**6, "ns": 10**9}[unit]
                        col = pc.add(col.cast(pa.int64()), shift_s * mul).cast(col.type)
                    elif name == "job_id_raw":
                        col = pc.add(col, j * 10**9)
                    elif name == "job_id":
                        col = pc.binary_join_element_wise(pa.scalar(f"{j}x"), col, "")
                    cols[name] = col
                table = pa.table(cols)
            rel = f"{store._folder(part['cluster'], month)}/part-copy{j}.parquet"
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, dst / rel, compression="zstd")
            parts.append({"cluster": part["cluster"], "month": month, "path": rel,
                          "rows": table.num_rows})  # fmt: skip
        files += [{**f, "path": f"{f['path']}#copy{j}", "seq": f["seq"]} for f in manifest["files"]]
    out = dict(manifest, partitions=parts, files=files)
    (dst / store.MANIFEST).write_text(json.dumps(out, indent=1) + "\n")
    return {"runs": sum(p["rows"] for p in parts), "months": len({p["month"] for p in parts})}


def _options(path: Path):
    sys.path.insert(0, str(HERE))
    import gen_sacct

    from slurmgpu.accounting import AnalysisOptions

    per_node = {"gpu": 8, "mig": 8, "shard": 8}
    capacity = {p: n * per_node[p] for p, _, n, _ in gen_sacct.PARTITIONS if p in per_node}
    return AnalysisOptions(
        store=str(path),
        capacity=capacity,
        gpu_types={"gpu": "h100", "mig": "a100_80gb", "shard": "rtx4090"},
        shards_per_gpu={"shard": 8},
    )


def measure(kind: str, path: Path) -> dict:
    """One measurement, in this interpreter: trend or report of the store."""
    import pandas  # noqa: F401
    import pyarrow.parquet  # noqa: F401

    from slurmgpu.accounting.pipeline import analyze
    from slurmgpu.accounting.trend import trend
    from slurmgpu.views.report import render_report
    from slurmgpu.views.report.trend import render_trend

    start, cpu0 = time.perf_counter(), time.process_time()
    if kind == "trend":
        doc = trend(_options(path))
        sizes = {f: len(render_trend(doc, f)) for f in ("text", "json", "html", "prom")}
        extra = {"months": len(doc.months), "trend_rows": len(doc.rows)}
    else:
        doc = analyze(_options(path)).document
        sizes = {f: len(render_report(doc, f)) for f in ("text", "json", "html", "prom")}
        extra = {"jobs": doc.totals.jobs}
    return {
        "kind": kind,
        "seconds": time.perf_counter() - start,
        "cpu_seconds": time.process_time() - cpu0,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "chars": sizes,
        **extra,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", type=Path, help="an ingested store (FILE.store)")
    parser.add_argument("--copies", default="1,4", help="comma list of scale factors")
    parser.add_argument("--kinds", default="trend,report", help="trend and/or report")
    parser.add_argument("--measure", choices=["trend", "report"], help=argparse.SUPPRESS)
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure, args.store)))
        return 0
    from slurmgpu.util.proc import run

    results = []
    for k in (int(x) for x in args.copies.split(",")):
        dst = args.store.with_name(f"{args.store.stem}-x{k}.store")
        t0 = time.perf_counter()
        made = scaled_store(args.store, dst, k)
        print(f"x{k}: {made['runs']:,} runs, {made['months']} months "
              f"(built in {time.perf_counter() - t0:.1f} s)", flush=True)  # fmt: skip
        for kind in args.kinds.split(","):
            argv_ = [sys.executable, str(Path(__file__).resolve()), str(dst), "--measure", kind]
            r = json.loads(run(argv_, timeout=args.timeout).stdout.strip().splitlines()[-1])
            r.update(copies=k, runs=made["runs"], store_months=made["months"])
            results.append(r)
            print(f"  {kind:<6} {r['seconds']:8.1f} s  cpu {r['cpu_seconds']:8.1f} s  "
                  f"peak RSS {r['peak_rss_mib']:8,.0f} MiB  "
                  f"{r['runs'] / r['seconds']:>10,.0f} runs/s", flush=True)  # fmt: skip
        shutil.rmtree(dst, ignore_errors=True)
    out = args.store.with_suffix(".scale.bench.json")
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
