"""AMD GPUs through ROCm's `amdsmi` Python module, combined with the host facts.

The only module that talks to the AMD driver. Tests replace the `amdsmi` module itself
(tests/doubles/amdsmi serves recorded machines), so this code runs unchanged in tests and in
production. One `Gpu` per amdsmi processor handle: on MI300 in a compute partition mode
(DPX/QPX/CPX) that is one per logical GPU, each with its own render node, so a CPX node of 8
packages is 64 devices. Per device:

- `File=`: `/dev/dri/renderD<drm_render>` (`amdsmi_get_gpu_enumeration_info`, ROCm >= 6.4);
- placement: `amdsmi_topo_get_numa_node_number`; CPU affinity = that NUMA node's cpus (Slurm's
  rsmi plugin does the same);
- XGMI: `amdsmi_topo_get_link_type` between each pair; an XGMI link of one hop is a direct
  Infinity Fabric link (one per pair on MI300X);
- partitions: `amdsmi_get_gpu_compute_partition` / `..._memory_partition`, and the partition
  id from the BDF's function number.
"""

from __future__ import annotations

import contextlib
from typing import Any

from slurmgpu.errors import InventoryError
from slurmgpu.model.gpu import COMPUTE_PARTITIONS, LINK_XGMI, VENDOR_AMD, Gpu, PeerLink
from slurmgpu.model.host import Host
from slurmgpu.model.inventory import VendorDriver
from slurmgpu.sources.nvml import normalize_pci_bus_id

_MIB = 1024 * 1024
_XGMI = 2  # AMDSMI_IOLINK_TYPE_XGMI


def import_amdsmi():
    try:
        import amdsmi
    except ImportError as exc:
        raise InventoryError(
            "amdsmi is not importable: install ROCm's amdsmi Python package, or use --snapshot"
        ) from exc
    return amdsmi


def _one_line(exc: Exception) -> str:
    """amdsmi's messages span lines (`Error code:\n\t51 | AMDSMI_STATUS_...`)."""
    return " ".join(str(exc).split())


def _partition(value: Any, known: tuple[str, ...] | dict) -> str | None:
    text = str(value).strip().upper()
    return text if text in known else None


def read_amd(host: Host, *, allow_partial: bool = False):
    """(gpus, VendorDriver, warnings) of every AMD GPU amdsmi sees on this node."""
    amd = import_amdsmi()
    try:
        amd.amdsmi_init(amd.AmdSmiInitFlags.INIT_AMD_GPUS)
    except amd.AmdSmiException as exc:
        raise InventoryError(f"amdsmi failed to initialise: {_one_line(exc)}") from exc
    warnings: list[str] = []
    try:
        handles = amd.amdsmi_get_processor_handles()
        if not handles:
            raise InventoryError("amdsmi found no AMD GPU")
        version = amd.amdsmi_get_lib_version()
        driver = amd.amdsmi_get_gpu_driver_info(handles[0])["driver_version"]
        gpus: list[Gpu] = []
        kept = []
        for index, handle in enumerate(handles):
            try:
                gpus.append(_read_one(amd, host, index, handle))
                kept.append(handle)
            except amd.AmdSmiException as exc:
                message = f"AMD GPU {index}: amdsmi error: {_one_line(exc)}"
                if not allow_partial:
                    raise InventoryError(message) from exc
                warnings.append(f"left out {message}")
        gpus = _with_xgmi(amd, gpus, kept)
    finally:
        with contextlib.suppress(amd.AmdSmiException):
            amd.amdsmi_shut_down()
    lib = ".".join(str(version[k]) for k in ("year", "major", "minor", "release"))
    info = VendorDriver(
        vendor=VENDOR_AMD,
        driver_version=str(driver),
        library="amdsmi",
        library_version=lib,
        device_count=len(handles),  # a GPU left out shows as missing (gen-gres: PARTIAL)
    )
    return gpus, info, warnings


def _read_one(amd, host: Host, index: int, handle) -> Gpu:
    bdf = normalize_pci_bus_id(amd.amdsmi_get_gpu_device_bdf(handle))
    asic = amd.amdsmi_get_gpu_asic_info(handle)
    try:
        render = amd.amdsmi_get_gpu_enumeration_info(handle)["drm_render"]
    except AttributeError:
        raise InventoryError(
            "this amdsmi has no amdsmi_get_gpu_enumeration_info (the render node of each GPU): "
            "ROCm 6.4 or later is needed"
        ) from None
    numa = amd.amdsmi_topo_get_numa_node_number(handle)
    node = next((n for n in host.numa_nodes if n.node_id == numa), None)
    compute = memory = None
    with contextlib.suppress(amd.AmdSmiException):
        compute = _partition(amd.amdsmi_get_gpu_compute_partition(handle), COMPUTE_PARTITIONS)
        memory = _partition(
            amd.amdsmi_get_gpu_memory_partition(handle), ("NPS1", "NPS2", "NPS4", "NPS8")
        )
    partition_id = int(bdf[-1]) if compute and compute != "SPX" else None
    return Gpu(
        index=index,
        minor_number=int(render),
        uuid=str(amd.amdsmi_get_gpu_device_uuid(handle)).lower(),
        name=str(asic["market_name"]).strip(),
        memory_mib=amd.amdsmi_get_gpu_memory_total(handle, amd.AmdSmiMemoryType.VRAM) // _MIB,
        pci_bus_id=bdf,
        numa_node=numa if node is not None else None,
        cpu_affinity=node.cpus if node is not None else (),
        vendor=VENDOR_AMD,
        compute_partition=compute,
        memory_partition=memory,
        partition_id=partition_id,
    )


def _with_xgmi(amd, gpus: list[Gpu], handles: list) -> list[Gpu]:
    import dataclasses

    out = []
    for i, gpu in enumerate(gpus):
        links = []
        for j, other in enumerate(gpus):
            if i == j:
                continue
            kind = amd.amdsmi_topo_get_link_type(handles[i], handles[j])
            if int(kind["type"]) == _XGMI and int(kind["hops"]) == 1:
                links.append(PeerLink(other.pci_bus_id, LINK_XGMI, 1))
        out.append(dataclasses.replace(gpu, peer_links=tuple(links)))
    return out
