"""Host facts under one root (default `/`): CPU topology, NUMA, memory, MIG caps minors, /dev.

Every path is read below `host_root`, so tests and off-node generation can point it at a
recorded tree (`tests/data/hosts/...`) instead of the running machine.
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

from slurmgpu.errors import InventoryError
from slurmgpu.model.host import Host, LogicalCpu, NumaNode
from slurmgpu.util.hostlist import parse_id_list

_CPU_DIR = re.compile(r"^cpu(\d+)$")
_NODE_DIR = re.compile(r"^node(\d+)$")
MIG_MINORS = "proc/driver/nvidia-caps/mig-minors"


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InventoryError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise InventoryError(f"cannot read {path}: not UTF-8 text (byte {exc.start})") from None


def read_cpus(root: Path) -> tuple[LogicalCpu, ...]:
    """Every online cpu with a `topology/` directory under `sys/devices/system/cpu`."""
    base = root / "sys/devices/system/cpu"
    if not base.is_dir():
        raise InventoryError(f"no CPU topology at {base}")
    cpus = []
    for entry in os.listdir(base):
        m = _CPU_DIR.match(entry)
        topo = base / entry / "topology"
        if not m or not topo.is_dir():  # offline cpus have no topology/
            continue
        try:
            package = int(_read(topo / "physical_package_id").strip())
            core = int(_read(topo / "core_id").strip())
        except ValueError as exc:
            raise InventoryError(f"unreadable CPU topology in {topo}: {exc}") from exc
        cpus.append(LogicalCpu(cpu=int(m.group(1)), physical_package_id=package, core_id=core))
    if not cpus:
        raise InventoryError(f"no CPUs with topology found under {base}")
    return tuple(sorted(cpus, key=lambda c: c.cpu))


def read_numa_nodes(root: Path) -> tuple[NumaNode, ...]:
    """NUMA nodes and their cpus; a machine without `sys/devices/system/node` is one node."""
    base = root / "sys/devices/system/node"
    nodes = []
    if base.is_dir():
        for entry in os.listdir(base):
            m = _NODE_DIR.match(entry)
            if not m or not (base / entry / "cpulist").exists():
                continue
            text = _read(base / entry / "cpulist").strip()
            try:
                cpus = parse_id_list(text)
            except ValueError as exc:
                raise InventoryError(f"bad cpulist in {base / entry}: {exc}") from exc
            nodes.append(NumaNode(node_id=int(m.group(1)), cpus=tuple(cpus)))
    return tuple(sorted(nodes, key=lambda n: n.node_id))


def read_memory_mib(root: Path) -> int:
    """MemTotal from `proc/meminfo`, in MiB (what `slurmd -C` reports as RealMemory)."""
    path = root / "proc/meminfo"
    for line in _read(path).splitlines():
        if line.startswith("MemTotal:"):
            parts = line.split()
            try:
                kib = int(parts[1])
            except (IndexError, ValueError) as exc:
                raise InventoryError(f"{path}: unreadable MemTotal line {line!r}") from exc
            return kib // 1024
    raise InventoryError(f"{path}: no MemTotal line")


def parse_mig_minors(text: str, *, source: str = MIG_MINORS) -> dict[str, int]:
    """`gpu0/gi1/access 12` lines -> {"gpu0/gi1/access": 12} (also `config 1`, `monitor 2`)."""
    table: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            raise InventoryError(f"{source}:{number}: expected 'NAME MINOR', got {line!r}")
        table[parts[0]] = int(parts[1])
    return table


def read_mig_minors(root: Path) -> dict[str, int]:
    """The MIG caps minors table; empty when the driver exposes none (no MIG-capable GPU)."""
    path = root / MIG_MINORS
    if not path.exists():
        return {}
    return parse_mig_minors(_read(path), source=str(path))


# Ascend's shared control devices (every NPU job needs them) and AMD's compute device
_SHARED_NODES = ("kfd", "davinci_manager", "devmm_svm", "hisi_hdc")
_DAVINCI = re.compile(r"^davinci\d+$")
_RENDER = re.compile(r"^renderD\d+$")


def read_device_nodes(root: Path) -> tuple[str, ...]:
    """Accelerator device nodes under the root, as absolute paths: `/dev/nvidia*`,
    `/dev/nvidia-caps/*`, `/dev/dri/renderD*` and `/dev/kfd` (AMD), `/dev/davinci*` and the
    Ascend control devices."""
    dev = root / "dev"
    found = []
    if dev.is_dir():
        for entry in os.listdir(dev):
            nvidia = entry.startswith("nvidia") and entry != "nvidia-caps"
            if nvidia or entry in _SHARED_NODES or _DAVINCI.match(entry):
                found.append(f"/dev/{entry}")
        dri = dev / "dri"
        if dri.is_dir():
            found.extend(f"/dev/dri/{e}" for e in os.listdir(dri) if _RENDER.match(e))
        caps = dev / "nvidia-caps"
        if caps.is_dir():
            found.extend(f"/dev/nvidia-caps/{entry}" for entry in os.listdir(caps))
    return tuple(sorted(found, key=_natural_key))


def _natural_key(text: str) -> list[object]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def read_hostname(root: Path) -> str:
    """Short host name: `etc/hostname` under the root, else (root `/` only) the running host."""
    path = root / "etc/hostname"
    if path.exists():
        name = _read(path).strip()
        if name:
            return name.split(".")[0]
    if root.resolve() == Path("/"):
        return socket.gethostname().split(".")[0]
    raise InventoryError(f"no host name: {path} is missing or empty")


def read_host(host_root: str | os.PathLike[str] = "/") -> Host:
    """Everything slurmgpu needs to know about the host under `host_root`."""
    root = Path(host_root)
    return Host(
        hostname=read_hostname(root),
        cpus=read_cpus(root),
        numa_nodes=read_numa_nodes(root),
        memory_mib=read_memory_mib(root),
        mig_minors=read_mig_minors(root),
        device_nodes=read_device_nodes(root),
    )
