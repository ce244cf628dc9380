"""One inventory of every accelerator vendor on the node: NVIDIA, AMD and Ascend together.

`read_inventory` asks each vendor's reader in turn (`--vendor auto`, the default, asks all
and keeps those whose library is present and finds devices): NVML (`sources.nvml`), amdsmi
(`sources.amdsmi`), and for Ascend DCMI through libdcmi.so (`sources.dcmi`) with `npu-smi`
text (`sources.npu_smi`) as the fallback. A vendor asked for by name that cannot be read is
an error; under `auto` it is skipped, and a node where no vendor is readable is an error that
says why each one was not.
"""

from __future__ import annotations

import dataclasses
import os

from slurmgpu import __version__
from slurmgpu.errors import InventoryError, UsageError
from slurmgpu.model import validate
from slurmgpu.model.gpu import VENDOR_AMD, VENDOR_ASCEND, VENDOR_NVIDIA, VENDORS
from slurmgpu.model.inventory import Inventory
from slurmgpu.sources import sysfs

# messages that mean "this vendor's stack is not on this node" (skipped under auto)
_ABSENT = (
    "is not importable",
    "Driver Not Loaded",
    "Library Not Found",
    "NVML Shared Library Not Found",
    "amdsmi failed to initialise",
    "command not found",
    "found no AMD GPU",
    "cannot load libdcmi",
    "no Ascend driver loaded",
)


def parse_vendors(text: str) -> tuple[str, ...]:
    """`auto` or a comma list of nvidia, amd, ascend."""
    names = tuple(v.strip().lower() for v in text.split(",") if v.strip())
    if names == ("auto",):
        return ()
    bad = [v for v in names if v not in VENDORS]
    if bad or not names:
        raise UsageError(f"--vendor: use auto or a list of {', '.join(VENDORS)} (got {text!r})")
    return names


def _absent(exc: Exception) -> bool:
    return any(marker in str(exc) for marker in _ABSENT)


def read_ascend(host, *, allow_partial: bool = False):
    """DCMI first; `npu-smi` when libdcmi.so cannot be loaded."""
    from slurmgpu.sources import dcmi, npu_smi

    try:
        return dcmi.read_ascend(host, allow_partial=allow_partial)
    except dcmi.DcmiUnavailable:
        npus, info, warnings = npu_smi.read_ascend(host)
        note = "Ascend NPUs read through npu-smi: libdcmi.so cannot be loaded (no NPU ids)"
        return npus, info, [note, *warnings]


def read_inventory(
    host_root: str | os.PathLike[str] = "/",
    *,
    allow_partial: bool = False,
    vendors: tuple[str, ...] = (),
) -> Inventory:
    """Every asked-for (default: every present) vendor's devices in one validated Inventory."""
    from slurmgpu.sources import amdsmi, nvml

    wanted = vendors or VENDORS
    why_not: list[str] = []
    inv: Inventory | None = None
    if VENDOR_NVIDIA in wanted:
        try:
            inv = nvml.read_inventory(host_root, allow_partial=allow_partial)
        except InventoryError as exc:
            if vendors or not _absent(exc):
                raise
            why_not.append(f"NVIDIA: {exc}")
    host = inv.host if inv is not None else sysfs.read_host(host_root)
    gpus = list(inv.gpus) if inv is not None else []
    warnings = list(inv.warnings) if inv is not None else []
    drivers = []
    readers = {
        VENDOR_AMD: lambda: amdsmi.read_amd(host, allow_partial=allow_partial),
        VENDOR_ASCEND: lambda: read_ascend(host, allow_partial=allow_partial),
    }
    for vendor in (VENDOR_AMD, VENDOR_ASCEND):
        if vendor not in wanted:
            continue
        try:
            found, info, notes = readers[vendor]()
        except InventoryError as exc:
            if vendors or not _absent(exc):
                raise
            why_not.append(f"{vendor}: {exc}")
            continue
        gpus.extend(found)
        drivers.append(info)
        warnings.extend(notes)
    if not gpus and inv is None:
        raise InventoryError("no accelerator found: " + "; ".join(why_not))
    if inv is None:
        inv = Inventory(
            generator=f"slurmgpu {__version__}",
            driver_version="",
            nvml_version="",
            host=dataclasses.replace(host, mig_minors={}),
            gpus=(),
        )
    merged = dataclasses.replace(
        inv, gpus=tuple(gpus), warnings=tuple(warnings), drivers=tuple(drivers)
    )
    found = validate.problems(merged)
    if found:
        more = f" (and {len(found) - 1} more problem(s))" if len(found) > 1 else ""
        raise InventoryError(f"the host reports an inventory slurmgpu refuses: {found[0]}{more}")
    return merged
