"""Hostile snapshots: injected lines, duplicate ids, bad ranges, and GPUs that vanish quietly.

A snapshot string reaches gres.conf and slurm.conf; each case here must be refused with one
line naming the field, and nothing written.
"""

from __future__ import annotations

import pytest

from tests.hostile.conftest import assert_one_error, cli, example, proc, write_json

GEN = ("--slurm-version", "22.05", "--node-line")
INJECT = "\nName=gpu Type=evil File=/dev/nvidia9"


def _nvlink(d, v):
    d["gpus"][0]["nvlinks"][0].update(remote_pci_bus_id=v)


# field -> how to plant a value there
PLANT = {
    "gpus[0].uuid": lambda d, v: d["gpus"][0].update(uuid=v),
    "gpus[0].name": lambda d, v: d["gpus"][0].update(name=v),
    "gpus[0].pci_bus_id": lambda d, v: d["gpus"][0].update(pci_bus_id=v),
    "host.hostname": lambda d, v: d["host"].update(hostname=v),
    "driver_version": lambda d, v: d.update(driver_version=v),
    "nvml_version": lambda d, v: d.update(nvml_version=v),
    "warnings[0]": lambda d, v: d.update(warnings=[v]),
    "generator": lambda d, v: d.update(generator=v),
    "gpus[0].nvlinks[0].remote_pci_bus_id": _nvlink,
}
LINE_BREAKS = [INJECT, "x\rName=gpu", "dgx\x00", "dgx\u2028Name=gpu", "x\x85y", "x" * 5000]
CONFIG_CHARS = ["a#b", "a=b", "a,b", ""]
# free text is printed only in comments: '#', '=' and spaces are harmless there, line breaks not;
# GPU names have spaces ("NVIDIA H100 80GB HBM3"); identifiers have none
CASES = [
    (field, value)
    for field in PLANT
    for value in LINE_BREAKS
    + ([] if field in ("warnings[0]", "generator") else CONFIG_CHARS)
    + ([] if field in ("warnings[0]", "generator", "gpus[0].name") else ["dgx 01"])
]


@pytest.mark.parametrize(("field", "value"), CASES, ids=[f"{f}={v[:12]!r}" for f, v in CASES])
def test_hostile_string_is_refused_and_nothing_written(tmp_path, field, value):
    data = example("dgx-h100")
    PLANT[field](data, value)
    out = tmp_path / "gres.conf"
    run = cli("gen-gres", "--snapshot", write_json(tmp_path / "s.json", data), "-o", out, *GEN)
    assert_one_error(run, 1, says=field)
    assert not out.exists() and "Name=gpu" not in run.stdout


MIG_STRINGS = [
    ("profile", "1g.5gb\nName=gpu Type=evil File=/dev/nvidia9"),
    ("profile", "1g.5gb#x"),
    ("uuid", "MIG-1 2"),
]


@pytest.mark.parametrize(("key", "value"), MIG_STRINGS)
def test_hostile_mig_strings(tmp_path, key, value):
    data = example("dgx-a100-mig")
    data["gpus"][0]["mig_devices"][0][key] = value
    run = cli("gen-gres", "--snapshot", write_json(tmp_path / "s.json", data), *GEN)
    assert_one_error(run, 1, says=f"mig_devices[0].{key}")


def test_gpu_name_giving_an_unsafe_type_is_refused_as_a_real_process(tmp_path):
    data = example("dgx-h100")
    for gpu in data["gpus"]:
        gpu["name"] = "NVIDIA H100#80GB"  # the case: slurmd parsed 0 of 8 GPUs
    run = proc("gen-gres", "--snapshot", write_json(tmp_path / "s.json", data), *GEN)
    assert_one_error(run, 1, says="gpus[0].name")


DUPLICATES = [
    ("index", lambda d: d["gpus"][3].update(index=d["gpus"][2]["index"]), "index 2"),
    ("minor", lambda d: d["gpus"][3].update(minor_number=2), "minor 2"),
    ("uuid", lambda d: d["gpus"][3].update(uuid=d["gpus"][1]["uuid"].upper()), "UUID"),
    ("pci", lambda d: d["gpus"][3].update(pci_bus_id=d["gpus"][1]["pci_bus_id"]), "PCI id"),
    ("minor -1", lambda d: d["gpus"][0].update(minor_number=-1), "out of range"),
    ("minor 255", lambda d: d["gpus"][0].update(minor_number=255), "out of range"),
    ("memory 0", lambda d: d["gpus"][0].update(memory_mib=0), "out of range"),
    ("host memory -5", lambda d: d["host"].update(memory_mib=-5), "out of range"),
    ("numa 99", lambda d: d["gpus"][0].update(numa_node=99), "not in host.numa_nodes"),
    ("cpu twice", lambda d: d["host"]["cpus"].append(dict(d["host"]["cpus"][0])), "cpu 0"),
    ("no cpus", lambda d: d["host"].update(cpus=[]), "empty"),
    ("link twice", lambda d: d["gpus"][0]["nvlinks"].append(d["gpus"][0]["nvlinks"][0]), "link"),
    ("device node", lambda d: d["host"]["device_nodes"].append("/etc/passwd"), "device node"),
    ("cpu list", lambda d: d["gpus"][0].update(cpu_affinity="0-99999999999"), "cpu_affinity"),
]


