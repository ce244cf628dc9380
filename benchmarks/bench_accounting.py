"""Time slurmgpu's accounting path on a synthetic sacct dump, next to two references.

Stages, each in its own subprocess so that its peak RSS is its own:
  pyarrow   pyarrow.csv alone parsing the file ('|' delimiter, types inferred): the floor
  baseline  a straightforward row-by-row reader: `csv` module, one dict per row with the
            TRES string split and times parsed, then a pandas DataFrame and a groupby
            (run on the first --baseline-rows rows and extrapolated linearly: labelled so)
  analyze   slurmgpu.accounting.analyze(): chunked load + metrics + recommendations
  report    analyze + rendering every report format (text, JSON, HTML, Prometheus)
  ingest    slurmgpu.accounting.store.ingest() into a fresh store beside the file (#27)
  analyze-store  analyze() of that store (run after ingest: --stages ...,ingest,analyze-store)
  trend-store    report --trend monthly of that store, every format (after ingest)

    python benchmarks/gen_sacct.py --jobs 1000000 --output benchmarks/out/sacct-1m.txt
    python benchmarks/bench_accounting.py benchmarks/out/sacct-1m.txt
    python benchmarks/bench_accounting.py --curve 1000000,2000000,5000000   # memory curve

Results are printed and written as JSON next to the input (`*.bench.json`).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(ROOT))


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _count_rows(path: Path) -> int:
    with open(path, "rb") as fh:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 24), b"")) - 1


# --------------------------------------------------------------------------- stages


def stage_pyarrow(path: Path, _args: argparse.Namespace) -> dict:
    import pyarrow.csv as pacsv

    base = _peak_rss_mib()
    start, cpu0 = time.perf_counter(), time.process_time()
    table = pacsv.read_csv(
        path,
        read_options=pacsv.ReadOptions(block_size=1 << 24),
        # sacct -P does no quoting; the malformed (short) rows are skipped, not fatal
        parse_options=pacsv.ParseOptions(
            delimiter="|", quote_char=False, invalid_row_handler=lambda _row: "skip"
        ),
    )
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu0
    return {
        "rows": table.num_rows,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "rss_after_import_mib": base,
    }


def _baseline_rows(path: Path, limit: int) -> tuple[int, float]:
    import csv
    import datetime as dt

    import pandas as pd

    start = time.perf_counter()
    records = []
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh, delimiter="|", quoting=csv.QUOTE_NONE)
        header = next(reader)
        for n, row in enumerate(reader):
            if n >= limit:
                break
            if len(row) != len(header):
                continue
            rec = dict(zip(header, row, strict=True))
            tres = {}
            for item in rec["AllocTRES"].split(","):
                if "=" in item:
                    key, value = item.split("=", 1)
                    tres[key] = value
            try:
                rec["gpus"] = float(tres.get("gres/gpu", 0))
                rec["elapsed_s"] = int(rec["ElapsedRaw"] or 0)
            except ValueError:
                continue
            for key in ("Submit", "Start", "End"):
                try:
                    rec[key] = dt.datetime.fromisoformat(rec[key])
                except ValueError:
                    rec[key] = None
            rec["is_step"] = "." in rec["JobIDRaw"]
            records.append(rec)
    frame = pd.DataFrame.from_records(records)
    alloc = frame[~frame["is_step"]]
    (alloc["gpus"] * alloc["elapsed_s"] / 3600).groupby(alloc["Partition"]).sum()
    return len(records), time.perf_counter() - start


def stage_baseline(path: Path, args: argparse.Namespace) -> dict:
    import pandas  # noqa: F401  (import cost is not part of the timing)

    base = _peak_rss_mib()
    total = _count_rows(path)
    limit = min(total, args.baseline_rows)
    done, seconds = _baseline_rows(path, limit)
    result = {"rows": done, "seconds": seconds, "rss_after_import_mib": base}
    if limit < total:
        result.update(
            extrapolated=True,
            measured_rows=limit,
            measured_seconds=seconds,
            rows=total,
            seconds=seconds * total / limit,
            note=f"measured on the first {limit:,} of {total:,} rows, time extrapolated "
            "linearly; peak memory is that of the subset",
        )
    return result


def _analyze(path: Path, store: Path | None = None):
    """The library call `slurmgpu report --sacct-file` (or `--store`) makes, with the
    synthetic site's capacity, GPU types and shards (as a site would pass --capacity)."""
    from slurmgpu.accounting import analyze

    return analyze(_analyze_options(path, store))


def _analyze_options(path: Path, store: Path | None = None):
    sys.path.insert(0, str(HERE))
    import gen_sacct

    from slurmgpu.accounting import AnalysisOptions

    gpus_per_node = {"gpu": 8, "mig": 8, "shard": 8}
    capacity = {
        p: n * gpus_per_node[p] for p, _, n, _ in gen_sacct.PARTITIONS if p in gpus_per_node
    }
    return AnalysisOptions(
        files=[] if store else [path],
        store=str(store) if store else None,
        capacity=capacity,
        gpu_types={"gpu": "h100", "mig": "a100_80gb", "shard": "rtx4090"},
        shards_per_gpu={"shard": 8},
    )


