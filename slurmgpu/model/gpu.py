"""A GPU as NVML reports it: identity, memory, PCI/NUMA placement, MIG devices, NVLinks.

Pure data (no I/O): `slurmgpu.sources.nvml` fills it through pynvml.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurmgpu.model.catalog import GpuModel, model_for_name

# NVML's nvmlNvLinkDeviceType_t, in the words the snapshot uses. There is no separate
# "bridge" type: two GPUs joined by an NVLink bridge report each other as GPU.
REMOTE_GPU = "GPU"
REMOTE_NVSWITCH = "NVSWITCH"
REMOTE_IBMNPU = "IBMNPU"
REMOTE_UNKNOWN = "UNKNOWN"
REMOTE_TYPES = (REMOTE_GPU, REMOTE_NVSWITCH, REMOTE_IBMNPU, REMOTE_UNKNOWN)


@dataclass(frozen=True)
class NvLink:
    """One NVLink of a GPU (`nvmlDeviceGetNvLink*` for link number `link`)."""

    link: int
    active: bool
    version: int | None
    remote_pci_bus_id: str | None
    remote_type: str  # one of REMOTE_TYPES


@dataclass(frozen=True)
class MigDevice:
    """One MIG device: a compute instance `ci_id` inside GPU instance `gi_id`.

    `gi_access_minor` / `ci_access_minor` are the minors of `/dev/nvidia-caps/nvidia-capN`
    for `gpu<minor>/gi<gi>/access` and `gpu<minor>/gi<gi>/ci<ci>/access` in
    `/proc/driver/nvidia-caps/mig-minors`; None when the host table lacks the entry.
    """

    index: int
    gi_id: int
    ci_id: int
    profile: str  # e.g. "1g.10gb", "1c.3g.20gb"
    memory_mib: int
    uuid: str
    gi_access_minor: int | None
    ci_access_minor: int | None

    @property
    def gi_access_path(self) -> str | None:
        if self.gi_access_minor is None:
            return None
        return f"/dev/nvidia-caps/nvidia-cap{self.gi_access_minor}"

    @property
    def ci_access_path(self) -> str | None:
        if self.ci_access_minor is None:
            return None
        return f"/dev/nvidia-caps/nvidia-cap{self.ci_access_minor}"


@dataclass(frozen=True)
class Gpu:
    """One physical GPU. `index` is NVML's (PCI bus order); `minor_number` names /dev/nvidiaN."""

    index: int
    minor_number: int
    uuid: str
    name: str
    memory_mib: int
    pci_bus_id: str
    numa_node: int | None
    cpu_affinity: tuple[int, ...]  # OS cpu ids
    mig_mode_current: bool = False
    mig_mode_pending: bool = False
    mig_devices: tuple[MigDevice, ...] = ()
    nvlinks: tuple[NvLink, ...] = ()

    @property
    def device_file(self) -> str:
        return f"/dev/nvidia{self.minor_number}"

    @property
    def model(self) -> GpuModel | None:
        return model_for_name(self.name)

    @property
    def active_nvlinks(self) -> tuple[NvLink, ...]:
        return tuple(link for link in self.nvlinks if link.active)

    @property
    def mig_enabled(self) -> bool:
        return self.mig_mode_current

    @property
    def label(self) -> str:
        """How messages name this GPU: `GPU 3 (00000000:4E:00.0)`."""
        return f"GPU {self.index} ({self.pci_bus_id})"
