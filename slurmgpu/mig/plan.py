"""Choose per-GPU MIG layouts for a set of nodes that meet a demand with few GPUs carved.

Greedy over the catalogue's maximal layouts (no slice left idle by choice): each round carves
the GPU + layout that serves the most still-unmet compute slices (ties: the GPU's current
layout, then a GPU already in MIG mode, then the highest index, so low indices stay whole).
It stops when the demand is met or no GPU may be carved (`keep_whole` per node). The plan
states a lower bound (total slices / slices per GPU) beside what the greedy used, so a gap is
visible rather than hidden.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from slurmgpu.errors import UsageError
from slurmgpu.mig.demand import Demand, profile_for
from slurmgpu.mig.layout import Layout, maximal_layouts, place
from slurmgpu.model.catalog import GpuModel, MigProfile
from slurmgpu.model.gpu import Gpu
from slurmgpu.model.inventory import Inventory


@dataclass(frozen=True)
class GpuPlan:
    """One GPU's planned state: a MIG layout, or whole (`layout` None, MIG disabled)."""

    gpu: Gpu
    model: GpuModel | None
    layout: Layout | None
    current: tuple[str, ...]  # the MIG profiles it has now (empty: whole or MIG off)

    @property
    def target(self) -> tuple[str, ...]:
        if self.layout is None:
            return ()
        return tuple(sorted(p.profile.name for p in self.layout.placements))

    @property
    def changes(self) -> bool:
        return self.target != tuple(sorted(self.current)) or (
            self.layout is None and self.gpu.mig_enabled
        )


@dataclass(frozen=True)
class NodePlan:
    """A node's inventory and the plan for each of its GPUs (in NVML index order)."""

    inventory: Inventory
    gpus: tuple[GpuPlan, ...]
    config_name: str

    @property
    def node(self) -> str:
        return self.inventory.node_name

    @property
    def carved(self) -> int:
        return sum(1 for g in self.gpus if g.layout is not None)


@dataclass(frozen=True)
class MigPlan:
    """The plan for every node, what of the demand it serves, and what is still missing."""

    demand: Demand
    nodes: tuple[NodePlan, ...]
    served: tuple[tuple[str, int], ...]
    unmet: tuple[tuple[str, int], ...]
    spare: tuple[tuple[str, int], ...]  # planned instances beyond the demand
    lower_bound: int | None  # fewest GPUs any plan could carve (one GPU model only)
    keep_whole: int

    @property
    def carved(self) -> int:
        return sum(n.carved for n in self.nodes)

    @property
    def met(self) -> bool:
        return not self.unmet


_PROFILE_CACHE: dict[tuple[str, str], MigProfile | None] = {}


def _profile(model: GpuModel, item: str) -> MigProfile | None:
    key = (model.key, item)
    if key not in _PROFILE_CACHE:
        _PROFILE_CACHE[key] = profile_for(model, item)
    return _PROFILE_CACHE[key]


def _current(gpu: Gpu) -> tuple[str, ...]:
    return tuple(m.profile for m in gpu.mig_devices) if gpu.mig_enabled else ()


def _weight(model: GpuModel, layout: Layout, remaining: Counter[str]) -> tuple[int, int]:
    """(compute slices, memory slices) of still-unmet demand this layout would serve."""
    have = Counter(p.profile.name for p in layout.placements)
    compute = memory = 0
    for item, n in remaining.items():
        profile = _profile(model, item)
        if profile is None or n <= 0:
            continue
        take = min(n, have[profile.name])
        have[profile.name] -= take
        compute += take * profile.gpu_slices
        memory += take * profile.memory_slices
    return compute, memory


def _serve(model: GpuModel, layout: Layout, remaining: Counter[str]) -> Counter[str]:
    """Take what `layout` serves off `remaining`; return the layout's unused instances."""
    have = Counter(p.profile.name for p in layout.placements)
    for item in list(remaining):
        profile = _profile(model, item)
        if profile is None:
            continue
        take = min(remaining[item], have[profile.name])
        have[profile.name] -= take
        remaining[item] -= take
    return +have


def _check_items(demand: Demand, models: Sequence[GpuModel]) -> None:
    for item, _ in demand.items:
        if not any(profile_for(m, item) for m in models):
            offered = sorted({p.name for m in models for p in m.mig_profiles})
            names = ", ".join(sorted({m.key for m in models})) or "no MIG-capable GPU"
            raise UsageError(
                f"--demand {item}: no GPU in the given nodes ({names}) offers it"
                + (f"; profiles on offer: {', '.join(offered)}" if offered else "")
            )


def _lower_bound(demand: Demand, models: Sequence[GpuModel]) -> int | None:
    if len({m.key for m in models}) != 1:
        return None
    model = models[0]
    compute = memory = 0
    for item, n in demand.items:
        profile = profile_for(model, item)
        if profile is None:
            return None
        compute += n * profile.gpu_slices
        memory += n * profile.memory_slices
    return max(math.ceil(compute / model.compute_slices), math.ceil(memory / model.memory_slices))


