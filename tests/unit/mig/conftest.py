"""Nodes for MIG planning tests: the recorded DGX A100 example, re-badged as other models."""

from __future__ import annotations

import dataclasses

import pytest

from slurmgpu.model.inventory import Inventory
from slurmgpu.sources import snapshot
from tests.doubles.machines import EXAMPLES


def node_of(nvml_name: str, hostname: str = "node01", *, mig_off: bool = True) -> Inventory:
    """The DGX A100 example with every GPU named `nvml_name` (MIG off unless asked)."""
    inv = snapshot.load(EXAMPLES / "dgx-a100-mig.json")
    gpus = tuple(
        dataclasses.replace(
            g,
            name=nvml_name,
            **(
                dict(mig_mode_current=False, mig_mode_pending=False, mig_devices=())
                if mig_off
                else {}
            ),
        )
        for g in inv.gpus
    )
    host = dataclasses.replace(inv.host, hostname=hostname)
    return dataclasses.replace(inv, gpus=gpus, host=host)


@pytest.fixture
def dgx_a100() -> Inventory:
    return snapshot.load(EXAMPLES / "dgx-a100-mig.json")
