"""An inventory: everything slurmgpu knows about one GPU node at one moment (a snapshot)."""

from __future__ import annotations

from dataclasses import dataclass

from slurmgpu.model.gpu import Gpu
from slurmgpu.model.host import Host

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class SkippedGpu:
    """A GPU left out of a partial inventory (`--allow-partial`), and why."""

    index: int
    pci_bus_id: str | None
    reason: str


@dataclass(frozen=True)
class Inventory:
    """NVML + host facts of one node; what `slurmgpu inventory` saves and gen-gres reads."""

    generator: str
    driver_version: str
    nvml_version: str
    host: Host
    gpus: tuple[Gpu, ...]
    warnings: tuple[str, ...] = ()
    skipped_gpus: tuple[SkippedGpu, ...] = ()
    # nvmlDeviceGetCount() when the inventory was taken: how a snapshot knows a GPU is
    # missing from `gpus` (None in snapshots written before it was recorded)
    nvml_device_count: int | None = None
    schema_version: int = SCHEMA_VERSION

    @property
    def node_name(self) -> str:
        """The node this inventory describes (its short host name)."""
        return self.host.hostname

    @property
    def partial(self) -> bool:
        return bool(self.skipped_gpus)
