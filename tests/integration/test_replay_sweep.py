"""`slurmgpu replay --via-slurm` on the real test cluster: one job array, a task per candidate.

The command runs as a site runs it (a subprocess with the cluster's SLURM_CONF): it writes the
normalized trace to a work directory, submits `sbatch --array=0-(N-1)`, each task runs this
checkout's Python (`python -m slurmgpu replay-task`) on the test node, and the gatherer's
report must equal the in-process sweep's, number for number. A second sweep runs its tasks
through a wrapper (`--slurm-python`) that makes one task exit 3 before Python starts: that
candidate must be named on stderr with its task id, state and exit code, the command must
exit 1, and the other candidates' results must still be in the report.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from tests.harness import SlurmCluster

pytestmark = pytest.mark.integration

DATA = Path(__file__).resolve().parents[1] / "data" / "sacct"
MODEL = ["--sacct-file", str(DATA / "synthetic-mix.txt"), "--capacity", "gpu=16",
         "--capacity", "mig=1", "--gpu-type", "gpu=h100", "--gpu-type", "mig=h100",
         "--baseline", "carve:mig:1:1g.10gb=7", "--format", "json"]  # fmt: skip
CANDIDATES = ["move:gpu:spare:8", "shard:gpu:2:4", "tier:p2:priority=1"]


def _sweep_file(path: Path, changes: list[str]) -> Path:
    path.write_text("# candidates\n" + "\n".join(changes) + "\n")
    return path


def _via_slurm(cluster: SlurmCluster, sweep: Path, workdir: Path, *extra: str):
    argv = [sys.executable, "-m", "slurmgpu", "replay", *MODEL, "--sweep", str(sweep),
            "--via-slurm", "--workdir", str(workdir), "--slurm-partition", "gpu",
            "--slurm-time", "5", "--slurm-option=--mem=400M", *extra]  # fmt: skip
    return cluster.run(argv, check=False, timeout=80)


def _job_id(stderr: str) -> str:
    line = next(ln for ln in stderr.splitlines() if "submitted job array" in ln)
    return line.split("submitted job array ")[1].split()[0]


def _in_process(sweep: Path) -> dict:
    res = CliRunner().invoke(main, ["replay", *MODEL, "--sweep", str(sweep), "--processes", "1"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_sweep_via_slurm_equals_the_in_process_sweep(slurm_cluster: SlurmCluster, tmp_path):
    sweep = _sweep_file(tmp_path / "sweep.txt", CANDIDATES)
    expected = _in_process(sweep)
    proc = _via_slurm(slurm_cluster, sweep, tmp_path / "work")
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert [s["change"] for s in got["scenarios"]] == CANDIDATES
    assert got == expected  # every number of the baseline and of each scenario
    # the candidates really differ from the baseline, or equality would prove little
    assert got["scenarios"][0]["by_partition"] != got["baseline"]["by_partition"]
    job = _job_id(proc.stderr)
    # slurmctld sends each task's end to slurmdbd on its own: the gatherer has seen every
    # task end, but sacct may not list them all yet (CI saw one of three), so poll
    want = [f"{job}_{i}|COMPLETED|0:0" for i in range(3)]
    deadline = time.monotonic() + 30
    while True:
        rows = slurm_cluster.run(["sacct", "-n", "-X", "-P", "-j", job,
                                  "--format=JobID,State,ExitCode"]).stdout.split()  # fmt: skip
        if sorted(rows) == want or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert sorted(rows) == want
    [run] = (tmp_path / "work").iterdir()
    assert sorted(p.name for p in (run / "results").iterdir()) == ["0.json", "1.json", "2.json"]
    assert (run / "trace.npz").is_file()  # the tasks read the normalized trace, not the dump


def test_a_failing_task_is_named_and_the_sweep_exits_non_zero(
    slurm_cluster: SlurmCluster, tmp_path
):
    changes = [*CANDIDATES, "move:gpu:other:8"]
    sweep = _sweep_file(tmp_path / "sweep.txt", changes)
    wrapper = tmp_path / "python-or-fail"
    wrapper.write_text(
        "#!/bin/sh\n"
        'if [ "$SLURM_ARRAY_TASK_ID" = 3 ]; then echo "injected failure" >&2; exit 3; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    wrapper.chmod(0o755)
    proc = _via_slurm(slurm_cluster, sweep, tmp_path / "work", "--slurm-python", str(wrapper))
    assert proc.returncode == 1, proc.stderr
    job = _job_id(proc.stderr)
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("slurmgpu: error: ")]
    assert len(errors) == 2, proc.stderr
    assert errors[0].startswith(
        f"slurmgpu: error: sweep task {job}_3 (move:gpu:other:8) "
        "ended FAILED, exit code 3:0, no result: injected failure"
    )
    assert f"1 of 4 sweep tasks of array job {job} failed" in errors[1]
    got = json.loads(proc.stdout)
    assert [s["change"] for s in got["scenarios"]] == CANDIDATES


def test_interrupting_the_gatherer_cancels_the_array(slurm_cluster: SlurmCluster, tmp_path):
    import os
    import signal
    import subprocess

    sweep = _sweep_file(tmp_path / "sweep.txt", CANDIDATES[:2])
    slow = tmp_path / "python-slow"
    slow.write_text(f'#!/bin/sh\nsleep 60\nexec {sys.executable} "$@"\n')
    slow.chmod(0o755)
    argv = [sys.executable, "-m", "slurmgpu", "replay", *MODEL, "--sweep", str(sweep),
            "--via-slurm", "--workdir", str(tmp_path / "work"), "--slurm-python", str(slow),
            "--slurm-option=--mem=400M"]  # fmt: skip
    gatherer = subprocess.Popen(argv, env={**os.environ, **slurm_cluster.env}, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        first = gatherer.stderr.readline()
        assert "submitted job array" in first, first
        job = _job_id(first)
        slurm_cluster.wait_job_state(int(job), "RUNNING", timeout=30)  # the sleeping tasks
        gatherer.send_signal(signal.SIGINT)
        assert gatherer.wait(timeout=30) != 0
    finally:
        gatherer.kill()
    deadline = time.monotonic() + 30
    while True:
        rows = slurm_cluster.run(["sacct", "-n", "-X", "-P", "-j", job,
                                  "--format=JobID,State"]).stdout.splitlines()  # fmt: skip
        # `CANCELLED by 0`: the gatherer's scancel, as root
        if sorted(r.split()[0] for r in rows) == [f"{job}_{i}|CANCELLED" for i in range(2)]:
            break
        assert time.monotonic() < deadline, rows
        time.sleep(0.5)
