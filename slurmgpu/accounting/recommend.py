"""Partition and tier recommendations from the metrics, each with its evidence and effect.

Every rule states the numbers it used (`evidence`) and what it expects to change
(`estimated_effect`). When no rule fires, one `{"kind": "none"}` entry says which checks were
made and why none applies: an honest "no change" is an answer, not a failure.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from slurmgpu.model.catalog import GpuModel, MigProfile, model_for_type

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


def _partition_model(
    frame: pd.DataFrame, partition: str, types: Mapping[str, str]
) -> GpuModel | None:
    if partition in types:
        model = model_for_type(types[partition])
        if model:
            return model
    sel = frame["partition"].to_numpy(dtype=object, na_value="") == partition
    seen = frame["gpu_type"].to_numpy(dtype=object, na_value=None)[sel]
    for t in pd.Series(seen).dropna().value_counts().index:
        model = model_for_type(str(t))
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


def valid_layout(profile: MigProfile, count: int) -> bool:
    """`count` instances of `profile` fit one GPU (max instances, 8 memory slices, placements)."""
    return (
        count <= profile.max_instances
        and count * profile.placement_size <= 8
        and count <= len(profile.placements)
    )


def _concurrency_p95(work: pd.DataFrame, mask: np.ndarray, hours: float) -> float:
    """p95 over hourly buckets of the number of `mask` runs running at once."""
    from slurmgpu.accounting.metrics import Window, timeseries

    if not mask.any():
        return 0.0
    w = work[mask].copy()
    w["gpus"] = 1.0  # count runs, not GPUs
    s = w["start"].min()
    e = w["end"].max()
    if pd.isna(s) or pd.isna(e) or e <= s:
        return 0.0
    ts = timeseries(w, Window(np.datetime64(s, "s"), np.datetime64(e, "s")), None, "1h")
    vals = [p["gpu_hours_allocated"] for p in ts["points"]]
    return float(np.percentile(vals, 95)) if vals else 0.0


def _carve(
    frame: pd.DataFrame,
    work: pd.DataFrame,
    need: np.ndarray,
    measured: np.ndarray,
    partitions: Sequence[dict],
    types: Mapping[str, str],
    hours: float,
    checks: list[str],
) -> list[dict]:
    recs = []
    parts = frame["partition"].to_numpy(dtype=object, na_value="")
    equiv = work["gpus"].to_numpy()
    gh = work["gpu_hours"].to_numpy()
    for entry in partitions:
        p = entry["partition"]
        sel = (parts == p) & work["gpu_job"].to_numpy() & (equiv > 0)
        n = int(sel.sum())
        if n < MIN_GPU_RUNS:
            checks.append(f"{p}: {n} GPU runs, fewer than {MIN_GPU_RUNS}: no slice advice")
            continue
        whole = sel & (equiv >= 1.0) & (equiv <= 1.0) & measured
        small = whole & (need <= 0.5)
        share = small.sum() / n
        if share < MIN_SMALL_SHARE:
            checks.append(
                f"{p}: {small.sum()} of {n} GPU runs measured to fit 1/2 GPU "
                f"({share:.0%} < {MIN_SMALL_SHARE:.0%}); measured gres/gpumem for {whole.sum()}"
            )
            continue
        model = _partition_model(frame, p, types)
        tiny = small & (need <= 1 / 7)
        medium = small & ~tiny
        conc_tiny = _concurrency_p95(work, tiny, hours) * SLICE_HEADROOM
        conc_med = _concurrency_p95(work, medium, hours) * SLICE_HEADROOM
        held = float(gh[small].sum() / hours) if hours else 0.0
        evidence = {
            "partition": p,
            "gpu_runs": n,
            "runs_fitting_half_gpu": int(small.sum()),
            "runs_fitting_seventh_gpu": int(tiny.sum()),
            "share_fitting_half_gpu": float(share),
            "small_job_gpu_hours": float(gh[small].sum()),
            "p95_concurrent_small_runs": {"1/7": conc_tiny, "1/2": conc_med},
            "basis": "measured gres/gpumem",
        }
        if model is not None and model.supports_mig:
            layouts = []
            gpus = 0
            mem = frame["gpu_mem_used_mib"].to_numpy(dtype=float, na_value=np.nan)
            for cls, conc in ((tiny, conc_tiny), (medium, conc_med)):
                if conc <= 0:
                    continue
                prof = _smallest_profile(model, float(np.percentile(mem[cls], 95)))
                if prof is None:
                    continue
                per_gpu = max(c for c in range(1, 8) if valid_layout(prof, c))
                n_gpu = math.ceil(conc / per_gpu)
                layouts.append({"profile": prof.name, "per_gpu": per_gpu, "gpus": n_gpu})
                gpus += n_gpu
            cap = entry.get("capacity_gpu_hours")
            cap_gpus = cap / hours if cap and hours else None
            if cap_gpus is not None:
                gpus = min(gpus, int(cap_gpus))
            freed = held - gpus
            if gpus <= 0 or freed <= 0:
                checks.append(
                    f"{p}: small jobs hold {held:.2f} GPUs on average: carving frees none"
                )
                continue
            layout_text = " + ".join(
                f"{x['gpus']} GPU(s) as {x['per_gpu']}x {x['profile']}" for x in layouts
            )
            recs.append(
                {
                    "kind": "mig_carve",
                    "title": f"Carve {gpus} {model.short_type} GPU(s) of partition {p} into MIG",
                    "detail": (
                        f"{share:.0%} of {n} GPU runs in {p} used at most half a GPU's memory; "
                        f"layout: {layout_text} (valid {model.key} MIG profiles)."
                    ),
                    "evidence": {**evidence, "gpu_model": model.key, "layouts": layouts},
                    "estimated_effect": {
                        "gpus_carved": gpus,
                        "whole_gpus_freed_avg": float(freed),
                        "gpu_hours_freed": float(freed * hours),
                    },
                }
            )
        else:
            shards = 4 if conc_med > 0 else 7
            gpus = max(1, math.ceil((conc_tiny + conc_med) / shards))
            freed = held - gpus
            if freed <= 0:
                checks.append(f"{p}: small jobs hold {held:.2f} GPUs: sharding frees none")
                continue
            recs.append(
                {
                    "kind": "shard",
                    "title": f"Offer {gpus} GPU(s) of partition {p} as shards",
                    "detail": (
                        f"{share:.0%} of {n} GPU runs in {p} fit half a GPU and the GPU model "
                        f"({model.key if model else 'unknown'}) has no MIG: share GPUs with "
                        f"gres/shard ({shards} shards per GPU)."
                    ),
                    "evidence": evidence,
                    "estimated_effect": {
                        "gpus_shared": gpus,
                        "shards_per_gpu": shards,
                        "whole_gpus_freed_avg": float(freed),
                        "gpu_hours_freed": float(freed * hours),
                    },
                }
            )
    return recs


def _move_nodes(
    partitions: Sequence[dict], hours: float, gpus_per_node: Mapping[str, float], checks: list[str]
) -> list[dict]:
    known = [e for e in partitions if e.get("allocation_ratio") is not None]
    if len(known) < 2:
        checks.append("move_nodes: capacity known for fewer than 2 partitions")
        return []
    starved = [
        e
        for e in known
        if (e["wait_s"]["p95"] or 0) >= STARVED_WAIT_P95_S
        and e["allocation_ratio"] >= STARVED_MIN_RATIO
    ]
    idle = [
        e
        for e in known
        if e["allocation_ratio"] <= IDLE_MAX_RATIO
        and (e["wait_s"]["p95"] or 0) <= IDLE_MAX_WAIT_P95_S
    ]
    if not starved or not idle:
        checks.append(
            f"move_nodes: starved partitions {[e['partition'] for e in starved]}, "
            f"idle partitions {[e['partition'] for e in idle]}: no pair"
        )
        return []
    recs = []
    taker = max(starved, key=lambda e: e["wait_s"]["p95"] or 0)
    donor = min(idle, key=lambda e: e["allocation_ratio"])
    cap_gpus = donor["capacity_gpu_hours"] / hours
    used_gpus = donor["gpu_hours_allocated"] / hours
    spare = cap_gpus - used_gpus / DONOR_TARGET_RATIO
    per_node = gpus_per_node.get(donor["partition"], DEFAULT_GPUS_PER_NODE) or DEFAULT_GPUS_PER_NODE
    nodes = int(spare // per_node)
    if nodes < 1:
        checks.append(f"move_nodes: {donor['partition']} has {spare:.1f} spare GPUs, under a node")
        return []
    moved = nodes * per_node
    recs.append(
        {
            "kind": "move_nodes",
            "title": f"Move {nodes} node(s) ({moved:g} GPUs) from {donor['partition']} "
            f"to {taker['partition']}",
            "detail": (
                f"{taker['partition']}: p95 wait {taker['wait_s']['p95'] / 3600:.1f} h at "
                f"{taker['allocation_ratio']:.0%} allocated; {donor['partition']}: "
                f"{donor['allocation_ratio']:.0%} allocated with p95 wait "
                f"{(donor['wait_s']['p95'] or 0) / 60:.0f} min."
            ),
            "evidence": {
                "from": {k: donor[k] for k in ("partition", "allocation_ratio", "wait_s")},
                "to": {k: taker[k] for k in ("partition", "allocation_ratio", "wait_s")},
                "gpus_per_node": per_node,
            },
            "estimated_effect": {
                "gpus_moved": moved,
                "donor_allocation_ratio_after": float(used_gpus / (cap_gpus - moved))
                if cap_gpus > moved
                else None,
                "capacity_gpu_hours_added_to_taker": float(moved * hours),
            },
        }
    )
    return recs


def _top_tier(tiers: Sequence[str]) -> str | None:
    ranked = sorted((int(m.group(1)), t) for t in tiers if (m := re.match(r"^[Pp](\d+)$", t)))
    return ranked[0][1] if ranked else None


def _tiers(
    frame: pd.DataFrame, work: pd.DataFrame, by_tier: Sequence[dict], totals: dict,
    checks: list[str],
) -> list[dict]:  # fmt: skip
    recs = []
    lost = totals["gpu_hours_lost_to_preemption"]
    alloc = totals["gpu_hours_allocated"] or 0.0
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
                {
                    "kind": "tier_adjust",
                    "title": (
                        "Preemption throws away more than it buys"
                        if lost > saved
                        else f"Preemption loses {share:.0%} of allocated GPU-hours"
                    )
                    + ": add GraceTime or checkpointing, or stop preempting "
                    + ", ".join(map(str, tiers_hit)),
                    "detail": (
                        f"{int(pre.sum())} preempted runs lost {lost:.1f} GPU-hours "
                        f"({share:.1%} of allocated); the waits they saved are estimated at "
                        f"{saved:.1f} GPU-hours."
                    ),
                    "evidence": {
                        "preemptions": int(pre.sum()),
                        "gpu_hours_lost_to_preemption": lost,
                        "gpu_hours_wait_saved_estimate": saved,
                        "share_of_allocated": share,
                        "preempted_tiers": tiers_hit,
                    },
                    "estimated_effect": {"gpu_hours_recovered_max": lost},
                }
            )
        else:
            checks.append(
                f"tier_adjust: preemption lost {lost:.1f} GPU-hours, saved ~{saved:.1f}: fine"
            )
    else:
        checks.append("tier_adjust: no preemptions in the window")
    top = _top_tier([e["tier"] for e in by_tier])
    if top is not None:
        entry = next(e for e in by_tier if e["tier"] == top)
        p95 = entry["wait_s"]["p95"]
        if entry["jobs"] < MIN_TIER_JOBS:
            checks.append(f"tier_adjust: {top} has {entry['jobs']} jobs, too few to judge waits")
        elif p95 is not None and p95 > TOP_TIER_WAIT_P95_S:
            recs.append(
                {
                    "kind": "tier_adjust",
                    "title": f"{top} jobs wait too long: let {top} preempt more tiers or "
                    "reserve GPUs for it",
                    "detail": f"{top} p95 wait {p95 / 60:.0f} min over {entry['jobs']} jobs "
                    f"(target {TOP_TIER_WAIT_P95_S / 60:.0f} min).",
                    "evidence": {"tier": top, "wait_s": entry["wait_s"], "jobs": entry["jobs"]},
                    "estimated_effect": {"target_wait_p95_s": TOP_TIER_WAIT_P95_S},
                }
            )
        else:
            checks.append(f"tier_adjust: {top} p95 wait {p95} s within target")
    return recs


def recommend(
    frame: pd.DataFrame,
    work: pd.DataFrame,
    *,
    need: np.ndarray,
    measured: np.ndarray,
    by_partition: Sequence[dict],
    by_tier: Sequence[dict],
    totals: dict,
    hours: float,
    partition_types: Mapping[str, str],
    gpus_per_node: Mapping[str, float],
) -> list[dict]:
    """All recommendations, or one honest `none` entry listing the checks made."""
    checks: list[str] = []
    recs = _carve(frame, work, need, measured, by_partition, partition_types, hours, checks)
    recs += _move_nodes(by_partition, hours, gpus_per_node, checks)
    recs += _tiers(frame, work, by_tier, totals, checks)
    if not recs:
        recs.append(
            {
                "kind": "none",
                "title": "No change recommended",
                "detail": "The data does not support a partition or tier change: "
                + "; ".join(checks),
                "evidence": {"checks": checks},
                "estimated_effect": {},
            }
        )
    return recs
