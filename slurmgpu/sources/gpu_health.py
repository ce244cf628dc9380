"""GPU health through NVML: lost GPUs, XID events, ECC, retired pages / row remapping, persistence.

Calls NVML documents for this (nvml.h): `nvmlDeviceGetPersistenceMode`,
`nvmlDeviceGetTotalEccErrors(.., NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC)`,
`nvmlDeviceGetRetiredPagesPendingStatus` (pre-Ampere page retirement),
`nvmlDeviceGetRemappedRows` (Ampere+: corrected, uncorrected, pending, failure), and XID
events through an event set (`nvmlDeviceRegisterEvents(.., nvmlEventTypeXidCriticalError)`,
`nvmlEventSetWait_v2`). NVML delivers only XIDs that happen while the event set is
registered, so this one-shot read (wait 0 ms) sees few: past XIDs are in the kernel log
(`NVRM: Xid`), which `sources/kernel_xids.py` reads since the last run. A GPU that fell off
the bus (XID 79) is found anyway: it answers every call with NVML_ERROR_GPU_IS_LOST.
"""

from __future__ import annotations

import contextlib

from slurmgpu.errors import InventoryError
from slurmgpu.model.fleet import GpuHealth
from slurmgpu.sources.nvml import _import_pynvml, _text, normalize_pci_bus_id


def _optional(nv, fn, *args):
    try:
        return fn(*args)
    except nv.NVMLError_NotSupported:
        return None


def _xids(nv, handle, max_events: int = 64) -> tuple[int, ...]:
    try:
        event_set = nv.nvmlEventSetCreate()
    except nv.NVMLError:
        return ()
    xids: list[int] = []
    try:
        with contextlib.suppress(nv.NVMLError_NotSupported):
            nv.nvmlDeviceRegisterEvents(handle, nv.nvmlEventTypeXidCriticalError, event_set)
        for _ in range(max_events):
            try:
                event = nv.nvmlEventSetWait_v2(event_set, 0)
            except nv.NVMLError_Timeout:
                break
            xids.append(int(event.eventData))
    finally:
        with contextlib.suppress(nv.NVMLError):
            nv.nvmlEventSetFree(event_set)
    return tuple(xids)


def _one(nv, index: int) -> GpuHealth:
    bus_id = None
    try:
        handle = nv.nvmlDeviceGetHandleByIndex(index)
        bus_id = normalize_pci_bus_id(_text(nv.nvmlDeviceGetPciInfo(handle).busId))
        rows = _optional(nv, nv.nvmlDeviceGetRemappedRows, handle)
        pm = _optional(nv, nv.nvmlDeviceGetPersistenceMode, handle)
        pending = _optional(nv, nv.nvmlDeviceGetRetiredPagesPendingStatus, handle)
        ecc = nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC
        corrected = nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC
        return GpuHealth(
            index=index,
            pci_bus_id=bus_id,
            persistence_mode=None if pm is None else pm == nv.NVML_FEATURE_ENABLED,
            ecc_uncorrected_volatile=_optional(nv, nv.nvmlDeviceGetTotalEccErrors, handle, *ecc),
            ecc_corrected_volatile=_optional(
                nv, nv.nvmlDeviceGetTotalEccErrors, handle, *corrected
            ),
            retired_pages_pending=None if pending is None else pending == nv.NVML_FEATURE_ENABLED,
            remapped_rows_pending=None if rows is None else bool(rows[2]),
            remapping_failed=None if rows is None else bool(rows[3]),
            xids=_xids(nv, handle),
        )
    except nv.NVMLError_GpuIsLost:
        return GpuHealth(index=index, pci_bus_id=bus_id, lost=True, xids=(79,))
    except nv.NVMLError as exc:
        return GpuHealth(index=index, pci_bus_id=bus_id, error=str(exc))


def read_health() -> list[GpuHealth]:
    """Health of every GPU NVML lists; InventoryError when NVML cannot start at all."""
    nv = _import_pynvml()
    try:
        nv.nvmlInit()
    except nv.NVMLError as exc:
        raise InventoryError(f"NVML failed to initialise: {exc}") from exc
    try:
        return [_one(nv, i) for i in range(nv.nvmlDeviceGetCount())]
    finally:
        with contextlib.suppress(nv.NVMLError):
            nv.nvmlShutdown()
