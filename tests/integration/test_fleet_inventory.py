"""`slurmgpu inventory --nodes HOSTLIST --output-dir DIR`: one srun task per node.

The node namespaces see the repository and its venv (the prerequisite "slurmgpu installed on
the nodes"); srun exports the caller's environment, in which the pynvml double's machine file
is `ROOT/fake/machine.json`, a path each node's mount namespace binds to its own machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurmgpu.sources import snapshot
from tests.harness.multinode import MultiNodeCluster

pytestmark = pytest.mark.integration
NODES = ("gpu01", "gpu02", "gpu03", "gpu04")


def inventory(cluster: MultiNodeCluster, out: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(cluster.env)
    env.update(cluster.double_env())
    return subprocess.run(
        [
            sys.executable, "-m", "slurmgpu", "inventory",
            "--nodes", "gpu[01-04]",
            "--output-dir", str(out),
            "--remote-command", f"{sys.executable} -m slurmgpu",
            "--host-root", str(cluster.fake_dir / "host"),
        ],
        capture_output=True, text=True, timeout=180, env=env, cwd=cluster.work_dir,
    )  # fmt: skip


def test_one_snapshot_per_node_through_srun(fleet_cluster: MultiNodeCluster, tmp_path) -> None:
    proc = inventory(fleet_cluster, tmp_path / "snaps")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in (tmp_path / "snaps").iterdir()) == [f"{n}.json" for n in NODES]
    invs = {n: snapshot.load(tmp_path / "snaps" / f"{n}.json") for n in NODES}
    # each node answered with its own machine, not the caller's
    assert {n: inv.node_name for n, inv in invs.items()} == {n: n for n in NODES}
    assert {inv.gpus[0].name for inv in invs.values()} == {
        "NVIDIA H100 80GB HBM3",
        "NVIDIA A100-SXM4-40GB",
        "NVIDIA GeForce RTX 4090",
    }
    assert sum(len(g.mig_devices) for g in invs["gpu03"].gpus) == 12
    assert invs["gpu01"].host.cpu_count == 224 and invs["gpu03"].host.cpu_count == 256
    # and they feed the cluster-wide gres.conf directly
    gen = subprocess.run(
        [sys.executable, "-m", "slurmgpu", "gen-gres", "--snapshot-dir", str(tmp_path / "snaps")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert gen.returncode == 0, gen.stderr
    assert "NodeName=gpu[01-02] Name=gpu Type=h100 File=/dev/nvidia0" in gen.stdout


def test_a_failing_node_is_reported_and_the_others_kept(
    fleet_cluster: MultiNodeCluster, tmp_path
) -> None:
    machine = fleet_cluster.root / "nodes" / "gpu04" / "fake" / "machine.json"
    original = machine.read_text()
    data = json.loads(original)
    data["init_error"] = "DRIVER_NOT_LOADED"
    machine.write_text(json.dumps(data))
    try:
        proc = inventory(fleet_cluster, tmp_path / "snaps")
    finally:
        machine.write_text(original)
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    failed = [ln for ln in lines if ln.startswith("gpu04: FAILED")]
    assert failed and "Driver Not Loaded" in failed[0], proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("slurmgpu: error: 1 of 4 node(s)")
    assert sorted(p.name for p in (tmp_path / "snaps").iterdir()) == [
        "gpu01.json",
        "gpu02.json",
        "gpu03.json",
    ]


def test_a_drained_node_is_not_asked(fleet_cluster: MultiNodeCluster, tmp_path) -> None:
    fleet_cluster.scontrol("update", "NodeName=gpu02", "State=DRAIN", "Reason=test-drain")
    try:
        proc = inventory(fleet_cluster, tmp_path / "snaps")
    finally:
        fleet_cluster.scontrol("update", "NodeName=gpu02", "State=RESUME")
    assert proc.returncode == 1
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("gpu02: "))
    assert line.startswith("gpu02: FAILED: node is ") and "DRAIN" in line, line
    assert "(Reason=test-drain" in line, line
    assert (tmp_path / "snaps" / "gpu01.json").exists()
