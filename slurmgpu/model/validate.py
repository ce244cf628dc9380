"""What a valid inventory is, stated as data: the rules every snapshot passes before rendering.

A snapshot is untrusted input (hand-edited, copied between hosts, written by another tool),
and its strings end up inside gres.conf, slurm.conf and topology.conf, where a newline, `#`,
`=` or a space changes what Slurm reads. So every string that can reach a config has a
character set (host names and GRES types as Slurm accepts them; UUIDs and PCI bus ids by
their formats; free text such as warnings without control characters), every number a range,
and every id that names a device is unique. `FIELD_RULES` below is the table; `problems()`
applies it and the cross-field rules and returns every violation, each naming its field.

Completeness is separate (`missing_gpus`): a snapshot knows how many GPUs the node has from
two records written by `slurmgpu inventory`: `nvml_device_count` (nvmlDeviceGetCount) and
the `/dev/nvidiaN` device nodes in `host.device_nodes`. A GPU deleted from `gpus` disagrees
with both; gen-gres refuses it unless `--allow-partial` (docs/hardening.md).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from slurmgpu.model.gpu import (
    COMPUTE_PARTITIONS,
    LINK_KINDS,
    MEMORY_PARTITIONS,
    REMOTE_TYPES,
    VENDOR_AMD,
    VENDOR_ASCEND,
    VENDOR_NVIDIA,
    VENDORS,
)
from slurmgpu.model.inventory import Inventory

_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_PCI = r"[0-9a-fA-F]{4}(?:[0-9a-fA-F]{4})?:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"


@dataclass(frozen=True)
class Pattern:
    """A string rule: a full-match regex, a length limit, and words for the message."""

    regex: str
    max_len: int
    says: str

    def problem(self, value: str) -> str | None:
        if len(value) > self.max_len:
            return f"longer than {self.max_len} characters"
        if not re.fullmatch(self.regex, value):
            return f"{value[:60]!r} is not {self.says}"
        return None


# Host names as Slurm's NodeName takes them (letters, digits, '-', '_', '.'; no hostlist
# brackets, spaces, '#', '=' or ','). GRES types as gres.conf Type= and the node line's
# Gres=gpu:TYPE:N take them (no ':' ',' '=' '#' or space). MIG profiles as NVML names them.
HOST_NAME = Pattern(r"[A-Za-z0-9][A-Za-z0-9._-]*", 64, "a host name (letters, digits, . _ -)")
# topology.conf(5): SwitchName/BlockName "cannot be longer than 64 characters"
SWITCH_NAME = Pattern(r"[A-Za-z0-9][A-Za-z0-9._-]*", 64, "a switch name (letters, digits, . _ -)")
GRES_TYPE = Pattern(r"[A-Za-z0-9][A-Za-z0-9._+-]*", 64, "a GRES type (letters, digits, . _ + -)")
# suffixes: +me (media extensions), and the newer drivers' -me, +gfx, +me.all
MIG_PROFILE = Pattern(
    r"(?:\d+c\.)?\d+g\.\d+gb(?:[+-][a-z][a-z.]*)*", 32, "a MIG profile like 1g.10gb"
)
GPU_UUID = Pattern(rf"GPU-{_UUID}", 40, "a GPU UUID (GPU-xxxxxxxx-xxxx-...)")
MIG_UUID = Pattern(
    rf"MIG-(?:{_UUID}|GPU-{_UUID}/\d+/\d+)", 64, "a MIG UUID (MIG-xxxxxxxx-xxxx-...)"
)
PCI_BUS_ID = Pattern(_PCI, 16, "a PCI bus id like 00000000:07:00.0")
# amdsmi_get_gpu_device_uuid: a plain 8-4-4-4-12 UUID
AMD_UUID = Pattern(_UUID, 36, "an AMD GPU UUID (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)")
# Ascend: "NPU-" and the five words of the chip's die id (dcmi_get_device_die_v2), or empty
# when only `npu-smi info` was read (it prints no id)
NPU_ID = Pattern(r"(?:NPU(?:-[0-9A-Fa-f]{1,8}){5})?", 50, "an NPU id (NPU- and 5 hex words)")
UUIDS = {VENDOR_NVIDIA: GPU_UUID, VENDOR_AMD: AMD_UUID, VENDOR_ASCEND: NPU_ID}
# NVML_DEVICE_NAME_V2_BUFFER_SIZE is 96; names are like "NVIDIA A100-SXM4-40GB"
GPU_NAME = Pattern(
    r"[A-Za-z0-9][A-Za-z0-9 ._()/+-]*", 95, "a GPU name (letters, digits, spaces, . _ ( ) / + -)"
)
VERSION = Pattern(r"[A-Za-z0-9][A-Za-z0-9._+-]*", 40, "a version string like 550.54.15")
MIG_MINOR_KEY = Pattern(
    r"config|monitor|gpu\d+/gi\d+/access|gpu\d+/gi\d+/ci\d+/access",
    40,
    "a mig-minors entry like gpu0/gi1/access",
)
DEVICE_NODE = Pattern(
    r"/dev/nvidia[a-z0-9-]*|/dev/nvidia-caps/nvidia-cap\d+"
    r"|/dev/dri/renderD\d+|/dev/dri/card\d+|/dev/kfd"
    r"|/dev/davinci\d+|/dev/davinci_manager|/dev/devmm_svm|/dev/hisi_hdc",
    64,
    "an accelerator device node path (/dev/nvidia*, /dev/dri/*, /dev/kfd, /dev/davinci*, ...)",
)
LIBRARIES = ("amdsmi", "dcmi", "npu-smi")
# free text (warnings, reasons, generator): printed in comments, so one printable line
TEXT = Pattern(r"[^\x00-\x1f\x7f\u0085\u2028\u2029]*", 1000, "one line of printable text")

# (low, high) inclusive ranges. Device minors: /dev/nvidia0..254 (255 is nvidiactl).
NVIDIA_MINORS = (0, 254)
# DRM render nodes start at minor 128; Ascend /dev/davinciN by physical id
MINORS = {VENDOR_NVIDIA: NVIDIA_MINORS, VENDOR_AMD: (128, 1 << 20), VENDOR_ASCEND: (0, 1023)}
PARTITION_ID = (0, 7)
PEER_LINK_COUNT = (1, 64)
GPU_INDEX = (0, 1023)
MEMORY_MIB_GPU = (1, 16 * 1024 * 1024)  # up to 16 TiB per GPU
MEMORY_MIB_HOST = (1, 1 << 40)  # Slurm's RealMemory is a 64-bit MiB count
CPU_ID = (0, 65_535)
NUMA_ID = (0, 1023)
CAPS_MINOR = (0, 1 << 20)
MIG_ID = (0, 1023)
NVLINK_ID = (0, 63)
NVLINK_VERSION = (1, 64)
DEVICE_COUNT = (0, 1024)


def _range(path: str, value: int | None, bounds: tuple[int, int]) -> Iterator[str]:
    if value is None:
        return
    lo, hi = bounds
    if not lo <= value <= hi:
        yield f"{path}: {value} is out of range {lo}..{hi}"


def _text(path: str, value: str | None, rule: Pattern) -> Iterator[str]:
    if value is None:
        return
    why = rule.problem(value)
    if why:
        yield f"{path}: {why}"


def _unique(seen: dict[object, str], key: object, path: str, what: str) -> Iterator[str]:
    """Report `key` seen before; `seen` maps keys to the object that holds them first."""
    owner = path if path.endswith("]") else path.rsplit(".", 1)[0]
    if key in seen:
        yield f"{path}: {what} {key} is also {seen[key]}'s"
    else:
        seen[key] = owner


def problems(inv: Inventory) -> list[str]:
    """Every rule the inventory breaks, each as `field.path: what is wrong` (empty: valid)."""
    return [*_top(inv), *_host(inv), *_gpus(inv), *_mig(inv)]


def _top(inv: Inventory) -> Iterator[str]:
    yield from _text("generator", inv.generator, TEXT)
    nvidia = any(g.vendor == VENDOR_NVIDIA for g in inv.gpus) or not inv.drivers
    for name in ("driver_version", "nvml_version"):
        value = getattr(inv, name)
        if value or nvidia:  # empty on a node read without NVML (no NVIDIA GPU)
            yield from _text(name, value, VERSION)
    seen_vendor: dict[object, str] = {}
    for i, d in enumerate(inv.drivers):
        p = f"drivers[{i}]"
        if d.vendor not in VENDORS or d.vendor == VENDOR_NVIDIA:
            yield f"{p}.vendor: expected amd or ascend, got {d.vendor[:30]!r}"
        yield from _unique(seen_vendor, d.vendor, f"{p}.vendor", "vendor")
        yield from _text(f"{p}.driver_version", d.driver_version, VERSION)
        yield from _text(f"{p}.library_version", d.library_version, VERSION)
        if d.library not in LIBRARIES:
            yield f"{p}.library: expected one of {', '.join(LIBRARIES)}, got {d.library[:30]!r}"
        yield from _range(f"{p}.device_count", d.device_count, DEVICE_COUNT)
    yield from _range("nvml_device_count", inv.nvml_device_count, DEVICE_COUNT)
    for i, warning in enumerate(inv.warnings):
        yield from _text(f"warnings[{i}]", warning, TEXT)
    seen: dict[object, str] = {}
    for i, gpu in enumerate(inv.gpus):
        if gpu.vendor == VENDOR_NVIDIA:  # skipped_gpus are NVML's
            seen.setdefault(gpu.index, f"gpus[{i}]")
    for i, s in enumerate(inv.skipped_gpus):
        path = f"skipped_gpus[{i}]"
        yield from _range(f"{path}.index", s.index, GPU_INDEX)
        yield from _unique(seen, s.index, f"{path}.index", "index")
        yield from _text(f"{path}.pci_bus_id", s.pci_bus_id, PCI_BUS_ID)
        yield from _text(f"{path}.reason", s.reason, TEXT)


def _host(inv: Inventory) -> Iterator[str]:
    host = inv.host
    yield from _text("host.hostname", host.hostname, HOST_NAME)
    yield from _range("host.memory_mib", host.memory_mib, MEMORY_MIB_HOST)
    if not host.cpus:
        yield "host.cpus: empty (a node has at least one cpu)"
    seen_cpu: dict[object, str] = {}
    for i, c in enumerate(host.cpus):
        yield from _range(f"host.cpus[{i}].cpu", c.cpu, CPU_ID)
        yield from _range(f"host.cpus[{i}].physical_package_id", c.physical_package_id, CPU_ID)
        yield from _range(f"host.cpus[{i}].core_id", c.core_id, CPU_ID)
        yield from _unique(seen_cpu, c.cpu, f"host.cpus[{i}].cpu", "cpu")
    yield from _cpu_layout(host)
    cpus = {c.cpu for c in host.cpus}
    seen_node: dict[object, str] = {}
    for i, node in enumerate(host.numa_nodes):
        yield from _range(f"host.numa_nodes[{i}].node_id", node.node_id, NUMA_ID)
        yield from _unique(seen_node, node.node_id, f"host.numa_nodes[{i}].node_id", "node")
        stray = sorted(set(node.cpus) - cpus)
        if stray:
            yield f"host.numa_nodes[{i}].cpus: cpu {stray[0]} is not in host.cpus"
    seen_minor: dict[object, str] = {}
    for key, minor in host.mig_minors.items():
        yield from _text(f"host.mig_minors.{key[:40]}", key, MIG_MINOR_KEY)
        yield from _range(f"host.mig_minors.{key[:40]}", minor, CAPS_MINOR)
        yield from _unique(seen_minor, minor, f"host.mig_minors.{key[:40]}", "caps minor")
    for i, node in enumerate(host.device_nodes):
        yield from _text(f"host.device_nodes[{i}]", node, DEVICE_NODE)


def _cpu_layout(host) -> Iterator[str]:
    """The node line states Sockets x CoresPerSocket x ThreadsPerCore = CPUs: every package
    must have as many cores, every core as many threads (one corrupted cpu entry -- a wrong
    core_id or physical_package_id -- breaks that, and Slurm would be told a wrong node)."""
    if not host.cpus:
        return
    cores: dict[int, set[int]] = {}
    threads: dict[tuple[int, int], int] = {}
    for c in host.cpus:
        cores.setdefault(c.physical_package_id, set()).add(c.core_id)
        threads[(c.physical_package_id, c.core_id)] = (
            threads.get((c.physical_package_id, c.core_id), 0) + 1
        )
    per_package = sorted({len(ids) for ids in cores.values()})
    if len(per_package) > 1:
        counts = ", ".join(f"package {p}: {len(ids)}" for p, ids in sorted(cores.items()))
        yield (
            f"host.cpus: packages have different core counts ({_cut(counts)}), so Sockets x "
            f"CoresPerSocket x ThreadsPerCore cannot be CPUs={len(host.cpus)}"
        )
    per_core = sorted(set(threads.values()))
    if len(per_core) > 1:
        usual = Counter(threads.values()).most_common(1)[0][0]
        (pkg, core), n = next((k, n) for k, n in sorted(threads.items()) if n != usual)
        yield (
            f"host.cpus: cores have {' or '.join(map(str, per_core))} threads (package {pkg} "
            f"core {core} has {n}), so Sockets x CoresPerSocket x ThreadsPerCore cannot be "
            f"CPUs={len(host.cpus)}"
        )


def layout_problem(host, *, numa_as_socket: bool) -> str | None:
    """Why the node line's Sockets x CoresPerSocket x ThreadsPerCore would not be CPUs (with
    NUMA nodes as sockets, every NUMA node must hold as many cores), or None."""
    sockets, per_socket = host.layout(numa_as_socket=numa_as_socket)
    product = sockets * per_socket * host.threads_per_core
    if product == host.cpu_count:
        return None
    what = "NUMA nodes as sockets" if numa_as_socket else "sockets"
    return (
        f"host.cpus: {sockets} {what} x {per_socket} cores x {host.threads_per_core} threads "
        f"= {product}, not CPUs={host.cpu_count}: the cpu layout is not uniform"
    )


def _cut(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _gpus(inv: Inventory) -> Iterator[str]:
    cpus = {c.cpu for c in inv.host.cpus}
    numa = {n.node_id for n in inv.host.numa_nodes}
    seen: dict[str, dict[object, str]] = {k: {} for k in ("index", "minor", "uuid", "pci")}
    for i, gpu in enumerate(inv.gpus):
        p = f"gpus[{i}]"
        if gpu.vendor not in VENDORS:
            yield f"{p}.vendor: expected one of {', '.join(VENDORS)}, got {gpu.vendor[:30]!r}"
            continue
        yield from _range(f"{p}.index", gpu.index, GPU_INDEX)
        yield from _range(f"{p}.minor_number", gpu.minor_number, MINORS[gpu.vendor])
        yield from _text(f"{p}.uuid", gpu.uuid, UUIDS[gpu.vendor])
        yield from _vendor_fields(p, gpu)
        yield from _text(f"{p}.name", gpu.name, GPU_NAME)
        yield from _range(f"{p}.memory_mib", gpu.memory_mib, MEMORY_MIB_GPU)
        yield from _text(f"{p}.pci_bus_id", gpu.pci_bus_id, PCI_BUS_ID)
        yield from _range(f"{p}.numa_node", gpu.numa_node, NUMA_ID)
        if gpu.numa_node is not None and numa and gpu.numa_node not in numa:
            yield f"{p}.numa_node: {gpu.numa_node} is not in host.numa_nodes"
        yield from _unique(seen["index"], key_of(gpu, gpu.index), f"{p}.index", "index")
        yield from _unique(
            seen["minor"], key_of(gpu, gpu.minor_number), f"{p}.minor_number", "minor"
        )
        if gpu.uuid:
            yield from _unique(seen["uuid"], gpu.uuid.lower(), f"{p}.uuid", "UUID")
        yield from _unique(seen["pci"], gpu.pci_bus_id.upper(), f"{p}.pci_bus_id", "PCI id")
        stray = sorted(set(gpu.cpu_affinity) - cpus)
        if stray:
            yield f"{p}.cpu_affinity: cpu {stray[0]} is not in host.cpus"
        seen_link: dict[object, str] = {}
        for j, link in enumerate(gpu.nvlinks):
            lp = f"{p}.nvlinks[{j}]"
            yield from _range(f"{lp}.link", link.link, NVLINK_ID)
            yield from _unique(seen_link, link.link, f"{lp}.link", "link")
            yield from _range(f"{lp}.version", link.version, NVLINK_VERSION)
            yield from _text(f"{lp}.remote_pci_bus_id", link.remote_pci_bus_id, PCI_BUS_ID)
            if link.remote_type not in REMOTE_TYPES:
                yield (
                    f"{lp}.remote_type: expected one of {', '.join(REMOTE_TYPES)}, "
                    f"got {link.remote_type[:30]!r}"
                )


def key_of(gpu, number: int) -> str:
    """How a per-vendor number is shown and compared: `4` (NVIDIA), `amd 4`, `ascend 4`."""
    return str(number) if gpu.vendor == VENDOR_NVIDIA else f"{gpu.vendor} {number}"


def _vendor_fields(p: str, gpu) -> Iterator[str]:
    """Schema-2 fields: peer links (XGMI/HCCS), AMD partitions, and what only NVIDIA has."""
    if gpu.vendor != VENDOR_NVIDIA and (gpu.mig_devices or gpu.nvlinks or gpu.mig_mode_current):
        yield f"{p}: MIG and NVLink are NVIDIA's; a {gpu.vendor} device has neither"
    seen: dict[object, str] = {}
    for j, link in enumerate(gpu.peer_links):
        lp = f"{p}.peer_links[{j}]"
        if link.kind not in LINK_KINDS:
            yield f"{lp}.kind: expected one of {', '.join(LINK_KINDS)}, got {link.kind[:30]!r}"
        yield from _text(f"{lp}.remote_pci_bus_id", link.remote_pci_bus_id, PCI_BUS_ID)
        yield from _range(f"{lp}.count", link.count, PEER_LINK_COUNT)
        yield from _unique(seen, link.remote_pci_bus_id.upper(), f"{lp}.remote_pci_bus_id", "peer")
    parts = (gpu.compute_partition, gpu.memory_partition, gpu.partition_id)
    if gpu.vendor != VENDOR_AMD and any(v is not None for v in parts):
        yield f"{p}: compute/memory partitions are AMD's; a {gpu.vendor} device has none"
    if gpu.compute_partition is not None and gpu.compute_partition not in COMPUTE_PARTITIONS:
        yield (
            f"{p}.compute_partition: expected one of {', '.join(COMPUTE_PARTITIONS)}, "
            f"got {gpu.compute_partition[:30]!r}"
        )
    if gpu.memory_partition is not None and gpu.memory_partition not in MEMORY_PARTITIONS:
        yield (
            f"{p}.memory_partition: expected one of {', '.join(MEMORY_PARTITIONS)}, "
            f"got {gpu.memory_partition[:30]!r}"
        )
    yield from _range(f"{p}.partition_id", gpu.partition_id, PARTITION_ID)
    if gpu.partition_id is not None and gpu.compute_partition:
        most = COMPUTE_PARTITIONS.get(gpu.compute_partition, 8)
        if gpu.partition_id >= most:
            yield (
                f"{p}.partition_id: {gpu.partition_id} but {gpu.compute_partition} makes "
                f"{most} partition(s)"
            )


def _mig(inv: Inventory) -> Iterator[str]:
    """MIG devices: formats, unique ids, and caps minors that name one thing each.

    Compute instances of one GPU instance share its GI access minor; every other pair of
    devices must have different minors, or two slices would open the same capability.
    """
    uuids: dict[object, str] = {}
    ci_minors: dict[object, str] = {}
    gi_minor_owner: dict[int, tuple[int, int, str]] = {}  # minor -> (gpu minor, gi, path)
    table = inv.host.mig_minors
    for i, gpu in enumerate(inv.gpus):
        ids: dict[object, str] = {}
        for j, mig in enumerate(gpu.mig_devices):
            p = f"gpus[{i}].mig_devices[{j}]"
            yield from _range(f"{p}.index", mig.index, MIG_ID)
            yield from _range(f"{p}.gi_id", mig.gi_id, MIG_ID)
            yield from _range(f"{p}.ci_id", mig.ci_id, MIG_ID)
            yield from _text(f"{p}.profile", mig.profile, MIG_PROFILE)
            yield from _range(f"{p}.memory_mib", mig.memory_mib, MEMORY_MIB_GPU)
            yield from _text(f"{p}.uuid", mig.uuid, MIG_UUID)
            yield from _range(f"{p}.gi_access_minor", mig.gi_access_minor, CAPS_MINOR)
            yield from _range(f"{p}.ci_access_minor", mig.ci_access_minor, CAPS_MINOR)
            yield from _unique(ids, f"gi{mig.gi_id}/ci{mig.ci_id}", p, "MIG device")
            yield from _unique(uuids, mig.uuid.lower(), f"{p}.uuid", "UUID")
            gi_key = f"gpu{gpu.minor_number}/gi{mig.gi_id}/access"
            ci_key = f"gpu{gpu.minor_number}/gi{mig.gi_id}/ci{mig.ci_id}/access"
            for key, minor, field in (
                (gi_key, mig.gi_access_minor, "gi_access_minor"),
                (ci_key, mig.ci_access_minor, "ci_access_minor"),
            ):
                if minor is not None and key in table and table[key] != minor:
                    yield (
                        f"{p}.{field}: {minor} disagrees with host.mig_minors {key} = {table[key]}"
                    )
            if mig.ci_access_minor is not None:
                yield from _unique(
                    ci_minors, mig.ci_access_minor, f"{p}.ci_access_minor", "caps minor"
                )
            if mig.gi_access_minor is not None:
                owner = gi_minor_owner.setdefault(
                    mig.gi_access_minor, (gpu.minor_number, mig.gi_id, f"{p}.gi_access_minor")
                )
                if owner[:2] != (gpu.minor_number, mig.gi_id):
                    yield (
                        f"{p}.gi_access_minor: caps minor {mig.gi_access_minor} is also "
                        f"{owner[2].rsplit('.', 1)[0]}'s (another GPU instance)"
                    )
    for minor, (_gpu, _gi, path) in gi_minor_owner.items():
        if minor in ci_minors:
            yield f"{path}: caps minor {minor} is also {ci_minors[minor]}'s"


_NVIDIA_DEV = re.compile(r"^/dev/nvidia(\d+)$")
_VENDOR_DEV = {
    VENDOR_AMD: re.compile(r"^/dev/dri/renderD(\d+)$"),
    VENDOR_ASCEND: re.compile(r"^/dev/davinci(\d+)$"),
}


def missing_gpus(inv: Inventory) -> list[str]:
    """Why the inventory may describe fewer GPUs than the node has (empty: complete).

    Skipped GPUs (a partial inventory) are reported by the renderer itself; this is about
    GPUs that vanished without a trace: fewer GPUs than NVML counted, or GPU device nodes
    with no GPU (or a GPU without its device node).
    """
    out = []
    nvidia = [g for g in inv.gpus if g.vendor == VENDOR_NVIDIA]
    described = len(nvidia) + len(inv.skipped_gpus)
    out.extend(_missing_other_vendors(inv))
    if inv.nvml_device_count is not None and described != inv.nvml_device_count:
        out.append(
            f"NVML counted {inv.nvml_device_count} GPU(s) (nvml_device_count) but the "
            f"snapshot describes {described}"
        )
    dev_minors = {
        int(m.group(1)) for m in map(_NVIDIA_DEV.match, inv.host.device_nodes) if m is not None
    }
    if dev_minors:
        gpu_minors = {g.minor_number for g in nvidia}
        orphan = sorted(dev_minors - gpu_minors)
        if len(orphan) > len(inv.skipped_gpus):
            out.append(
                f"device node(s) {', '.join(f'/dev/nvidia{m}' for m in orphan)} have no GPU "
                "in the snapshot"
            )
        absent = sorted(gpu_minors - dev_minors)
        if absent:
            out.append(
                f"GPU(s) with minor {', '.join(map(str, absent))} have no /dev/nvidiaN "
                "device node in host.device_nodes"
            )
    return out


def _missing_other_vendors(inv: Inventory) -> list[str]:
    """AMD/Ascend: the library's device count and the device nodes against the devices."""
    out = []
    for d in inv.drivers:
        mine = [g for g in inv.gpus if g.vendor == d.vendor]
        if d.device_count is not None and d.device_count != len(mine):
            out.append(
                f"{d.library} counted {d.device_count} {d.vendor} device(s) "
                f"(drivers[].device_count) but the snapshot describes {len(mine)}"
            )
        pattern = _VENDOR_DEV.get(d.vendor)
        if pattern is None:
            continue
        nodes = {int(m.group(1)) for m in map(pattern.match, inv.host.device_nodes) if m}
        if not nodes:
            continue
        minors = {g.minor_number for g in mine}
        orphan = sorted(nodes - minors)
        # AMD: card/render nodes of non-accelerator devices (a BMC's VGA) are not GPUs
        if orphan and d.vendor == VENDOR_ASCEND:
            out.append(
                f"device node(s) {', '.join(f'/dev/davinci{m}' for m in orphan)} have no NPU "
                "in the snapshot"
            )
        absent = sorted(minors - nodes)
        if absent:
            shown = ", ".join(g.device_file for g in mine if g.minor_number in absent)
            out.append(f"{d.vendor} device(s) without a device node in host.device_nodes: {shown}")
    return out
