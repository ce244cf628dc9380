"""The long soak (issue #33): slurmgpu's acting set on the multi-node test cluster under
faults, with figures for docs/operations.md. Needs root and the integration tests' packages
(Slurm, munge, MariaDB, prometheus, exim4): it brings up its own 4-node test cluster.

    sudo .venv/bin/python benchmarks/soak.py                        # >= 2,000 jobs
    sudo .venv/bin/python benchmarks/soak.py --jobs 400 --span 240  # a shorter one
    sudo .venv/bin/python benchmarks/soak.py --seed 7 --no-faults   # the same load, no faults

What runs and what is checked: tests/harness/soak.py (the CI size is
tests/integration/test_soak.py). Prints the figures (jobs, faults, actions, passes and their
durations) and each invariant with its evidence; writes them as JSON to
benchmarks/out/soak.json. Exits 1 when an invariant fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(ROOT))

NODES = ("gpu01=dgx-h100", "gpu02=dgx-h100", "gpu03=dgx-a100-mig", "gpu04=pcie-8gpu")


def main(argv: list[str] | None = None) -> int:
    from tests.harness.multinode import MultiNodeCluster
    from tests.harness.soak import Soak, SoakConfig

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=33)
    ap.add_argument("--jobs", type=int, default=1600, help="submissions (arrays: 3 tasks)")
    ap.add_argument("--span", type=float, default=1800.0, help="seconds of submissions")
    ap.add_argument("--drain", type=float, default=120.0, help="seconds to let the queue empty")
    ap.add_argument("--idle-period", type=float, default=8.0)
    ap.add_argument("--autopilot-period", type=float, default=90.0)
    ap.add_argument("--report-period", type=float, default=60.0)
    ap.add_argument("--kill-share", type=float, default=0.2)
    ap.add_argument("--overlap-share", type=float, default=0.15)
    ap.add_argument("--no-faults", action="store_true")
    ap.add_argument("--out", default=str(HERE / "out" / "soak.json"))
    args = ap.parse_args(argv)
    config = SoakConfig(
        seed=args.seed, jobs=args.jobs, span_s=args.span, drain_s=args.drain,
        idle_period_s=args.idle_period, autopilot_period_s=args.autopilot_period,
        report_period_s=args.report_period, kill_share=args.kill_share,
        overlap_share=args.overlap_share, faults=not args.no_faults,
    )  # fmt: skip
    cluster = MultiNodeCluster(nodes=NODES).up()
    work = Path(tempfile.mkdtemp(prefix="slurmgpu-soak-"))
    soak = Soak(cluster, config, work)
    try:
        result = soak.run()
    finally:
        soak.down()
        cluster.down()
    print(result.report())
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = result.figures() | {"evidence": {i.name: i.evidence for i in result.invariants}}
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out}; logs and state under {work}")
    return 1 if result.failed() else 0


if __name__ == "__main__":
    sys.exit(main())
