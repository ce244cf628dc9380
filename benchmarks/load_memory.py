"""Peak memory and time of the accounting loader on large synthetic sacct dumps.

The loader streams (docs/accounting.md, "Streaming and memory"): memory should follow the
number of allocation rows, not the size of the text. This script generates dumps of growing
size with `benchmarks/gen_sacct.py` and loads each in a fresh interpreter, reporting lines,
allocation rows, seconds and peak RSS (ru_maxrss) as JSON lines:

    python benchmarks/load_memory.py --rows 1000000 4000000 10000000 [--keep DIR]

A 10M-line dump is ~3.5 GB on disk; files are deleted after use unless --keep is given.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

MEASURE = """
import json, resource, sys, time
from slurmgpu.accounting.load import load_files
t = time.perf_counter()
r = load_files([sys.argv[1]])
print(json.dumps({
    "lines": r.rows_read + r.blank_lines,
    "rows_rejected": r.rows_rejected,
    "allocation_rows": len(r.frame),
    "step_rows": r.step_rows,
    "seconds": round(time.perf_counter() - t, 1),
    "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    "frame_mib": round(r.frame.memory_usage(deep=True).sum() / 2**20),
}))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 4_000_000])
    parser.add_argument("--keep", type=Path, help="keep the generated dumps in this directory")
    args = parser.parse_args(argv)
    gen = HERE / "gen_sacct.py"
    if not gen.exists():
        print(f"{gen} is missing (it generates the synthetic dumps)", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        out_dir = args.keep or Path(tmp)
        out_dir.mkdir(parents=True, exist_ok=True)
        for rows in args.rows:
            path = out_dir / f"sacct-{rows}-rows.txt"
            subprocess.run(
                [sys.executable, str(gen), "--rows", str(rows), "--output", str(path)],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            size = path.stat().st_size
            proc = subprocess.run(
                [sys.executable, "-c", MEASURE, str(path)],
                check=True,
                capture_output=True,
                text=True,
                cwd=REPO,
                env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
            )
            result = json.loads(proc.stdout)
            result["file_mib"] = round(size / 2**20)
            print(json.dumps(result), flush=True)
            if not args.keep:
                path.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
