"""A test double of AMD's `amdsmi` Python module serving a recorded machine.

Same function names, return shapes (dicts with amdsmi's keys), enum classes and exception
classes as ROCm's py-interface (`amdsmi_interface.py`) for the calls slurmgpu makes. The
machine is a JSON file from tests/data/machines/ (vendor "amd"), named by the environment
variable SLURMGPU_FAKE_AMDSMI_MACHINE (read at amdsmi_init) or set with `use_machine(path)`.

Partition modes are served as the driver does: each package becomes `COMPUTE_PARTITIONS[mode]`
logical GPUs (processor handles), partition k of a package carries k in its BDF's function
number (as amdsmi reports it, ROCm/rocm-systems#5805), its own render node and an equal share
of the package's memory. Only the hardware is faked; nothing here knows about slurmgpu.
"""

from __future__ import annotations

import json
import os
from enum import IntEnum

ENV_VAR = "SLURMGPU_FAKE_AMDSMI_MACHINE"
COMPUTE_PARTITIONS = {"SPX": 1, "DPX": 2, "TPX": 3, "QPX": 4, "CPX": 8}


class AmdSmiException(Exception):
    """Base of every amdsmi error."""


class AmdSmiLibraryException(AmdSmiException):
    def __init__(self, err_code: int, err_info: str = ""):
        super().__init__(f"Error code:\n\t{err_code} | {err_info}")
        self.err_code = err_code
        self.err_info = err_info


class AmdSmiRetryException(AmdSmiLibraryException):
    pass


class AmdSmiParameterException(AmdSmiException):
    pass


AMDSMI_STATUS_NOT_INIT = 32  # amdsmi_status_t AMDSMI_STATUS_NOT_INIT
AMDSMI_STATUS_DRIVER_NOT_LOADED = 51
AMDSMI_STATUS_NOT_SUPPORTED = 2


class AmdSmiInitFlags(IntEnum):
    INIT_ALL_PROCESSORS = 0xFFFFFFFF
    INIT_AMD_CPUS = 1 << 0
    INIT_AMD_GPUS = 1 << 1


class AmdSmiMemoryType(IntEnum):
    VRAM = 0
    VIS_VRAM = 1
    GTT = 2


class AmdSmiIoLinkType(IntEnum):
    UNDEFINED = 0
    PCIEXPRESS = 1
    XGMI = 2


class _Handle:
    """One processor handle: a logical GPU (package, partition)."""

    def __init__(self, package: dict, partition: int, mode: str, memory: str, render: int):
        self.package = package
        self.partition = partition
        self.mode = mode
        self.memory = memory
        self.render = render


_state: dict = {"machine": None, "path": None, "init": False}


def use_machine(path: str | os.PathLike[str] | None) -> None:
    """Serve the machine in `path` (None: read SLURMGPU_FAKE_AMDSMI_MACHINE at init)."""
    _state["path"] = None if path is None else str(path)
    _state["machine"] = None
    _state["init"] = False


def _machine() -> dict:
    if not _state["init"]:
        raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_INIT, "AMDSMI_STATUS_NOT_INIT")
    return _state["machine"]


def amdsmi_init(flag: int = AmdSmiInitFlags.INIT_AMD_GPUS) -> None:
    path = _state["path"] or os.environ.get(ENV_VAR)
    if not path:
        raise AmdSmiLibraryException(
            AMDSMI_STATUS_DRIVER_NOT_LOADED, "AMDSMI_STATUS_DRIVER_NOT_LOADED"
        )
    with open(path, encoding="utf-8") as fh:
        machine = json.load(fh)
    if "amdsmi" not in machine:  # no AMD GPU: amdgpu is not loaded on this node
        raise AmdSmiLibraryException(
            AMDSMI_STATUS_DRIVER_NOT_LOADED, "AMDSMI_STATUS_DRIVER_NOT_LOADED"
        )
    if machine["amdsmi"].get("init_error"):
        raise AmdSmiLibraryException(
            AMDSMI_STATUS_DRIVER_NOT_LOADED, machine["amdsmi"]["init_error"]
        )
    _state["machine"] = machine
    _state["init"] = True
    _state["handles"] = _handles(machine)


def amdsmi_shut_down() -> None:
    _state["init"] = False


def _handles(machine: dict) -> list[_Handle]:
    mode = machine["amdsmi"].get("compute_partition", "SPX")
    memory = machine["amdsmi"].get("memory_partition", "NPS1")
    parts = COMPUTE_PARTITIONS[mode]
    packages = [p for p in machine["gpus"] if p.get("vendor") == "amd"]
    handles = []
    extra = 128 + len(packages)  # partition render nodes come after the PCI devices' nodes
    for p_index, package in enumerate(packages):
        for k in range(parts):
            later = extra + p_index * (parts - 1) + (k - 1)
            render = package["render_minor"] if k == 0 else later
            handles.append(_Handle(package, k, mode, memory, render))
    return handles


def render_minors(machine: dict) -> list[int]:
    """Every render minor the machine's logical GPUs have (for the recorded host tree)."""
    return [h.render for h in _handles(machine)]


def amdsmi_get_processor_handles() -> list[_Handle]:
    _machine()
    return list(_state["handles"])


def _check(handle) -> _Handle:
    _machine()
    if not isinstance(handle, _Handle):
        raise AmdSmiParameterException(f"{handle!r} is not a processor handle")
    if handle.package.get("lost"):
        raise AmdSmiLibraryException(AMDSMI_STATUS_DRIVER_NOT_LOADED, "AMDSMI_STATUS_NO_DATA")
    return handle


