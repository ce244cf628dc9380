"""The inventory a node would have after its plan is applied (for gen-gres's renderer).

GPU-instance ids follow the numbering the driver uses on A100/H100-class GPUs: a binary tree
over the memory-slice grid (the full-GPU instance is 0, the two halves 1-2, quarters 3-6,
eighths 7-14), so `gi = grid/size - 1 + start/size`. The caps minors follow the driver's
`/proc/driver/nvidia-caps/mig-minors` numbering (config 1, monitor 2, then 135 per GPU minor:
9 per GPU instance, its access then 8 compute instances) unless the snapshot recorded them.
A preview's UUIDs are placeholders: the real ones exist only after `mig apply`.
"""

from __future__ import annotations

import dataclasses

from slurmgpu.mig.plan import NodePlan
from slurmgpu.model.gpu import Gpu, MigDevice
from slurmgpu.model.inventory import Inventory
from slurmgpu.model.mig_layout import Layout, Placement
from slurmgpu.sources.nvml import mig_caps_paths

MINORS_PER_GPU = 135
MINORS_PER_GI = 9


def gi_id(grid: int, placement: Placement) -> int:
    """The GPU-instance id the driver gives an instance at this placement."""
    size = placement.profile.placement_size
    return grid // size - 1 + placement.start // size


def caps_minor(path: str) -> int | None:
    """The driver's standard minor for a mig-minors entry `gpuG/giI[/ciC]/access`."""
    parts = path.split("/")
    try:
        gpu, gi = int(parts[0][3:]), int(parts[1][2:])
        ci = int(parts[2][2:]) if len(parts) == 4 else None
    except (IndexError, ValueError):
        return None
    base = 3 + MINORS_PER_GPU * gpu + MINORS_PER_GI * gi
    return base if ci is None else base + 1 + ci


def planned_devices(inv: Inventory, gpu: Gpu, layout: Layout) -> tuple[MigDevice, ...]:
    """The MIG devices `layout` creates on `gpu` (one full compute instance each)."""
    model = gpu.model
    grid = model.memory_slices if model else 8
    out = []
    for i, pl in enumerate(layout.placements):
        gi = gi_id(grid, pl)
        gi_path, ci_path = mig_caps_paths(gpu.minor_number, gi, 0)
        out.append(
            MigDevice(
                index=i,
                gi_id=gi,
                ci_id=0,
                profile=pl.profile.name,
                memory_mib=pl.profile.memory_mib,
                uuid=f"MIG-planned-gpu{gpu.index}-gi{gi}",
                gi_access_minor=inv.host.mig_minor(gi_path) or caps_minor(gi_path),
                ci_access_minor=inv.host.mig_minor(ci_path) or caps_minor(ci_path),
            )
        )
    return tuple(out)


def planned_inventory(node: NodePlan) -> Inventory:
    """`node.inventory` with every GPU in its planned state (MIG layout or whole)."""
    inv = node.inventory
    gpus = []
    for gp in node.gpus:
        if gp.layout is None:
            gpus.append(
                dataclasses.replace(
                    gp.gpu, mig_mode_current=False, mig_mode_pending=False, mig_devices=()
                )
            )
        else:
            gpus.append(
                dataclasses.replace(
                    gp.gpu,
                    mig_mode_current=True,
                    mig_mode_pending=True,
                    mig_devices=planned_devices(inv, gp.gpu, gp.layout),
                )
            )
    return dataclasses.replace(
        inv, gpus=tuple(gpus), warnings=(), generator=f"{inv.generator} + slurmgpu mig plan"
    )
