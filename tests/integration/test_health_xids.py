"""`check --health-check` reads Xids from the kernel log on the real test cluster: a critical
Xid logged between runs drains the node, keeps it drained on later runs until
`--clear-xids`, then the node is resumed; an application Xid only warns. NVML is the pynvml
double (dgx-h100), the kernel log a recorded `journalctl -k` text under the host tree."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.doubles.hosttree import build_host_tree

ROOT = Path(__file__).resolve().parents[2]
MACHINE = ROOT / "tests" / "data" / "machines" / "dgx-h100.json"
KERNEL = ROOT / "tests" / "data" / "kernel"


def check(cluster, host: Path, *args: str):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env |= cluster.env | {
        "PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "doubles"), str(ROOT)]),
        "SLURMGPU_FAKE_NVML_MACHINE": str(MACHINE),
    }
    return subprocess.run(
        [sys.executable, "-m", "slurmgpu", "check", "--node", cluster.node_name,
         "--host-root", str(host), *args],
        capture_output=True, text=True, env=env, timeout=120, cwd=ROOT,
    )  # fmt: skip


def node_line(cluster) -> str:
    """The node line gen-gres makes for the dgx-h100 record, for the harness's node (so that
    the only problems `check` finds are the Xids)."""
    proc = subprocess.run(
        [sys.executable, "-m", "slurmgpu", "gen-gres", "--snapshot",
         str(ROOT / "etc" / "examples" / "dgx-h100.json"), "--node-line", "--output", "-"],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("NodeName="))
    return line.replace("NodeName=dgxh100", f"NodeName={cluster.node_name}")


def wait_idle(cluster, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while (state := cluster.node_state()["State"]) != "IDLE":
        assert time.monotonic() < deadline, state
        time.sleep(0.5)


def test_kernel_log_xids_drain_until_cleared(slurm_cluster, tmp_path):
    cluster = slurm_cluster
    cluster.reconfigure(node_line=node_line(cluster))
    host = build_host_tree(MACHINE, tmp_path / "host")
    log = host / "var" / "log" / "kern.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("2026-11-30T02:11:07+0000 gpu01 kernel: nvidia-uvm: Loaded\n")
    try:
        # a clean first run: nothing in the log, the node stays up
        first = check(cluster, host, "--health-check")
        assert first.returncode == 0, first.stdout + first.stderr
        assert "Xid" not in first.stdout
        # the driver logs a double-bit ECC error between two runs (NVML's event wait
        # would not see it): the next run drains the node
        log.write_text(log.read_text() + (KERNEL / "journalctl-k.txt").read_text())
        run = check(cluster, host, "--health-check")
        assert run.returncode == 1, run.stdout + run.stderr
        # `check` groups findings by cause (#20): "error: xid on 1 node(s) ...", then each
        assert "error: xid on 1 node(s) (gpu01)" in run.stdout, run.stdout
        assert (
            "gpu01: GPU 2 (00000000:3A:00.0) reported Xid 48 in the kernel log "
            "(2026-11-30T04:52:41+0000, pid=1234, name=train.py, An uncorrectable double bit"
        ) in run.stdout
        assert "reported Xid 31" in run.stdout  # an application's MMU fault: a warning
        node = cluster.node_state()
        assert "DRAIN" in node["State"], node
        assert node["Reason"].startswith("slurmgpu: GPU 2 (00000000:3A:00.0) reported Xid 48")
        # nothing new in the log: still drained, the Xid is remembered
        again = check(cluster, host, "--health-check")
        assert again.returncode == 1 and "still not cleared" in again.stdout
        assert "DRAIN" in cluster.node_state()["State"]
        # the GPU was reset: the admin clears the Xids, the next run resumes the node
        cleared = check(cluster, host, "--clear-xids")
        assert cleared.returncode == 0, cleared.stdout + cleared.stderr
        resumed = check(cluster, host, "--health-check")
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert "gpu01: resume" in resumed.stdout
        wait_idle(cluster)  # a resumed node may show NOT_RESPONDING until slurmd answers a ping
        # an application Xid alone warns and drains nothing
        with open(log, "a") as fh:
            fh.write((KERNEL / "dmesg.txt").read_text().splitlines()[2] + "\n")
        warned = check(cluster, host, "--health-check")
        assert warned.returncode == 0, warned.stdout + warned.stderr
        assert "gpu01: warning: GPU 6 (00000000:BA:00.0) reported Xid 13" in warned.stdout
        assert "DRAIN" not in cluster.node_state()["State"]
    finally:
        cluster.reset()  # the harness default node, and no drain kept
