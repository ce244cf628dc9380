"""Failing vendor sources: one line naming the device, or (--allow-partial) a loud partial
inventory that gen-gres refuses to use silently; never a dropped device with exit 0."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from slurmgpu.errors import InventoryError
from slurmgpu.render import gres
from slurmgpu.sources import accelerators
from tests.doubles.machines import MACHINES
from tests.unit.vendors.test_vendor_inventory import node  # noqa: F401  (fixture)


def test_lost_amd_gpu_is_named_or_left_out_loudly(node, tmp_path, monkeypatch):  # noqa: F811
    root = node("mi300x-8gpu")
    import sys

    amd = sys.modules["amdsmi"]
    data = json.loads((MACHINES / "mi300x-8gpu.json").read_text())
    data["gpus"][3]["lost"] = True
    path = tmp_path / "lost.json"
    path.write_text(json.dumps(data))
    amd.use_machine(path)
    with pytest.raises(InventoryError, match="AMD GPU 3: amdsmi error"):
        accelerators.read_inventory(root)
    amd.use_machine(path)
    inv = accelerators.read_inventory(root, allow_partial=True)
    assert len(inv.gpus) == 7 and any(w.startswith("left out AMD GPU 3") for w in inv.warnings)
    # gen-gres sees the gap (amdsmi counted 8) and asks for --allow-partial again
    with pytest.raises(InventoryError, match="amdsmi counted 8 amd device"):
        gres.render_gres_conf(inv, gres.GresOptions(), inventory_sha256="0" * 64)
    text = gres.render_gres_conf(
        inv, gres.GresOptions(allow_partial=True), inventory_sha256="0" * 64
    )
    assert "!!! PARTIAL" in text


def test_failing_npu_through_dcmi_is_named(tmp_path, monkeypatch):
    from slurmgpu.sources import sysfs
    from tests.doubles import libdcmi
    from tests.doubles.hosttree import build_host_tree

    data = json.loads((MACHINES / "atlas-800t-a2.json").read_text())
    data["gpus"][5]["lost"] = True
    so = libdcmi.build(data, tmp_path / "dcmi")
    monkeypatch.setenv("SLURMGPU_DCMI_LIBRARY", str(so))
    host = sysfs.read_host(build_host_tree(data, tmp_path / "host"))
    from slurmgpu.sources import dcmi

    with pytest.raises(
        InventoryError,
        match=r"NPU 5 \(card 5 device 0\): dcmi_get_device_chip_info failed: DCMI error -8008",
    ):
        dcmi.read_ascend(host)
    npus, info, warnings = dcmi.read_ascend(host, allow_partial=True)
    assert len(npus) == 7 and info.device_count == 8 and warnings[0].startswith("left out NPU 5")


def test_npu_smi_garbage_is_one_line(node, tmp_path, monkeypatch):  # noqa: F811
    root = node("atlas-800t-a2")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "npu-smi").write_text("#!/bin/sh\necho 'Segmentation fault (core dumped)'\n")
    (fake / "npu-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:/usr/bin:/bin")
    result = CliRunner().invoke(main, ["inventory", "--host-root", str(root), "--vendor", "ascend"])
    assert result.exit_code == 1
    assert result.stderr == "slurmgpu: error: npu-smi info printed no NPU table slurmgpu can read\n"


def test_unknown_vendor_is_a_usage_error(node):  # noqa: F811
    result = CliRunner().invoke(main, ["inventory", "--vendor", "intel"])
    assert result.exit_code == 2 and "--vendor: use auto or a list of" in result.output
