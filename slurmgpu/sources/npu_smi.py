"""Ascend NPUs from `npu-smi info` text: the fallback when libdcmi.so cannot be loaded.

Two commands: `npu-smi info` (per NPU: id, chip name, health, bus id, HBM total) and
`npu-smi info -t topo` (the pairwise matrix: `HCCS` marks an HCCS link; its last column is
the NPU's CPU affinity). The device table has two rows per chip:

    | 0     910B3               | OK            | 93.4        35          0    / 0       |
    | 0                         | 0000:C1:00.0  | 0           0    / 0    3300 / 65536   |

Newer npu-smi prints `Chip  Phy-ID` in the second header row and the physical id (the N of
/dev/davinciN) after the chip number; older ones print only the chip, and then the NPU id is
the physical id (as on Atlas 800T A2, where both run 0-7) and the caller checks it against
the /dev/davinciN nodes. `npu-smi` prints no device id, so these NPUs have an empty `uuid`.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass

from slurmgpu.errors import InventoryError
from slurmgpu.model.gpu import LINK_HCCS, VENDOR_ASCEND, Gpu, PeerLink
from slurmgpu.model.host import Host
from slurmgpu.model.inventory import VendorDriver
from slurmgpu.sources.nvml import normalize_pci_bus_id
from slurmgpu.util.hostlist import parse_id_list
from slurmgpu.util.proc import run

_VERSION = re.compile(r"npu-smi\s+(\S+)\s+Version:\s*(\S+)")
_ROW1 = re.compile(r"^\|\s*(\d+)\s+(\S+)\s*\|\s*(\S+)\s*\|")
_ROW2 = re.compile(
    r"^\|\s*(\d+)(?:\s+(\d+))?\s*\|\s*([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*\|"
    r"(.*)\|\s*$"
)
_HBM = re.compile(r"(\d+)\s*/\s*(\d+)\s*$")


@dataclass(frozen=True)
class NpuRow:
    npu_id: int
    chip: str
    health: str
    chip_id: int
    phy_id: int | None
    bus_id: str
    hbm_total_mib: int | None


def parse_info(text: str) -> tuple[str, list[NpuRow]]:
    """(npu-smi version, one row per chip) from `npu-smi info`; InventoryError if unreadable."""
    m = _VERSION.search(text)
    version = m.group(2) if m else ""
    rows: list[NpuRow] = []
    pending: tuple[int, str, str] | None = None
    for line in text.splitlines():
        if line.startswith("| NPU ") and "Process" in line:
            break  # the process table follows
        first = _ROW1.match(line)
        second = _ROW2.match(line)
        if second and pending is not None:
            hbm = _HBM.search(second.group(4).strip())
            phy = second.group(2)
            rows.append(
                NpuRow(
                    npu_id=pending[0],
                    chip=pending[1],
                    health=pending[2],
                    chip_id=int(second.group(1)),
                    phy_id=int(phy) if phy is not None else None,
                    bus_id=normalize_pci_bus_id(second.group(3)),
                    hbm_total_mib=int(hbm.group(2)) if hbm else None,
                )
            )
            pending = None
        elif first and not line.startswith("| NPU "):
            pending = (int(first.group(1)), first.group(2), first.group(3))
    if not rows:
        raise InventoryError("npu-smi info printed no NPU table slurmgpu can read")
    return version, rows


def parse_topo(text: str) -> dict[str, tuple[list[str], tuple[int, ...]]]:
    """`NPU0` -> (the connection to each NPU in header order, its CPU affinity)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return {}
    header = lines[0].split()
    names = [h for h in header if re.fullmatch(r"NPU\d+", h)]
    out: dict[str, tuple[list[str], tuple[int, ...]]] = {}
    for line in lines[1:]:
        parts = line.split()
        if not parts or parts[0] not in names:
            continue
        cells = parts[1 : 1 + len(names)]
        rest = parts[1 + len(names) :]
        cpus: tuple[int, ...] = ()
        if rest:
            try:
                cpus = tuple(parse_id_list(rest[0]))
            except ValueError:
                cpus = ()
        out[parts[0]] = (cells, cpus)
    return out


def run_npu_smi(args: list[str], npu_smi: str = "npu-smi") -> str:
    if shutil.which(npu_smi) is None:
        raise InventoryError("npu-smi: command not found (no Ascend driver tools on PATH)")
    proc = run([npu_smi, *args], timeout=60, check=False)
    if proc.returncode != 0:
        said = (proc.stdout or proc.stderr or "").strip().splitlines()
        if any("dcmi module initialize failed" in line for line in said):
            raise InventoryError(
                f"npu-smi {' '.join(args)}: no Ascend driver loaded ({said[0].strip()})"
            )
        raise InventoryError(
            f"npu-smi {' '.join(args)} failed (exit {proc.returncode}): "
            f"{said[0] if said else 'no output'}"
        )
    return proc.stdout


def read_ascend(host: Host, *, npu_smi: str = "npu-smi"):
    """(npus, VendorDriver, warnings) from `npu-smi info` and `npu-smi info -t topo`."""
    version, rows = parse_info(run_npu_smi(["info"], npu_smi))
    topo = parse_topo(run_npu_smi(["info", "-t", "topo"], npu_smi))
    warnings = []
    names = [f"NPU{r.npu_id}" for r in rows]
    numa_of = {cpu: n.node_id for n in host.numa_nodes for cpu in n.cpus}
    npus = []
    for row in rows:
        cells, cpus = topo.get(f"NPU{row.npu_id}", ([], ()))
        links = tuple(
            PeerLink(other.bus_id, LINK_HCCS, 1)
            for other, cell in zip(rows, cells, strict=False)
            if other is not row and cell == "HCCS"
        )
        nodes = {numa_of[c] for c in cpus if c in numa_of}
        if row.health != "OK":
            warnings.append(f"NPU {row.npu_id} ({row.bus_id}): npu-smi health {row.health}")
        npus.append(
            Gpu(
                index=row.npu_id,
                minor_number=row.phy_id if row.phy_id is not None else row.npu_id,
                uuid="",
                name=row.chip if row.chip.startswith("Ascend") else f"Ascend{row.chip}",
                memory_mib=row.hbm_total_mib or 1,
                pci_bus_id=row.bus_id,
                numa_node=nodes.pop() if len(nodes) == 1 else None,
                cpu_affinity=cpus,
                vendor=VENDOR_ASCEND,
                peer_links=links,
            )
        )
    if not topo:
        warnings.append("npu-smi info -t topo printed no matrix: no HCCS links, no CPU affinity")
    del names
    info = VendorDriver(
        vendor=VENDOR_ASCEND,
        driver_version=version or "unknown",
        library="npu-smi",
        library_version=version or "unknown",
        device_count=len(rows),
    )
    return npus, info, warnings
