"""Ascend NPUs through Huawei's DCMI C library (`libdcmi.so`, loaded with ctypes).

There are no Python bindings: the functions below are declared here as in
`dcmi_interface_api.h` and called through ctypes. Devices are addressed by (card id, device
id); `dcmi_get_device_logic_id` gives the logical id (what ASCEND_RT_VISIBLE_DEVICES counts)
and `dcmi_get_device_phyid_from_logicid` the physical id (the N of /dev/davinciN).
Per NPU: chip name and AI cores (`dcmi_get_device_chip_info`), PCI address
(`dcmi_get_device_pcie_info_v2`), HBM size in MB (`dcmi_get_device_hbm_info`), CPU affinity
(`dcmi_get_affinity_cpu_info_by_device_id`, a cpu list string), the die id
(`dcmi_get_device_die_v2`, the NPU's `uuid`), and HCCS links between each pair
(`dcmi_get_topo_info_by_device_id`, DCMI_TOPO_TYPE_HCCS = 3).

A library that cannot be loaded raises `DcmiUnavailable`, and the caller falls back to
`npu-smi`. The environment variable SLURMGPU_DCMI_LIBRARY names another library file (the
tests' double, a C library built from a recorded machine).
"""

from __future__ import annotations

import ctypes
import os

from slurmgpu.errors import InventoryError
from slurmgpu.model.gpu import LINK_HCCS, VENDOR_ASCEND, Gpu, PeerLink
from slurmgpu.model.host import Host
from slurmgpu.model.inventory import VendorDriver
from slurmgpu.util.hostlist import parse_id_list

LIBRARY = "libdcmi.so"
ENV_LIBRARY = "SLURMGPU_DCMI_LIBRARY"
TOPO_HCCS = 3  # DCMI_TOPO_TYPE_HCCS
TOPO_HCCS_SW = 7  # DCMI_TOPO_TYPE_HCCS_SW (through an HCCS switch)
NDIE = 0  # enum dcmi_die_type
MAX_CARDS = 64
NAME_LEN = 32


class DcmiUnavailable(InventoryError):
    """libdcmi.so cannot be loaded here (no Ascend driver): use npu-smi instead."""


class ChipInfo(ctypes.Structure):
    _fields_ = [
        ("chip_type", ctypes.c_ubyte * NAME_LEN),
        ("chip_name", ctypes.c_ubyte * NAME_LEN),
        ("chip_ver", ctypes.c_ubyte * NAME_LEN),
        ("aicore_cnt", ctypes.c_uint),
    ]


class PcieInfoAll(ctypes.Structure):
    _fields_ = [
        ("venderid", ctypes.c_uint),
        ("subvenderid", ctypes.c_uint),
        ("deviceid", ctypes.c_uint),
        ("subdeviceid", ctypes.c_uint),
        ("domain", ctypes.c_int),
        ("bdf_busid", ctypes.c_uint),
        ("bdf_deviceid", ctypes.c_uint),
        ("bdf_funcid", ctypes.c_uint),
        ("reserve", ctypes.c_ubyte * 32),
    ]


class HbmInfo(ctypes.Structure):
    _fields_ = [
        ("memory_size", ctypes.c_ulonglong),  # MB
        ("freq", ctypes.c_uint),
        ("memory_usage", ctypes.c_ulonglong),
        ("temp", ctypes.c_int),
        ("bandwith_util_rate", ctypes.c_uint),
    ]


class DieId(ctypes.Structure):
    _fields_ = [("soc_die", ctypes.c_uint * 5)]


def _text(raw) -> str:
    return bytes(raw).split(b"\0", 1)[0].decode("ascii", "replace").strip()


def load_library():
    path = os.environ.get(ENV_LIBRARY) or LIBRARY
    try:
        return ctypes.CDLL(path)
    except OSError as exc:
        raise DcmiUnavailable(f"cannot load libdcmi ({path}): {exc}") from None


class _Dcmi:
    def __init__(self, lib):
        self.lib = lib

    def call(self, name: str, *args) -> None:
        try:
            fn = getattr(self.lib, name)
        except AttributeError:
            raise InventoryError(f"libdcmi has no {name}: the Ascend driver is too old") from None
        ret = fn(*args)
        if ret != 0:
            raise InventoryError(f"{name} failed: DCMI error {ret}")


