"""A test double of the `pynvml` module (nvidia-ml-py) serving a recorded machine.

Same function names, signatures, exception classes and constants as nvidia-ml-py for the
calls slurmgpu makes (tests/unit/sources/test_pynvml_double.py checks the signatures
against the installed real module). The machine is a JSON file from tests/data/machines/,
named by the environment variable SLURMGPU_FAKE_NVML_MACHINE (read at nvmlInit) or set with
`use_machine(path)`. Only the GPU hardware is faked; nothing here knows about slurmgpu.
"""

from __future__ import annotations

import ctypes
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
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_INSUFFICIENT_RESOURCES = 23
NVML_ERROR_INVALID_STATE = 29
NVML_ERROR_UNKNOWN = 999

NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_DEVICE_MIG_DISABLE = 0x0
NVML_DEVICE_MIG_ENABLE = 0x1
NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED = 0x0
# nvmlComputeInstanceProfile: the CI profile enum for a CI of N compute slices
_CI_PROFILE_FOR_SLICES = {1: 0x0, 2: 0x1, 3: 0x2, 4: 0x3, 7: 0x4, 8: 0x5, 6: 0x6}
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
    NVML_ERROR_MEMORY: "Insufficient Memory",
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
_state: dict[str, object] = {"machine": None, "path": None, "initialized": False, "dirty": None}


def use_machine(path) -> None:
    """Serve the machine recorded in `path` (JSON) from the next nvmlInit on."""
    _state["path"] = str(path)
    _state["machine"] = None
    _state["initialized"] = False
    _state["dirty"] = None


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
        if failing.startswith("once:"):  # a transient error: the next call succeeds
            del handle.gpu["errors"][call]
            failing = failing.removeprefix("once:")
            _state["dirty"] = _state["path"] or os.environ.get(ENV_VAR)
        raise NVMLError(globals()[f"NVML_ERROR_{failing}"])


# -- library -----------------------------------------------------------------------------------
def nvmlInitWithFlags(flags):
    path = _state["path"] or os.environ.get(ENV_VAR)
    if not path:
        raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)
    if _state.get("dirty") == path and _state["machine"] is not None:
        _state["initialized"] = True  # a changed machine keeps its state, like a real GPU
        return None
    with open(path, encoding="utf-8") as fh:
        machine = json.load(fh)
    if machine.get("init_error"):
        raise NVMLError(globals()[f"NVML_ERROR_{machine['init_error']}"])
    # a mixed node's machine also lists AMD GPUs and Ascend NPUs (other doubles serve those)
    nvidia = [g for g in machine["gpus"] if g.get("vendor", "nvidia") == "nvidia"]
    if not nvidia:  # no NVIDIA GPU: no NVIDIA driver on the node
        raise NVMLError(NVML_ERROR_DRIVER_NOT_LOADED)
    machine["gpus"] = nvidia
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
    # a recorded machine runs nothing; a test may load it with processes (see below)
    used = sum(p.usedGpuMemory or 0 for p in nvmlDeviceGetComputeRunningProcesses(handle))
    return SimpleNamespace(total=total, free=total - used, used=used)


# -- load: processes and utilization a test puts on a recorded machine --------------------------
# A GPU entry may carry "processes": [{"pid": 4242, "used_memory_mib": 1000}] and
# "utilization": {"gpu": 55, "memory": 20}; a MIG device entry "processes" alike.
# "used_memory_mib": null stands for NVML_VALUE_NOT_AVAILABLE (nvidia-ml-py gives None).
_NO_INSTANCE = 0xFFFFFFFF  # gpuInstanceId/computeInstanceId of a process on a whole GPU


def _process(entry: dict, mig: dict | None):
    used = entry.get("used_memory_mib")
    return SimpleNamespace(
        pid=entry["pid"],
        usedGpuMemory=None if used is None else int(used * 2**20),
        gpuInstanceId=mig["gi_id"] if mig else _NO_INSTANCE,
        computeInstanceId=mig["ci_id"] if mig else _NO_INSTANCE,
    )


