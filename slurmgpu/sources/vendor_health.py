"""Health counters of AMD GPUs (amdsmi) and Ascend NPUs (DCMI) for `slurmgpu check`.

- AMD: `amdsmi_get_gpu_total_ecc_count` per logical GPU (correctable, uncorrectable and
  deferred RAS error counts since the driver loaded); a GPU that fails the query is an error.
- Ascend: `dcmi_get_device_health(card, device, &health)`: 0 normal, 1 minor alarm, 2 major
  alarm, 3 critical alarm (the most severe alarm of the chip), 0xFFFFFFFF: no such device.
A vendor whose library is absent gives no devices (and says why in the notes).
"""

from __future__ import annotations

import contextlib
import ctypes

from slurmgpu.errors import InventoryError
from slurmgpu.model.fleet import GpuHealth

NO_DEVICE = 0xFFFFFFFF


def read_vendor_health() -> tuple[list[GpuHealth], list[str]]:
    """(health of every AMD GPU and Ascend NPU found, why a vendor could not be read)."""
    health: list[GpuHealth] = []
    notes: list[str] = []
    for read in (read_amd_health, read_ascend_health):
        try:
            health += read()
        except InventoryError as exc:
            notes.append(str(exc))
    return health, notes


def read_amd_health() -> list[GpuHealth]:
    """ECC/RAS counts of every AMD logical GPU (index: its render minor)."""
    from slurmgpu.sources.amdsmi import _one_line

    try:
        import amdsmi as amd
    except ImportError:
        raise InventoryError("amdsmi: not importable") from None
    try:
        amd.amdsmi_init(amd.AmdSmiInitFlags.INIT_AMD_GPUS)
    except amd.AmdSmiException as exc:
        raise InventoryError(f"amdsmi: {_one_line(exc)}") from None
    out = []
    try:
        for i, handle in enumerate(amd.amdsmi_get_processor_handles()):
            try:
                minor = int(amd.amdsmi_get_gpu_enumeration_info(handle)["drm_render"])
                bdf = str(amd.amdsmi_get_gpu_device_bdf(handle))
            except amd.AmdSmiException as exc:
                out.append(GpuHealth(index=i, error=_one_line(exc), vendor="amd"))
                continue
            try:
                ecc = amd.amdsmi_get_gpu_total_ecc_count(handle)
            except amd.AmdSmiException as exc:
                out.append(GpuHealth(minor, bdf, error=_one_line(exc), vendor="amd"))
                continue
            out.append(
                GpuHealth(
                    minor,
                    bdf,
                    ecc_uncorrected_volatile=int(ecc["uncorrectable_count"]),
                    ecc_corrected_volatile=int(ecc["correctable_count"]),
                    ecc_deferred=int(ecc.get("deferred_count", 0)),
                    vendor="amd",
                )
            )
    finally:
        with contextlib.suppress(amd.AmdSmiException):
            amd.amdsmi_shut_down()
    return out


def read_ascend_health() -> list[GpuHealth]:
    """The health state of every Ascend NPU (index: its logical id)."""
    from slurmgpu.sources import dcmi

    try:
        d = dcmi._Dcmi(dcmi.load_library())
        d.call("dcmi_init")
        ids = dcmi.device_ids(d)
    except InventoryError as exc:
        raise InventoryError(f"DCMI: {exc}") from None
    out = []
    for card, dev, logic, _phy in ids:
        value = ctypes.c_uint()
        try:
            d.call("dcmi_get_device_health", card, dev, ctypes.byref(value))
        except InventoryError as exc:
            out.append(GpuHealth(logic, error=str(exc), vendor="ascend"))
            continue
        if value.value == NO_DEVICE:
            out.append(GpuHealth(logic, lost=True, vendor="ascend"))
        else:
            out.append(GpuHealth(logic, health_alarm=int(value.value), vendor="ascend"))
    return out