def device_ids(d: _Dcmi) -> list[tuple[int, int, int, int]]:
    """(card, device, logical id, physical id) of every NPU, by logical id."""
    count = ctypes.c_int()
    cards = (ctypes.c_int * MAX_CARDS)()
    d.call("dcmi_get_card_num_list", ctypes.byref(count), cards, MAX_CARDS)
    found = []
    for card in list(cards)[: count.value]:
        n = ctypes.c_int()
        d.call("dcmi_get_device_num_in_card", card, ctypes.byref(n))
        for dev in range(n.value):
            logic = ctypes.c_int()
            d.call("dcmi_get_device_logic_id", ctypes.byref(logic), card, dev)
            phy = ctypes.c_uint()
            d.call(
                "dcmi_get_device_phyid_from_logicid", ctypes.c_uint(logic.value), ctypes.byref(phy)
            )
            found.append((card, dev, logic.value, phy.value))
    return sorted(found, key=lambda t: t[2])


def read_ascend(host: Host, *, allow_partial: bool = False):
    """(npus, VendorDriver, warnings) from DCMI."""
    d = _Dcmi(load_library())
    d.call("dcmi_init")
    found = device_ids(d)
    warnings: list[str] = []
    npus: list[Gpu] = []
    kept = []
    for card, dev, logic, phy in found:
        try:
            npus.append(_read_one(d, host, card, dev, logic, phy))
            kept.append((card, dev))
        except InventoryError as exc:
            message = f"NPU {logic} (card {card} device {dev}): {exc}"
            if not allow_partial:
                raise InventoryError(message) from None
            warnings.append(f"left out {message}")
    npus = _with_hccs(d, npus, kept)
    version = ctypes.create_string_buffer(64)
    try:
        d.call("dcmi_get_dcmi_version", version, 64)
        lib_version = version.value.decode("ascii", "replace").strip() or "unknown"
    except InventoryError:
        lib_version = "unknown"
    info = VendorDriver(
        vendor=VENDOR_ASCEND,
        driver_version=lib_version,
        library="dcmi",
        library_version=lib_version,
        device_count=len(found),  # an NPU left out shows as missing (gen-gres: PARTIAL)
    )
    return npus, info, warnings


def _read_one(d: _Dcmi, host: Host, card: int, dev: int, logic: int, phy: int) -> Gpu:
    chip = ChipInfo()
    d.call("dcmi_get_device_chip_info", card, dev, ctypes.byref(chip))
    pcie = PcieInfoAll()
    d.call("dcmi_get_device_pcie_info_v2", card, dev, ctypes.byref(pcie))
    hbm = HbmInfo()
    d.call("dcmi_get_device_hbm_info", card, dev, ctypes.byref(hbm))
    buf = ctypes.create_string_buffer(256)
    length = ctypes.c_int(256)
    d.call("dcmi_get_affinity_cpu_info_by_device_id", card, dev, buf, ctypes.byref(length))
    try:
        cpus = tuple(parse_id_list(buf.value.decode("ascii", "replace").strip()))
    except ValueError:
        cpus = ()
    die = DieId()
    d.call("dcmi_get_device_die_v2", card, dev, NDIE, ctypes.byref(die))
    numa_of = {cpu: n.node_id for n in host.numa_nodes for cpu in n.cpus}
    nodes = {numa_of[c] for c in cpus if c in numa_of}
    name = _text(chip.chip_name)
    bus = f"{pcie.domain:08X}:{pcie.bdf_busid:02X}:{pcie.bdf_deviceid:02X}.{pcie.bdf_funcid}"
    return Gpu(
        index=logic,
        minor_number=phy,
        uuid="NPU-" + "-".join(f"{w:08X}" for w in die.soc_die),
        name=name if name.startswith("Ascend") else f"Ascend{name}",
        memory_mib=int(hbm.memory_size),
        pci_bus_id=bus,
        numa_node=nodes.pop() if len(nodes) == 1 else None,
        cpu_affinity=cpus,
        vendor=VENDOR_ASCEND,
    )


def _with_hccs(d: _Dcmi, npus: list[Gpu], ids: list[tuple[int, int]]) -> list[Gpu]:
    import dataclasses

    out = []
    for i, npu in enumerate(npus):
        links = []
        for j, other in enumerate(npus):
            if i == j:
                continue
            topo = ctypes.c_int()
            (c1, d1), (c2, d2) = ids[i], ids[j]
            d.call("dcmi_get_topo_info_by_device_id", c1, d1, c2, d2, ctypes.byref(topo))
            if topo.value in (TOPO_HCCS, TOPO_HCCS_SW):
                links.append(PeerLink(other.pci_bus_id, LINK_HCCS, 1))
        out.append(dataclasses.replace(npu, peer_links=tuple(links)))
    return out