def _mig_enabled(gpu: dict) -> bool:
    return bool(gpu.get("mig_mode") and gpu["mig_mode"][0])


def nvmlDeviceGetComputeRunningProcesses(handle):
    _check(handle, "nvmlDeviceGetComputeRunningProcesses")
    if handle.mig:
        return [_process(p, handle.mig) for p in handle.mig.get("processes", [])]
    if _mig_enabled(handle.gpu):
        # the parent GPU lists the processes of all its MIG instances, with their ids
        return [
            _process(p, mig)
            for mig in handle.gpu.get("mig_devices", [])
            for p in mig.get("processes", [])
        ]
    return [_process(p, None) for p in handle.gpu.get("processes", [])]


def nvmlDeviceGetUtilizationRates(handle):
    _check(handle, "nvmlDeviceGetUtilizationRates")
    # nvml.h: "On MIG-enabled GPUs, querying device utilization rates is not currently
    # supported" -- neither on the parent GPU nor on a MIG device handle
    if handle.mig or _mig_enabled(handle.gpu):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    rates = handle.gpu.get("utilization", {"gpu": 0, "memory": 0})
    return SimpleNamespace(gpu=rates["gpu"], memory=rates["memory"])


# -- energy: the counter and power a test puts on a GPU entry ---------------------------------
# "total_energy_mj": the cumulative counter (a test advances it between passes; lowering it
# is a driver reload); "power_mw": power now. Without them the counter is 0 and the power is
# the model's (power.json) at the entry's utilization. "energy": "unsupported" stands for a
# GPU before Volta (no counter). MIG device handles have neither (NVML: Not Supported).
_POWER = os.path.join(os.path.dirname(__file__), "power.json")


def _model_power_mw(gpu: dict) -> int:
    with open(_POWER, encoding="utf-8") as fh:
        model = json.load(fh)["models"].get(gpu.get("name", ""))
    if model is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    util = gpu.get("utilization", {"gpu": 0})["gpu"]
    watts = model["idle_w"] + (model["loaded_w"] - model["idle_w"]) * util / 100.0
    return round(watts * 1000)


def nvmlDeviceGetTotalEnergyConsumption(handle):
    _check(handle, "nvmlDeviceGetTotalEnergyConsumption")
    if handle.mig or handle.gpu.get("energy") == "unsupported":
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return int(handle.gpu.get("total_energy_mj", 0))


def nvmlDeviceGetPowerUsage(handle):
    _check(handle, "nvmlDeviceGetPowerUsage")
    if handle.mig:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    if "power_mw" in handle.gpu:
        return int(handle.gpu["power_mw"])
    return _model_power_mw(handle.gpu)


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


# -- MIG management ------------------------------------------------------------------------------
# State changes live in the loaded machine (in memory): a later nvmlInit of the same machine
# keeps them, as a real GPU keeps its instances across processes. With the environment
# variable SLURMGPU_FAKE_NVML_WRITE=1 they are also written back to the machine file, so a
# child process (slurmgpu mig apply, then slurmgpu inventory) sees what the parent created.
# Semantics and return codes follow NVML's documentation (nvml.h, "Multi Instance GPU
# Management"): creating needs MIG mode on (NOT_SUPPORTED otherwise) and free slices on the
# placement grid (INSUFFICIENT_RESOURCES); destroying an instance that holds compute
# instances or processes is IN_USE; nvmlDeviceSetMigMode reports IN_USE in its activation
# status when the GPU is not idle. GPU-instance ids follow the driver's tree numbering over
# the memory-slice grid (full GPU 0, halves 1-2, quarters 3-6, eighths 7-14).
WRITE_VAR = "SLURMGPU_FAKE_NVML_WRITE"


class c_nvmlGpuInstancePlacement_t(ctypes.Structure):
    _fields_ = [("start", ctypes.c_uint), ("size", ctypes.c_uint)]


class _GpuInstance:
    def __init__(self, gpu: dict, gi: dict):
        self.gpu = gpu
        self.gi = gi