def stage_analyze(path: Path, _args: argparse.Namespace) -> dict:
    import pandas  # noqa: F401
    import pyarrow  # noqa: F401

    import slurmgpu.accounting  # noqa: F401

    base = _peak_rss_mib()
    start, cpu0 = time.perf_counter(), time.process_time()
    result = _analyze(path)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu0
    totals = result.to_dict()["totals"]
    return {
        "rows": totals["rows_read"],
        "seconds": seconds,
        "cpu_seconds": cpu,
        "rss_after_import_mib": base,
        "jobs": totals["jobs"],
        "rows_rejected": totals["rows_rejected"],
        "gpu_hours_allocated": totals["gpu_hours_allocated"],
    }


def stage_report(path: Path, _args: argparse.Namespace) -> dict:
    import pandas  # noqa: F401
    import pyarrow  # noqa: F401

    import slurmgpu.accounting  # noqa: F401
    from slurmgpu.views.report import FORMATS, render_report

    base = _peak_rss_mib()
    start, cpu0 = time.perf_counter(), time.process_time()
    analysis = _analyze(path).document
    analyzed = time.perf_counter()
    sizes = {fmt: len(render_report(analysis, fmt)) for fmt in FORMATS}
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu0
    return {
        "rows": analysis.totals.rows_read,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "render_seconds": seconds - (analyzed - start),
        "rss_after_import_mib": base,
        "report_chars": sizes,
    }


def _store_of(path: Path) -> Path:
    return path.with_suffix(".store")


def stage_ingest(path: Path, _args: argparse.Namespace) -> dict:
    """`slurmgpu ingest` of the file into a fresh store beside it (`FILE.store`)."""
    import shutil

    import pandas  # noqa: F401
    import pyarrow.parquet  # noqa: F401

    from slurmgpu.accounting import store

    shutil.rmtree(_store_of(path), ignore_errors=True)
    base = _peak_rss_mib()
    start, cpu0 = time.perf_counter(), time.process_time()
    summary = store.ingest(_store_of(path), [path])
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu0
    size = sum(p.stat().st_size for p in _store_of(path).rglob("*") if p.is_file())
    return {
        "rows": _count_rows(path),
        "seconds": seconds,
        "cpu_seconds": cpu,
        "rss_after_import_mib": base,
        "runs_stored": summary.runs_stored,
        "store_mib": size / 2**20,
    }


def stage_analyze_store(path: Path, _args: argparse.Namespace) -> dict:
    """`analyze --store` of the store the ingest stage wrote (run `ingest` first)."""
    import pandas  # noqa: F401
    import pyarrow.parquet  # noqa: F401

    import slurmgpu.accounting  # noqa: F401

    base = _peak_rss_mib()
    start, cpu0 = time.perf_counter(), time.process_time()
    result = _analyze(path, _store_of(path))
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu0
    totals = result.to_dict()["totals"]
    return {
        "rows": totals["rows_read"],
        "seconds": seconds,
        "cpu_seconds": cpu,
        "rss_after_import_mib": base,
        "jobs": totals["jobs"],
        "gpu_hours_allocated": totals["gpu_hours_allocated"],
    }


def stage_trend_store(path: Path, _args: argparse.Namespace) -> dict:
    """`report --store --trend monthly` of the store the ingest stage wrote (all formats)."""
    import pandas  # noqa: F401
    import pyarrow.parquet  # noqa: F401

    from slurmgpu.accounting.trend import trend
    from slurmgpu.views.report.trend import render_trend

    options = _analyze_options(path, _store_of(path))
    base = _peak_rss_mib()
    start, cpu0 = time.perf_counter(), time.process_time()
    doc = trend(options)
    sizes = {fmt: len(render_trend(doc, fmt)) for fmt in ("text", "json", "html", "prom")}
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu0
    total = sum(r.jobs for r in doc.rows if r.partition == "*")
    return {
        "rows": _count_rows(path),
        "seconds": seconds,
        "cpu_seconds": cpu,
        "rss_after_import_mib": base,
        "months": len(doc.months),
        "job_months": total,
        "report_chars": sizes,
    }


STAGES = {
    "pyarrow": stage_pyarrow,
    "ingest": stage_ingest,
    "analyze-store": stage_analyze_store,
    "trend-store": stage_trend_store,
    "baseline": stage_baseline,
    "analyze": stage_analyze,
    "report": stage_report,
}


# --------------------------------------------------------------------------- driver


