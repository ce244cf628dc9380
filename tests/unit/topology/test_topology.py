"""gen-topology: the switch-description loader, the checks Slurm needs, and both renderers."""

from __future__ import annotations

import textwrap

import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from slurmgpu.errors import TopologyError
from slurmgpu.render.topology import render_topology
from slurmgpu.sources.topology_file import load_topology_spec, parse_topology_spec
from slurmgpu.util.tomlpos import find_key_line

FABRIC = textwrap.dedent(
    """\
    # two leaves under one spine, two NVLink racks
    block_sizes = [2, 4]

    [[switch]]
    name = "leaf1"
    nodes = "dgx[01-02]"

    [[switch]]
    name = "leaf2"
    nodes = ["dgx03", "dgx04"]
    link_speed = 400

    [[switch]]
    name = "spine"
    switches = "leaf[1-2]"

    [[nvlink_domain]]
    name = "rack1"
    nodes = "dgx[01-02]"

    [[nvlink_domain]]
    name = "rack2"
    nodes = "dgx[03-04]"
    """
)
NODES = ["dgx01", "dgx02", "dgx03", "dgx04"]


def spec(text: str = FABRIC):
    return parse_topology_spec(text, "fabric.toml")


def test_find_key_line_in_array_tables():
    assert find_key_line(FABRIC, "", "block_sizes") == 2
    assert find_key_line(FABRIC, "switch", None, 1) == 8
    assert find_key_line(FABRIC, "switch", "nodes", 1) == 10
    assert find_key_line(FABRIC, "nvlink_domain", "nodes", 1) == 23
    assert find_key_line(FABRIC, "switch", "nodes", 7) is None


def test_loader_expands_hostlists_and_keeps_lines():
    s = spec()
    assert [sw.name for sw in s.switches] == ["leaf1", "leaf2", "spine"]
    assert s.switches[0].nodes == ("dgx01", "dgx02")
    assert s.switches[2].switches == ("leaf1", "leaf2")
    assert s.switches[1].link_speed == 400
    assert s.switches[1].nodes_line == 10
    assert s.blocks[1].nodes == ("dgx03", "dgx04")
    assert s.block_sizes == (2, 4)


def test_tree_conf_for_22_05():
    out = render_topology(spec(), slurm_version=(22, 5), nodes=NODES)
    assert set(out.files) == {"topology.conf"}
    body = [ln for ln in out.files["topology.conf"].splitlines() if not ln.startswith("#")]
    assert body == [
        "SwitchName=leaf1 Nodes=dgx[01-02]",
        "SwitchName=leaf2 Nodes=dgx[03-04] LinkSpeed=400",
        "SwitchName=spine Switches=leaf[1-2]",
    ]
    assert "TopologyPlugin=topology/tree" in out.files["topology.conf"]


def test_block_conf_needs_23_11():
    with pytest.raises(TopologyError, match=r"23\.11"):
        render_topology(spec(), slurm_version=(22, 5), plugin="block")
    out = render_topology(spec(), slurm_version=(23, 11), plugin="block", nodes=NODES)
    body = [ln for ln in out.files["topology.conf"].splitlines() if not ln.startswith("#")]
    assert body == [
        "BlockName=rack1 Nodes=dgx[01-02]",
        "BlockName=rack2 Nodes=dgx[03-04]",
        "BlockSizes=2,4",
    ]


def test_yaml_from_25_05_carries_both_topologies():
    import yaml  # PyYAML (a test dependency) parses the file as Slurm's YAML parser would

    out = render_topology(spec(), slurm_version=(25, 5), nodes=NODES)
    assert set(out.files) == {"topology.conf", "topology.yaml"}
    doc = yaml.safe_load(out.files["topology.yaml"])
    assert [t["topology"] for t in doc] == ["tree", "nvlink"]
    tree, block = doc
    assert tree["cluster_default"] is True and block["cluster_default"] is False
    assert tree["tree"]["switches"][2] == {"switch": "spine", "children": "leaf[1-2]"}
    assert block["block"]["block_sizes"] == [2, 4]
    assert block["block"]["blocks"][0] == {"block": "rack1", "nodes": "dgx[01-02]"}
    assert any("ignores topology.conf" in w for w in out.warnings)


def test_output_is_byte_identical_for_same_input():
    a = render_topology(spec(), slurm_version=(25, 11), nodes=NODES)
    b = render_topology(spec(), slurm_version=(25, 11), nodes=list(reversed(NODES)))
    assert a.files == b.files


def test_node_under_two_leaves_names_the_line():
    text = FABRIC.replace('nodes = ["dgx03", "dgx04"]', 'nodes = ["dgx02", "dgx03", "dgx04"]')
    with pytest.raises(TopologyError) as err:
        render_topology(spec(text), slurm_version=(22, 5))
    assert str(err.value).startswith("fabric.toml:10:")
    assert "'dgx02' is under two leaf switches, 'leaf1' and 'leaf2'" in str(err.value)


