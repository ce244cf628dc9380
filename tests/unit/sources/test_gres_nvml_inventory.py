"""`read_inventory` through the pynvml double: the real NVML code path on recorded machines.

Expected values are worked out from the facts (tests/data/machines/*.json come from
facts/nvml/topo-*.json): NUMA/affinity per GPU, 12 (A100) or 18 (H100) NVSwitch links, and
MIG caps minors by the driver's numbering 3 + 135 * gpu_minor + 9 * gi (+ 1 + ci).
"""

import sys

import pytest

from slurmgpu.errors import InventoryError
from slurmgpu.sources.nvml import read_inventory
from tests.doubles.machines import install_double, setup_machine


@pytest.fixture
def nvml(monkeypatch):
    return install_double(monkeypatch)


def gi_minor(gpu_minor, gi):
    return 3 + 135 * gpu_minor + 9 * gi


A100_NUMA = [3, 3, 1, 1, 7, 7, 5, 5]
A100_BUS = ["07", "0F", "47", "4E", "87", "90", "B7", "BD"]


def test_dgx_a100(nvml, tmp_path):
    inv = read_inventory(setup_machine(nvml, tmp_path, "dgx-a100-mig"))
    assert inv.driver_version == "535.129.03" and inv.nvml_version == "12.535.129.03"
    assert len(inv.gpus) == 8 and not inv.skipped_gpus and inv.warnings == ()
    for gpu in inv.gpus:
        n = A100_NUMA[gpu.index]
        assert gpu.minor_number == gpu.index
        assert gpu.pci_bus_id == f"00000000:{A100_BUS[gpu.index]}:00.0"
        assert gpu.numa_node == n
        assert gpu.cpu_affinity == tuple(range(16 * n, 16 * n + 16)) + tuple(
            range(128 + 16 * n, 128 + 16 * n + 16)
        )
        assert gpu.memory_mib == 40960
        active = gpu.active_nvlinks
        assert len(active) == 12
        assert {link.remote_type for link in active} == {"NVSWITCH"}
        assert {link.remote_pci_bus_id for link in active} == {
            f"00000000:{b}:00.0" for b in ("C4", "C5", "C6", "C7", "C8", "C9")
        }
        assert gpu.mig_mode_current == (gpu.index in (0, 1, 2))
    gpu0, gpu1, gpu2 = inv.gpus[:3]
    assert [m.profile for m in gpu0.mig_devices] == ["1g.5gb"] * 7
    assert [m.gi_id for m in gpu0.mig_devices] == list(range(7, 14))
    assert [(m.gi_access_minor, m.ci_access_minor) for m in gpu0.mig_devices] == [
        (gi_minor(0, gi), gi_minor(0, gi) + 1) for gi in range(7, 14)
    ]
    assert gpu0.mig_devices[0].gi_access_minor == 66
    assert [(m.profile, m.gi_access_minor, m.ci_access_minor) for m in gpu1.mig_devices] == [
        ("3g.20gb", 147, 148),
        ("3g.20gb", 156, 157),
    ]
    assert [(m.profile, m.memory_mib) for m in gpu2.mig_devices] == [
        ("4g.20gb", 19968),
        ("2g.10gb", 9856),
        ("1g.10gb", 9856),
    ]
    # only the mig-minors entries in use are kept (plus config/monitor)
    assert inv.host.mig_minors["gpu2/gi6/ci0/access"] == gi_minor(2, 6) + 1
    assert len(inv.host.mig_minors) == 2 + 2 * 12


def test_dgx_h100_links_and_numa(nvml, tmp_path):
    inv = read_inventory(setup_machine(nvml, tmp_path, "dgx-h100"))
    for gpu in inv.gpus:
        assert gpu.numa_node == (0 if gpu.index < 4 else 1)
        assert len(gpu.active_nvlinks) == 18
        per_switch = {}
        for link in gpu.active_nvlinks:
            per_switch[link.remote_pci_bus_id] = per_switch.get(link.remote_pci_bus_id, 0) + 1
        assert sorted(per_switch.values()) == [4, 4, 5, 5]
        assert not gpu.mig_mode_current and gpu.mig_devices == ()


def test_pcie_no_nvlink_and_minors_differ_from_index(nvml, tmp_path):
    inv = read_inventory(setup_machine(nvml, tmp_path, "pcie-8gpu"))
    assert [g.minor_number for g in inv.gpus] == [1, 0, 3, 2, 5, 4, 7, 6]
    assert all(g.nvlinks == () for g in inv.gpus)  # NVML_ERROR_NOT_SUPPORTED
    assert all(not g.mig_mode_current for g in inv.gpus)  # MIG not supported
    assert inv.host.mig_minors == {}


