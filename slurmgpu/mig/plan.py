"""Choose per-GPU MIG layouts for a set of nodes that meet a demand with few GPUs carved.

Greedy over the catalogue's maximal layouts (no slice left idle by choice): each round carves
the GPU + layout that serves the most still-unmet compute slices (ties: the GPU's current
layout, then a GPU already in MIG mode, then the highest index, so low indices stay whole).
It stops when the demand is met or no GPU may be carved (`keep_whole` per node). With one GPU
model, a bounded exact search then looks for the demand in fewer layouts. The plan states a
lower bound beside the GPUs carved, so a gap is visible rather than hidden.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from slurmgpu.errors import UsageError
from slurmgpu.mig.demand import Demand, profile_for
from slurmgpu.model.catalog import GpuModel, MigProfile
from slurmgpu.model.gpu import VENDOR_NVIDIA, Gpu
from slurmgpu.model.inventory import Inventory
from slurmgpu.model.mig_layout import Layout, maximal_layouts, place


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


def _needs(model: GpuModel, items: Sequence[tuple[str, int]]) -> dict[str, int] | None:
    """{profile name: instances} a demand asks of `model` (None: an item it cannot serve)."""
    need: dict[str, int] = {}
    for item, n in items:
        profile = _profile(model, item)
        if profile is None:
            return None
        need[profile.name] = need.get(profile.name, 0) + n
    return need


def _bound(model: GpuModel, need: dict[str, int]) -> int:
    """GPUs no layout set can go below: compute and memory slices, per-profile maxima, and
    one GPU per instance bigger than half a GPU."""
    profiles = {name: model.profile(name) for name in need}
    compute = sum(n * profiles[k].gpu_slices for k, n in need.items() if n > 0)
    memory = sum(n * profiles[k].memory_slices for k, n in need.items() if n > 0)
    per_profile = max(
        (math.ceil(n / profiles[k].max_instances) for k, n in need.items() if n > 0), default=0
    )
    # two instances of more than half the compute slices never share a GPU (4g, 7g on a 7)
    big = sum(
        n for k, n in need.items() if n > 0 and 2 * profiles[k].gpu_slices > model.compute_slices
    )
    return max(
        math.ceil(compute / model.compute_slices),
        math.ceil(memory / model.memory_slices),
        per_profile,
        big,
    )


def _lower_bound(demand: Demand, models: Sequence[GpuModel]) -> int | None:
    if len({m.key for m in models}) != 1:
        return None
    need = _needs(models[0], demand.items)
    return None if need is None else _bound(models[0], need)


def fewest_layouts(
    model: GpuModel, need: dict[str, int], most: int, budget: int = 50_000
) -> list[Layout] | None:
    """The fewest maximal layouts (at most `most`) whose instances cover `need`, by a
    bounded search (`budget` nodes); None when none is found within the bounds."""
    useful = [
        (lay, lay.counts) for lay in maximal_layouts(model.key) if set(lay.counts) & set(need)
    ]
    visited = 0

    def search(first: int, left: int, need_left: dict[str, int], chosen: list[Layout]):
        nonlocal visited
        if not any(n > 0 for n in need_left.values()):
            return list(chosen)
        if left == 0 or _bound(model, need_left) > left or visited >= budget:
            return None
        for i in range(first, len(useful)):
            visited += 1
            lay, counts = useful[i]
            if not any(need_left.get(k, 0) > 0 for k in counts):
                continue
            rest = {k: n - counts.get(k, 0) for k, n in need_left.items()}
            found = search(i, left - 1, rest, [*chosen, lay])
            if found is not None:
                return found
        return None

    for k in range(_bound(model, need), most + 1):
        found = search(0, k, dict(need), [])
        if found is not None:
            return found
        if visited >= budget:
            return None
    return None


# a mig-parted config name is `PREFIX` + the node name (a host name): a plain YAML key
CONFIG_PREFIX = re.compile(r"[A-Za-z0-9_.-]{0,64}")


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
    if not CONFIG_PREFIX.fullmatch(config_prefix):
        # the name becomes a key of the mig-parted YAML: a newline, `:` or `#` would add lines
        raise UsageError(
            f"--config-prefix {config_prefix!r}: use letters, digits and . _ - (at most 64)"
        )
    if not inventories:
        raise UsageError("no nodes to plan for: give --snapshot FILE or --snapshot-dir DIR")
    names = [inv.node_name for inv in inventories]
    if len(set(names)) != len(names):
        raise UsageError(f"two snapshots describe the same node: {sorted(names)}")
    # MIG (and mig-parted) is NVIDIA's: nodes with only AMD GPUs or Ascend NPUs are not planned
    inventories = [inv for inv in inventories if any(g.vendor == VENDOR_NVIDIA for g in inv.gpus)]
    if not inventories:
        raise UsageError("no node with an NVIDIA GPU to plan MIG layouts for")
    mig_models = [
        g.model for inv in inventories for g in inv.gpus if g.model and g.model.supports_mig
    ]
    _check_items(demand, mig_models)

    remaining: Counter[str] = Counter(dict(demand.items))
    chosen: dict[tuple[str, int], Layout] = {}
    spare: Counter[str] = Counter()
    allowance_of = {inv.node_name: max(0, len(inv.gpus) - keep_whole) for inv in inventories}
    allowance = dict(allowance_of)
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

    chosen, spare = _improve(inventories, gpus, demand, chosen, spare, remaining, allowance_of)
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


def _improve(inventories, gpus, demand, chosen, spare, remaining, allowance_of):
    """One GPU model and the greedy met the demand: look for a plan with fewer GPUs carved
    (bounded exact search) and, when found, give its layouts to GPUs as the greedy would."""
    models = {model.key: model for _, _, model in gpus}
    if +remaining or len(models) != 1 or not chosen:
        return chosen, spare
    model = next(iter(models.values()))
    need = _needs(model, demand.items)
    better = fewest_layouts(model, need, len(chosen) - 1) if need else None
    if better is None:
        return chosen, spare
    allowance = dict(allowance_of)
    placed: dict[tuple[str, int], Layout] = {}
    free = [(inv, gpu) for inv, gpu, _ in gpus]
    # a layout a GPU already has stays on that GPU; then MIG GPUs, then the highest index
    for layout in sorted(better, key=lambda lay: lay.label):
        names = sorted(p.profile.name for p in layout.placements)
        candidates = [
            (sorted(_current(gpu)) == names, gpu.mig_enabled, gpu.index, inv, gpu)
            for inv, gpu in free
            if allowance[inv.node_name] > 0 and (inv.node_name, gpu.index) not in placed
        ]
        same, _, _, inv, gpu = max(candidates, key=lambda c: c[:3])
        if same:
            layout = place(model, Counter(_current(gpu))) or layout
        placed[(inv.node_name, gpu.index)] = layout
        allowance[inv.node_name] -= 1
    left: Counter[str] = Counter(dict(demand.items))
    new_spare: Counter[str] = Counter()
    for layout in placed.values():
        new_spare += _serve(model, layout, left)
    return placed, new_spare
