"""An inventory: everything slurmgpu knows about one GPU node at one moment (a snapshot)."""

from __future__ import annotations

from dataclasses import dataclass

from slurmgpu.model.gpu import Gpu
from slurmgpu.model.host import Host

# 2: devices of several vendors (`gpus[].vendor`, `peer_links`, AMD partitions; `drivers`)
SCHEMA_VERSION = 2


@dataclass(frozen=True)
class VendorDriver:
    """The driver and management library one non-NVIDIA vendor's devices were read through.

    `device_count` is what the library counted (amdsmi processor handles, DCMI devices,
    `npu-smi` rows): how a snapshot knows a device is missing, as `nvml_device_count` does.
    """

    vendor: str
    driver_version: str
    library: str  # amdsmi, dcmi, npu-smi
    library_version: str
    device_count: int | None = None


@dataclass(frozen=True)
class SkippedGpu:
    """A GPU left out of a partial inventory (`--allow-partial`), and why."""

    index: int
    pci_bus_id: str | None
    reason: str


@dataclass(frozen=True)
class Inventory:
    """Accelerator + host facts of one node; what `slurmgpu inventory` saves and gen-gres reads."""

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
    # since schema 2: AMD and Ascend drivers (NVIDIA's stay in driver_version / nvml_version,
    # which are empty strings on a node without NVIDIA GPUs)
    drivers: tuple[VendorDriver, ...] = ()
    schema_version: int = SCHEMA_VERSION

    @property
    def node_name(self) -> str:
        """The node this inventory describes (its short host name)."""
        return self.host.hostname

    @property
    def vendors(self) -> tuple[str, ...]:
        """The vendors of the devices, in first-appearance order."""
        return tuple(dict.fromkeys(g.vendor for g in self.gpus))

    @property
    def partial(self) -> bool:
        return bool(self.skipped_gpus)
