"""Host facts from a recorded tree under --host-root."""

import pytest

from slurmgpu.errors import InventoryError
from slurmgpu.sources import sysfs
from tests.doubles.hosttree import build_host_tree, mig_minor_table
from tests.doubles.machines import MACHINES


def test_dgx_a100_host_tree(tmp_path):
    host = sysfs.read_host(build_host_tree(MACHINES / "dgx-a100-mig.json", tmp_path))
    assert host.hostname == "dgxa100"
    assert (host.sockets, host.cores_per_socket, host.threads_per_core) == (2, 64, 2)
    assert host.cpu_count == 256
    assert [n.node_id for n in host.numa_nodes] == list(range(8))
    assert host.numa_nodes[3].cpus == tuple(range(48, 64)) + tuple(range(176, 192))
    assert host.memory_mib == 1056462848 // 1024
    assert "/dev/nvidia7" in host.device_nodes and "/dev/nvidia-nvswitchctl" in host.device_nodes
    # the driver's numbering: 3 + 135 * gpu + 9 * gi (+ 1 + ci for a compute instance)
    assert host.mig_minors["gpu0/gi1/access"] == 12
    assert host.mig_minors["gpu0/gi1/ci0/access"] == 13
    assert host.mig_minors["gpu31/gi14/ci7/access"] == 4322


def test_intel_core_id_gaps_fold_to_socket_major_ids(tmp_path):
    host = sysfs.read_host(build_host_tree(MACHINES / "dgx-h100.json", tmp_path))
    # core_id on this Xeon skips one number every 8 cores; Slurm's ids do not
    core_ids = sorted({c.core_id for c in host.cpus if c.physical_package_id == 0})
    assert core_ids[-1] > 55
    assert host.abstract_cores(list(range(56, 112)) + list(range(168, 224))) == list(range(56, 112))


def test_mig_minor_table_shape():
    table = mig_minor_table()
    assert table["config"] == 1 and table["monitor"] == 2
    assert table["gpu3/gi3/ci3/access"] == 439
    assert len(table) == 2 + 32 * 15 * 9


def test_bad_mig_minors_line_names_the_line():
    with pytest.raises(InventoryError, match=r"mig-minors:2: expected 'NAME MINOR'"):
        sysfs.parse_mig_minors("config 1\ngpu0/gi1/access twelve\n")


def test_missing_memtotal(tmp_path):
    root = build_host_tree(MACHINES / "pcie-8gpu.json", tmp_path)
    (root / "proc/meminfo").write_text("MemFree: 1 kB\n")
    with pytest.raises(InventoryError, match="no MemTotal"):
        sysfs.read_host(root)


def test_missing_cpu_topology(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/hostname").write_text("empty\n")
    with pytest.raises(InventoryError, match="no CPU topology"):
        sysfs.read_host(tmp_path)
