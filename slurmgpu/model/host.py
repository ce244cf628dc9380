"""The host a set of GPUs sits in, as Slurm sees it: CPU topology, memory, MIG capability minors.

Pure data (no I/O): `slurmgpu.sources.sysfs` fills it from `/sys` and `/proc`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field


@dataclass(frozen=True)
class LogicalCpu:
    """One OS cpu (a hardware thread) as `/sys/devices/system/cpu/cpuN/topology` describes it."""

    cpu: int
    physical_package_id: int
    core_id: int


@dataclass(frozen=True)
class NumaNode:
    """A NUMA node and the OS cpus in it (`/sys/devices/system/node/nodeN/cpulist`)."""

    node_id: int
    cpus: tuple[int, ...]


@dataclass(frozen=True)
class Host:
    """CPU layout, memory, device nodes and the MIG caps minors table of one GPU server."""

    hostname: str
    cpus: tuple[LogicalCpu, ...]
    numa_nodes: tuple[NumaNode, ...]
    memory_mib: int
    # `/proc/driver/nvidia-caps/mig-minors` entries, e.g. {"gpu0/gi1/access": 12}
    mig_minors: dict[str, int] = field(default_factory=dict)
    # device nodes seen under /dev (nvidia*, nvidia-caps/*), absolute paths, sorted
    device_nodes: tuple[str, ...] = ()

    # -- layout as Slurm's node line states it ------------------------------------------------
    @functools.cached_property
    def _packages(self) -> dict[int, list[int]]:
        """physical_package_id -> sorted unique core_ids in that package."""
        cores: dict[int, set[int]] = {}
        for c in self.cpus:
            cores.setdefault(c.physical_package_id, set()).add(c.core_id)
        return {pkg: sorted(ids) for pkg, ids in sorted(cores.items())}

    @property
    def sockets(self) -> int:
        return len(self._packages)

    @property
    def cores_per_socket(self) -> int:
        counts = {len(ids) for ids in self._packages.values()}
        # Slurm's node line has one CoresPerSocket: use the smallest, never promise more cores
        return min(counts) if counts else 0

    @property
    def cores(self) -> int:
        return sum(len(ids) for ids in self._packages.values())

    @property
    def threads_per_core(self) -> int:
        per_core: dict[tuple[int, int], int] = {}
        for c in self.cpus:
            key = (c.physical_package_id, c.core_id)
            per_core[key] = per_core.get(key, 0) + 1
        return min(per_core.values()) if per_core else 0

    @property
    def cpu_count(self) -> int:
        return len(self.cpus)

    def layout(self, *, numa_as_socket: bool = False) -> tuple[int, int]:
        """(sockets, cores per socket) as the node line states them.

        With `numa_as_socket` (SlurmdParameters=numa_node_as_socket) each NUMA node that has
        cpus counts as a socket, e.g. a 2x64-core EPYC in NPS4 mode is 8 x 16.
        """
        if not numa_as_socket:
            return self.sockets, self.cores_per_socket
        node_of_cpu = {cpu: n.node_id for n in self.numa_nodes for cpu in n.cpus}
        cores: dict[int, set[tuple[int, int]]] = {}
        for c in self.cpus:
            node = node_of_cpu.get(c.cpu, 0)
            cores.setdefault(node, set()).add((c.physical_package_id, c.core_id))
        if not cores:
            return 0, 0
        return len(cores), min(len(v) for v in cores.values())

    # -- the OS cpu -> Slurm abstract core map ---------------------------------------------------
    @functools.cached_property
    def abstract_core_of_cpu(self) -> dict[int, int]:
        """OS cpu -> Slurm abstract core id (socket-major; hyperthreads fold onto their core).

        Slurm numbers cores 0..N-1 socket by socket (hwloc logical order), so core ids in
        gres.conf `Cores=` are not OS cpu ids. `core_id` in sysfs is per package and often
        not contiguous (Intel parts skip numbers), hence the rank over the sorted ids.
        """
        base = 0
        rank: dict[tuple[int, int], int] = {}
        for pkg, core_ids in self._packages.items():
            for i, core_id in enumerate(core_ids):
                rank[(pkg, core_id)] = base + i
            base += len(core_ids)
        return {c.cpu: rank[(c.physical_package_id, c.core_id)] for c in self.cpus}

    @functools.cached_property
    def numa_abstract_core_of_cpu(self) -> dict[int, int]:
        """Like `abstract_core_of_cpu`, but with NUMA nodes as sockets (numa_node_as_socket).

        Cores are grouped by the NUMA node of their threads, nodes in id order, cores within a
        node in (package, core_id) order.
        """
        node_of_cpu = {cpu: n.node_id for n in self.numa_nodes for cpu in n.cpus}
        by_node: dict[int, set[tuple[int, int]]] = {}
        for c in self.cpus:
            node = node_of_cpu.get(c.cpu, 0)
            by_node.setdefault(node, set()).add((c.physical_package_id, c.core_id))
        rank: dict[tuple[int, int], int] = {}
        base = 0
        for _node, cores in sorted(by_node.items()):
            for i, key in enumerate(sorted(cores)):
                rank.setdefault(key, base + i)
            base += len(cores)
        return {c.cpu: rank[(c.physical_package_id, c.core_id)] for c in self.cpus}

    def abstract_cores(self, os_cpus: tuple[int, ...] | list[int], *, numa_as_socket=False):
        """The sorted Slurm abstract core ids that the OS cpus `os_cpus` belong to."""
        table = self.numa_abstract_core_of_cpu if numa_as_socket else self.abstract_core_of_cpu
        return sorted({table[c] for c in os_cpus if c in table})

    def mig_minor(self, path: str) -> int | None:
        """The caps minor of a mig-minors entry (`gpu0/gi1/access`), or None if absent."""
        return self.mig_minors.get(path)