class _ComputeInstance:
    def __init__(self, gpu: dict, gi: dict, ci_id: int):
        self.gpu = gpu
        self.gi = gi
        self.ci_id = ci_id


def _save() -> None:
    _state["dirty"] = _state["path"] or os.environ.get(ENV_VAR)
    if os.environ.get(WRITE_VAR) == "1" and _state["dirty"]:
        tmp = f"{_state['dirty']}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(_machine(), fh, indent=1)
        os.replace(tmp, _state["dirty"])


def _profiles() -> list[dict]:
    return _machine().get("mig_profiles", [])


def _grid() -> int:
    return max((p["memory_slices"] for p in _profiles()), default=8)


def _gi_number(start: int, size: int) -> int:
    return _grid() // size - 1 + start // size


def _instances(gpu: dict) -> list[dict]:
    """The GPU's GPU instances [{id, profile, start, size, cis: [ci ids]}], from its MIG devices."""
    if "gpu_instances" not in gpu:
        by_name = {p["name"]: p for p in _profiles()}
        gis: dict[int, dict] = {}
        for mig in gpu.get("mig_devices", []):
            prof = by_name[mig["profile"]]
            size = prof["memory_slices"]
            start = (mig["gi_id"] - (_grid() // size - 1)) * size
            gi = gis.setdefault(
                mig["gi_id"],
                {
                    "id": mig["gi_id"],
                    "profile": prof["id"],
                    "start": start,
                    "size": size,
                    "cis": [],
                },
            )
            gi["cis"].append(mig["ci_id"])
        gpu["gpu_instances"] = sorted(gis.values(), key=lambda g: g["id"])
    return gpu["gpu_instances"]


def _profile_by_id(profile_id: int) -> dict:
    for p in _profiles():
        if p["id"] == profile_id:
            return p
    raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)


def _rebuild_mig_devices(gpu: dict) -> None:
    """NVML's MIG device handles: one per compute instance, indexed in GI/CI order."""
    import uuid as _uuid

    devices = []
    for gi in sorted(_instances(gpu), key=lambda g: g["id"]):
        prof = _profile_by_id(gi["profile"])
        for ci in sorted(gi["cis"]):
            name = f"{gpu['uuid']}/{gi['id']}/{ci}"
            devices.append(
                {
                    "index": len(devices),
                    "gi_id": gi["id"],
                    "ci_id": ci,
                    "profile": prof["name"],
                    "gpu_slices": prof["slices"],
                    "memory_mib": prof["memory_mib"],
                    "uuid": f"MIG-{_uuid.uuid5(_uuid.NAMESPACE_OID, name)}",
                }
            )
    gpu["mig_devices"] = devices


def _mig_on(device, call: str) -> dict:
    _check(device, call)
    gpu = device.gpu
    if device.mig or gpu.get("mig_mode") is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return gpu


def nvmlDeviceSetMigMode(device, mode):
    gpu = _mig_on(device, "nvmlDeviceSetMigMode")
    if mode not in (NVML_DEVICE_MIG_DISABLE, NVML_DEVICE_MIG_ENABLE):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    gpu["mig_mode"] = [gpu["mig_mode"][0], mode]
    if gpu.get("processes") or (mode == NVML_DEVICE_MIG_DISABLE and _instances(gpu)):
        _save()
        return NVML_ERROR_IN_USE  # activation failed: the GPU is not idle; pending stays set
    gpu["mig_mode"] = [mode, mode]
    if mode == NVML_DEVICE_MIG_DISABLE:
        gpu["gpu_instances"] = []
        gpu["mig_devices"] = []
    _save()
    return NVML_SUCCESS


def nvmlDeviceGetGpuInstanceProfileInfo(device, profile, version=2):
    _mig_on(device, "nvmlDeviceGetGpuInstanceProfileInfo")
    for p in _profiles():
        if p["enum"] == profile:
            return SimpleNamespace(
                id=p["id"],
                isP2pSupported=0,
                sliceCount=p["slices"],
                instanceCount=p["instances"],
                multiprocessorCount=p["sm"],
                copyEngineCount=p["slices"],
                decoderCount=0,
                encoderCount=0,
                jpegCount=0,
                ofaCount=0,
                memorySizeMB=p["memory_mib"],
                name=f"MIG {p['name']}",
            )
    if 0 <= profile < 0x12:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)  # a real profile this GPU does not offer
    raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)


