"""`slurmgpu advise --via-slurm` on the real test cluster: the candidates' first round as one
job array (a task each, `replay --via-slurm`'s sweep); the advice must equal the in-process
one, number for number (the greedy steps and the perturbed replays run in the command)."""

from __future__ import annotations

import json
import sys

import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from tests.harness import SlurmCluster
from tests.unit.advice.helios_month import month, sacct_text

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slurm_only(
        "host",
        reason="the tasks run this checkout's venv Python on the node (see test_replay_sweep)",
    ),
]

CAP = ["--capacity", "burst=96", "--capacity", "big=64", "--capacity", "idle=64"]
CANDIDATES = ["--candidate", "move:idle:big:16", "--candidate", "move:burst:big:16"]


def test_advise_via_slurm_equals_the_in_process_advice(slurm_cluster: SlurmCluster, tmp_path):
    dump = tmp_path / "month.sacct"
    dump.write_text(sacct_text(month(7, days=0.5)))
    model = ["--sacct-file", str(dump), *CAP, *CANDIDATES, "--format", "json"]
    res = CliRunner().invoke(main, ["advise", *model, "--processes", "1"])
    assert res.exit_code == 0, res.output
    expected = json.loads(res.stdout)
    argv = [sys.executable, "-m", "slurmgpu", "advise", *model, "--via-slurm",
            "--workdir", str(tmp_path / "work"), "--slurm-partition", "gpu",
            "--slurm-time", "5", "--slurm-option=--mem=400M"]  # fmt: skip
    proc = slurm_cluster.run(argv, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "submitted job array" in proc.stderr
    got = json.loads(proc.stdout)
    assert got == expected
    # the two candidates were judged, not skipped: one in the plan or rejected for a reason
    judged = {r["change"] for r in got["rejected"]} | set(got["plan"]["changes"])
    judged |= {a["change"] for a in got["accepted"]}
    assert judged == {"move:idle:big:16", "move:burst:big:16"}
    assert not any(r["why"].startswith("not replayed") for r in got["rejected"])