def plan(
    inventories: Sequence[Inventory],
    demand: Demand,
    *,
    keep_whole: int = 0,
    config_prefix: str = "slurmgpu-",
) -> MigPlan:
    """Per-GPU layouts for these nodes meeting `demand` with the fewest GPUs carved we find."""
    if keep_whole < 0:
        raise UsageError("--keep-whole: must be 0 or more")
    if not inventories:
        raise UsageError("no nodes to plan for: give --snapshot FILE or --snapshot-dir DIR")
    names = [inv.node_name for inv in inventories]
    if len(set(names)) != len(names):
        raise UsageError(f"two snapshots describe the same node: {sorted(names)}")
    mig_models = [
        g.model for inv in inventories for g in inv.gpus if g.model and g.model.supports_mig
    ]
    _check_items(demand, mig_models)

    remaining: Counter[str] = Counter(dict(demand.items))
    chosen: dict[tuple[str, int], Layout] = {}
    spare: Counter[str] = Counter()
    allowance = {inv.node_name: max(0, len(inv.gpus) - keep_whole) for inv in inventories}
    gpus = [
        (inv, gpu, gpu.model)
        for inv in inventories
        for gpu in inv.gpus
        if gpu.model is not None and gpu.model.supports_mig
    ]
    models = {model.key: model for _, _, model in gpus}
    while +remaining:
        # the best layouts per model this round (weights do not depend on which GPU)
        top: dict[str, tuple[tuple[int, int], list[Layout]]] = {}
        for key, model in models.items():
            for layout in maximal_layouts(key):
                weight = _weight(model, layout, remaining)
                if weight[0] > 0 and (key not in top or weight > top[key][0]):
                    top[key] = (weight, [layout])
                elif key in top and weight == top[key][0]:
                    top[key][1].append(layout)
        best = None
        for inv, gpu, model in gpus:
            if allowance[inv.node_name] <= 0 or (inv.node_name, gpu.index) in chosen:
                continue
            if model.key not in top:
                continue
            weight, candidates = top[model.key]
            current = sorted(_current(gpu))
            for layout in candidates:
                same = sorted(p.profile.name for p in layout.placements) == current
                rank = (weight, same, gpu.mig_enabled, gpu.index)
                if best is None or rank > best[0]:
                    best = (rank, inv, gpu, model, layout)
        if best is None:
            break
        _, inv, gpu, model, layout = best
        # keep the GPU's own placements when the layout is what it already has
        if sorted(_current(gpu)) == sorted(p.profile.name for p in layout.placements):
            layout = place(model, Counter(_current(gpu))) or layout
        chosen[(inv.node_name, gpu.index)] = layout
        allowance[inv.node_name] -= 1
        spare += _serve(model, layout, remaining)

    nodes = tuple(
        NodePlan(
            inventory=inv,
            gpus=tuple(
                GpuPlan(g, g.model, chosen.get((inv.node_name, g.index)), _current(g))
                for g in inv.gpus
            ),
            config_name=f"{config_prefix}{inv.node_name}",
        )
        for inv in inventories
    )
    served = tuple((item, n - remaining[item]) for item, n in demand.items)
    return MigPlan(
        demand=demand,
        nodes=nodes,
        served=served,
        unmet=tuple((item, remaining[item]) for item, _ in demand.items if remaining[item] > 0),
        spare=tuple(sorted(spare.items())),
        lower_bound=_lower_bound(demand, mig_models),
        keep_whole=keep_whole,
    )


def plan_nodes(
    *,
    snapshots: Sequence[str] = (),
    snapshot_dir: str | None = None,
    demand_items: Sequence[str] = (),
    sacct_files: Sequence[str] = (),
    gpu_model: str | None = None,
    keep_whole: int = 0,
    config_prefix: str = "slurmgpu-",
) -> MigPlan:
    """`slurmgpu mig plan`: load the nodes and the demand (given or measured), then `plan`."""
    from slurmgpu.mig.demand import demand_from_sacct, parse_demand
    from slurmgpu.mig.inputs import load_nodes
    from slurmgpu.model.catalog import resolve

    inventories = load_nodes(snapshots, snapshot_dir)
    if bool(demand_items) == bool(sacct_files):
        raise UsageError("give the demand either as --demand PROFILE=COUNT or as --sacct-file")
    if demand_items:
        demand = parse_demand(demand_items)
    else:
        if gpu_model is not None:
            model = resolve(gpu_model)
            if model is None or not model.supports_mig:
                raise UsageError(f"--gpu-model {gpu_model}: not a MIG-capable GPU in the catalogue")
        else:
            found = [
                g.model for inv in inventories for g in inv.gpus if g.model and g.model.supports_mig
            ]
            if not found:
                raise UsageError("no MIG-capable GPU in the given nodes")
            model = found[0]
        demand = demand_from_sacct(sacct_files, model)
        if not demand.items:
            raise UsageError(
                f"--sacct-file: no run in {', '.join(sacct_files)} fits a {model.key} MIG slice"
            )
    return plan(inventories, demand, keep_whole=keep_whole, config_prefix=config_prefix)
