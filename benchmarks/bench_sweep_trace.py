"""What a `replay --via-slurm` task saves by reading the normalized trace, not the sacct dump.

Each array task could re-parse the site's sacct dump; instead the gatherer writes the trace
once (`slurmgpu.replay.trace_file.save_trace`) and every task loads it. This times, on a
generated dump (`gen_sacct.py`), in one run side by side:
  parse   the sacct dump -> trace (`replay.from_accounting.load_trace`, what each task would do)
  save    trace -> trace.npz (once, by the gatherer)
  load    trace.npz -> trace (what each task does)

    python benchmarks/bench_sweep_trace.py --jobs 100000

Results are printed and written as JSON to benchmarks/out/sweep-trace.bench.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100000)
    args = parser.parse_args()
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    dump = out / f"sacct-{args.jobs}.txt"
    if not dump.exists():
        subprocess.run([sys.executable, str(HERE / "gen_sacct.py"), "--jobs", str(args.jobs),
                        "--output", str(dump)], check=True)  # fmt: skip

    from slurmgpu.replay.from_accounting import load_trace
    from slurmgpu.replay.trace_file import load_trace_file, save_trace

    t0 = time.perf_counter()
    trace = load_trace([dump])
    t1 = time.perf_counter()
    npz = save_trace(trace, out / "sweep-trace.npz")
    t2 = time.perf_counter()
    back = load_trace_file(npz)
    t3 = time.perf_counter()
    assert len(back) == len(trace)
    result = {
        "jobs_generated": args.jobs,
        "jobs_in_trace": len(trace),
        "dump_mib": round(dump.stat().st_size / 2**20, 1),
        "trace_npz_mib": round(npz.stat().st_size / 2**20, 1),
        "parse_s": round(t1 - t0, 2),
        "save_s": round(t2 - t1, 2),
        "load_s": round(t3 - t2, 2),
    }
    print(json.dumps(result, indent=1))
    (out / "sweep-trace.bench.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
