"""gen-topology output loaded by the real slurmctld (topology/tree on the test cluster)."""

from __future__ import annotations

import textwrap

import pytest
from click.testing import CliRunner

from slurmgpu.cli import main

FABRIC = textwrap.dedent(
    """\
    [[switch]]
    name = "leaf1"
    nodes = "gpu01"

    [[switch]]
    name = "spine"
    switches = "leaf1"
    """
)


@pytest.fixture
def topology_cluster(slurm_cluster, tmp_path):
    fabric = tmp_path / "fabric.toml"
    fabric.write_text(FABRIC)
    # slurmctld 25.05+ reads topology.yaml before topology.conf: none may be left over
    (slurm_cluster.conf_dir / "topology.yaml").unlink(missing_ok=True)
    result = CliRunner().invoke(
        main,
        [
            "gen-topology",
            "--switches",
            str(fabric),
            "--nodes",
            slurm_cluster.node_name,
            "--slurm-version",
            "22.05",
            "--output-dir",
            str(slurm_cluster.conf_dir),
        ],
    )
    assert result.exit_code in (0, 3), result.output  # 3: written (docs/acting.md)
    try:
        slurm_cluster.reconfigure(extra_conf="TopologyPlugin=topology/tree")
        yield slurm_cluster
    finally:
        for name in ("topology.conf", "topology.yaml"):
            (slurm_cluster.conf_dir / name).unlink(missing_ok=True)
        slurm_cluster.reset()


def test_slurmctld_reads_the_generated_tree(topology_cluster):
    shown = topology_cluster.scontrol("show", "topology")
    records = {}
    for line in shown.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "SwitchName" in fields:
            records[fields["SwitchName"]] = fields
    assert set(records) == {"leaf1", "spine"}
    assert records["leaf1"]["Nodes"] == "gpu01"
    assert records["leaf1"]["Level"] == "0"
    assert records["spine"]["Switches"] == "leaf1"
    assert records["spine"]["Level"] == "1"
    # and the scheduler still places a job on the node under the tree
    jobid = topology_cluster.sbatch("--gres=gpu:1", "--switches=1")
    assert topology_cluster.wait_job_state(jobid, {"COMPLETED"}, timeout=60) == "COMPLETED"