def test_unknown_child_switch_names_the_line():
    text = FABRIC.replace('switches = "leaf[1-2]"', 'switches = "leaf[1-3]"')
    with pytest.raises(TopologyError) as err:
        render_topology(spec(text), slurm_version=(22, 5))
    assert str(err.value) == ("fabric.toml:15: switch 'spine' references unknown switch 'leaf3'")


def test_switch_cycle_rejected():
    text = FABRIC + '\n[[switch]]\nname = "top"\nswitches = "spine"\n'
    text = text.replace('switches = "leaf[1-2]"', 'switches = ["leaf1", "leaf2", "top"]')
    with pytest.raises(TopologyError, match="switch cycle spine -> top -> spine"):
        render_topology(spec(text), slurm_version=(22, 5))


def test_every_snapshot_node_must_be_under_a_switch():
    with pytest.raises(TopologyError, match=r"dgx05 are under no switch"):
        render_topology(spec(), slurm_version=(22, 5), nodes=[*NODES, "dgx05"])


def test_switch_naming_a_node_without_snapshot_rejected():
    with pytest.raises(TopologyError, match=r"fabric.toml:6: switch 'leaf1' names node 'dgx01'"):
        render_topology(spec(), slurm_version=(22, 5), nodes=NODES[1:])


def test_node_in_two_domains_and_block_size_rules():
    text = FABRIC.replace('nodes = "dgx[03-04]"', 'nodes = "dgx[02-04]"')
    with pytest.raises(TopologyError, match="'dgx02' is in two NVLink domains"):
        render_topology(spec(text), slurm_version=(23, 11), plugin="block")
    with pytest.raises(TopologyError, match=r"fabric\.toml:2: .*6 is not a power-of-two multiple"):
        render_topology(spec(FABRIC.replace("[2, 4]", "[2, 6]")), slurm_version=(23, 11))
    with pytest.raises(TopologyError, match="fewer than the base block size 4"):
        render_topology(spec(FABRIC.replace("[2, 4]", "[4]")), slurm_version=(23, 11))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[switch]]\nname = "a"\nnodez = "n1"\n', "fabric.toml:3: switch[0].nodez: unknown key"),
        ('[[switch]]\nname = "a"\n', "fabric.toml:2: switch[0].name: switch 'a' has neither"),
        ('[[switch]]\nnodes = "n1"\n', "fabric.toml:1: switch[0]: a non-empty name is required"),
        ('[[switch]]\nname = "a"\nnodes = "n[1-"\n', "fabric.toml:3: switch[0].nodes: unbalanced"),
        ("block_sizes = [0]\n", "fabric.toml:1: block_sizes: expected a list of positive"),
        ("switches = 1\n", "fabric.toml:1: switches: unknown key"),
        ("[[switch]\n", "fabric.toml: not valid TOML"),
    ],
)
def test_malformed_descriptions(text, message):
    with pytest.raises(TopologyError) as err:
        parse_topology_spec(text, "fabric.toml")
    assert str(err.value).startswith(message)


def test_missing_file_is_one_line(tmp_path):
    with pytest.raises(TopologyError, match="cannot read"):
        load_topology_spec(tmp_path / "nope.toml")


def test_cli_writes_atomically_with_backup_and_diff(tmp_path):
    fabric = tmp_path / "fabric.toml"
    fabric.write_text(FABRIC)
    out = tmp_path / "etc"
    out.mkdir()
    (out / "topology.conf").write_text("SwitchName=old Nodes=dgx01\n")
    runner = CliRunner()
    args = ["gen-topology", "--switches", str(fabric), "--nodes", "dgx[01-04]"]
    args += ["--slurm-version", "24.05", "--output-dir", str(out)]
    diff = runner.invoke(main, [*args, "--diff"])
    assert diff.exit_code == 3, diff.output  # they differ (docs/acting.md, exit codes)
    assert "-SwitchName=old Nodes=dgx01" in diff.output
    assert "+SwitchName=spine Switches=leaf[1-2]" in diff.output
    assert (out / "topology.conf").read_text() == "SwitchName=old Nodes=dgx01\n"
    done = runner.invoke(main, args)
    assert done.exit_code == 3, done.output  # written
    assert "SwitchName=spine Switches=leaf[1-2]" in (out / "topology.conf").read_text()
    assert (out / "topology.conf.bak").read_text() == "SwitchName=old Nodes=dgx01\n"
    assert not (out / "topology.yaml").exists()  # 24.05 reads only topology.conf
    assert sorted(p.name for p in out.iterdir()) == ["topology.conf", "topology.conf.bak"]
    assert runner.invoke(main, [*args, "--diff"]).exit_code == 0  # equal now


def test_cli_error_is_one_line_and_writes_nothing(tmp_path):
    fabric = tmp_path / "fabric.toml"
    fabric.write_text(FABRIC.replace('switches = "leaf[1-2]"', 'switches = "leaf9"'))
    result = CliRunner().invoke(
        main, ["gen-topology", "--switches", str(fabric), "--output-dir", str(tmp_path)]
    )
    assert result.exit_code == 1
    assert result.output.strip().count("\n") == 0
    assert "references unknown switch 'leaf9'" in result.output
    assert not (tmp_path / "topology.conf").exists()
