"""A test double of the `pynvml` module (nvidia-ml-py) serving a recorded machine.

Same function names, signatures, exception classes and constants as nvidia-ml-py for the
calls slurmgpu makes (tests/unit/sources/test_pynvml_double.py checks the signatures
against the installed real module). The machine is a JSON file from tests/data/machines/,
named by the environment variable SLURMGPU_FAKE_NVML_MACHINE (read at nvmlInit) or set with
`use_machine(path)`. Only the GPU hardware is faked; nothing here knows about slurmgpu.
"""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

ENV_VAR = "SLURMGPU_FAKE_NVML_MACHINE"

# -- constants (values as in NVML's nvml.h) ----------------------------------------------------
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_UNKNOWN = 999

NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_DEVICE_MIG_DISABLE = 0x0
NVML_DEVICE_MIG_ENABLE = 0x1
NVML_NVLINK_MAX_LINKS = 36
NVML_NVLINK_DEVICE_TYPE_GPU = 0x00
NVML_NVLINK_DEVICE_TYPE_IBMNPU = 0x01
NVML_NVLINK_DEVICE_TYPE_SWITCH = 0x02
NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 0xFF
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
nvmlEventTypeXidCriticalError = 0x0000000000000008

_MESSAGES = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
    NVML_ERROR_INSUFFICIENT_POWER: "Insufficient External Power",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_TIMEOUT: "Timeout",
    NVML_ERROR_IRQ_ISSUE: "Interrupt Request Issue",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_CORRUPTED_INFOROM: "Corrupted infoROM",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
    NVML_ERROR_OPERATING_SYSTEM: "The operating system has blocked the request.",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    """Like nvidia-ml-py: `NVMLError(code)` builds the subclass for that code."""

    _valClassMapping: dict[int, type] = {}  # noqa: RUF012  (same name as the real module)

    def __new__(cls, value):
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, value=None):
        super().__init__()

    def __str__(self):
        return _MESSAGES.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other):
        return isinstance(other, NVMLError) and self.value == other.value

    __hash__ = Exception.__hash__


def _class_name(constant: str) -> str:
    # NVML_ERROR_GPU_IS_LOST -> NVMLError_GpuIsLost (the real module's naming rule)
    words = constant.replace("NVML_ERROR_", "").split("_")
    return "NVMLError_" + "".join(w.capitalize() for w in words)


def _make_error_classes() -> None:
    module = globals()
    for name in [n for n in list(module) if n.startswith("NVML_ERROR_")]:
        value = module[name]

        def new(cls, *args, _value=value):
            return NVMLError.__new__(cls, _value)

        cls = type(_class_name(name), (NVMLError,), {"__new__": new})
        cls.__module__ = __name__
        module[cls.__name__] = cls
        NVMLError._valClassMapping[value] = cls


_make_error_classes()


def nvmlExceptionClass(nvmlErrorCode):
    return NVMLError._valClassMapping[nvmlErrorCode]


# -- the recorded machine -----------------------------------------------------------------------
_state: dict[str, object] = {"machine": None, "path": None, "initialized": False}


def use_machine(path) -> None:
    """Serve the machine recorded in `path` (JSON) from the next nvmlInit on."""
    _state["path"] = str(path)
    _state["machine"] = None
    _state["initialized"] = False


def _machine() -> dict:
    if not _state["initialized"]:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    return _state["machine"]  # type: ignore[return-value]


class _Handle:
    """An opaque device handle (the real one is a ctypes pointer)."""

    def __init__(self, gpu: dict, mig: dict | None = None):
        self.gpu = gpu
        self.mig = mig


def _check(handle: _Handle, call: str) -> None:
    if not isinstance(handle, _Handle):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    if handle.gpu.get("lost"):
        raise NVMLError(NVML_ERROR_GPU_IS_LOST)
    failing = handle.gpu.get("errors", {}).get(call)
    if failing:
        raise NVMLError(globals()[f"NVML_ERROR_{failing}"])


# -- library -----------------------------------------------------------------------------------
def nvmlInitWithFlags(flags):
    path = _state["path"] or os.environ.get(ENV_VAR)
    if not path:
        raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)
    with open(path, encoding="utf-8") as fh:
        machine = json.load(fh)
    if machine.get("init_error"):
        raise NVMLError(globals()[f"NVML_ERROR_{machine['init_error']}"])
    _state["machine"] = machine
    _state["initialized"] = True
    return None


