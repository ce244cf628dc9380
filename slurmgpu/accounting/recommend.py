"""Partition and tier recommendations from the metrics, each with its evidence and effect.

Every rule reads the typed metrics (`GroupRow`s, `Totals`) and returns `Recommendation`s
(accounting/document.py) stating the numbers it used (`evidence`) and what it expects to change
(`estimated_effect`). When no rule fires, one `none` entry says which checks were made and why
none applies: an honest "no change" is an answer, not a failure.

MIG carving follows the GPU model's own grid (catalogue `compute_slices` and profiles): the
smallest class of small jobs is those needing at most one compute slice (1/7 of an A100/H100/
H200, 1/4 of an A30), and a layout never has more instances than the GPU has slices.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from slurmgpu.accounting.document import (
    CarveEffect,
    CarveEvidence,
    ChecksEvidence,
    GroupRow,
    Layout,
    MoveEffect,
    MoveEvidence,
    NoEffect,
    PartitionLoad,
    PreemptionEffect,
    PreemptionEvidence,
    Recommendation,
    ShardEffect,
    ShardEvidence,
    TopTierEffect,
    TopTierEvidence,
    Totals,
)
from slurmgpu.accounting.window import Window
from slurmgpu.model.catalog import COMPUTE_SLICES_PER_GPU, GpuModel, MigProfile, resolve

# Too few GPU runs make every share noise; 20 is the smallest sample where a 20% share means
# at least 4 jobs.
MIN_GPU_RUNS = 20
# Carving pays off when a sizeable share of whole-GPU runs would fit a slice: the case study
# that motivated slurmgpu found ~40%; at 20% a partition of 8-GPU nodes still frees a GPU.
MIN_SMALL_SHARE = 0.20
# Burst headroom over the p95 hourly concurrency of small jobs when sizing the slices.
SLICE_HEADROOM = 1.25
# A partition is "starved" when jobs wait long AND its GPUs are mostly allocated ...
STARVED_WAIT_P95_S = 3600.0
STARVED_MIN_RATIO = 0.80
# ... and "idle" when most GPUs sit unallocated and nobody waits.
IDLE_MAX_RATIO = 0.40
IDLE_MAX_WAIT_P95_S = 600.0
# GPUs are moved so that the donor ends at most this allocated (room for its own bursts).
DONOR_TARGET_RATIO = 0.70
# Preemption under PreemptMode=REQUEUE throws work away; flag it once the lost GPU-hours
# exceed this share of all allocated GPU-hours, or exceed the waits it saved.
PREEMPT_LOSS_SHARE = 0.05
# The top tier (P0) is for work that must start soon: a p95 wait above 15 min defeats it.
TOP_TIER_WAIT_P95_S = 900.0
# ... judged only over enough jobs for a p95 to mean something
MIN_TIER_JOBS = 5
DEFAULT_GPUS_PER_NODE = 8
# A slice must hold the p95 measured GPU memory of its jobs with 10% to spare.
MEMORY_MARGIN = 1.10
# gres/shard counts per GPU beyond 8 buy little and multiply context switching
MAX_SHARDS_PER_GPU = 8


def _partition_model(
    frame: pd.DataFrame, partition: str, types: Mapping[str, str]
) -> GpuModel | None:
    if partition in types:
        model = resolve(types[partition])
        if model:
            return model
    sel = frame["partition"].to_numpy(dtype=object, na_value="") == partition
    seen = frame["gpu_type"].to_numpy(dtype=object, na_value=None)[sel]
    for t in pd.Series(seen).dropna().value_counts().index:
        model = resolve(str(t))
        if model:
            return model
    return None


def _smallest_profile(model: GpuModel, memory_mib: float) -> MigProfile | None:
    """The profile with the fewest slices whose memory holds `memory_mib` (+ margin)."""
    fitting = [
        p
        for p in model.mig_profiles
        if not p.media_extensions and p.memory_mib >= memory_mib * MEMORY_MARGIN
    ]
    return min(fitting, key=lambda p: (p.gpu_slices, p.memory_slices), default=None)


def compute_slices(model: GpuModel | None) -> int:
    """The MIG compute slices of one GPU of `model`: 7 on A100/H100/H200/B200, 4 on A30; 7 for
    a model without MIG or unknown (only then does the smallest class not decide a profile)."""
    return (
        model.compute_slices
        if model is not None and model.compute_slices
        else (COMPUTE_SLICES_PER_GPU)
    )


def valid_layout(profile: MigProfile, count: int) -> bool:
    """`count` instances of `profile` fit one GPU (max instances, its memory-slice grid:
    8 slices on A100/H100, 4 on A30; placements)."""
    return (
        count <= profile.max_instances
        and count * profile.placement_size <= profile.memory_slices_of_gpu
        and count <= len(profile.placements)
    )


def instances_per_gpu(profile: MigProfile) -> int:
    """The most instances of `profile` one GPU holds (0: none, a catalogue inconsistency)."""
    counts = [c for c in range(1, profile.compute_slices_of_gpu + 1) if valid_layout(profile, c)]
    return max(counts, default=0)


def hourly(work: pd.DataFrame, mask: np.ndarray, window: Window, per_run: np.ndarray) -> np.ndarray:
    """Time-averaged sum of `per_run` over the `mask` runs running in each hour of the window
    (per_run = 1: runs at once; = GPUs: GPUs held)."""
    from slurmgpu.accounting.metrics import timeseries

    w = pd.DataFrame(
        {
            "start": work["start"].to_numpy()[mask],
            "end": work["end"].to_numpy()[mask],
            "gpus": per_run[mask],
        }
    )
    ts = timeseries(w, window, None, "1h")
    hours = np.array([p.gpu_hours_allocated for p in ts.points], dtype=float)
    return hours  # GPU-hours in a 1 h bucket = mean concurrency in that hour


def _concurrency_effect(
    held: np.ndarray, needed_slices: list[tuple[np.ndarray, int]], gpus: int
) -> dict:
    """Effect of dedicating `gpus` GPUs to slices, hour by hour.

    held: whole GPUs the small runs held each hour; needed_slices: (slices needed each hour,
    slices per GPU) per profile. Freed each hour = held - carved GPUs; the slices would not
    have sufficed in hours where the GPUs their profiles need exceed the carved ones.
    """
    if not len(held):
        return {"whole_gpus_freed_p50": 0.0, "hours_slices_short": 0, "hours": 0}
    need_gpus = np.zeros(len(held))
    for slices, per_gpu in needed_slices:
        need_gpus += np.ceil(np.round(slices, 6) / per_gpu)
    freed = held - gpus
    return {
        "whole_gpus_freed_p50": float(np.percentile(freed, 50)),
        "hours_slices_short": int((need_gpus > gpus).sum()),
        "hours": len(held),
    }


def _carve(
    frame: pd.DataFrame,
    work: pd.DataFrame,
    need: np.ndarray,
    need_basis: np.ndarray,
    partitions: Sequence[GroupRow],
    types: Mapping[str, str],
    window: Window,
    checks: list[str],
) -> list[Recommendation]:
    recs = []
    parts = frame["partition"].to_numpy(dtype=object, na_value="")
    equiv = work["gpus"].to_numpy()
    gh = work["gpu_hours"].to_numpy()
    mem = work["mem_used_mib"].to_numpy()
    measured = need_basis == 0
    ones = np.ones(len(work))
    for entry in partitions:
        p = entry.name
        sel = (parts == p) & work["gpu_job"].to_numpy() & (equiv > 0)
        known = sel & ~np.isnan(need)
        n, n_known = int(sel.sum()), int(known.sum())
        if n_known < MIN_GPU_RUNS:
            checks.append(
                f"{p}: need known for {n_known} of {n} GPU runs, fewer than {MIN_GPU_RUNS}: "
                "no slice advice"
            )
            continue
        whole = sel & (equiv == 1.0) & measured
        small = whole & (need <= 0.5)
        share = small.sum() / n_known
        if share < MIN_SMALL_SHARE:
            checks.append(
                f"{p}: {small.sum()} of {n_known} GPU runs with a known need fit 1/2 GPU "
                f"({share:.1%}, below the {MIN_SMALL_SHARE:.0%} threshold)"
            )
            continue
        model = _partition_model(frame, p, types)
        slices = compute_slices(model)
        one_slice = f"1/{slices}"
        tiny = small & (need <= 1 / slices + 1e-9)
        medium = small & ~tiny
        held = hourly(work, small, window, equiv)
        conc = {
            one_slice: hourly(work, tiny, window, ones),
            "1/2": hourly(work, medium, window, ones),
        }
        evidence = {  # the SliceEvidence fields both rules share
            "partition": p,
            "gpu_runs": n,
            "gpu_runs_need_known": n_known,
            "runs_fitting_half_gpu": int(small.sum()),
            "runs_fitting_one_slice": int(tiny.sum()),
            "one_slice": one_slice,
            "share_fitting_half_gpu": float(share),
            "small_job_gpu_hours": float(gh[small].sum()),
            "p95_concurrent_small_runs": {
                k: float(np.percentile(v, 95)) if len(v) else 0.0 for k, v in conc.items()
            },
            "basis": "measured GPU memory",
        }
        if model is not None and model.supports_mig:
            rec = _mig_rec(p, model, entry, window, tiny, medium, mem, conc, held, evidence, checks)
        else:
            gpu_mem = work["gpu_mem_mib"].to_numpy()[sel]
            rec = _shard_rec(p, model, gpu_mem, small, mem, conc, held, evidence, checks)
        if rec:
            recs.append(rec)
    return recs


def _mig_rec(p, model, entry, window, tiny, medium, mem, conc, held, evidence, checks):
    layouts, slices, gpus = [], [], 0
    for cls, key in ((tiny, f"1/{compute_slices(model)}"), (medium, "1/2")):
        if not cls.any():
            continue
        prof = _smallest_profile(model, float(np.percentile(mem[cls], 95)))
        if prof is None:
            continue
        per_gpu = instances_per_gpu(prof)
        if per_gpu <= 0:
            continue
        peak = float(np.percentile(conc[key], 95)) * SLICE_HEADROOM if len(conc[key]) else 0.0
        n_gpu = math.ceil(round(peak, 6) / per_gpu)
        if n_gpu <= 0:
            continue
        layouts.append(Layout(profile=prof.name, per_gpu=per_gpu, gpus=n_gpu))
        slices.append((conc[key], per_gpu))
        gpus += n_gpu
    cap = entry.capacity_gpu_hours
    if cap and window.hours:
        gpus = min(gpus, int(cap / window.hours))
    effect = _concurrency_effect(held, slices, gpus)
    if gpus <= 0 or effect["whole_gpus_freed_p50"] <= 0:
        checks.append(
            f"{p}: small jobs held {np.percentile(held, 50) if len(held) else 0:.1f} whole "
            f"GPUs in a median hour: carving {gpus} frees none"
        )
        return None
    layout_text = " + ".join(f"{x.gpus} GPU(s) as {x.per_gpu}x {x.profile}" for x in layouts)
    return Recommendation(
        kind="mig_carve",
        title=f"Carve {gpus} {model.short_type} GPU(s) of partition {p} into MIG",
        detail=(
            f"{evidence['share_fitting_half_gpu']:.0%} of {evidence['gpu_runs_need_known']} GPU "
            f"runs in {p} with a known need used at most half a GPU's memory; layout: "
            f"{layout_text} (valid {model.key} MIG profiles). Hour by hour, the small jobs "
            f"would have freed {effect['whole_gpus_freed_p50']:.1f} whole GPUs in a median "
            f"hour; the slices would not have sufficed in {effect['hours_slices_short']} of "
            f"{effect['hours']} hours."
        ),
        evidence=CarveEvidence(**evidence, gpu_model=model.key, layouts=tuple(layouts)),
        estimated_effect=CarveEffect(gpus_carved=gpus, **effect),
        **_changes(_replay_changes().Carve(p, x.gpus, ((x.profile, x.per_gpu),)) for x in layouts),
    )


def _shard_rec(p, model, gpu_mem, small, mem, conc, held, evidence, checks):
    sizes = gpu_mem[~np.isnan(gpu_mem)]
    if not len(sizes):
        checks.append(f"{p}: GPU memory size unknown: no shard advice (give the GPU's size)")
        return None
    size = float(np.min(sizes))
    p95 = float(np.percentile(mem[small], 95))
    # a shard has no memory limit of its own: N shards per GPU only fit when N jobs at their
    # p95 memory (+ margin) fit the GPU together
    shards = min(MAX_SHARDS_PER_GPU, int(size // (p95 * MEMORY_MARGIN))) if p95 > 0 else 0
    if shards < 2:
        checks.append(
            f"{p}: small jobs' p95 GPU memory {p95:.0f} MiB (+{MEMORY_MARGIN - 1:.0%}) leaves "
            f"room for {shards} per {size:.0f} MiB GPU: sharing would overcommit memory"
        )
        return None
    one_slice = next(k for k in conc if k != "1/2")
    total = conc[one_slice] + conc["1/2"] if len(conc[one_slice]) else conc["1/2"]
    peak = float(np.percentile(total, 95)) * SLICE_HEADROOM if len(total) else 0.0
    gpus = max(1, math.ceil(round(peak, 6) / shards))
    effect = _concurrency_effect(held, [(total, shards)], gpus)
    if effect["whole_gpus_freed_p50"] <= 0:
        checks.append(f"{p}: sharing {gpus} GPU(s) frees none in a median hour")
        return None
    return Recommendation(
        kind="shard",
        title=f"Offer {gpus} GPU(s) of partition {p} as shards",
        detail=(
            f"{evidence['share_fitting_half_gpu']:.0%} of {evidence['gpu_runs_need_known']} GPU "
            f"runs in {p} with a known need fit half a GPU and the GPU model "
            f"({model.key if model else 'not in the catalogue'}) has no MIG: share GPUs with "
            f"gres/shard ({shards} shards per GPU, each holding the p95 {p95:.0f} MiB + "
            f"{MEMORY_MARGIN - 1:.0%})."
        ),
        evidence=ShardEvidence(**evidence, gpu_memory_mib=size, p95_gpu_memory_mib=p95),
        estimated_effect=ShardEffect(gpus_shared=gpus, shards_per_gpu=shards, **effect),
        **_changes([_replay_changes().Shard(p, gpus, shards)]),
    )


# A node of another GPU type goes into a starved partition only when most of its GPU runs
# name no type (`gres/gpu:N`): typed requests (`gres/gpu:v100m32:N`) cannot use it.
MOVE_OTHER_TYPE_MAX_TYPED_SHARE = 0.5


@dataclass(frozen=True)
class PartitionGpus:
    """What GPUs a partition has, as far as a node move must know."""

    model: GpuModel | None  # the partition's GPU model (given type, else its runs' types)
    typed_share: float  # share of its GPU runs asking a typed GRES (gres/gpu:TYPE)
    typed_name: str | None  # the typed name its runs ask most


def partition_gpus(
    frame: pd.DataFrame, partitions: Sequence[GroupRow], types: Mapping[str, str]
) -> dict[str, PartitionGpus]:
    """`PartitionGpus` of each partition."""
    parts = frame["partition"].to_numpy(dtype=object, na_value="")
    typed = frame["gpu_type"].to_numpy(dtype=object, na_value=None)
    gpu = np.nan_to_num(frame["gpu_count"].to_numpy(dtype=float, na_value=np.nan)) > 0
    out = {}
    for entry in partitions:
        sel = gpu & (parts == entry.name)
        names = pd.Series(typed[sel]).dropna()
        out[entry.name] = PartitionGpus(
            model=_partition_model(frame, entry.name, types),
            typed_share=float(len(names) / sel.sum()) if sel.any() else 0.0,
            typed_name=str(names.value_counts().index[0]) if len(names) else None,
        )
    return out


def _move_nodes(
    partitions: Sequence[GroupRow],
    hours: float,
    gpus_per_node: Mapping[str, float],
    checks: list[str],
    cluster_of: Mapping[str, str] | None = None,
    gpus_of: Mapping[str, PartitionGpus] | None = None,
) -> list[Recommendation]:
    """Graded node moves: whole nodes from the most idle partitions to the most starved.

    Donors rank by idle GPU-hours (capacity - allocated), takers by unmet demand (pending
    GPU-hours); nodes move while the donor stays at or under DONOR_TARGET_RATIO allocated.
    With several clusters (`cluster_of`: partition label -> cluster), a node never moves
    across clusters: the donor must be in the taker's cluster. A donor of the taker's GPU
    model comes first (`gpus_of`); one of another model only when most of the taker's GPU
    runs name no type, and the title says which jobs will not use its nodes.
    """
    several = cluster_of is not None and len(set(cluster_of.values())) > 1
    crossed: set[tuple[str, str]] = set()
    gpus_of = gpus_of or {}
    mistyped: set[tuple[str, str]] = set()

    def model_key(name: str) -> str | None:
        g = gpus_of.get(name)
        return g.model.key if g is not None and g.model is not None else None

    known = [e for e in partitions if e.allocation_ratio is not None]
    if len(known) < 2:
        checks.append("move_nodes: capacity known for fewer than 2 partitions")
        return []
    takers = sorted(
        (e for e in known if e.pending_gpu_hours > 0 and (e.wait_s.p95 or 0) >= STARVED_WAIT_P95_S),
        key=lambda e: -e.pending_gpu_hours,
    )
    donors = sorted(
        (
            e
            for e in known
            if e.allocation_ratio < DONOR_TARGET_RATIO and (e.wait_s.p95 or 0) < STARVED_WAIT_P95_S
        ),
        key=lambda e: -(e.idle_gpu_hours or 0),
    )
    if not takers or not donors:
        checks.append(
            f"move_nodes: partitions with unmet demand and p95 wait >= "
            f"{_dur(STARVED_WAIT_P95_S)}: {[e.name for e in takers]}; partitions under "
            f"{DONOR_TARGET_RATIO:.0%} allocated without long waits: "
            f"{[e.name for e in donors]}: no pair"
        )
        return []
    recs = []
    spare = {}
    for d in donors:
        cap_gpus, used = d.capacity_gpu_hours / hours, d.gpu_hours_allocated / hours
        spare[d.name] = cap_gpus - used / DONOR_TARGET_RATIO
    for taker in takers:
        demand_gpus = taker.pending_gpu_hours / hours  # GPUs that would have served it
        want = model_key(taker.name)
        # same GPU model first, then unknown, then other models (each by idle GPU-hours)
        ranked = sorted(
            donors,
            key=lambda d: 0 if model_key(d.name) == want else 1 if model_key(d.name) is None else 2,
        )
        for donor in ranked:
            name = donor.name
            if several and cluster_of.get(name) != cluster_of.get(taker.name):
                crossed.add((name, taker.name))
                continue
            other = want is not None and model_key(name) not in (None, want)
            if other and gpus_of[taker.name].typed_share > MOVE_OTHER_TYPE_MAX_TYPED_SHARE:
                mistyped.add((name, taker.name))
                continue
            per_node = gpus_per_node.get(name) or DEFAULT_GPUS_PER_NODE
            nodes = int(min(spare[name], math.ceil(demand_gpus / per_node) * per_node) // per_node)
            if nodes < 1:
                continue
            moved = nodes * per_node
            spare[name] -= moved
            demand_gpus -= moved
            cap_gpus = donor.capacity_gpu_hours / hours
            used = donor.gpu_hours_allocated / hours
            served = min(moved * hours, taker.pending_gpu_hours)
            caveat = ""
            if other:
                t = gpus_of[taker.name]
                caveat = (
                    f"{gpus_of[name].model.key.upper()} nodes into a {t.model.key.upper()} "
                    "partition"
                    + (
                        f": jobs asking gres/gpu:{t.typed_name} will not use them"
                        if t.typed_name
                        else ""
                    )
                )
            recs.append(
                Recommendation(
                    kind="move_nodes",
                    title=f"Move {nodes} node(s) ({moved:g} GPUs) from {name} to {taker.name}"
                    + (f" ({caveat})" if caveat else ""),
                    detail=(
                        (
                            f"{caveat} ({gpus_of[taker.name].typed_share:.0%} of "
                            f"{taker.name}'s GPU runs ask a typed GPU). "
                            if caveat
                            else ""
                        )
                        + f"{taker.name}: p95 wait {_dur(taker.wait_s.p95)} at "
                        f"{taker.allocation_ratio:.0%} allocated, "
                        f"{taker.pending_gpu_hours:.0f} GPU-hours of demand waited; "
                        f"{name}: {donor.allocation_ratio:.0%} allocated "
                        f"({donor.idle_gpu_hours:.0f} idle GPU-hours), p95 wait "
                        f"{_dur(donor.wait_s.p95 or 0)}. After the move {name} would be "
                        f"{used / (cap_gpus - moved):.0%} allocated; up to {served:.0f} "
                        "GPU-hours of the waiting demand could have been served."
                    ),
                    evidence=MoveEvidence(
                        donor=_load(donor), taker=_load(taker), gpus_per_node=per_node
                    ),
                    estimated_effect=MoveEffect(
                        gpus_moved=moved,
                        donor_allocation_ratio_after=float(used / (cap_gpus - moved)),
                        capacity_gpu_hours_added_to_taker=float(moved * hours),
                        demand_gpu_hours_served=float(served),
                    ),
                    **_changes([_replay_changes().Move(name, taker.name, int(moved))]),
                )
            )
            if demand_gpus <= 0:
                break
    if not recs:
        checks.append("move_nodes: no donor has a whole node to spare under its target ratio")
    if crossed:
        pairs = ", ".join(f"{d} -> {t}" for d, t in sorted(crossed))
        checks.append(f"move_nodes: no move across clusters ({pairs})")
    if mistyped:
        pairs = ", ".join(f"{d} -> {t}" for d, t in sorted(mistyped))
        checks.append(
            f"move_nodes: no move of another GPU model into a partition where more than "
            f"{MOVE_OTHER_TYPE_MAX_TYPED_SHARE:.0%} of the GPU runs ask a typed GPU ({pairs})"
        )
    return recs


def _load(row: GroupRow) -> PartitionLoad:
    """The numbers of a partition a node move rests on."""
    return PartitionLoad(
        partition=row.name,
        allocation_ratio=row.allocation_ratio,
        wait_s=row.wait_s,
        idle_gpu_hours=row.idle_gpu_hours,
        pending_gpu_hours=row.pending_gpu_hours,
    )


SUGGESTED_GRACE_S = 300  # time a preempted job gets to checkpoint, suggested in `change`


def _replay_changes():
    """The replay's change grammar (one grammar for `analyze` and `replay --what-if`)."""
    from slurmgpu.model import changes

    return changes