def amdsmi_get_gpu_device_bdf(handle) -> str:
    h = _check(handle)
    bdf = h.package["bdf"]
    return bdf[:-1] + str(h.partition)  # partition id in the function number


def amdsmi_get_gpu_device_uuid(handle) -> str:
    h = _check(handle)
    uuid = h.package["uuid"]
    # partitions: a distinct UUID per logical GPU (here: the partition id in the 2nd group)
    return uuid if h.partition == 0 else f"{uuid[:9]}{h.partition:04x}{uuid[13:]}"


def amdsmi_get_gpu_asic_info(handle) -> dict:
    h = _check(handle)
    p = h.package
    return {
        "market_name": p["market_name"],
        "vendor_id": "0x1002",
        "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]",
        "subvendor_id": "0x1002",
        "device_id": p["device_id"],
        "rev_id": "0x00",
        "asic_serial": p.get("asic_serial", "N/A"),
        "oam_id": p.get("oam_id", 0),
        "num_of_compute_units": p["compute_units"] // COMPUTE_PARTITIONS[h.mode],
        "target_graphics_version": p.get("gfx", "gfx942"),
    }


def amdsmi_get_gpu_driver_info(handle) -> dict:
    _check(handle)
    info = _machine()["amdsmi"]
    return {
        "driver_name": "amdgpu",
        "driver_version": info["driver_version"],
        "driver_date": info.get("driver_date", "2015/01/01 00:00"),
    }


def amdsmi_get_lib_version() -> dict:
    year, major, minor, release = _machine()["amdsmi"]["lib_version"]
    return {"year": year, "major": major, "minor": minor, "release": release, "build": ""}


def amdsmi_get_gpu_memory_total(handle, mem_type) -> int:
    h = _check(handle)
    if int(mem_type) != AmdSmiMemoryType.VRAM:
        raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED, "AMDSMI_STATUS_NOT_SUPPORTED")
    return h.package["vram_mib"] * 1024 * 1024 // COMPUTE_PARTITIONS[h.mode]


def amdsmi_topo_get_numa_node_number(handle) -> int:
    return _check(handle).package["numa_node"]


def amdsmi_get_gpu_kfd_info(handle) -> dict:
    h = _check(handle)
    return {
        "kfd_id": h.package["kfd_id"] + h.partition,
        "node_id": _state["handles"].index(h) + 1,  # KFD node 0 is the CPU
        "current_partition_id": h.partition,
    }


def amdsmi_get_gpu_enumeration_info(handle) -> dict:
    h = _check(handle)
    i = _state["handles"].index(h)
    return {
        "drm_render": h.render,
        "drm_card": h.render - 128 + 1,  # card0 is the BMC's VGA on these platforms
        "hsa_id": i + 1,
        "hip_id": i,
        "hip_uuid": "GPU-" + amdsmi_get_gpu_device_uuid(h).replace("-", "")[:16],
    }


def amdsmi_get_gpu_compute_partition(handle) -> str:
    return _check(handle).mode


def amdsmi_get_gpu_memory_partition(handle) -> str:
    return _check(handle).memory


def amdsmi_topo_get_link_type(handle_src, handle_dst) -> dict:
    a, b = _check(handle_src), _check(handle_dst)
    if a.package is b.package:
        return {"hops": 0, "type": AmdSmiIoLinkType.UNDEFINED}
    xgmi = b.package["bdf"] in a.package.get("xgmi_peers", [])
    if xgmi:
        return {"hops": 1, "type": AmdSmiIoLinkType.XGMI}
    return {"hops": 2, "type": AmdSmiIoLinkType.PCIEXPRESS}


# Work on the machine (collector tests): `machine["amdsmi"]["load"]` maps a render minor (as
# text) to {"gfx_activity": percent or "N/A", "vram_used_mib": MiB}; idle when absent.
def _load(h: _Handle) -> dict:
    return _machine()["amdsmi"].get("load", {}).get(str(h.render), {})


def amdsmi_get_gpu_activity(handle) -> dict:
    h = _check(handle)
    gfx = _load(h).get("gfx_activity", 0)
    return {"gfx_activity": gfx, "umc_activity": "N/A", "mm_activity": "N/A"}


# amd-smi reports a counter_resolution of about 15.3 uJ on MI300X (a test may give its own)
ENERGY_RESOLUTION_UJ = 15.3


def amdsmi_get_energy_count(handle) -> dict:
    """The energy accumulator of the test's load (`energy_accumulator`, 0 unless given), its
    resolution in uJ and a timestamp, as amdsmi's Python API returns them."""
    h = _check(handle)
    load = _load(h)
    return {
        "energy_accumulator": int(load.get("energy_accumulator", 0)),
        "counter_resolution": float(load.get("counter_resolution", ENERGY_RESOLUTION_UJ)),
        "timestamp": 0,
    }


def amdsmi_get_gpu_memory_usage(handle, mem_type) -> int:
    h = _check(handle)
    if int(mem_type) != AmdSmiMemoryType.VRAM:
        raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED, "AMDSMI_STATUS_NOT_SUPPORTED")
    return int(_load(h).get("vram_used_mib", 0)) * 1024 * 1024


def amdsmi_get_gpu_total_ecc_count(handle) -> dict:
    """RAS error counts of a logical GPU: the package's `ecc` (recorded or a test's), else 0."""
    h = _check(handle)
    ecc = h.package.get("ecc", {})
    return {
        "correctable_count": ecc.get("correctable", 0),
        "uncorrectable_count": ecc.get("uncorrectable", 0),
        "deferred_count": ecc.get("deferred", 0),
    }
