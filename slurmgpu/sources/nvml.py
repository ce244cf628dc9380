"""GPUs through NVML, via `import pynvml` (nvidia-ml-py) only, combined with the host facts.

The only module that talks to the GPU driver. Tests replace the `pynvml` module itself (a
double serving recorded machines), so this code runs unchanged in tests and in production.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
from typing import Any

from slurmgpu import __version__
from slurmgpu.errors import InventoryError
from slurmgpu.model import validate
from slurmgpu.model.catalog import model_for_name
from slurmgpu.model.gpu import (
    REMOTE_GPU,
    REMOTE_IBMNPU,
    REMOTE_NVSWITCH,
    REMOTE_UNKNOWN,
    Gpu,
    MigDevice,
    NvLink,
)
from slurmgpu.model.host import Host
from slurmgpu.model.inventory import Inventory, SkippedGpu
from slurmgpu.sources import sysfs

_MIB = 1024 * 1024
# nvmlDeviceGetName on a MIG handle: "NVIDIA A100-SXM4-40GB MIG 1g.5gb" (or "... MIG 1c.3g.20gb")
_MIG_NAME = re.compile(r"\bMIG\s+(?P<profile>(?:\d+c\.)?\d+g\.\d+gb(?:\+me)?)\s*$")
_PCI = re.compile(
    r"^(?:(?P<dom>[0-9A-Fa-f]{1,8}):)?(?P<bus>[0-9A-Fa-f]{1,2}):(?P<dev>[0-9A-Fa-f]{1,2})\.(?P<fn>[0-7])$"
)


def normalize_pci_bus_id(bus_id: str) -> str:
    """`0000:c4:00.0` or `00000000:C4:00.0` -> NVML's form `00000000:C4:00.0`."""
    m = _PCI.match(bus_id.strip())
    if not m:
        return bus_id.strip()
    dom = int(m.group("dom") or "0", 16)
    return f"{dom:08X}:{int(m.group('bus'), 16):02X}:{int(m.group('dev'), 16):02X}.{m.group('fn')}"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _import_pynvml():
    try:
        import pynvml
    except ImportError as exc:
        raise InventoryError(
            "pynvml is not importable: install nvidia-ml-py, or use --snapshot FILE"
        ) from exc
    return pynvml


def mig_caps_paths(gpu_minor: int, gi_id: int, ci_id: int) -> tuple[str, str]:
    """The mig-minors entries a MIG device needs: GI access and CI access."""
    return (f"gpu{gpu_minor}/gi{gi_id}/access", f"gpu{gpu_minor}/gi{gi_id}/ci{ci_id}/access")