def run_stage(stage: str, path: Path, args: argparse.Namespace) -> dict:
    """Run one stage in a fresh interpreter; its JSON line is the result."""
    from slurmgpu.errors import SlurmCommandError
    from slurmgpu.util.proc import run

    argv = [sys.executable, str(Path(__file__).resolve()), "--stage", stage, str(path)]
    argv += ["--baseline-rows", str(args.baseline_rows)]
    try:
        proc = run(argv, timeout=args.timeout)
    except SlurmCommandError as exc:
        return {"stage": stage, "error": str(exc)}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _best(tries: list[dict]) -> dict:
    """The fastest of a stage's tries (the least disturbed by other work on the machine),
    with every try's seconds kept."""
    ok = [t for t in tries if "error" not in t]
    if not ok:
        return tries[-1]
    best = dict(min(ok, key=lambda t: t["seconds"]))
    best["tries_seconds"] = [round(t["seconds"], 2) for t in ok]
    return best


def _print_table(results: list[dict], file_info: dict) -> None:
    print(
        f"\ninput: {file_info['path']}: {file_info['rows']:,} rows, "
        f"{file_info['bytes'] / 2**20:,.0f} MiB"
    )
    floor = next(
        (r["seconds"] for r in results if r.get("stage") == "pyarrow" and "seconds" in r), None
    )
    print(
        f"{'stage':<13} {'seconds':>9} {'x pyarrow':>10} {'rows/s':>12} {'peak RSS MiB':>13}  note"
    )
    for r in results:
        if "error" in r:
            print(f"{r['stage']:<13} {'-':>9} {'-':>10} {'-':>12} {'-':>13}  {r['error']}")
            continue
        ratio = f"{r['seconds'] / floor:.1f}" if floor else "-"
        note = "extrapolated" if r.get("extrapolated") else ""
        if "cpu_seconds" in r:
            note += f" cpu {r['cpu_seconds']:.1f} s"
        if len(r.get("tries_seconds", [])) > 1:
            note += f" best of {r['tries_seconds']}"
        print(
            f"{r['stage']:<13} {r['seconds']:>9.2f} {ratio:>10} {r['rows'] / r['seconds']:>12,.0f} "
            f"{r['peak_rss_mib']:>13,.0f}  {note}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path, nargs="?", help="a sacct -P dump (gen_sacct.py)")
    parser.add_argument("--stage", choices=sorted(STAGES), help=argparse.SUPPRESS)
    parser.add_argument(
        "--stages", default="pyarrow,baseline,analyze,report", help="comma list of stages"
    )
    parser.add_argument("--baseline-rows", type=int, default=300_000)
    parser.add_argument(
        "--repeat", type=int, default=1, help="tries per stage, interleaved; the fastest counts"
    )
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument(
        "--curve",
        help="comma list of row counts: generate each size and measure the analyze stage's "
        "peak RSS (the memory curve for bounded-memory evidence)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the --curve files")
    parser.add_argument("--seed", type=int, default=20261202)
    args = parser.parse_args(argv)

    if args.stage:  # child: measure one stage, print one JSON line
        result = STAGES[args.stage](args.file, args)
        result.update(stage=args.stage, peak_rss_mib=_peak_rss_mib())
        print(json.dumps(result))
        return 0

    if args.curve:
        return _curve(args)
    if args.file is None:
        parser.error("a FILE (or --curve) is needed")
    info = {
        "path": str(args.file),
        "rows": _count_rows(args.file),
        "bytes": args.file.stat().st_size,
    }
    stages = [s for s in args.stages.split(",") if s]
    runs: dict[str, list[dict]] = {s: [] for s in stages}
    for _ in range(args.repeat):  # interleaved, so contention hits every stage alike
        for stage in stages:
            runs[stage].append(run_stage(stage, args.file, args))
    results = [_best(runs[s]) for s in stages]
    _print_table(results, info)
    out = args.file.with_suffix(".bench.json")
    out.write_text(json.dumps({"input": info, "results": results}, indent=2) + "\n")
    print(f"\nwritten: {out}")
    return 0


def _curve(args: argparse.Namespace) -> int:
    sys.path.insert(0, str(HERE))
    import gen_sacct

    points = []
    out_dir = ROOT / "benchmarks" / "out"
    for rows in (int(x) for x in args.curve.split(",")):
        path = out_dir / f"sacct-curve-{rows}.txt"
        gen = gen_sacct.generate(path, jobs=None, rows=rows, seed=args.seed)
        result = run_stage("analyze", path, args)
        result.update(file_rows=gen["rows"], file_mib=gen["bytes"] / 2**20, jobs=gen["jobs"])
        points.append(result)
        if "error" in result:
            print(f"{rows:>11,} rows: {result['error']}")
        else:
            print(
                f"{gen['rows']:>11,} rows {gen['bytes'] / 2**20:>7,.0f} MiB: analyze "
                f"{result['seconds']:7.1f} s, peak RSS {result['peak_rss_mib']:7,.0f} MiB",
                flush=True,
            )
        if not args.keep:
            path.unlink()
    (out_dir / "memory-curve.bench.json").write_text(json.dumps(points, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
