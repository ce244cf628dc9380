"""One NVML pass over the node: every whole GPU and MIG instance, its memory, utilization
where NVML gives it, and the processes on it.

NVML gives no utilization on MIG (`nvmlDeviceGetUtilizationRates` is "not supported" on a
MIG-enabled GPU and on its instances), so a MIG sample says `util_pct=None` instead of
inventing a number; memory used is per instance. A GPU that fails to answer is reported in
`errors` and left out of that pass -- never silently.

Each whole GPU's energy figures (`energy.EnergyReading`) are read once per pass, MIG or not:
the cumulative energy counter (`nvmlDeviceGetTotalEnergyConsumption`, mJ, Volta and later)
and the power now (`nvmlDeviceGetPowerUsage`, mW); a GPU that gives neither has no reading.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from slurmgpu.measure.collector.energy import EnergyReading

MIB = 2**20


@dataclass(frozen=True)
class GpuProcess:
    """A process NVML lists on a device, with the memory it holds (None: NVML did not say)."""

    pid: int
    used_mib: float | None


@dataclass(frozen=True)
class DeviceSample:
    """One whole GPU or one MIG instance at one moment."""

    minor: int
    gi: int | None
    profile: str | None
    uuid: str
    mem_total_mib: float
    mem_used_mib: float
    util_pct: float | None
    processes: tuple[GpuProcess, ...] = ()
    vendor: str = "nvidia"  # amd: minor is the render node's; ascend: the davinci node's

    @property
    def key(self) -> str:
        """`0` for GPU minor 0, `0/gi7` for its MIG GPU instance 7 (state and label key);
        `renderD128` for an AMD GPU, `davinci3` for an Ascend NPU (a mixed node's NPU 3 and
        GPU 3 stay apart)."""
        if self.vendor == "amd":
            return f"renderD{self.minor}"
        if self.vendor == "ascend":
            return f"davinci{self.minor}"
        return str(self.minor) if self.gi is None else f"{self.minor}/gi{self.gi}"


@dataclass
class NodeSample:
    """All devices of one pass, plus what went wrong (one line per GPU or call)."""

    devices: list[DeviceSample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # whole device key (`0`, `renderD128`) -> its energy figures this pass
    energy: dict[str, EnergyReading] = field(default_factory=dict)


def sample_node() -> NodeSample:
    """Read every GPU through pynvml (imported here: only `collect` pays for it)."""
    import pynvml as nv

    out = NodeSample()
    try:
        nv.nvmlInit()
    except nv.NVMLError as exc:
        out.errors.append(f"NVML: {exc}")
        return out
    try:
        for index in range(nv.nvmlDeviceGetCount()):
            try:
                handle = nv.nvmlDeviceGetHandleByIndex(index)
                out.devices.extend(_gpu(nv, handle))
                reading = _energy(nv, handle)
                if reading is not None:
                    out.energy[str(nv.nvmlDeviceGetMinorNumber(handle))] = reading
            except nv.NVMLError as exc:
                out.errors.append(f"GPU index {index}: {exc}")
    finally:
        nv.nvmlShutdown()
    return out


def _gpu(nv, handle) -> list[DeviceSample]:
    minor = nv.nvmlDeviceGetMinorNumber(handle)
    try:
        mig_on = nv.nvmlDeviceGetMigMode(handle)[0] == nv.NVML_DEVICE_MIG_ENABLE
    except nv.NVMLError_NotSupported:
        mig_on = False
    if not mig_on:
        return [_device(nv, handle, minor, None, None)]
    devices = []
    for i in range(nv.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, i)
        except nv.NVMLError_NotFound:
            continue  # an unused slot of the layout
        gi = nv.nvmlDeviceGetGpuInstanceId(mig)
        name = _text(nv.nvmlDeviceGetName(mig))
        profile = name.rsplit(" MIG ", 1)[-1] if " MIG " in name else None
        devices.append(_device(nv, mig, minor, gi, profile))
    return devices


def _energy(nv, handle) -> EnergyReading | None:
    """The GPU's energy counter (mJ -> J) and power (mW -> W); None when it gives neither
    (a failing call is "not given": the pass goes on without energy for this GPU)."""
    try:
        counter: float | None = nv.nvmlDeviceGetTotalEnergyConsumption(handle) / 1000.0
    except nv.NVMLError:
        counter = None
    try:
        power: float | None = nv.nvmlDeviceGetPowerUsage(handle) / 1000.0
    except nv.NVMLError:
        power = None
    if counter is None and power is None:
        return None
    return EnergyReading(counter, power)


def _device(nv, handle, minor: int, gi: int | None, profile: str | None) -> DeviceSample:
    memory = nv.nvmlDeviceGetMemoryInfo(handle)
    try:
        util: float | None = float(nv.nvmlDeviceGetUtilizationRates(handle).gpu)
    except nv.NVMLError_NotSupported:
        util = None
    processes = tuple(
        GpuProcess(int(p.pid), None if p.usedGpuMemory is None else p.usedGpuMemory / MIB)
        for p in nv.nvmlDeviceGetComputeRunningProcesses(handle)
    )
    return DeviceSample(
        minor=minor,
        gi=gi,
        profile=profile,
        uuid=_text(nv.nvmlDeviceGetUUID(handle)),
        mem_total_mib=memory.total / MIB,
        mem_used_mib=memory.used / MIB,
        util_pct=util,
        processes=processes,
    )


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