def _changes(items) -> dict:
    """`change` (the first, a string `replay --what-if` takes) and `changes` (all of them), as
    `Recommendation` keywords: a recommendation made of several changes (a carve in two
    layouts) lists each."""
    texts = tuple(_replay_changes().format_change(c) for c in items)
    return {"change": texts[0] if texts else None, "changes": texts}


def _preempt_all_changes(frame: pd.DataFrame, top: str) -> dict:
    """The top tier's QOS preempting every other QOS seen in the window."""
    qos = frame["qos"].to_numpy(dtype=object, na_value="")
    tier = frame["tier"].to_numpy(dtype=object, na_value="")
    mine = sorted(set(qos[tier == top]) - {""})
    others = tuple(sorted(set(qos[tier != top]) - {""} - set(mine)))
    if not others:
        return _changes([])
    return _changes(_replay_changes().TierChange(q, preempts=others) for q in mine)


def _dur(seconds: float) -> str:
    """A rounded duration: 45 s, 12 min, 6.2 h, 3.1 d."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def _top_tier(tiers: Sequence[str]) -> str | None:
    ranked = sorted((int(m.group(1)), t) for t in tiers if (m := re.match(r"^[Pp](\d+)$", t)))
    return ranked[0][1] if ranked else None


def _tiers(
    frame: pd.DataFrame, work: pd.DataFrame, by_tier: Sequence[GroupRow], totals: Totals,
    checks: list[str],
) -> list[Recommendation]:  # fmt: skip
    recs = []
    lost = totals.gpu_hours_lost_to_preemption
    alloc = totals.gpu_hours_allocated or 0.0
    pre = work["preempted"].to_numpy()
    if pre.any():
        # What preemption saved: the preemptors would otherwise have waited for the victims to
        # finish, i.e. the victims' remaining time limit (or, without one, as long again as
        # they had run), on as many GPUs.
        limit = frame["timelimit_s"].to_numpy(dtype=float, na_value=np.nan)[pre]
        ran = frame["elapsed_s"].to_numpy(dtype=float, na_value=np.nan)[pre]
        remaining = np.where(np.isnan(limit), ran, np.maximum(limit - ran, 0))
        saved = float((np.nan_to_num(remaining) * work["gpus"].to_numpy()[pre]).sum() / 3600)
        share = lost / alloc if alloc else 0.0
        if lost > saved or share >= PREEMPT_LOSS_SHARE:
            tiers_hit = sorted(set(frame["tier"].to_numpy(dtype=object, na_value="")[pre]))
            recs.append(
                Recommendation(
                    kind="tier_adjust",
                    title=(
                        "Preemption throws away more than it buys"
                        if lost > saved
                        else f"Preemption loses {share:.0%} of allocated GPU-hours"
                    )
                    + ": add GraceTime or checkpointing, or stop preempting "
                    + ", ".join(map(str, tiers_hit)),
                    detail=(
                        f"{int(pre.sum())} preempted runs lost {lost:.1f} GPU-hours "
                        f"({share:.1%} of allocated); the waits they saved are estimated at "
                        f"{saved:.1f} GPU-hours."
                    ),
                    evidence=PreemptionEvidence(
                        preemptions=int(pre.sum()),
                        gpu_hours_lost_to_preemption=lost,
                        gpu_hours_wait_saved_estimate=saved,
                        share_of_allocated=share,
                        preempted_tiers=tuple(tiers_hit),
                    ),
                    estimated_effect=PreemptionEffect(gpu_hours_recovered_max=lost),
                    **_changes(
                        _replay_changes().TierChange(q, grace_s=SUGGESTED_GRACE_S)
                        for q in sorted(
                            set(frame["qos"].to_numpy(dtype=object, na_value="")[pre]) - {""}
                        )
                    ),
                )
            )
        else:
            checks.append(
                f"tier_adjust: preemption lost {lost:.1f} GPU-hours, saved ~{saved:.1f}: fine"
            )
    else:
        checks.append("tier_adjust: no preemptions in the window")
    top = _top_tier([e.name for e in by_tier])
    if top is not None:
        entry = next(e for e in by_tier if e.name == top)
        p95 = entry.wait_s.p95
        if entry.jobs < MIN_TIER_JOBS:
            checks.append(f"tier_adjust: {top} has {entry.jobs} jobs, too few to judge waits")
        elif p95 is not None and p95 > TOP_TIER_WAIT_P95_S:
            recs.append(
                Recommendation(
                    kind="tier_adjust",
                    title=f"{top} jobs wait too long: let {top} preempt more tiers or "
                    "reserve GPUs for it",
                    detail=f"{top} p95 wait {p95 / 60:.0f} min over {entry.jobs} jobs "
                    f"(target {TOP_TIER_WAIT_P95_S / 60:.0f} min).",
                    evidence=TopTierEvidence(tier=top, wait_s=entry.wait_s, jobs=entry.jobs),
                    estimated_effect=TopTierEffect(target_wait_p95_s=TOP_TIER_WAIT_P95_S),
                    **_preempt_all_changes(frame, top),
                )
            )
        else:
            checks.append(f"tier_adjust: {top} p95 wait {p95} s within target")
    return recs


def recommend(
    frame: pd.DataFrame,
    work: pd.DataFrame,
    *,
    need: np.ndarray,
    need_basis: np.ndarray,
    by_partition: Sequence[GroupRow],
    by_tier: Sequence[GroupRow],
    totals: Totals,
    window: Window,
    partition_types: Mapping[str, str],
    gpus_per_node: Mapping[str, float],
    cluster_of: Mapping[str, str] | None = None,
) -> list[Recommendation]:
    """All recommendations, or one honest `none` entry listing the checks made."""
    checks: list[str] = []
    recs = _carve(frame, work, need, need_basis, by_partition, partition_types, window, checks)
    gpus_of = partition_gpus(frame, by_partition, partition_types)
    recs += _move_nodes(by_partition, window.hours, gpus_per_node, checks, cluster_of, gpus_of)
    recs += _tiers(frame, work, by_tier, totals, checks)
    if not recs:
        recs.append(
            Recommendation(
                kind="none",
                title="No change recommended",
                detail="The data does not support a partition or tier change: " + "; ".join(checks),
                evidence=ChecksEvidence(checks=tuple(checks)),
                estimated_effect=NoEffect(),
                change=None,
                changes=(),
            )
        )
    return recs
