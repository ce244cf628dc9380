"""`slurmgpu check` health counters per vendor: AMD RAS/ECC counts through the amdsmi double,
Ascend health states through the compiled libdcmi double."""

from __future__ import annotations

import sys

import pytest

from slurmgpu.fleet.check import health_problems
from slurmgpu.model.fleet import ERROR, WARNING, GpuHealth
from slurmgpu.sources.vendor_health import read_vendor_health
from tests.doubles import libdcmi
from tests.doubles.machines import load_double, variant
from tests.unit.tools import need


@pytest.fixture
def amd(monkeypatch, tmp_path):
    module = load_double("amdsmi")
    monkeypatch.setitem(sys.modules, "amdsmi", module)
    monkeypatch.setenv("SLURMGPU_DCMI_LIBRARY", str(tmp_path / "no-libdcmi.so"))
    return module


def test_amd_ras_counts_become_problems(amd, tmp_path):
    def errors(data):
        data["gpus"][1]["ecc"] = {"correctable": 12, "uncorrectable": 2}
        data["gpus"][5]["ecc"] = {"deferred": 1}

    amd.use_machine(variant(tmp_path, "mi300x-8gpu", errors))
    health, why_not = read_vendor_health()
    assert len(health) == 8 and all(h.vendor == "amd" for h in health)
    assert len(why_not) == 1 and why_not[0].startswith("DCMI: cannot load libdcmi")
    by_minor = {h.index: h for h in health}
    assert by_minor[129].ecc_uncorrected_volatile == 2
    assert by_minor[129].ecc_corrected_volatile == 12
    problems = health_problems("mi01", health)
    assert [(p.kind, p.severity) for p in problems] == [
        ("ecc-uncorrected", ERROR),
        ("ecc-deferred", WARNING),
    ]
    assert problems[0].message.startswith("AMD GPU renderD129 (0000:")
    assert "2 uncorrectable RAS/ECC error(s)" in problems[0].message


def test_ascend_health_states_become_problems(amd, monkeypatch, tmp_path):
    def alarms(data):
        data["gpus"][2]["health"] = "Warning"
        data["gpus"][6]["health"] = "Critical"
        data["gpus"][7]["lost"] = True

    path = variant(tmp_path, "atlas-800t-a2", alarms)
    need("gcc")  # the libdcmi double is compiled
    monkeypatch.setenv("SLURMGPU_DCMI_LIBRARY", str(libdcmi.build(path, tmp_path / "dcmi")))
    amd.use_machine(path)  # no AMD GPU: amdsmi does not initialise
    health, why_not = read_vendor_health()
    assert [h.health_alarm for h in health] == [0, 0, 1, 0, 0, 0, 3, None]
    assert health[7].error and "-8008" in health[7].error
    assert why_not and why_not[0].startswith("amdsmi:")
    problems = health_problems("atlas01", health)
    assert [(p.kind, p.severity, p.message.split(":")[0]) for p in problems] == [
        ("npu-alarm", WARNING, "Ascend NPU 2 reports a minor alarm (DCMI health 1)"),
        ("npu-alarm", ERROR, "Ascend NPU 6 reports a critical alarm (DCMI health 3)"),
        ("dcmi-error", ERROR, "Ascend NPU 7"),
    ]


def test_nvidia_rules_are_unchanged_beside_other_vendors():
    health = [
        GpuHealth(0, ecc_uncorrected_volatile=1),
        GpuHealth(3, health_alarm=0, vendor="ascend"),
    ]
    problems = health_problems("mixed01", health)
    assert [(p.kind, p.message.split(" has")[0]) for p in problems] == [
        ("ecc-uncorrected", "GPU 0")
    ]
