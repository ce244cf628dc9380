"""gen-topology against hostile switch files, node names and huge or deep graphs."""

from __future__ import annotations

import time

import pytest

from slurmgpu.errors import TopologyError
from slurmgpu.render.topology import render_topology
from slurmgpu.sources.topology_file import parse_topology_spec
from tests.hostile.conftest import EXAMPLES, assert_one_error, cli, example, write_json

SWITCHES = EXAMPLES / "switches.toml"


def _gen(tmp_path, text, *extra):
    path = tmp_path / "sw.toml"
    path.write_text(text, encoding="utf-8")
    return cli("gen-topology", "--switches", path, *extra)


@pytest.mark.parametrize(
    "nodes",
    [
        'nodes = "dgx01\\nSwitchName=evil Nodes=dgx02"',
        'nodes = "dgx01 Switches=evil"',
        'nodes = ["dgx01", "dgx#02"]',
        'nodes = "dgx=01"',
        'nodes = "dgx01,\\u2028SwitchName=x"',
    ],
)
def test_node_names_cannot_inject_switch_lines(tmp_path, nodes):
    run = _gen(tmp_path, f'[[switch]]\nname = "leaf1"\n{nodes}\n')
    assert_one_error(run, 1, says="sw.toml:3: switch[0].nodes")
    assert "SwitchName=" not in run.stdout


@pytest.mark.parametrize("name", ["leaf\\nSwitchName=evil", "leaf 1", "a#b", "a=b", "x" * 65])
def test_switch_and_domain_names_are_checked(tmp_path, name):
    run = _gen(tmp_path, f'[[switch]]\nname = "{name}"\nnodes = "dgx01"\n')
    assert_one_error(run, 1, says="switch[0].name")
    run = _gen(tmp_path, f'[[nvlink_domain]]\nname = "{name}"\nnodes = "dgx01"\n')
    assert_one_error(run, 1, says="nvlink_domain[0].name")


def test_child_switch_names_are_checked(tmp_path):
    text = '[[switch]]\nname = "spine"\nswitches = "leaf1 Nodes=x"\n'
    assert_one_error(_gen(tmp_path, text), 1, says="switch[0].switches")


def test_snapshot_host_name_cannot_inject(tmp_path):
    data = example("dgx-h100")
    data["host"]["hostname"] = "dgx01\nSwitchName=evil"
    run = cli("gen-topology", "--switches", SWITCHES, write_json(tmp_path / "s.json", data))
    assert_one_error(run, 1, says="host.hostname")


def test_huge_hostlist_in_a_switch_file_is_refused_quickly(tmp_path):
    started = time.monotonic()
    run = _gen(tmp_path, '[[switch]]\nname = "leaf1"\nnodes = "n[0-99999999]"\n')
    assert_one_error(run, 1, says="limit of 65536")
    assert time.monotonic() - started < 10


def test_multiplying_brackets_are_refused(tmp_path):
    run = _gen(tmp_path, '[[switch]]\nname = "l"\nnodes = "r[0-999]n[0-999]"\n')
    assert_one_error(run, 1, says="limit of 65536")


def _chain(n: int, *, close: bool) -> str:
    parts = ['[[switch]]\nname = "s0"\nnodes = "n0"\n']
    for i in range(1, n):
        parts.append(f'[[switch]]\nname = "s{i}"\nswitches = "s{i - 1}"\n')
    if close:  # s0 also sits above the top: a cycle through all n switches
        parts[0] = f'[[switch]]\nname = "s0"\nnodes = "n0"\nswitches = "s{n - 1}"\n'
    return "".join(parts)


def test_a_3000_switch_chain_is_checked_without_recursion():
    spec = parse_topology_spec(_chain(3000, close=False), "chain.toml")
    files = render_topology(spec, slurm_version=(22, 5), nodes=["n0"])
    assert files.files["topology.conf"].count("SwitchName=") == 3000


def test_a_3000_switch_cycle_is_one_line(tmp_path):
    run = _gen(tmp_path, _chain(3000, close=True))
    line = assert_one_error(run, 1, says="switch cycle")
    assert len(line) < 500


def test_cycle_error_names_the_switches():
    spec = parse_topology_spec(_chain(3, close=True), "c.toml")
    with pytest.raises(TopologyError, match=r"switch cycle s0 -> s2 -> s1 -> s0"):
        render_topology(spec, slurm_version=(22, 5))


def test_many_large_switches_are_limited_for_the_whole_file(tmp_path):
    text = "".join(
        f'[[switch]]\nname = "l{i}"\nnodes = "s{i}n[0-59999]"\n' for i in range(20)
    )  # 1.2 million names, each switch under the per-hostlist limit
    assert_one_error(_gen(tmp_path, text), 1, says="in the whole file")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (
            '[[switch]]\nname = "l"\nnodes = "a"\nlink_speed = 1180591620717411303424\n',
            "link_speed",
        ),
        ("block_sizes = [99999999999999999999]\n", "block_sizes"),
        ("block_sizes = [0]\n", "block_sizes"),
    ],
)
def test_numbers_beyond_what_slurm_stores_are_refused(tmp_path, text, says):
    assert_one_error(_gen(tmp_path, text), 1, says=says)