def nvmlDeviceGetGpuInstancePossiblePlacements(device, profileId, placementsRef, countRef):
    _mig_on(device, "nvmlDeviceGetGpuInstancePossiblePlacements")
    prof = _profile_by_id(profileId)
    count = countRef._obj if hasattr(countRef, "_obj") else countRef
    if placementsRef is not None:
        for i, start in enumerate(prof["placements"]):
            placementsRef[i].start = start
            placementsRef[i].size = prof["memory_slices"]
    count.value = len(prof["placements"])
    return NVML_SUCCESS


def nvmlDeviceGetGpuInstanceRemainingCapacity(device, profileId):
    gpu = _mig_on(device, "nvmlDeviceGetGpuInstanceRemainingCapacity")
    prof = _profile_by_id(profileId)
    if not gpu["mig_mode"][0]:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    free = 0
    taken = _taken_slots(gpu)
    for start in prof["placements"]:
        slots = set(range(start, start + prof["memory_slices"]))
        if not slots & taken:
            taken |= slots
            free += 1
    same = sum(1 for gi in _instances(gpu) if gi["profile"] == profileId)
    return max(0, min(free, prof["instances"] - same))


def _taken_slots(gpu: dict) -> set[int]:
    return {s for gi in _instances(gpu) for s in range(gi["start"], gi["start"] + gi["size"])}


def _create_gi(device, profileId, start, call):
    gpu = _mig_on(device, call)
    if not gpu["mig_mode"][0]:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    prof = _profile_by_id(profileId)
    if start is None:  # NVML picks the first free placement
        start = next(
            (
                s
                for s in prof["placements"]
                if not set(range(s, s + prof["memory_slices"])) & _taken_slots(gpu)
            ),
            None,
        )
        if start is None:
            raise NVMLError(NVML_ERROR_INSUFFICIENT_RESOURCES)
    if start not in prof["placements"]:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    slots = set(range(start, start + prof["memory_slices"]))
    same = sum(1 for gi in _instances(gpu) if gi["profile"] == profileId)
    used = sum(_profile_by_id(gi["profile"])["slices"] for gi in _instances(gpu))
    compute = max((p["slices"] for p in _profiles()), default=7)
    if slots & _taken_slots(gpu) or same >= prof["instances"] or used + prof["slices"] > compute:
        raise NVMLError(NVML_ERROR_INSUFFICIENT_RESOURCES)
    gi = {
        "id": _gi_number(start, prof["memory_slices"]),
        "profile": profileId,
        "start": start,
        "size": prof["memory_slices"],
        "cis": [],
    }
    _instances(gpu).append(gi)
    _save()
    return _GpuInstance(gpu, gi)


def nvmlDeviceCreateGpuInstance(device, profileId):
    return _create_gi(device, profileId, None, "nvmlDeviceCreateGpuInstance")


def nvmlDeviceCreateGpuInstanceWithPlacement(device, profileId, placement):
    if placement.size != _profile_by_id(profileId)["memory_slices"]:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return _create_gi(
        device, profileId, placement.start, "nvmlDeviceCreateGpuInstanceWithPlacement"
    )


def nvmlDeviceGetGpuInstanceById(device, gpuInstanceId):
    gpu = _mig_on(device, "nvmlDeviceGetGpuInstanceById")
    if not gpu["mig_mode"][0]:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    for gi in _instances(gpu):
        if gi["id"] == gpuInstanceId:
            return _GpuInstance(gpu, gi)
    raise NVMLError(NVML_ERROR_NOT_FOUND)


