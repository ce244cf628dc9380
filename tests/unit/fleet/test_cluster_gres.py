"""Cluster-wide gres.conf: NodeName= on every line, identical nodes merged, per-node checks."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from slurmgpu.errors import UsageError
from slurmgpu.render import gres
from slurmgpu.render.cluster_gres import render_cluster_gres
from slurmgpu.sources import snapshot
from tests.doubles.machines import EXAMPLES

FLEET = {"gpu01": "dgx-h100", "gpu02": "dgx-h100", "gpu03": "dgx-a100-mig", "gpu04": "pcie-8gpu"}


def node_inventory(name: str, machine: str):
    inv = snapshot.load(EXAMPLES / f"{machine}.json")
    return dataclasses.replace(inv, host=dataclasses.replace(inv.host, hostname=name))


def write_snapshots(directory: Path, nodes=FLEET) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, machine in nodes.items():
        data = json.loads((EXAMPLES / f"{machine}.json").read_text())
        data["host"]["hostname"] = name
        (directory / f"{name}.json").write_text(json.dumps(data))
    return directory


def render(nodes=FLEET, **opts):
    invs = [node_inventory(n, m) for n, m in nodes.items()]
    shas = {inv.node_name: snapshot.inventory_sha256(inv) for inv in invs}
    return render_cluster_gres(invs, gres.GresOptions(**opts), inventory_sha256=shas)


def config_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]


def test_every_line_names_its_nodes_and_identical_nodes_share_one_hostlist():
    result = render()
    lines = config_lines(result.gres_conf)
    assert lines[0] == "AutoDetect=off"
    assert all(ln.startswith("NodeName=") for ln in lines[1:])
    names = {ln.split()[0] for ln in lines[1:]}
    assert names == {"NodeName=gpu[01-02]", "NodeName=gpu03", "NodeName=gpu04"}
    # 8 H100 lines (one per GPU: Links differ), 17 MIG/whole lines on gpu03, 2 on gpu04
    assert sum(ln.startswith("NodeName=gpu[01-02] ") for ln in lines) == 8
    assert sum("MultipleFiles=" in ln for ln in lines) == 12
    assert [g.names for g in result.groups] == [("gpu01", "gpu02"), ("gpu03",), ("gpu04",)]


def test_node_lines_are_grouped_like_the_gres_lines():
    result = render()
    lines = config_lines(result.node_conf)
    assert lines[0] == "GresTypes=gpu"
    assert lines[1].startswith("NodeName=gpu[01-02] CPUs=224 ") and "Gres=gpu:h100:8" in lines[1]
    assert lines[2].startswith("NodeName=gpu03 CPUs=256 ") and "gpu:1g.5gb:7" in lines[2]
    assert lines[3].startswith("NodeName=gpu04 ") and "Gres=gpu:rtx4090:8" in lines[3]
    assert result.node_line_for("gpu02").startswith("NodeName=gpu02 CPUs=224 ")


def test_merged_groups_carry_no_single_node_uuid_but_singles_do():
    text = render().gres_conf
    h100_uuid = snapshot.load(EXAMPLES / "dgx-h100.json").gpus[0].uuid
    a100 = snapshot.load(EXAMPLES / "dgx-a100-mig.json")
    assert h100_uuid not in text
    assert a100.gpus[3].uuid in text


def test_a_changed_node_leaves_its_group():
    invs = [node_inventory(n, m) for n, m in FLEET.items()]
    h100 = invs[1]
    # gpu02 has a GPU fewer, as its own inventory records it (NVML counts 7, no /dev node)
    gone = f"/dev/nvidia{h100.gpus[7].minor_number}"
    host = dataclasses.replace(
        h100.host, device_nodes=tuple(d for d in h100.host.device_nodes if d != gone)
    )
    invs[1] = dataclasses.replace(h100, gpus=h100.gpus[:7], nvml_device_count=7, host=host)
    shas = {inv.node_name: "0" * 64 for inv in invs}
    result = render_cluster_gres(invs, gres.GresOptions(), inventory_sha256=shas)
    assert [g.names for g in result.groups][:2] == [("gpu01",), ("gpu02",)]
    assert "NodeName=gpu02 CPUs=224" in result.node_conf and "Gres=gpu:h100:7" in result.node_conf


def test_output_is_deterministic_and_order_free():
    a = render()
    b = render(dict(reversed(list(FLEET.items()))))
    assert a.gres_conf == b.gres_conf and a.node_conf == b.node_conf


def test_shards_name_their_nodes_too():
    result = render({"gpu01": "dgx-h100", "gpu02": "dgx-h100"}, shards_per_gpu=4)
    shard = [ln for ln in config_lines(result.gres_conf) if "Name=shard" in ln]
    assert len(shard) == 8 and all(ln.startswith("NodeName=gpu[01-02] ") for ln in shard)


def test_two_snapshots_of_one_node_are_refused():
    invs = [node_inventory("gpu01", "dgx-h100"), node_inventory("gpu01", "pcie-8gpu")]
    with pytest.raises(UsageError, match="two snapshots describe node gpu01"):
        render_cluster_gres(invs, gres.GresOptions(), inventory_sha256={"gpu01": "0"})


def test_cli_snapshot_dir_and_repeated_snapshot_agree(tmp_path):
    d = write_snapshots(tmp_path / "snaps")
    by_dir = CliRunner().invoke(main, ["gen-gres", "--snapshot-dir", str(d), "--node-line"])
    files = [str(d / f"{n}.json") for n in FLEET]
    args = ["gen-gres", "--node-line"] + [x for f in files for x in ("--snapshot", f)]
    by_files = CliRunner().invoke(main, args)
    assert by_dir.exit_code == 0, by_dir.output
    assert by_dir.output == by_files.output
    assert "NodeName=gpu[01-02] Name=gpu Type=h100 File=/dev/nvidia0" in by_dir.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--snapshot-dir", "{tmp}/none"], "--snapshot-dir {tmp}/none: not a directory"),
        (["--snapshot-dir", "{tmp}"], "no *.json snapshot in it"),
        (["--snapshot-dir", "{snaps}", "--node-name", "x"], "--node-name cannot be used"),
    ],
)
def test_cli_bad_input_is_one_line(tmp_path, args, message):
    snaps = write_snapshots(tmp_path / "snaps", {"gpu01": "dgx-h100"})
    argv = [a.format(tmp=tmp_path / "empty", snaps=snaps) for a in args]
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(main, ["gen-gres", *argv])
    assert result.exit_code != 0
    assert result.output.strip().splitlines()[-1].startswith("slurmgpu: error: ")
    assert message.format(tmp=tmp_path / "empty") in result.output
