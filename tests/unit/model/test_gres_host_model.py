"""Host model: the OS cpu -> Slurm abstract core map and the node layout."""

from slurmgpu.model.host import Host, LogicalCpu, NumaNode


def _host(core_ids_per_pkg, threads=2, numa=None):
    """OS cpus numbered like Linux does: all first threads, then all siblings."""
    cpus = []
    per_thread = sum(len(ids) for ids in core_ids_per_pkg)
    for t in range(threads):
        base = 0
        for pkg, ids in enumerate(core_ids_per_pkg):
            for i, core_id in enumerate(ids):
                cpus.append(LogicalCpu(t * per_thread + base + i, pkg, core_id))
            base += len(ids)
    return Host(
        hostname="h",
        cpus=tuple(cpus),
        numa_nodes=tuple(numa or ()),
        memory_mib=1024,
    )


def test_core_ids_with_gaps_still_give_contiguous_abstract_ids():
    # Xeon-style core_id numbering skips values: 0,1,2,4,5,6 (no 3)
    host = _host([[0, 1, 2, 4, 5, 6], [0, 1, 2, 4, 5, 6]])
    assert host.sockets == 2 and host.cores_per_socket == 6 and host.threads_per_core == 2
    # cpu 3 is package 0 core_id 4 -> the 4th core of socket 0 -> abstract 3
    assert host.abstract_core_of_cpu[3] == 3
    # cpu 6 is package 1 core_id 0 -> first core of socket 1 -> abstract 6
    assert host.abstract_core_of_cpu[6] == 6
    # hyperthread sibling of cpu 3 is cpu 12+3 = 15 -> same abstract core
    assert host.abstract_core_of_cpu[15] == 3
    assert host.abstract_cores([3, 15, 6]) == [3, 6]


def test_numa_as_socket_layout_and_numbering():
    # one package of 8 cores split into 2 NUMA nodes of 4 cores, threads 0-7 / 8-15
    numa = [NumaNode(0, (0, 1, 2, 3, 8, 9, 10, 11)), NumaNode(1, (4, 5, 6, 7, 12, 13, 14, 15))]
    host = _host([list(range(8))], numa=numa)
    assert host.layout() == (1, 8)
    assert host.layout(numa_as_socket=True) == (2, 4)
    assert host.abstract_cores([4, 12], numa_as_socket=True) == [4]
    assert host.cpu_count == 16


def test_mig_minor_lookup():
    host = Host("h", (LogicalCpu(0, 0, 0),), (), 1, mig_minors={"gpu0/gi1/access": 12})
    assert host.mig_minor("gpu0/gi1/access") == 12
    assert host.mig_minor("gpu0/gi2/access") is None