class _GpuReader:
    """Reads one GPU; any NVMLError escapes to `read_gpus`, which names the GPU."""

    def __init__(self, nv, host: Host, warnings: list[str]):
        self.nv = nv
        self.host = host
        self.warnings = warnings

    def _optional(self, fn, *args, default=None):
        """Call an NVML query that a GPU/driver may not support; GPU loss still raises."""
        nv = self.nv
        try:
            return fn(*args)
        except (nv.NVMLError_NotSupported, nv.NVMLError_FunctionNotFound):
            return default

    def read(self, index: int, handle) -> Gpu:
        nv = self.nv
        minor = nv.nvmlDeviceGetMinorNumber(handle)
        name = _text(nv.nvmlDeviceGetName(handle))
        pci = normalize_pci_bus_id(_text(nv.nvmlDeviceGetPciInfo(handle).busId))
        affinity = self._affinity(handle)
        numa = self._optional(nv.nvmlDeviceGetNumaNodeId, handle)
        if numa is None or numa < 0:
            numa = self._numa_from_affinity(affinity)
        current, pending = self._optional(nv.nvmlDeviceGetMigMode, handle, default=[0, 0])
        mig_on = current == nv.NVML_DEVICE_MIG_ENABLE
        gpu_label = f"GPU {index} ({pci})"
        migs = self._mig_devices(handle, minor, gpu_label) if mig_on else ()
        if mig_on and not migs:
            self.warnings.append(
                f"{gpu_label}: MIG is enabled but has no MIG devices; it gets no gres.conf "
                "line until instances are created (nvidia-smi mig -cgi ... -C)"
            )
        if current != pending:
            state = "enabled" if pending == nv.NVML_DEVICE_MIG_ENABLE else "disabled"
            self.warnings.append(f"{gpu_label}: MIG mode becomes {state} at the next GPU reset")
        return Gpu(
            index=index,
            minor_number=minor,
            uuid=_text(nv.nvmlDeviceGetUUID(handle)),
            name=name,
            memory_mib=nv.nvmlDeviceGetMemoryInfo(handle).total // _MIB,
            pci_bus_id=pci,
            numa_node=numa,
            cpu_affinity=affinity,
            mig_mode_current=mig_on,
            mig_mode_pending=pending == nv.NVML_DEVICE_MIG_ENABLE,
            mig_devices=migs,
            nvlinks=self._nvlinks(handle),
        )

    def _affinity(self, handle) -> tuple[int, ...]:
        words_needed = max(1, math.ceil((max(c.cpu for c in self.host.cpus) + 1) / 64))
        words = self.nv.nvmlDeviceGetCpuAffinity(handle, words_needed)
        cpus = []
        for w, word in enumerate(words):  # 64-bit words, bit i of word w = cpu 64*w + i
            word = int(word)
            for bit in range(64):
                if word >> bit & 1:
                    cpus.append(64 * w + bit)
        return tuple(cpus)

    def _numa_from_affinity(self, affinity: tuple[int, ...]) -> int | None:
        wanted = set(affinity)
        for node in self.host.numa_nodes:
            if wanted and wanted <= set(node.cpus):
                return node.node_id
        return None

    def _mig_devices(self, handle, gpu_minor: int, gpu_label: str) -> tuple[MigDevice, ...]:
        nv = self.nv
        out = []
        for i in range(nv.nvmlDeviceGetMaxMigDeviceCount(handle)):
            try:
                mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, i)
            except (nv.NVMLError_NotFound, nv.NVMLError_InvalidArgument):
                continue  # no MIG device at this index
            gi = nv.nvmlDeviceGetGpuInstanceId(mig)
            ci = nv.nvmlDeviceGetComputeInstanceId(mig)
            gi_path, ci_path = mig_caps_paths(gpu_minor, gi, ci)
            out.append(
                MigDevice(
                    index=i,
                    gi_id=gi,
                    ci_id=ci,
                    profile=self._mig_profile(mig, gpu_label, gi, ci),
                    memory_mib=nv.nvmlDeviceGetMemoryInfo(mig).total // _MIB,
                    uuid=_text(nv.nvmlDeviceGetUUID(mig)),
                    gi_access_minor=self.host.mig_minor(gi_path),
                    ci_access_minor=self.host.mig_minor(ci_path),
                )
            )
        return tuple(out)

    def _mig_profile(self, mig, gpu_label: str, gi: int, ci: int) -> str:
        """The profile from the MIG device's NVML name; else slices + memory, as Slurm does.

        The name carries NVIDIA's own profile string (`1g.10gb`, `1g.5gb+me`, `1c.3g.20gb`).
        Slurm's autodetect instead rounds memorySizeMB/1024, which turns A100-40GB's
        7g.40gb into `7g.39gb`; the fallback uses the catalogue first for that reason.
        """
        nv = self.nv
        m = _MIG_NAME.search(_text(nv.nvmlDeviceGetName(mig)))
        if m:
            return m.group("profile")
        attrs = nv.nvmlDeviceGetAttributes(mig)
        slices, mem_mib = attrs.gpuInstanceSliceCount, attrs.memorySizeMB
        self.warnings.append(
            f"{gpu_label}: MIG device gi{gi}/ci{ci} has no profile in its NVML name; "
            f"derived from {slices} slices and {mem_mib} MiB"
        )
        return f"{slices}g.{round(mem_mib / 1024)}gb"

    def _nvlinks(self, handle) -> tuple[NvLink, ...]:
        nv = self.nv
        links = []
        for link in range(nv.NVML_NVLINK_MAX_LINKS):
            try:
                active = nv.nvmlDeviceGetNvLinkState(handle, link) == nv.NVML_FEATURE_ENABLED
            except (nv.NVMLError_NotSupported, nv.NVMLError_InvalidArgument):
                break  # no NVLink (PCIe boards) or past the GPU's last link, as Slurm stops
            if not active:
                links.append(NvLink(link, False, None, None, REMOTE_UNKNOWN))
                continue
            version = self._optional(nv.nvmlDeviceGetNvLinkVersion, handle, link)
            remote = normalize_pci_bus_id(
                _text(nv.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
            )
            kind = self._optional(nv.nvmlDeviceGetNvLinkRemoteDeviceType, handle, link)
            links.append(NvLink(link, True, version, remote, self._remote_type(kind)))
        return tuple(links)

    def _remote_type(self, kind: int | None) -> str:
        nv = self.nv
        return {
            nv.NVML_NVLINK_DEVICE_TYPE_GPU: REMOTE_GPU,
            nv.NVML_NVLINK_DEVICE_TYPE_IBMNPU: REMOTE_IBMNPU,
            nv.NVML_NVLINK_DEVICE_TYPE_SWITCH: REMOTE_NVSWITCH,
        }.get(kind, REMOTE_UNKNOWN)


def _fix_remote_types(gpus: list[Gpu]) -> list[Gpu]:
    """Drivers without nvmlDeviceGetNvLinkRemoteDeviceType: a remote bus id of a GPU is a GPU."""
    bus_ids = {g.pci_bus_id for g in gpus}
    fixed = []
    for gpu in gpus:
        links = tuple(
            dataclasses.replace(link, remote_type=REMOTE_GPU)
            if link.active
            and link.remote_type == REMOTE_UNKNOWN
            and link.remote_pci_bus_id in bus_ids
            else link
            for link in gpu.nvlinks
        )
        fixed.append(dataclasses.replace(gpu, nvlinks=links))
    return fixed


def _relevant_minors(host: Host, gpus: list[Gpu]) -> dict[str, int]:
    """The mig-minors entries this inventory uses (the full table has ~4300 lines)."""
    keep = {k: v for k, v in host.mig_minors.items() if k in ("config", "monitor")}
    for gpu in gpus:
        for mig in gpu.mig_devices:
            for path in mig_caps_paths(gpu.minor_number, mig.gi_id, mig.ci_id):
                if path in host.mig_minors:
                    keep[path] = host.mig_minors[path]
    return dict(sorted(keep.items(), key=lambda kv: kv[1]))


def missing_caps(gpus: list[Gpu] | tuple[Gpu, ...]) -> list[str]:
    """One message per GPU whose MIG devices lack a caps minor in mig-minors."""
    problems = []
    for gpu in gpus:
        missing = [
            path
            for mig in gpu.mig_devices
            for path, minor in zip(
                mig_caps_paths(gpu.minor_number, mig.gi_id, mig.ci_id),
                (mig.gi_access_minor, mig.ci_access_minor),
                strict=True,
            )
            if minor is None
        ]
        if missing:
            problems.append(
                f"{gpu.label}: no MIG caps minor for {', '.join(missing)} in /{sysfs.MIG_MINORS}"
            )
    return problems


def read_inventory(host_root: str | os.PathLike[str] = "/", *, allow_partial: bool = False):
    """Read NVML and the host into an `Inventory`.

    Raises `InventoryError` naming the GPU when NVML cannot start, a GPU fails (lost, fell
    off the bus) or a MIG device has no caps minor, unless `allow_partial`, in which case
    such GPUs are left out and listed in `skipped_gpus` and `warnings`.
    """
    host = sysfs.read_host(host_root)
    nv = _import_pynvml()
    try:
        nv.nvmlInit()
    except nv.NVMLError as exc:
        raise InventoryError(f"NVML failed to initialise: {exc}") from exc
    try:
        driver = _text(nv.nvmlSystemGetDriverVersion())
        nvml_version = _text(nv.nvmlSystemGetNVMLVersion())
        warnings: list[str] = []
        reader = _GpuReader(nv, host, warnings)
        gpus: list[Gpu] = []
        skipped: list[SkippedGpu] = []
        device_count = nv.nvmlDeviceGetCount()
        for index in range(device_count):
            bus_id = None
            try:
                handle = nv.nvmlDeviceGetHandleByIndex(index)
                bus_id = normalize_pci_bus_id(_text(nv.nvmlDeviceGetPciInfo(handle).busId))
                gpus.append(reader.read(index, handle))
            except nv.NVMLError as exc:
                where = f"GPU {index}" + (f" ({bus_id})" if bus_id else "")
                hint = (
                    " (fell off the bus? check dmesg for Xid 79)"
                    if isinstance(exc, nv.NVMLError_GpuIsLost)
                    else ""
                )
                message = f"{where}: NVML error: {exc}{hint}"
                if not allow_partial:
                    raise InventoryError(message) from exc
                skipped.append(SkippedGpu(index=index, pci_bus_id=bus_id, reason=str(exc)))
                warnings.append(f"left out {message}")
    finally:
        with contextlib.suppress(nv.NVMLError):
            nv.nvmlShutdown()
    gpus = _fix_remote_types(gpus)
    problems = missing_caps(gpus)
    if problems:
        if not allow_partial:
            raise InventoryError(problems[0])
        warnings.extend(problems)
    for gpu in gpus:
        if model_for_name(gpu.name) is None:
            warnings.append(f"{gpu.label}: {gpu.name!r} is not in slurmgpu's GPU catalogue")
    inventory = Inventory(
        generator=f"slurmgpu {__version__}",
        driver_version=driver,
        nvml_version=nvml_version,
        host=dataclasses.replace(host, mig_minors=_relevant_minors(host, gpus)),
        gpus=tuple(gpus),
        warnings=tuple(warnings),
        skipped_gpus=tuple(skipped),
        nvml_device_count=device_count,
    )
    found = validate.problems(inventory)
    if found:  # e.g. a host name Slurm cannot take, or two GPUs reporting one UUID
        more = f" (and {len(found) - 1} more problem(s))" if len(found) > 1 else ""
        raise InventoryError(f"the host reports an inventory slurmgpu refuses: {found[0]}{more}")
    return inventory
