"""AMD (amdsmi double), Ascend (libdcmi C double, npu-smi double and recorded outputs) and
mixed inventories, the schema-2 snapshot and its validation (issue #26)."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import pytest

from slurmgpu.errors import InventoryError, SnapshotError
from slurmgpu.sources import accelerators, npu_smi, snapshot, sysfs
from tests.doubles import libdcmi
from tests.doubles.hosttree import build_host_tree
from tests.doubles.machines import DOUBLES, EXAMPLES, MACHINES, load_double

ROOT = DOUBLES.parents[1]
NPU_SMI = ROOT / "tests" / "data" / "npu-smi"


@pytest.fixture
def node(monkeypatch, tmp_path):
    """Serve a recorded machine through every vendor double; return (host root, machine)."""

    def serve(name: str, *, dcmi: bool = False) -> Path:
        path = MACHINES / f"{name}.json"
        nv = load_double()
        nv.use_machine(path)
        monkeypatch.setitem(sys.modules, "pynvml", nv)
        amd = load_double("amdsmi")
        amd.use_machine(path)
        monkeypatch.setitem(sys.modules, "amdsmi", amd)
        monkeypatch.setenv("SLURMGPU_FAKE_NPU_MACHINE", str(path))
        monkeypatch.setenv("PATH", f"{DOUBLES / 'bin'}{os.pathsep}{os.environ['PATH']}")
        lib = tmp_path / "no-libdcmi.so"
        if dcmi:
            lib = libdcmi.build(path, tmp_path / "dcmi")
        monkeypatch.setenv("SLURMGPU_DCMI_LIBRARY", str(lib))
        return build_host_tree(path, tmp_path / "host")

    return serve


def test_mi300x_spx_eight_gpus_with_xgmi_mesh(node):
    inv = accelerators.read_inventory(node("mi300x-8gpu"))
    assert [g.vendor for g in inv.gpus] == ["amd"] * 8
    assert [g.device_file for g in inv.gpus] == [f"/dev/dri/renderD{128 + i}" for i in range(8)]
    assert all(len(g.peer_links) == 7 and g.peer_links[0].kind == "XGMI" for g in inv.gpus)
    assert inv.gpus[0].memory_mib == 196608 and inv.gpus[0].compute_partition == "SPX"
    assert inv.gpus[4].numa_node == 1 and 96 in inv.gpus[4].cpu_affinity
    assert inv.drivers[0].library == "amdsmi" and inv.drivers[0].device_count == 8
    assert "/dev/kfd" in inv.host.device_nodes
    assert inv.driver_version == "" and inv.nvml_device_count is None


def test_mi300x_cpx_nps4_makes_each_package_eight_devices(node):
    inv = accelerators.read_inventory(node("mi300x-cpx-nps4"))
    assert len(inv.gpus) == 64
    assert {g.memory_mib for g in inv.gpus} == {196608 // 8}
    assert sorted({g.partition_id for g in inv.gpus}) == list(range(8))
    assert {(g.compute_partition, g.memory_partition) for g in inv.gpus} == {("CPX", "NPS4")}
    assert len({g.device_file for g in inv.gpus}) == 64
    # a logical GPU links over XGMI to the 56 logical GPUs of the other 7 packages
    assert {len(g.peer_links) for g in inv.gpus} == {56}


def test_atlas_800t_a2_through_dcmi(node):
    inv = accelerators.read_inventory(node("atlas-800t-a2", dcmi=True))
    assert [g.device_file for g in inv.gpus] == [f"/dev/davinci{i}" for i in range(8)]
    assert {g.name for g in inv.gpus} == {"Ascend910B3"} and inv.gpus[0].memory_mib == 65536
    assert all(g.uuid.startswith("NPU-") for g in inv.gpus)
    assert all(len(g.peer_links) == 7 and g.peer_links[0].kind == "HCCS" for g in inv.gpus)
    assert inv.gpus[0].numa_node == 6 and inv.drivers[0].library == "dcmi"
    assert inv.warnings == ()


def test_atlas_800t_a2_through_npu_smi_when_libdcmi_is_absent(node):
    inv = accelerators.read_inventory(node("atlas-800t-a2"))
    assert inv.drivers[0].library == "npu-smi" and len(inv.gpus) == 8
    assert all(g.uuid == "" for g in inv.gpus)
    assert all(len(g.peer_links) == 7 for g in inv.gpus)
    assert any("npu-smi" in w for w in inv.warnings)


def test_mixed_node_has_both_vendors(node):
    inv = accelerators.read_inventory(node("mixed-gpu-npu"))
    assert inv.vendors == ("nvidia", "ascend")
    assert [g.gres_name for g in inv.gpus] == ["gpu"] * 4 + ["npu"] * 4
    assert all(not g.peer_links for g in inv.gpus)  # PCIe cards: no HCCS between them
    assert inv.nvml_device_count == 4


def test_a_vendor_asked_for_by_name_must_be_there(node):
    root = node("mi300x-8gpu")
    with pytest.raises(InventoryError, match="no Ascend driver loaded"):
        accelerators.read_inventory(root, vendors=("ascend",))
    inv = accelerators.read_inventory(root, vendors=("amd",))
    assert len(inv.gpus) == 8


def test_recorded_npu_smi_tables_parse():
    version, rows = npu_smi.parse_info((NPU_SMI / "910b4-24.1.1.txt").read_text())
    assert version == "24.1.1"
    assert [(r.npu_id, r.chip, r.bus_id, r.hbm_total_mib) for r in rows] == [
        (0, "910B4", "00000000:C1:00.0", 32768),
        (1, "910B4", "00000000:C2:00.0", 32768),
    ]
    _, rows = npu_smi.parse_info((NPU_SMI / "ascend910-phy-id.txt").read_text())
    assert [(r.npu_id, r.chip_id, r.phy_id) for r in rows] == [(0, 0, 0), (0, 1, 1), (1, 0, 2)]
    with pytest.raises(InventoryError, match="no NPU table"):
        npu_smi.parse_info("NPU not found\n")


# -- snapshots ------------------------------------------------------------------------------
V1 = sorted((ROOT / "tests" / "data" / "snapshots-v1").glob("*.json"))


@pytest.mark.parametrize("path", V1, ids=lambda p: p.stem)
def test_schema_1_snapshots_still_read_and_round_trip(path):
    text = path.read_text()
    inv = snapshot.loads(text)
    assert inv.schema_version == 1 and set(inv.vendors) == {"nvidia"}
    assert snapshot.dumps(inv) == text
    # the same machine written today differs only in its version
    now = (EXAMPLES / path.name).read_text()
    assert now.replace('"schema_version": 2', '"schema_version": 1', 1) == text


@pytest.mark.parametrize(
    "name", ["mi300x-8gpu", "mi300x-cpx-nps4", "atlas-800t-a2", "mixed-gpu-npu"]
)
def test_vendor_examples_round_trip(name):
    text = (EXAMPLES / f"{name}.json").read_text()
    assert snapshot.dumps(snapshot.loads(text)) == text
    assert json.loads(text)["schema_version"] == 2


def _break(name: str, change) -> str:
    data = json.loads((EXAMPLES / f"{name}.json").read_text())
    change(data)
    return json.dumps(data)


@pytest.mark.parametrize(
    ("name", "change", "message"),
    [
        ("mi300x-8gpu", lambda d: d["gpus"][0].update(vendor="intel"), "gpus[0].vendor"),
        ("mi300x-8gpu", lambda d: d["gpus"][0].update(minor_number=5), "minor_number: 5 is out"),
        ("mi300x-8gpu", lambda d: d["gpus"][0].update(uuid="GPU-x"), "not an AMD GPU UUID"),
        (
            "mi300x-cpx-nps4",
            lambda d: d["gpus"][1].update(compute_partition="XPX"),
            "compute_partition: expected one of SPX",
        ),
        (
            "mi300x-8gpu",
            lambda d: d["gpus"][0]["peer_links"][0].update(kind="NVLINK"),
            "peer_links[0].kind",
        ),
        (
            "atlas-800t-a2",
            lambda d: d["gpus"][0].update(compute_partition="CPX"),
            "partitions are AMD's",
        ),
        ("atlas-800t-a2", lambda d: d["drivers"][0].update(library="x"), "drivers[0].library"),
    ],
)
def test_bad_vendor_fields_are_refused_naming_the_field(name, change, message):
    with pytest.raises(SnapshotError, match=message.replace("[", r"\[").replace("]", r"\]")):
        snapshot.loads(_break(name, change))


def test_a_deleted_npu_is_noticed():
    from slurmgpu.render import gres

    inv = snapshot.load(EXAMPLES / "atlas-800t-a2.json")
    short = dataclasses.replace(inv, gpus=inv.gpus[:7])
    with pytest.raises(InventoryError, match="npu-smi counted 8 ascend device"):
        gres.render_gres_conf(short, gres.GresOptions(), inventory_sha256="0" * 64)


def test_host_reads_vendor_device_nodes(tmp_path):
    root = build_host_tree(MACHINES / "mixed-gpu-npu.json", tmp_path)
    nodes = sysfs.read_device_nodes(root)
    for path in ("/dev/nvidia0", "/dev/davinci3", "/dev/davinci_manager", "/dev/hisi_hdc"):
        assert path in nodes


def test_schema_1_file_with_schema_2_fields_is_refused():
    data = json.loads(V1[0].read_text())
    data["gpus"][0]["vendor"] = "amd"
    with pytest.raises(SnapshotError, match=r"gpus\[0\]\.vendor: a schema 2 field"):
        snapshot.loads(json.dumps(data))