def test_mig_caps_follow_the_minor_not_the_index(nvml, tmp_path):
    def swap(machine):
        machine["gpus"][0]["minor_number"], machine["gpus"][1]["minor_number"] = 1, 0

    inv = read_inventory(setup_machine(nvml, tmp_path, "dgx-a100-mig", change=swap))
    gpu0 = inv.gpus[0]
    assert gpu0.minor_number == 1 and gpu0.device_file == "/dev/nvidia1"
    assert gpu0.mig_devices[0].gi_access_minor == gi_minor(1, 7) == 201


def test_nvml_init_failure(nvml, tmp_path):
    def broken(machine):
        machine["init_error"] = "DRIVER_NOT_LOADED"

    with pytest.raises(InventoryError, match="NVML failed to initialise: Driver Not Loaded"):
        read_inventory(setup_machine(nvml, tmp_path, "dgx-h100", change=broken))


def test_nvml_library_missing(nvml, tmp_path, monkeypatch):
    root = setup_machine(nvml, tmp_path, "dgx-h100")
    nvml.use_machine("")  # no machine: the double behaves like a host without libnvidia-ml
    monkeypatch.delenv(nvml.ENV_VAR, raising=False)
    with pytest.raises(InventoryError, match="NVML Shared Library Not Found"):
        read_inventory(root)


def test_pynvml_not_installed(tmp_path, monkeypatch):
    from tests.doubles.hosttree import build_host_tree
    from tests.doubles.machines import MACHINES

    root = build_host_tree(MACHINES / "dgx-h100.json", tmp_path)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(InventoryError, match="pynvml is not importable"):
        read_inventory(root)


def _lose_gpu3(machine):
    machine["gpus"][3]["lost"] = True


def test_gpu_lost_names_the_gpu(nvml, tmp_path):
    with pytest.raises(InventoryError, match=r"^GPU 3: NVML error: GPU is lost"):
        read_inventory(setup_machine(nvml, tmp_path, "dgx-h100", change=_lose_gpu3))


def test_gpu_lost_mid_read_names_its_bus_id(nvml, tmp_path):
    def lost_late(machine):
        machine["gpus"][3]["errors"] = {"nvmlDeviceGetMemoryInfo": "GPU_IS_LOST"}

    with pytest.raises(InventoryError, match=r"GPU 3 \(00000000:5D:00.0\): NVML error: GPU is"):
        read_inventory(setup_machine(nvml, tmp_path, "dgx-h100", change=lost_late))


def test_gpu_lost_allow_partial(nvml, tmp_path):
    root = setup_machine(nvml, tmp_path, "dgx-h100", change=_lose_gpu3)
    inv = read_inventory(root, allow_partial=True)
    assert [g.index for g in inv.gpus] == [0, 1, 2, 4, 5, 6, 7]
    assert [(s.index, s.reason) for s in inv.skipped_gpus] == [(3, "GPU is lost")]
    assert any("left out GPU 3" in w for w in inv.warnings)


def test_mig_enabled_without_instances_warns(nvml, tmp_path):
    def empty_mig(machine):
        machine["gpus"][3]["mig_mode"] = [1, 1]
        machine["gpus"][3]["mig_devices"] = []

    inv = read_inventory(setup_machine(nvml, tmp_path, "dgx-a100-mig", change=empty_mig))
    assert inv.gpus[3].mig_mode_current and inv.gpus[3].mig_devices == ()
    assert any(w.startswith("GPU 3 (00000000:4E:00.0): MIG is enabled but") for w in inv.warnings)


def test_missing_caps_minor_names_the_gpu(nvml, tmp_path):
    root = setup_machine(nvml, tmp_path, "dgx-a100-mig", drop_minors=["gpu1/gi2/ci0/access"])
    with pytest.raises(
        InventoryError,
        match=r"GPU 1 \(00000000:0F:00.0\): no MIG caps minor for gpu1/gi2/ci0/access",
    ):
        read_inventory(root)
    inv = read_inventory(root, allow_partial=True)
    assert inv.gpus[1].mig_devices[1].ci_access_minor is None
    assert any("gpu1/gi2/ci0/access" in w for w in inv.warnings)


def test_numa_from_affinity_when_nvml_has_none(nvml, tmp_path):
    def no_numa(machine):
        machine["gpus"][0]["numa_node"] = None

    inv = read_inventory(setup_machine(nvml, tmp_path, "dgx-a100-mig", change=no_numa))
    assert inv.gpus[0].numa_node == 3


def test_pending_mig_mode_warns(nvml, tmp_path):
    def pending(machine):
        machine["gpus"][4]["mig_mode"] = [0, 1]

    inv = read_inventory(setup_machine(nvml, tmp_path, "dgx-a100-mig", change=pending))
    assert not inv.gpus[4].mig_mode_current and inv.gpus[4].mig_mode_pending
    assert any("GPU 4" in w and "becomes enabled" in w for w in inv.warnings)
