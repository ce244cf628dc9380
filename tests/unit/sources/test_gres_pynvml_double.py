"""The pynvml double must look like nvidia-ml-py: same names, signatures, errors, constants."""

import importlib
import inspect
import sys

import pytest

from tests.doubles.machines import load_double


@pytest.fixture(scope="module")
def real():
    saved = sys.modules.pop("pynvml", None)
    try:
        module = importlib.import_module("pynvml")
    finally:
        if saved is not None:
            sys.modules["pynvml"] = saved
    # nvidia-ml-py is a runtime dependency, so the real module must be the one found here
    assert "doubles" not in (module.__file__ or ""), module.__file__
    return module


def test_every_function_exists_with_the_real_signature(real):
    double = load_double()
    functions = [
        name
        for name, obj in vars(double).items()
        if name.startswith("nvml") and inspect.isfunction(obj)
    ]
    assert "nvmlDeviceGetNvLinkRemoteDeviceType" in functions
    for name in functions:
        assert hasattr(real, name), f"{name} is not in nvidia-ml-py"
        real_params = list(inspect.signature(getattr(real, name)).parameters)
        double_params = list(inspect.signature(getattr(double, name)).parameters)
        assert double_params == real_params, name


def test_error_classes_and_codes_match(real):
    double = load_double()
    for name in [n for n in dir(double) if n.startswith("NVML_ERROR_")]:
        assert getattr(double, name) == getattr(real, name), name
    for cls in ("NVMLError_GpuIsLost", "NVMLError_NotSupported", "NVMLError_DriverNotLoaded"):
        assert hasattr(real, cls) and hasattr(double, cls)
    err = double.NVMLError(double.NVML_ERROR_GPU_IS_LOST)
    assert isinstance(err, double.NVMLError_GpuIsLost)
    assert str(err) == str(real.NVMLError(real.NVML_ERROR_GPU_IS_LOST))


def test_constants_match(real):
    double = load_double()
    for name in (
        "NVML_NVLINK_MAX_LINKS",
        "NVML_DEVICE_MIG_ENABLE",
        "NVML_DEVICE_MIG_DISABLE",
        "NVML_NVLINK_DEVICE_TYPE_GPU",
        "NVML_NVLINK_DEVICE_TYPE_SWITCH",
        "NVML_NVLINK_DEVICE_TYPE_IBMNPU",
        "NVML_FEATURE_ENABLED",
    ):
        assert getattr(double, name) == getattr(real, name), name


def test_uninitialized_calls_fail_like_nvml():
    double = load_double()
    with pytest.raises(double.NVMLError_Uninitialized):
        double.nvmlDeviceGetCount()
