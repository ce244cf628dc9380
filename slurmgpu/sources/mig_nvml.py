"""Read and change a GPU's MIG layout through NVML (pynvml), the way nvidia-smi mig does.

The only code that changes GPU state. Applying a layout: MIG mode on (or off for a whole
GPU), destroy every compute instance and GPU instance, then create each GPU instance at its
planned placement with one compute instance spanning it (what `nvidia-smi mig -cgi P -C`
makes). NVML errors become `MigApplyError` naming the GPU, the call and NVML's code, e.g.
IN_USE when a process still runs on an instance.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurmgpu.errors import SlurmgpuError
from slurmgpu.model.catalog import GpuModel
from slurmgpu.model.mig_layout import Layout

MAX_GPU_INSTANCES = 15  # ids 0-14 on the 8-slot grid (the driver's tree numbering)
MAX_COMPUTE_INSTANCES = 8
# NVML's compute-instance profile enum for a CI of N compute slices (nvml.h)
CI_PROFILE_FOR_SLICES = {1: 0x0, 2: 0x1, 3: 0x2, 4: 0x3, 7: 0x4, 8: 0x5, 6: 0x6}


class MigApplyError(SlurmgpuError):
    """Changing a GPU's MIG layout failed; the message names GPU, step and NVML's error."""


@dataclass(frozen=True)
class GpuInstanceState:
    """One existing GPU instance: id, placement and its compute instances."""

    gi_id: int
    profile_id: int
    start: int
    size: int
    ci_ids: tuple[int, ...]


def _nvml():
    from slurmgpu.sources.nvml import _import_pynvml

    return _import_pynvml()


class NvmlMig:
    """MIG changes on one node's GPUs (opened with nvmlInit, closed with `close`)."""

    def __init__(self) -> None:
        self.nv = _nvml()
        self._call("nvmlInit", self.nv.nvmlInit, label="NVML")

    def close(self) -> None:
        self.nv.nvmlShutdown()

    def _call(self, what: str, fn, *args, label: str):
        try:
            return fn(*args)
        except self.nv.NVMLError as exc:
            name = _error_name(self.nv, exc)
            raise MigApplyError(f"{label}: {what} failed: NVML {name} ({exc})") from None

    def handle(self, index: int):
        return self._call(
            "nvmlDeviceGetHandleByIndex",
            self.nv.nvmlDeviceGetHandleByIndex,
            index,
            label=f"GPU {index}",
        )

    def instances(self, index: int) -> list[GpuInstanceState]:
        """The GPU's GPU instances now (empty when MIG is off)."""
        nv, dev = self.nv, self.handle(index)
        current, _ = self._call(
            "nvmlDeviceGetMigMode", nv.nvmlDeviceGetMigMode, dev, label=f"GPU {index}"
        )
        if current != nv.NVML_DEVICE_MIG_ENABLE:
            return []
        out = []
        for gi_id in range(MAX_GPU_INSTANCES):
            try:
                gi = nv.nvmlDeviceGetGpuInstanceById(dev, gi_id)
            except nv.NVMLError_NotFound:
                continue
            info = nv.nvmlGpuInstanceGetInfo(gi)
            cis = []
            for ci_id in range(MAX_COMPUTE_INSTANCES):
                try:
                    nv.nvmlGpuInstanceGetComputeInstanceById(gi, ci_id)
                except nv.NVMLError_NotFound:
                    continue
                cis.append(ci_id)
            out.append(
                GpuInstanceState(
                    gi_id, info.profileId, info.placement.start, info.placement.size, tuple(cis)
                )
            )
        return out

    def set_mig_mode(self, index: int, enabled: bool) -> None:
        nv, dev = self.nv, self.handle(index)
        mode = nv.NVML_DEVICE_MIG_ENABLE if enabled else nv.NVML_DEVICE_MIG_DISABLE
        current, _ = nv.nvmlDeviceGetMigMode(dev)
        if current == mode:
            return
        status = self._call(
            "nvmlDeviceSetMigMode", nv.nvmlDeviceSetMigMode, dev, mode, label=f"GPU {index}"
        )
        if status != nv.NVML_SUCCESS:
            raise MigApplyError(
                f"GPU {index}: MIG mode {'on' if enabled else 'off'} not activated: NVML "
                f"{_code_name(nv, status)} (the GPU is not idle, or needs a reset)"
            )

    def clear(self, index: int) -> None:
        """Destroy every compute instance, then every GPU instance, of GPU `index`."""
        nv, dev, label = self.nv, self.handle(index), f"GPU {index}"
        for state in self.instances(index):
            gi = nv.nvmlDeviceGetGpuInstanceById(dev, state.gi_id)
            for ci_id in state.ci_ids:
                ci = nv.nvmlGpuInstanceGetComputeInstanceById(gi, ci_id)
                self._call(
                    f"nvmlComputeInstanceDestroy (gi{state.gi_id}/ci{ci_id})",
                    nv.nvmlComputeInstanceDestroy,
                    ci,
                    label=label,
                )
            self._call(
                f"nvmlGpuInstanceDestroy (gi{state.gi_id})",
                nv.nvmlGpuInstanceDestroy,
                gi,
                label=label,
            )

    def create(self, index: int, layout: Layout) -> None:
        """Create `layout`'s GPU instances at their placements, one full CI in each."""
        nv, dev, label = self.nv, self.handle(index), f"GPU {index}"
        for pl in layout.placements:
            info = self._call(
                f"nvmlDeviceGetGpuInstanceProfileInfo ({pl.profile.name})",
                nv.nvmlDeviceGetGpuInstanceProfileInfo,
                dev,
                pl.profile.gi_profile_enum,
                label=label,
            )
            placement = nv.c_nvmlGpuInstancePlacement_t()
            placement.start, placement.size = pl.start, pl.profile.placement_size
            gi = self._call(
                f"nvmlDeviceCreateGpuInstanceWithPlacement ({pl.profile.name} at {pl.start})",
                nv.nvmlDeviceCreateGpuInstanceWithPlacement,
                dev,
                info.id,
                placement,
                label=label,
            )
            ci_profile = CI_PROFILE_FOR_SLICES[pl.profile.gpu_slices]
            ci_info = self._call(
                "nvmlGpuInstanceGetComputeInstanceProfileInfo",
                nv.nvmlGpuInstanceGetComputeInstanceProfileInfo,
                gi,
                ci_profile,
                nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                label=label,
            )
            self._call(
                f"nvmlGpuInstanceCreateComputeInstance ({pl.profile.name} at {pl.start})",
                nv.nvmlGpuInstanceCreateComputeInstance,
                gi,
                ci_info.id,
                label=label,
            )

    def apply(self, index: int, model: GpuModel | None, layout: Layout | None) -> None:
        """Bring GPU `index` to `layout` (None: MIG off, a whole GPU)."""
        if layout is None:
            if self.instances(index):
                self.clear(index)
            self.set_mig_mode(index, False)
            return
        if model is None or not model.supports_mig:
            raise MigApplyError(f"GPU {index}: not a MIG-capable GPU model")
        self.set_mig_mode(index, True)
        self.clear(index)
        self.create(index, layout)

    def profile_names(self, index: int, model: GpuModel) -> list[tuple[str, int]]:
        """(profile name, start) of each GPU instance, named through the catalogue."""
        nv, dev = self.nv, self.handle(index)
        by_id = {}
        for p in model.mig_profiles:
            try:
                by_id[nv.nvmlDeviceGetGpuInstanceProfileInfo(dev, p.gi_profile_enum).id] = p.name
            except nv.NVMLError:
                continue
        return [
            (by_id.get(s.profile_id, f"id{s.profile_id}"), s.start) for s in self.instances(index)
        ]


def _error_name(nv, exc) -> str:
    return _code_name(nv, getattr(exc, "value", None))


def _code_name(nv, code) -> str:
    for name in dir(nv):
        if name.startswith("NVML_ERROR_") and getattr(nv, name) == code:
            return name.removeprefix("NVML_ERROR_")
    return str(code)
