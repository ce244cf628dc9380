"""Snapshots round-trip exactly; bad ones fail with one line naming the field."""

import json

import pytest

from slurmgpu.errors import SnapshotError
from slurmgpu.sources import snapshot
from tests.doubles.machines import EXAMPLES, NAMES


@pytest.mark.parametrize("name", NAMES)
def test_round_trip_is_exact(name, tmp_path):
    text = (EXAMPLES / f"{name}.json").read_text()
    inv = snapshot.loads(text)
    assert snapshot.dumps(inv) == text
    assert snapshot.loads(snapshot.dumps(inv)) == inv
    path = tmp_path / "s.json"
    snapshot.save(inv, path)
    assert snapshot.load(path) == inv


def _broken(change):
    data = json.loads((EXAMPLES / "dgx-a100-mig.json").read_text())
    change(data)
    return json.dumps(data)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda d: d["gpus"][3].update(pci_bus_id=7),
            "gpus[3].pci_bus_id: expected a string, got 7",
        ),
        (lambda d: d.update(schema_version=3), "schema_version: 3 is newer than this slurmgpu"),
        (lambda d: d.update(schema_version="1"), "schema_version: expected an integer"),
        (lambda d: d["gpus"][0].pop("uuid"), "gpus[0].uuid: missing"),
        (lambda d: d["gpus"][0].update(colour="red"), "gpus[0].colour: unknown field"),
        (
            lambda d: d["gpus"][2].update(cpu_affinity="16-x"),
            "gpus[2].cpu_affinity: expected a cpu list",
        ),
        (
            lambda d: d["gpus"][1].update(mig_mode_current=1),
            "gpus[1].mig_mode_current: expected true or false",
        ),
        (
            lambda d: d["gpus"][0]["mig_devices"][2].update(gi_access_minor="66"),
            "gpus[0].mig_devices[2].gi_access_minor: expected an integer",
        ),
        (
            lambda d: d["gpus"][4]["nvlinks"][0].update(remote_type="BRIDGE"),
            "gpus[4].nvlinks[0].remote_type: expected one of GPU, NVSWITCH",
        ),
        (
            lambda d: d["gpus"][5].update(minor_number=4),
            "gpus[5].minor_number: minor 4 is also gpus[4]'s",
        ),
        (
            lambda d: d["host"]["mig_minors"].update(config=-1),
            "host.mig_minors.config: expected a non-negative",
        ),
        (lambda d: d["host"].update(cpus={}), "host.cpus: expected a list"),
        (
            lambda d: d["gpus"][0].update(cpu_affinity="999"),
            "gpus[0].cpu_affinity: cpu 999 is not in host.cpus",
        ),
    ],
)
def test_bad_snapshot_one_line_naming_the_field(change, message):
    with pytest.raises(SnapshotError) as err:
        snapshot.loads(_broken(change), source="x.json")
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith("x.json: ")
    assert message in text


def test_not_json():
    with pytest.raises(SnapshotError, match=r"x.json: not JSON: .* at line 1"):
        snapshot.loads("{nope", source="x.json")


def test_unreadable_file(tmp_path):
    with pytest.raises(SnapshotError, match="cannot read"):
        snapshot.load(tmp_path / "missing.json")


def test_sha256_is_stable_and_content_sensitive():
    inv = snapshot.load(EXAMPLES / "dgx-h100.json")
    again = snapshot.load(EXAMPLES / "dgx-h100.json")
    assert snapshot.inventory_sha256(inv) == snapshot.inventory_sha256(again)
    other = snapshot.load(EXAMPLES / "pcie-8gpu.json")
    assert snapshot.inventory_sha256(inv) != snapshot.inventory_sha256(other)
