"""An accelerator device: identity, memory, PCI/NUMA placement, MIG devices, links.

`Gpu` is one device of any vendor (`vendor`: nvidia, amd, ascend). NVIDIA GPUs come from NVML
(`slurmgpu.sources.nvml`), AMD GPUs from amdsmi (`sources.amdsmi`; one `Gpu` per logical GPU
of a compute partition), Ascend NPUs from DCMI or `npu-smi` (`sources.dcmi`,
`sources.npu_smi`). Pure data (no I/O).
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

VENDOR_NVIDIA = "nvidia"
VENDOR_AMD = "amd"
VENDOR_ASCEND = "ascend"
VENDORS = (VENDOR_NVIDIA, VENDOR_AMD, VENDOR_ASCEND)
# the Slurm GRES name of each vendor's devices (Ascend has no upstream plugin: plain `npu`)
GRES_NAME = {VENDOR_NVIDIA: "gpu", VENDOR_AMD: "gpu", VENDOR_ASCEND: "npu"}
# the device file of device minor N, per vendor: NVIDIA /dev/nvidiaN, AMD the DRM render node
# (major 226, minors from 128), Ascend /dev/davinciN (N = the NPU's physical id)
DEVICE_FILE = {
    VENDOR_NVIDIA: "/dev/nvidia{}",
    VENDOR_AMD: "/dev/dri/renderD{}",
    VENDOR_ASCEND: "/dev/davinci{}",
}
# peer links that are not NVLink: AMD Infinity Fabric (XGMI), Huawei HCCS
LINK_XGMI = "XGMI"
LINK_HCCS = "HCCS"
LINK_KINDS = (LINK_XGMI, LINK_HCCS)
# AMD MI300 compute partition modes and the logical GPUs each makes of one package
COMPUTE_PARTITIONS = {"SPX": 1, "DPX": 2, "TPX": 3, "QPX": 4, "CPX": 8}
MEMORY_PARTITIONS = ("NPS1", "NPS2", "NPS4", "NPS8")


@dataclass(frozen=True)
class PeerLink:
    """A direct device-to-device link that is not NVLink: XGMI (AMD) or HCCS (Ascend).

    `count` is the number of links between the two devices (one per pair on a fully meshed
    MI300X or Atlas 800T A2 board); Slurm's `Links=` takes it as is.
    """

    remote_pci_bus_id: str
    kind: str  # one of LINK_KINDS
    count: int = 1


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
    # -- since schema 2 (absent in older snapshots: an NVIDIA GPU) --------------------------
    vendor: str = VENDOR_NVIDIA
    peer_links: tuple[PeerLink, ...] = ()
    # AMD MI300: the package's compute/memory partition modes and this logical GPU's
    # partition id (the BDF's function number in amdsmi); None on unpartitioned parts
    compute_partition: str | None = None
    memory_partition: str | None = None
    partition_id: int | None = None

    @property
    def device_file(self) -> str:
        return DEVICE_FILE.get(self.vendor, DEVICE_FILE[VENDOR_NVIDIA]).format(self.minor_number)

    @property
    def gres_name(self) -> str:
        """`gpu` (NVIDIA, AMD) or `npu` (Ascend)."""
        return GRES_NAME.get(self.vendor, "gpu")

    @property
    def is_npu(self) -> bool:
        return self.vendor == VENDOR_ASCEND

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
        """How messages name this device: `GPU 3 (00000000:4E:00.0)`, `NPU 2 (...)`."""
        kind = "NPU" if self.is_npu else "GPU"
        return f"{kind} {self.index} ({self.pci_bus_id})"
