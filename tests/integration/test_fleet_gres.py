"""One cluster-wide gres.conf: checked by slurmd -G per node, and run by the multi-node cluster."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.harness.multinode import MultiNodeCluster
from tests.unit.fleet.test_cluster_gres import FLEET, write_snapshots

pytestmark = pytest.mark.integration


def gen_gres(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "slurmgpu", "gen-gres", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_cluster_runs_on_one_generated_gres_conf(fleet_cluster: MultiNodeCluster, tmp_path):
    snaps = write_snapshots(tmp_path / "snaps")
    out = tmp_path / "gres.conf"
    proc = gen_gres("--snapshot-dir", str(snaps), "--node-line", "--check", "--output", str(out))
    assert proc.returncode == 3, proc.stderr  # 3: written (docs/acting.md, exit codes)
    assert "slurmd -G accepted it for all 4 nodes" in proc.stderr
    node_conf = proc.stdout
    assert sorted(FLEET) == sorted(
        n for m in re.finditer(r"(?m)^NodeName=(\S+)", node_conf) for n in _expand(m.group(1))
    )
    try:
        fleet_cluster.reconfigure(node_conf=node_conf, gres_conf=out.read_text())
        gres = {n: fleet_cluster.node_record(n)["Gres"] for n in FLEET}
        assert gres["gpu01"] == gres["gpu02"] == "gpu:h100:8(S:0-1)"
        assert gres["gpu04"] == "gpu:rtx4090:8(S:0-1)"
        # the MIG node offers its slices, as generated from its snapshot
        assert "gpu:1g.5gb:7" in gres["gpu03"] and "gpu:a100:5" in gres["gpu03"]
        # a MIG slice job is placed on gpu03 (a batch job: on 22.05 a job *step* asking a
        # typed GPU on this mixed MIG node is refused, "Invalid generic resource (gres)
        # specification", seen here with and without Links=; see docs/fleet.md)
        jobid = fleet_cluster.sbatch("--gres=gpu:3g.20gb:1", script="#!/bin/sh\nhostname\n")
        fleet_cluster.wait_job_state(jobid, "COMPLETED", timeout=60)
        assert (fleet_cluster.work_dir / f"slurm-{jobid}.out").read_text().strip() == "gpu03"
        pair = fleet_cluster.run(
            [
                "srun",
                "-N2",
                "--gres=gpu:h100:8",
                "sh",
                "-c",
                "echo $(hostname) $CUDA_VISIBLE_DEVICES",
            ]
        ).stdout
        assert sorted(pair.splitlines()) == ["gpu01 0,1,2,3,4,5,6,7", "gpu02 0,1,2,3,4,5,6,7"]
    finally:
        fleet_cluster.reset()


def test_a_node_whose_line_is_wrong_is_named(tmp_path):
    """slurmd -G per node: a gres.conf edited so one node's Cores= exceed its CPUs fails there."""
    snaps = write_snapshots(tmp_path / "snaps")
    good = gen_gres("--snapshot-dir", str(snaps))
    assert good.returncode == 0, good.stderr
    bad = good.stdout.replace(
        "NodeName=gpu04 Name=gpu Type=rtx4090 File=/dev/nvidia[4-7] Cores=56-111",
        "NodeName=gpu04 Name=gpu Type=rtx4090 File=/dev/nvidia[4-7] Cores=56-300",
    )
    assert bad != good.stdout
    from slurmgpu.fleet.cluster_gres import check_cluster_gres, gen_cluster_gres
    from slurmgpu.render.gres import GresOptions

    result = gen_cluster_gres([], str(snaps), GresOptions())
    checks = {c.node: c.check for c in check_cluster_gres(result, bad)}
    assert checks["gpu01"].ok and checks["gpu03"].ok
    assert not checks["gpu04"].ok and any(
        "Cores" in e or "GRES" in e for e in checks["gpu04"].errors
    )


def _expand(hostlist: str) -> list[str]:
    from slurmgpu.util.hostlist import expand_hostlist

    return expand_hostlist(hostlist)
