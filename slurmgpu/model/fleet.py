"""What `slurmgpu check` finds: one `Problem` per thing wrong with a node, with what to do."""

from __future__ import annotations

from dataclasses import dataclass

ERROR = "error"
WARNING = "warning"


@dataclass(frozen=True)
class Problem:
    """One finding. `kind` is a stable key (Prometheus label, JSON); `action` says what to do."""

    node: str
    kind: str
    message: str
    action: str
    severity: str = ERROR

    @property
    def line(self) -> str:
        return f"{self.node}: {self.severity}: {self.message}; {self.action}"


@dataclass(frozen=True)
class GpuHealth:
    """NVML's health counters of one GPU (None: NVML does not support the query there)."""

    index: int
    pci_bus_id: str | None = None
    lost: bool = False
    error: str | None = None
    persistence_mode: bool | None = None
    ecc_uncorrected_volatile: int | None = None
    ecc_corrected_volatile: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_pending: bool | None = None
    remapping_failed: bool | None = None
    xids: tuple[int, ...] = ()
    # AMD (amdsmi) and Ascend (DCMI) devices: `index` is the render minor / the NPU's
    # logical id; AMD's ECC counts (since the driver loaded) fill ecc_*_volatile
    vendor: str = "nvidia"
    ecc_deferred: int | None = None  # AMD: deferred (poisoned, not yet consumed) errors
    health_alarm: int | None = (
        None  # Ascend dcmi_get_device_health: 0 OK, 1 minor, 2 major, 3 critical
    )


@dataclass(frozen=True)
class XidEvent:
    """One Xid the driver logged (`NVRM: Xid (PCI:0000:3b:00): 79, ...`) or DCGM reported.

    `pci_bus_id` in NVML's form (`00000000:3B:00.0`); `when` as the source gives it (an ISO
    time, `+12345.678 s after boot`, or empty); `source` names where it was read."""

    pci_bus_id: str
    xid: int
    detail: str = ""
    when: str = ""
    source: str = ""