def nvmlInit():
    nvmlInitWithFlags(0)
    return None


def nvmlShutdown():
    _machine()
    _state["initialized"] = False
    return None


def nvmlErrorString(result):
    return _MESSAGES.get(result, "Unknown Error")


def nvmlSystemGetDriverVersion():
    return _machine()["driver_version"]


def nvmlSystemGetNVMLVersion():
    return _machine()["nvml_version"]


# -- devices -----------------------------------------------------------------------------------
def nvmlDeviceGetCount():
    return len(_machine()["gpus"])


def nvmlDeviceGetHandleByIndex(index):
    gpus = _machine()["gpus"]
    if not 0 <= index < len(gpus):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return _Handle(gpus[index])


def nvmlDeviceGetMinorNumber(handle):
    _check(handle, "nvmlDeviceGetMinorNumber")
    if handle.mig:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return handle.gpu["minor_number"]


def nvmlDeviceGetUUID(handle):
    _check(handle, "nvmlDeviceGetUUID")
    return handle.mig["uuid"] if handle.mig else handle.gpu["uuid"]


def nvmlDeviceGetName(handle):
    _check(handle, "nvmlDeviceGetName")
    if handle.mig:
        # real NVML names a MIG device "<GPU name> MIG <profile>"
        return f"{handle.gpu['name']} MIG {handle.mig['profile']}"
    return handle.gpu["name"]


def nvmlDeviceGetMemoryInfo(handle, version=None):
    _check(handle, "nvmlDeviceGetMemoryInfo")
    total = handle.mig["memory_mib"] * 2**20 if handle.mig else handle.gpu["memory_total_bytes"]
    used = 0  # nothing runs on a recorded machine
    return SimpleNamespace(total=total, free=total - used, used=used)


def nvmlDeviceGetPciInfo(handle):
    _check(handle, "nvmlDeviceGetPciInfo")
    bus_id = handle.gpu["pci_bus_id"]
    domain, bus, rest = bus_id.split(":")
    return SimpleNamespace(
        busId=bus_id,
        busIdLegacy=bus_id[4:],
        domain=int(domain, 16),
        bus=int(bus, 16),
        device=int(rest.split(".")[0], 16),
        pciDeviceId=int(handle.gpu.get("pci_device_id", "0x0"), 16),
    )


def nvmlDeviceGetNumaNodeId(handle):
    _check(handle, "nvmlDeviceGetNumaNodeId")
    node = handle.gpu.get("numa_node")
    if node is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return node


