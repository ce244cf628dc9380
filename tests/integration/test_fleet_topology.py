"""A generated topology.conf places multi-node GPU jobs under one leaf switch (topology/tree).

Checked through the scheduler's own placement (scontrol's NodeList), not by reading the file back.
The leaves are chosen against Slurm's default order: leaf1 = gpu01+gpu03, leaf2 = gpu02+gpu04,
so without topology a 2-node job gets gpu[01-02] (lowest names first), with it a leaf pair.
topology/block needs Slurm 23.11+: on Debian 12's 22.05 only the tree plugin can be tested.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.harness.multinode import MultiNodeCluster

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slurm_only(
        "host",
        reason="the multi-node harness runs the host's Slurm only (not in the Debian root yet)",
    ),
]

SWITCHES = """
[[switch]]
name = "leaf1"
nodes = "gpu[01,03]"

[[switch]]
name = "leaf2"
nodes = "gpu[02,04]"

[[switch]]
name = "spine"
switches = "leaf[1-2]"
"""
LEAVES = ({"gpu01", "gpu03"}, {"gpu02", "gpu04"})


def _placed(cluster: MultiNodeCluster) -> set[str]:
    """Run a 2-node GPU job to completion; the nodes slurmctld gave it (scontrol NodeList).

    scontrol, not sacct: after the reconfiguration (nodes re-registered) sacct printed
    `NodeList=gpu02` for a job that scontrol showed on `gpu[02,04]` (NNodes=2): slurmdbd
    maps its node index bitmap onto an older node table. MinJobAge=300 keeps the record.
    """
    from slurmgpu.sources.slurm import parse_scontrol_record
    from slurmgpu.util.hostlist import expand_hostlist

    jobid = cluster.sbatch("-N2", "--gres=gpu:1", script="#!/bin/sh\nsleep 1\n")
    cluster.wait_job_state(jobid, "COMPLETED", timeout=60)
    job = parse_scontrol_record(cluster.scontrol("show", "-o", "job", str(jobid)).strip())
    assert job["NumNodes"] == "2", job
    return set(expand_hostlist(job["NodeList"]))


def test_tree_topology_keeps_a_two_node_job_under_one_leaf(
    fleet_cluster: MultiNodeCluster, tmp_path
) -> None:
    assert _placed(fleet_cluster) == {"gpu01", "gpu02"}  # Slurm's choice without topology
    switches = tmp_path / "switches.toml"
    switches.write_text(SWITCHES)
    gen = subprocess.run(
        [
            sys.executable,
            "-m",
            "slurmgpu",
            "gen-topology",
            "--switches",
            str(switches),
            "--nodes",
            "gpu[01-04]",
            "--plugin",
            "tree",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert gen.returncode == 0, gen.stderr
    assert "SwitchName=leaf1 Nodes=gpu[01,03]" in gen.stdout
    try:
        fleet_cluster.reconfigure(topology_conf=gen.stdout)
        assert "topology/tree" in fleet_cluster.scontrol("show", "config")
        assert _placed(fleet_cluster) in LEAVES
        # gpu01 busy: the job must take the other leaf whole, not gpu02 + gpu03
        blocker = fleet_cluster.sbatch("-w", "gpu01", "--exclusive", script="#!/bin/sh\nsleep 60\n")
        fleet_cluster.wait_job_state(blocker, "RUNNING", timeout=30)
        assert _placed(fleet_cluster) == {"gpu02", "gpu04"}
    finally:
        fleet_cluster.reset()
