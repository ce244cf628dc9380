"""`slurmgpu inventory` on hostile host trees (pynvml double over recorded machines)."""

from __future__ import annotations

import pytest

from tests.doubles.machines import install_double, setup_machine
from tests.hostile.conftest import assert_one_error, cli


@pytest.fixture
def nvml(monkeypatch):
    return install_double(monkeypatch)


def test_meminfo_not_utf8(nvml, tmp_path):
    root = setup_machine(nvml, tmp_path, "pcie-8gpu")
    (root / "proc" / "meminfo").write_bytes(b"MemTotal: \xff\xfe kB\n")
    assert_one_error(cli("inventory", "--host-root", root), 1, says="meminfo: not UTF-8")


def test_meminfo_with_a_5000_digit_number(nvml, tmp_path):
    root = setup_machine(nvml, tmp_path, "pcie-8gpu")
    (root / "proc" / "meminfo").write_text("MemTotal: " + "9" * 5000 + " kB\n")
    assert_one_error(cli("inventory", "--host-root", root), 1, says="MemTotal")


@pytest.mark.parametrize("name", ["dgx01 Gres=gpu:h100:99", "dgx#01", "dgx=01", "-dgx"])
def test_host_name_slurm_cannot_take_is_refused(nvml, tmp_path, name):
    root = setup_machine(nvml, tmp_path, "pcie-8gpu")
    (root / "etc" / "hostname").write_text(name + "\n")
    assert_one_error(cli("inventory", "--host-root", root), 1, says="host.hostname")


def test_gpus_reporting_one_uuid_are_refused(nvml, tmp_path):
    def same_uuid(machine):
        for gpu in machine["gpus"]:
            gpu["uuid"] = machine["gpus"][0]["uuid"]

    root = setup_machine(nvml, tmp_path, "pcie-8gpu", change=same_uuid)
    assert_one_error(cli("inventory", "--host-root", root), 1, says="UUID")


def test_inventory_output_errors(nvml, tmp_path):
    root = setup_machine(nvml, tmp_path, "pcie-8gpu")
    run = cli("inventory", "--host-root", root, "-o", tmp_path / "no" / "node.json")
    assert_one_error(run, 1, says="does not exist")
    run = cli("inventory", "--host-root", root, "-o", tmp_path)
    assert_one_error(run, 1, says="is a directory")


def test_inventory_records_the_nvml_device_count(nvml, tmp_path):
    root = setup_machine(nvml, tmp_path, "pcie-8gpu")
    run = cli("inventory", "--host-root", root)
    assert run.code == 0, run.stderr
    assert '"nvml_device_count": 8' in run.stdout
