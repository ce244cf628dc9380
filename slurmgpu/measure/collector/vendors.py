"""One pass over every vendor's devices: NVIDIA (NVML), AMD (amdsmi) and Ascend (DCMI).

AMD and Ascend samples carry the device's memory used and its utilization (amdsmi's GFX
activity; DCMI's AI Core rate, `dcmi_get_device_utilization_rate` input type 2) and, as
processes, the holders of the device node (`holders.py`) without per-process memory, so a
job's memory on the device is the device's used memory (the rule `state.attribute` applies
when a library gives no per-process number). A vendor whose library is absent is silent
when another vendor answered; when none did, every reason is an error.
"""

from __future__ import annotations

import contextlib
import ctypes
import os

from slurmgpu.errors import InventoryError
from slurmgpu.measure.collector.energy import EnergyReading
from slurmgpu.measure.collector.holders import device_holders
from slurmgpu.measure.collector.nvml import MIB, DeviceSample, GpuProcess, NodeSample

DCMI_AICORE = 2  # dcmi_get_device_utilization_rate input_type: AI Core


def sample_accelerators(host_root: str | os.PathLike[str] = "/") -> NodeSample:
    """NVML, amdsmi and DCMI together; errors of absent vendors dropped when one answered."""
    from slurmgpu.measure.collector.nvml import sample_node

    holders = device_holders(host_root)
    passes = []
    try:
        passes.append(sample_node())
    except ImportError:
        passes.append(NodeSample(errors=["NVML: pynvml is not installed"]))
    passes.append(sample_amd(holders))
    passes.append(sample_ascend(holders))
    out = NodeSample()
    answered = any(p.devices for p in passes)
    for p in passes:
        out.devices.extend(p.devices)
        out.energy.update(p.energy)
        if p.devices or not answered:
            out.errors.extend(p.errors)
    return out


def _holders_of(holders: dict[str, tuple[int, ...]], node: str) -> tuple[GpuProcess, ...]:
    return tuple(GpuProcess(pid, None) for pid in holders.get(node, ()))


def sample_amd(holders: dict[str, tuple[int, ...]]) -> NodeSample:
    """Every AMD logical GPU (render node), its VRAM used, GFX activity and holders."""
    from slurmgpu.sources.amdsmi import _one_line

    out = NodeSample()
    try:
        import amdsmi as amd
    except ImportError:
        out.errors.append("amdsmi: not importable (ROCm's amdsmi Python package)")
        return out
    try:
        amd.amdsmi_init(amd.AmdSmiInitFlags.INIT_AMD_GPUS)
    except amd.AmdSmiException as exc:
        out.errors.append(f"amdsmi: {_one_line(exc)}")
        return out
    try:
        for index, handle in enumerate(amd.amdsmi_get_processor_handles()):
            try:
                device = _amd_device(amd, handle, holders)
                out.devices.append(device)
                reading = _amd_energy(amd, handle)
                if reading is not None:
                    out.energy[device.key] = reading
            except amd.AmdSmiException as exc:
                out.errors.append(f"AMD GPU {index}: {_one_line(exc)}")
    finally:
        with contextlib.suppress(amd.AmdSmiException):
            amd.amdsmi_shut_down()
    return out


def _amd_device(amd, handle, holders) -> DeviceSample:
    minor = int(amd.amdsmi_get_gpu_enumeration_info(handle)["drm_render"])
    vram = amd.AmdSmiMemoryType.VRAM
    activity = amd.amdsmi_get_gpu_activity(handle).get("gfx_activity")
    util = float(activity) if isinstance(activity, int | float) else None  # "N/A"
    return DeviceSample(
        minor=minor,
        gi=None,
        profile=None,
        uuid=str(amd.amdsmi_get_gpu_device_uuid(handle)).lower(),
        mem_total_mib=amd.amdsmi_get_gpu_memory_total(handle, vram) / MIB,
        mem_used_mib=amd.amdsmi_get_gpu_memory_usage(handle, vram) / MIB,
        util_pct=util,
        processes=_holders_of(holders, f"/dev/dri/renderD{minor}"),
        vendor="amd",
    )


def _amd_energy(amd, handle) -> EnergyReading | None:
    """amdsmi's energy accumulator in joules (`amdsmi_get_energy_count`: the accumulator --
    `energy_accumulator`, `power` in older amdsmi -- times `counter_resolution` in uJ); None
    where this amdsmi or GPU does not give it, and on a package split into compute
    partitions (CPX...): each partition would show the package's energy, and charging every
    partition's job all of it would count it several times."""
    try:
        if str(amd.amdsmi_get_gpu_compute_partition(handle)).upper() != "SPX":
            return None
        got = amd.amdsmi_get_energy_count(handle)
    except (AttributeError, amd.AmdSmiException):
        return None
    raw = got.get("energy_accumulator", got.get("power")) if isinstance(got, dict) else None
    resolution = got.get("counter_resolution") if isinstance(got, dict) else None
    if not isinstance(raw, int | float) or not isinstance(resolution, int | float):
        return None  # "N/A"
    return EnergyReading(raw * resolution / 1e6, None, float(2**64) * resolution / 1e6)


def sample_ascend(holders: dict[str, tuple[int, ...]]) -> NodeSample:
    """Every Ascend NPU (`/dev/davinci<phy>`), its HBM used, AI Core rate and holders."""
    from slurmgpu.sources import dcmi

    out = NodeSample()
    try:
        d = dcmi._Dcmi(dcmi.load_library())
        d.call("dcmi_init")
        ids = dcmi.device_ids(d)
    except InventoryError as exc:
        out.errors.append(f"DCMI: {exc}")
        return out
    for card, dev, logic, phy in ids:
        try:
            out.devices.append(_npu_device(d, card, dev, logic, phy, holders))
        except InventoryError as exc:
            out.errors.append(f"NPU {logic} (card {card} device {dev}): {exc}")
    return out


def _npu_device(d, card: int, dev: int, logic: int, phy: int, holders) -> DeviceSample:
    from slurmgpu.sources.dcmi import HbmInfo

    hbm = HbmInfo()
    d.call("dcmi_get_device_hbm_info", card, dev, ctypes.byref(hbm))
    rate = ctypes.c_uint()
    try:
        d.call("dcmi_get_device_utilization_rate", card, dev, DCMI_AICORE, ctypes.byref(rate))
        util: float | None = float(rate.value)
    except InventoryError:
        util = None  # not on this driver: say unknown, never 0
    return DeviceSample(
        minor=phy,
        gi=None,
        profile=None,
        uuid="",  # the die id is the inventory's (sources/dcmi.py); not read every pass
        mem_total_mib=float(hbm.memory_size),  # DCMI reports MB
        mem_used_mib=float(hbm.memory_usage),
        util_pct=util,
        processes=_holders_of(holders, f"/dev/davinci{phy}"),
        vendor="ascend",
    )
