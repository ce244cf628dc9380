"""The multi-node harness itself: distinct hosts, own addresses, own GPUs, clean teardown."""

from __future__ import annotations

import re
import subprocess
import time

import pytest

from tests.harness.multinode import MultiNodeCluster, device_nodes, load_machine
from tests.integration.conftest import require_slurm

pytestmark = pytest.mark.integration


def test_every_node_is_idle_with_its_own_gpus(fleet_cluster: MultiNodeCluster) -> None:
    out = fleet_cluster.run(["sinfo", "-h", "-N", "-o", "%N %T %G"]).stdout.split("\n")
    rows = dict(line.split(" ", 1) for line in out if line.strip())
    assert rows == {
        "gpu01": "idle gpu:h100:8",
        "gpu02": "idle gpu:h100:8",
        "gpu03": "idle gpu:a100:8",
        "gpu04": "idle gpu:rtx4090:8",
    }


def test_srun_on_three_nodes_runs_on_three_hosts(fleet_cluster: MultiNodeCluster) -> None:
    out = fleet_cluster.run(
        ["srun", "-N3", "-w", "gpu[01,03-04]", "sh", "-c", "echo $(hostname) $SLURMD_NODENAME"]
    ).stdout
    pairs = sorted(tuple(line.split()) for line in out.splitlines() if line.strip())
    assert pairs == [("gpu01", "gpu01"), ("gpu03", "gpu03"), ("gpu04", "gpu04")]


def test_each_node_has_its_own_address_and_devices(fleet_cluster: MultiNodeCluster) -> None:
    script = "ip -4 -o addr show dev eth0; ls /dev | grep -c '^nvidia[0-9]'; ls /dev/nvidia-caps"
    out = fleet_cluster.run(["srun", "-N1", "-w", "gpu03", "sh", "-c", script]).stdout
    assert f"inet {fleet_cluster.address('gpu03')}/24" in out
    lines = out.splitlines()
    assert lines[1] == "8"
    # the MIG machine's driver made caps device nodes for its MIG instances; the others none
    caps = [p for p, _maj, _min in device_nodes(load_machine("dgx-a100-mig")) if "caps" in p]
    assert len(caps) > 2 and all(p.split("/")[1] in out for p in caps)
    other = fleet_cluster.run(["srun", "-N1", "-w", "gpu04", "ls", "/dev"]).stdout
    assert "nvidia-caps" in other and "nvidia-cap1" not in other
    # the host's own /dev is untouched
    host_dev = subprocess.run(["ls", "/dev"], capture_output=True, text=True).stdout
    assert not re.search(r"(?m)^nvidia[0-7]$", host_dev)


def test_a_gpu_job_gets_gpus_on_two_nodes(fleet_cluster: MultiNodeCluster) -> None:
    out = fleet_cluster.run(
        [
            "srun",
            "-N2",
            "-w",
            "gpu[01-02]",
            "--gres=gpu:h100:2",
            "sh",
            "-c",
            "echo $(hostname) $CUDA_VISIBLE_DEVICES",
        ]
    ).stdout
    assert sorted(out.split("\n")[:2]) == ["gpu01 0,1", "gpu02 0,1"]


CHILD = """
import json, sys, time
sys.path.insert(0, {repo!r})
from tests.harness.multinode import MultiNodeCluster, NodeSpec
cluster = MultiNodeCluster({root!r}, nodes=[NodeSpec("n1", "pcie-8gpu")])
start = time.monotonic()
cluster.up()
pids = [p for node in cluster.nodes.values() for p in node.pids]
pids += [d.pid for d in cluster._daemons.values() if d.pid]
print(json.dumps({{"up_s": time.monotonic() - start, "pids": pids,
                  "bridge": cluster.net["bridge"], "id": cluster.net["id"]}}), flush=True)
time.sleep(600)
"""


def test_sigterm_during_a_run_leaves_nothing_behind(tmp_path) -> None:
    """A second small cluster in a child process, SIGTERMed (a CI timeout): all of it goes."""
    import json
    import signal
    import sys
    from pathlib import Path

    from tests.harness.cluster import pid_alive

    require_slurm()
    repo = str(Path(__file__).resolve().parents[2])
    code = CHILD.format(repo=repo, root=str(tmp_path / "c"))
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        line = child.stdout.readline()
        assert line, child.stderr.read()
        info = json.loads(line)
        assert subprocess.run(["ip", "link", "show", info["bridge"]], check=False).returncode == 0
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    deadline = time.monotonic() + 10
    while any(pid_alive(p) for p in info["pids"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in info["pids"] if pid_alive(p)]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert info["bridge"] not in links and f"sgv{info['id']}" not in links
    assert info["up_s"] < 60, f"bring-up took {info['up_s']:.1f} s"


def test_slurm_test_cluster_script_with_nodes(tmp_path) -> None:
    """`scripts/slurm-test-cluster up DIR --node ...`, then status and down, by hand's path."""
    import sys
    from pathlib import Path

    require_slurm()
    script = [
        sys.executable,
        str(Path(__file__).resolve().parents[2] / "scripts/slurm-test-cluster"),
    ]
    root = tmp_path / "c"
    up = subprocess.run(
        [*script, "up", str(root), "--node", "a1=dgx-h100", "--node", "b1=pcie-8gpu"],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    try:
        assert up.returncode == 0, up.stderr
        assert up.stdout.strip() == f"export SLURM_CONF={root.resolve()}/etc/slurm.conf"
        status = subprocess.run([*script, "status", str(root)], capture_output=True, text=True)
        assert status.returncode == 0, status.stdout + status.stderr
        assert "slurmd-a1  running" in status.stdout and "slurmd-b1  running" in status.stdout
        assert "node b1: State=IDLE Gres=gpu:rtx4090:8" in status.stdout
    finally:
        down = subprocess.run([*script, "down", str(root)], capture_output=True, text=True)
    assert down.returncode == 0 and "slurmd-a1" in down.stdout, down.stdout + down.stderr
    bad = subprocess.run(
        [*script, "up", str(tmp_path / "d"), "--node", "x=no-such-machine"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert bad.returncode == 1 and "machine must be one of" in bad.stderr