def _gi_handle(gpuInstance, call) -> dict:
    if not isinstance(gpuInstance, _GpuInstance):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    failing = gpuInstance.gpu.get("errors", {}).get(call)
    if failing:
        raise NVMLError(globals()[f"NVML_ERROR_{failing}"])
    if gpuInstance.gi not in _instances(gpuInstance.gpu):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)  # destroyed: the handle is stale
    return gpuInstance.gi


def nvmlGpuInstanceGetInfo(gpuInstance):
    gi = _gi_handle(gpuInstance, "nvmlGpuInstanceGetInfo")
    return SimpleNamespace(
        device=_Handle(gpuInstance.gpu),
        id=gi["id"],
        profileId=gi["profile"],
        placement=SimpleNamespace(start=gi["start"], size=gi["size"]),
    )


def nvmlGpuInstanceDestroy(gpuInstance):
    gi = _gi_handle(gpuInstance, "nvmlGpuInstanceDestroy")
    if gi["cis"] or gi["id"] in gpuInstance.gpu.get("busy_gpu_instances", []):
        raise NVMLError(NVML_ERROR_IN_USE)
    _instances(gpuInstance.gpu).remove(gi)
    _rebuild_mig_devices(gpuInstance.gpu)
    _save()
    return NVML_SUCCESS


def nvmlGpuInstanceGetComputeInstanceProfileInfo(device, profile, engProfile, version=2):
    gi = _gi_handle(device, "nvmlGpuInstanceGetComputeInstanceProfileInfo")
    slices = next((n for n, enum in _CI_PROFILE_FOR_SLICES.items() if enum == profile), None)
    if slices is None or engProfile != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    gi_slices = _profile_by_id(gi["profile"])["slices"]
    if slices > gi_slices:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return SimpleNamespace(
        id=profile,
        sliceCount=slices,
        instanceCount=gi_slices // slices,
        multiprocessorCount=0,
        sharedCopyEngineCount=gi_slices,
        sharedDecoderCount=0,
        sharedEncoderCount=0,
        sharedJpegCount=0,
        sharedOfaCount=0,
        name=f"MIG {slices}c",
    )


def nvmlGpuInstanceCreateComputeInstance(gpuInstance, profileId):
    gi = _gi_handle(gpuInstance, "nvmlGpuInstanceCreateComputeInstance")
    slices = next((n for n, enum in _CI_PROFILE_FOR_SLICES.items() if enum == profileId), None)
    if slices is None:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    gi_slices = _profile_by_id(gi["profile"])["slices"]
    used = len(gi["cis"]) * slices  # one CI size per GPU instance here
    if slices > gi_slices or used + slices > gi_slices or len(gi["cis"]) >= 8:
        raise NVMLError(NVML_ERROR_INSUFFICIENT_RESOURCES)
    ci_id = next(i for i in range(8) if i not in gi["cis"])
    gi["cis"].append(ci_id)
    _rebuild_mig_devices(gpuInstance.gpu)
    _save()
    return _ComputeInstance(gpuInstance.gpu, gi, ci_id)


def nvmlGpuInstanceGetComputeInstanceById(gpuInstance, computeInstanceId):
    gi = _gi_handle(gpuInstance, "nvmlGpuInstanceGetComputeInstanceById")
    if computeInstanceId not in gi["cis"]:
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    return _ComputeInstance(gpuInstance.gpu, gi, computeInstanceId)


def nvmlComputeInstanceDestroy(computeInstance):
    if not isinstance(computeInstance, _ComputeInstance):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    gpu, gi = computeInstance.gpu, computeInstance.gi
    failing = gpu.get("errors", {}).get("nvmlComputeInstanceDestroy")
    if failing:
        raise NVMLError(globals()[f"NVML_ERROR_{failing}"])
    if computeInstance.ci_id not in gi["cis"]:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    if gi["id"] in gpu.get("busy_gpu_instances", []):
        raise NVMLError(NVML_ERROR_IN_USE)  # processes run on it
    gi["cis"].remove(computeInstance.ci_id)
    _rebuild_mig_devices(gpu)
    _save()
    return NVML_SUCCESS


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