def _parse_ids(text: str) -> list[int]:
    out: list[int] = []
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def nvmlDeviceGetCpuAffinity(handle, cpuSetSize):
    _check(handle, "nvmlDeviceGetCpuAffinity")
    words = [0] * cpuSetSize
    for cpu in _parse_ids(handle.gpu["cpu_affinity"]):
        if cpu // 64 < cpuSetSize:  # like NVML: cpus past the buffer are cut off
            words[cpu // 64] |= 1 << (cpu % 64)
    return words


# -- MIG ---------------------------------------------------------------------------------------
def nvmlDeviceGetMigMode(device):
    _check(device, "nvmlDeviceGetMigMode")
    mode = device.gpu.get("mig_mode")
    if mode is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return [mode[0], mode[1]]


def nvmlDeviceGetMaxMigDeviceCount(device):
    _check(device, "nvmlDeviceGetMaxMigDeviceCount")
    if device.gpu.get("mig_mode") is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return device.gpu.get("max_mig_devices", 7) if device.gpu["mig_mode"][0] else 0


def nvmlDeviceGetMigDeviceHandleByIndex(device, index):
    _check(device, "nvmlDeviceGetMigDeviceHandleByIndex")
    for mig in device.gpu.get("mig_devices", []):
        if mig["index"] == index:
            return _Handle(device.gpu, mig)
    raise NVMLError(NVML_ERROR_NOT_FOUND)


def nvmlDeviceIsMigDeviceHandle(device):
    _check(device, "nvmlDeviceIsMigDeviceHandle")
    return 1 if device.mig else 0


def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(migDevice):
    _check(migDevice, "nvmlDeviceGetDeviceHandleFromMigDeviceHandle")
    if not migDevice.mig:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return _Handle(migDevice.gpu)


def _mig_only(device, call):
    _check(device, call)
    if not device.mig:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return device.mig


def nvmlDeviceGetGpuInstanceId(device):
    return _mig_only(device, "nvmlDeviceGetGpuInstanceId")["gi_id"]


def nvmlDeviceGetComputeInstanceId(device):
    return _mig_only(device, "nvmlDeviceGetComputeInstanceId")["ci_id"]


def nvmlDeviceGetAttributes(device):
    mig = _mig_only(device, "nvmlDeviceGetAttributes")
    return SimpleNamespace(
        multiprocessorCount=mig.get("sm_count", 0),
        sharedCopyEngineCount=0,
        sharedDecoderCount=0,
        sharedEncoderCount=0,
        sharedJpegCount=0,
        sharedOfaCount=0,
        gpuInstanceSliceCount=mig["gpu_slices"],
        computeInstanceSliceCount=mig.get("ci_slices", mig["gpu_slices"]),
        memorySizeMB=mig["memory_mib"],
    )


# -- NVLink ------------------------------------------------------------------------------------
def _link(device, link, call) -> dict:
    _check(device, call)
    nvlink = device.gpu.get("nvlink")
    if nvlink in (None, "not_supported") or device.mig:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    links = nvlink["links"]
    if not 0 <= link < len(links):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return links[link]


def nvmlDeviceGetNvLinkState(device, link):
    return _link(device, link, "nvmlDeviceGetNvLinkState")["state"]


def nvmlDeviceGetNvLinkVersion(device, link):
    return _link(device, link, "nvmlDeviceGetNvLinkVersion")["version"]


def nvmlDeviceGetNvLinkRemotePciInfo(device, link):
    info = _link(device, link, "nvmlDeviceGetNvLinkRemotePciInfo")
    if not info["state"]:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return SimpleNamespace(busId=info["remote_pci_bus_id"])


def nvmlDeviceGetNvLinkRemoteDeviceType(handle, link):
    info = _link(handle, link, "nvmlDeviceGetNvLinkRemoteDeviceType")
    return info["remote_type"]


# -- health (a machine file's optional per-GPU "health" object; absent: a healthy GPU) ----------
def _health(handle, call) -> dict:
    _check(handle, call)
    return handle.gpu.get("health", {})


def nvmlDeviceGetPersistenceMode(handle):
    return _health(handle, "nvmlDeviceGetPersistenceMode").get(
        "persistence_mode", NVML_FEATURE_ENABLED
    )


def nvmlDeviceGetTotalEccErrors(handle, errorType, counterType):
    health = _health(handle, "nvmlDeviceGetTotalEccErrors")
    kind = "uncorrected" if errorType == NVML_MEMORY_ERROR_TYPE_UNCORRECTED else "corrected"
    scope = "aggregate" if counterType == NVML_AGGREGATE_ECC else "volatile"
    return health.get(f"ecc_{kind}_{scope}", 0)


def nvmlDeviceGetRetiredPagesPendingStatus(device):
    return _health(device, "nvmlDeviceGetRetiredPagesPendingStatus").get(
        "retired_pages_pending", NVML_FEATURE_DISABLED
    )


def nvmlDeviceGetRemappedRows(device):
    rows = _health(device, "nvmlDeviceGetRemappedRows").get("remapped_rows", [0, 0, 0, 0])
    return tuple(rows)  # (corrected rows, uncorrected rows, pending, failure occurred)


class _EventSet:
    def __init__(self):
        self.pending: list[SimpleNamespace] = []


def nvmlEventSetCreate():
    _machine()
    return _EventSet()


def nvmlDeviceRegisterEvents(handle, eventTypes, eventSet):
    """Queue the GPU's recorded XIDs (its health's "xid_events") as critical XID events.

    As if they arrived while the set is registered: real NVML delivers only those, not XIDs
    from before registration.
    """
    health = _health(handle, "nvmlDeviceRegisterEvents")
    if eventTypes & nvmlEventTypeXidCriticalError:
        for xid in health.get("xid_events", []):
            eventSet.pending.append(
                SimpleNamespace(
                    device=handle,
                    eventType=nvmlEventTypeXidCriticalError,
                    eventData=xid,
                    gpuInstanceId=0xFFFFFFFF,
                    computeInstanceId=0xFFFFFFFF,
                )
            )


def nvmlEventSetWait_v2(eventSet, timeoutms):
    _machine()
    if not eventSet.pending:
        raise NVMLError(NVML_ERROR_TIMEOUT)
    return eventSet.pending.pop(0)


def nvmlEventSetFree(eventSet):
    eventSet.pending.clear()
