"""A generated topology.conf places multi-node GPU jobs under one leaf switch (topology/tree).

Checked through the scheduler's own placement (scontrol's NodeList), not by reading the file back.
The leaves are chosen against Slurm's default order: leaf1 = gpu01+gpu03, leaf2 = gpu02+gpu04,
so without topology a 2-node job gets gpu[01-02] (lowest names first), with it a leaf pair.
topology/block needs Slurm 23.11+: on Debian 12's 22.05 only the tree plugin can be tested.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.multinode import MultiNodeCluster

pytestmark = pytest.mark.integration

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


def _placed(cluster: MultiNodeCluster, *args: str) -> set[str]:
    """Run a 2-node GPU job to completion; the nodes slurmctld gave it (scontrol NodeList).

    scontrol, not sacct: after the reconfiguration (nodes re-registered) sacct printed
    `NodeList=gpu02` for a job that scontrol showed on `gpu[02,04]` (NNodes=2): slurmdbd
    maps its node index bitmap onto an older node table. MinJobAge=300 keeps the record.
    """
    from slurmgpu.sources.slurm import parse_scontrol_record
    from slurmgpu.util.hostlist import expand_hostlist

    jobid = cluster.sbatch("-N2", "--gres=gpu:1", *args, script="#!/bin/sh\nsleep 1\n")
    cluster.wait_job_state(jobid, "COMPLETED", timeout=60)
    job = parse_scontrol_record(cluster.scontrol("show", "-o", "job", str(jobid)).strip())
    assert job["NumNodes"] == "2", job
    return set(expand_hostlist(job["NodeList"]))


def _gen_topology(tmp_path: Path, switches: str, *args: str) -> dict[str, str]:
    """`slurmgpu gen-topology --output-dir` for the installed Slurm; file name -> text."""
    spec = tmp_path / "switches.toml"
    spec.write_text(switches)
    out = tmp_path / "topology"
    out.mkdir(exist_ok=True)
    gen = subprocess.run(
        [sys.executable, "-m", "slurmgpu", "gen-topology", "--switches", str(spec),
         "--nodes", "gpu[01-04]", "--output-dir", str(out), *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert gen.returncode in (0, 3), gen.stderr  # 3: written (docs/acting.md, exit codes)
    return {f.name: f.read_text() for f in sorted(out.iterdir()) if not f.name.endswith("~")}


def test_tree_topology_keeps_a_two_node_job_under_one_leaf(
    fleet_cluster: MultiNodeCluster, tmp_path, slurm_series
) -> None:
    assert _placed(fleet_cluster) == {"gpu01", "gpu02"}  # Slurm's choice without topology
    files = _gen_topology(tmp_path, SWITCHES, "--plugin", "tree")
    assert "SwitchName=leaf1 Nodes=gpu[01,03]" in files["topology.conf"]
    # 25.05+: topology.yaml too (slurmctld reads it first); earlier releases only the .conf
    assert ("topology.yaml" in files) == (slurm_series >= (25, 5)), sorted(files)
    try:
        fleet_cluster.reconfigure(
            topology_conf=files["topology.conf"], topology_yaml=files.get("topology.yaml")
        )
        assert "topology/tree" in fleet_cluster.scontrol("show", "config")
        assert _placed(fleet_cluster) in LEAVES
        # gpu01 busy: the job must take the other leaf whole, not gpu02 + gpu03
        blocker = fleet_cluster.sbatch("-w", "gpu01", "--exclusive", script="#!/bin/sh\nsleep 60\n")
        fleet_cluster.wait_job_state(blocker, "RUNNING", timeout=30)
        assert _placed(fleet_cluster) == {"gpu02", "gpu04"}
    finally:
        fleet_cluster.reset()


# NVLink domains across the leaves: nvl1 = gpu[01-02], nvl2 = gpu[03-04]
DOMAINS = """
[[nvlink_domain]]
name = "nvl1"
nodes = "gpu[01-02]"

[[nvlink_domain]]
name = "nvl2"
nodes = "gpu[03-04]"
"""
BLOCKS = ({"gpu01", "gpu02"}, {"gpu03", "gpu04"})


@pytest.mark.slurm_not(
    "22.05", "24.11", fact="topology.yaml (a topology per partition, Topology=) is Slurm 25.05+"
)
def test_topology_yaml_gives_each_partition_its_own_topology(
    fleet_cluster: MultiNodeCluster, tmp_path
) -> None:
    # one fabric, two topologies: the switch tree (cluster default) and the NVLink blocks,
    # which the partition `nvl` picks with Topology=nvlink (the name gen-topology gives it)
    files = _gen_topology(tmp_path, SWITCHES + DOMAINS, "--plugin", "tree")
    assert "- topology: nvlink" in files["topology.yaml"]
    partitions = [
        "PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
        "PartitionName=nvl Nodes=ALL MaxTime=INFINITE State=UP Topology=nvlink",
    ]
    try:
        fleet_cluster.reconfigure(
            topology_conf=files["topology.conf"],
            topology_yaml=files["topology.yaml"],
            partitions=partitions,
        )
        # gpu01 busy: the tree partition takes leaf2 (gpu02+gpu04), the NVLink one nvl2
        blocker = fleet_cluster.sbatch("-w", "gpu01", "--exclusive", script="#!/bin/sh\nsleep 60\n")
        fleet_cluster.wait_job_state(blocker, "RUNNING", timeout=30)
        assert _placed(fleet_cluster) == {"gpu02", "gpu04"}
        assert _placed(fleet_cluster, "-p", "nvl") == {"gpu03", "gpu04"}
    finally:
        fleet_cluster.reset()