@pytest.mark.parametrize(("case", "change", "says"), DUPLICATES, ids=[c[0] for c in DUPLICATES])
def test_duplicates_and_ranges(tmp_path, case, change, says):
    data = example("dgx-h100")
    change(data)
    run = cli("gen-gres", "--snapshot", write_json(tmp_path / "s.json", data), *GEN)
    assert_one_error(run, 1, says=says)


def _mig(data, i):
    return data["gpus"][0]["mig_devices"][i]


def _copy(key_from: str, key_to: str):
    def change(d):
        _mig(d, 1)[key_to] = _mig(d, 0)[key_from]

    return change


MIG_CASES = [
    ("ci minors shared", _copy("ci_access_minor", "ci_access_minor")),
    ("gi minor of another GI", _copy("gi_access_minor", "gi_access_minor")),
    ("gi minor = ci minor", _copy("ci_access_minor", "gi_access_minor")),
    ("same gi/ci twice", _copy("gi_id", "gi_id")),
    ("minor disagrees with table", lambda d: _mig(d, 0).update(ci_access_minor=4000)),
    ("MIG uuid twice", _copy("uuid", "uuid")),
]


@pytest.mark.parametrize(("case", "change"), MIG_CASES, ids=[c[0] for c in MIG_CASES])
def test_mig_caps_minors_name_one_device_each(tmp_path, case, change):
    data = example("dgx-a100-mig")
    change(data)
    run = cli("gen-gres", "--snapshot", write_json(tmp_path / "s.json", data), *GEN)
    assert_one_error(run, 1, says="mig_devices[1]" if case != "minor disagrees with table" else "")


# -- GPUs that disappear ------------------------------------------------------------------------
def test_a_deleted_gpu_is_refused_not_gpu_h100_7(tmp_path):
    data = example("dgx-h100")
    del data["gpus"][5]
    snap = write_json(tmp_path / "s.json", data)
    run = proc("gen-gres", "--snapshot", snap, *GEN)
    assert "gpu:h100:7" not in run.stdout
    assert_one_error(run, 1, says="NVML counted 8 GPU(s)")


def test_a_deleted_gpu_without_the_count_is_caught_by_the_device_nodes(tmp_path):
    data = example("dgx-h100")
    del data["gpus"][5]
    del data["nvml_device_count"]  # a snapshot written before the count was recorded
    run = cli("gen-gres", "--snapshot", write_json(tmp_path / "s.json", data), *GEN)
    assert_one_error(run, 1, says="/dev/nvidia5 have no GPU")


def test_a_gpu_whose_device_node_is_missing(tmp_path):
    data = example("dgx-h100")
    data["host"]["device_nodes"].remove("/dev/nvidia3")
    run = cli("gen-gres", "--snapshot", write_json(tmp_path / "s.json", data), *GEN)
    assert_one_error(run, 1, says="minor 3 have no /dev/nvidiaN")


def test_allow_partial_names_the_missing_gpu_loudly(tmp_path):
    data = example("dgx-h100")
    del data["gpus"][5]
    run = cli(
        "gen-gres", "--snapshot", write_json(tmp_path / "s.json", data), *GEN, "--allow-partial"
    )
    assert run.code == 0, run.stderr
    assert "gpu:h100:7" in run.stdout
    assert "PARTIAL gres.conf: NVML counted 8 GPU(s)" in run.stderr
    assert "# !!! PARTIAL gres.conf: NVML counted 8" in run.stdout


def test_an_untouched_example_still_generates(tmp_path):
    for name in ("dgx-h100", "dgx-a100-mig", "pcie-8gpu"):
        run = cli("gen-gres", "--snapshot", write_json(tmp_path / "s.json", example(name)), *GEN)
        assert run.code == 0, run.stderr
        assert "Gres=gpu:" in run.stdout
