"""NVML's MIG management calls in the pynvml double, and slurmgpu's NVML MIG source over it.

Return codes per NVML's documentation: creating without MIG mode is NOT_SUPPORTED, on taken
slices INSUFFICIENT_RESOURCES, destroying a GPU instance that holds compute instances (or
runs processes) IN_USE, and nvmlDeviceSetMigMode reports IN_USE in its activation status
when the GPU is busy.
"""

from __future__ import annotations

import ctypes

import pytest

from slurmgpu.model.catalog import resolve
from slurmgpu.model.mig_layout import place
from slurmgpu.sources import nvml
from slurmgpu.sources.mig_nvml import MigApplyError, NvmlMig
from tests.doubles.machines import install_double, setup_machine


@pytest.fixture
def nv(tmp_path, monkeypatch):
    double = install_double(monkeypatch)
    root = setup_machine(double, tmp_path, "dgx-a100-mig", change=lambda m: None)
    double.nvmlInit()
    yield double, root
    if double._state["initialized"]:
        double.nvmlShutdown()


def placement(nv, start, size):
    p = nv.c_nvmlGpuInstancePlacement_t()
    p.start, p.size = start, size
    return p


def test_profile_info_and_placements(nv) -> None:
    nv, _ = nv
    dev = nv.nvmlDeviceGetHandleByIndex(3)
    info = nv.nvmlDeviceGetGpuInstanceProfileInfo(dev, 2)  # 3-slice profile enum
    assert (info.id, info.sliceCount, info.instanceCount) == (9, 3, 2)  # nvidia-smi id 9
    count = ctypes.c_uint(0)
    nv.nvmlDeviceGetGpuInstancePossiblePlacements(dev, info.id, None, ctypes.byref(count))
    assert count.value == 2
    buf = (nv.c_nvmlGpuInstancePlacement_t * count.value)()
    nv.nvmlDeviceGetGpuInstancePossiblePlacements(dev, info.id, buf, ctypes.byref(count))
    assert [(p.start, p.size) for p in buf] == [(0, 4), (4, 4)]
    with pytest.raises(nv.NVMLError_NotSupported):
        nv.nvmlDeviceGetGpuInstanceProfileInfo(dev, 5)  # 8-slice: not on an A100


def test_create_needs_mig_mode_and_free_slices(nv) -> None:
    nv, _ = nv
    dev = nv.nvmlDeviceGetHandleByIndex(3)  # MIG off in the recording
    with pytest.raises(nv.NVMLError_NotSupported):
        nv.nvmlDeviceCreateGpuInstanceWithPlacement(dev, 9, placement(nv, 0, 4))
    assert nv.nvmlDeviceSetMigMode(dev, nv.NVML_DEVICE_MIG_ENABLE) == nv.NVML_SUCCESS
    assert nv.nvmlDeviceGetMigMode(dev) == [1, 1]
    gi = nv.nvmlDeviceCreateGpuInstanceWithPlacement(dev, 5, placement(nv, 0, 4))  # 4g
    assert nv.nvmlGpuInstanceGetInfo(gi).id == 1
    with pytest.raises(nv.NVMLError_InsufficientResources):
        nv.nvmlDeviceCreateGpuInstanceWithPlacement(dev, 14, placement(nv, 2, 2))  # overlaps
    with pytest.raises(nv.NVMLError_InvalidArgument):
        nv.nvmlDeviceCreateGpuInstanceWithPlacement(dev, 9, placement(nv, 2, 4))  # bad start
    ci_info = nv.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, 3, 0)
    ci = nv.nvmlGpuInstanceCreateComputeInstance(gi, ci_info.id)
    assert nv.nvmlDeviceGetMaxMigDeviceCount(dev) == 7
    mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(dev, 0)
    assert nv.nvmlDeviceGetName(mig).endswith("MIG 4g.20gb")
    with pytest.raises(nv.NVMLError_InUse):
        nv.nvmlGpuInstanceDestroy(gi)  # it still holds a compute instance
    assert nv.nvmlDeviceSetMigMode(dev, nv.NVML_DEVICE_MIG_DISABLE) == nv.NVML_ERROR_IN_USE
    nv.nvmlComputeInstanceDestroy(ci)
    nv.nvmlGpuInstanceDestroy(gi)
    with pytest.raises(nv.NVMLError_NotFound):
        nv.nvmlDeviceGetGpuInstanceById(dev, 1)


def test_busy_instances_are_in_use(nv) -> None:
    nv, _ = nv
    machine = nv._state["machine"]
    machine["gpus"][1]["busy_gpu_instances"] = [1]
    dev = nv.nvmlDeviceGetHandleByIndex(1)
    gi = nv.nvmlDeviceGetGpuInstanceById(dev, 1)
    ci = nv.nvmlGpuInstanceGetComputeInstanceById(gi, 0)
    with pytest.raises(nv.NVMLError_InUse):
        nv.nvmlComputeInstanceDestroy(ci)
    machine["gpus"][5]["processes"] = 1
    busy = nv.nvmlDeviceGetHandleByIndex(5)
    assert nv.nvmlDeviceSetMigMode(busy, nv.NVML_DEVICE_MIG_ENABLE) == nv.NVML_ERROR_IN_USE
    assert nv.nvmlDeviceGetMigMode(busy) == [0, 1]  # pending, not active


def test_a_gpu_without_mig_is_not_supported(tmp_path, monkeypatch) -> None:
    double = install_double(monkeypatch)
    setup_machine(double, tmp_path, "pcie-8gpu")
    double.nvmlInit()
    dev = double.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(double.NVMLError_NotSupported):
        double.nvmlDeviceSetMigMode(dev, double.NVML_DEVICE_MIG_ENABLE)
    with pytest.raises(double.NVMLError_NotSupported):
        double.nvmlDeviceGetGpuInstanceProfileInfo(dev, 0)
    double.nvmlShutdown()


def test_source_applies_a_layout_and_inventory_sees_it(nv) -> None:
    double, root = nv
    double.nvmlShutdown()
    a100 = resolve("a100")
    target = place(a100, {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2})
    mig = NvmlMig()
    try:
        mig.apply(0, a100, target)  # GPU 0 had 7 x 1g.5gb
        mig.apply(1, a100, None)  # GPU 1 had 2 x 3g.20gb: back to a whole GPU
        placed = [(p.profile.name, p.start) for p in target.placements]
        assert placed == [("2g.10gb", 0), ("1g.5gb", 2), ("1g.5gb", 3), ("3g.20gb", 4)]
        assert sorted(mig.profile_names(0, a100)) == sorted(placed)
    finally:
        mig.close()
    inv = nvml.read_inventory(root)
    gpu0, gpu1 = inv.gpus[0], inv.gpus[1]
    assert sorted(m.profile for m in gpu0.mig_devices) == ["1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"]
    assert {m.gi_id for m in gpu0.mig_devices} == {3, 9, 10, 2}  # the driver's tree ids
    assert all(m.gi_access_minor is not None for m in gpu0.mig_devices)
    assert not gpu1.mig_enabled and not gpu1.mig_devices


def test_source_names_the_gpu_and_nvml_error(nv) -> None:
    double, _ = nv
    double._state["machine"]["gpus"][2]["busy_gpu_instances"] = [1]
    double._state["dirty"] = double._state["path"]
    double.nvmlShutdown()
    mig = NvmlMig()
    try:
        with pytest.raises(MigApplyError, match=r"GPU 2: nvmlComputeInstanceDestroy .* IN_USE"):
            mig.apply(2, resolve("a100"), place(resolve("a100"), {"7g.40gb": 1}))
    finally:
        mig.close()
