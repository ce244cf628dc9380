"""`by_accelerator`: allocation, capacity and fit per accelerator kind across vendors.

Each run counts under its GPU GRES (`gpu:h100`, `gpu:mi300x_cpx`, a MIG profile, `shard`, or
`gpu` untyped) and under its NPU GRES (`npu:910b`) when it has one; a job on a mixed node
with both counts in both rows. Device-hours count devices as Slurm does (one MIG slice, one
AMD partition, one NPU, one shard = one device). Vendor and class come from
`slurmgpu.model.accel.classify`, the same rules `submit --accel` and job_submit.lua route by.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from slurmgpu.accounting.columns import objects
from slurmgpu.accounting.document import AcceleratorRow
from slurmgpu.accounting.metrics import fit_shares
from slurmgpu.accounting.window import Window
from slurmgpu.model.accel import classify


def _num(frame: pd.DataFrame, col: str) -> np.ndarray:
    if col not in frame.columns:  # a store written before the column existed
        return np.full(len(frame), np.nan)
    return frame[col].to_numpy(dtype=float, na_value=np.nan)


def _texts(frame: pd.DataFrame, col: str) -> np.ndarray:
    if col not in frame.columns:
        return np.full(len(frame), None, dtype=object)
    return objects(frame, col, None)


def _hours_in_window(work: pd.DataFrame, window: Window) -> np.ndarray:
    start, end = work["start"].to_numpy(), work["end"].to_numpy()
    s = np.maximum(start, window.since)
    e = np.minimum(end, window.until)
    overlap = ((e - s) / np.timedelta64(1, "s")).astype(float)
    return np.where(np.isnat(start) | np.isnat(end), 0.0, np.maximum(overlap, 0.0)) / 3600.0


def _gpu_keys(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the GPU GRES key (None: no GPU) and its device count."""
    count = np.nan_to_num(_num(frame, "gpu_count"))
    shards = np.nan_to_num(_num(frame, "shards"))
    mig, gtype = _texts(frame, "mig_profile"), _texts(frame, "gpu_type")
    keys = np.full(len(frame), None, dtype=object)
    has_gpu = count > 0
    keys[has_gpu] = "gpu"
    typed = has_gpu & (gtype != None)  # noqa: E711 (elementwise on an object array)
    keys[typed] = np.char.add("gpu:", gtype[typed].astype(str)).astype(object)
    sliced = has_gpu & (mig != None)  # noqa: E711
    keys[sliced] = np.char.add("gpu:", mig[sliced].astype(str)).astype(object)
    shard = ~has_gpu & (shards > 0)
    keys[shard] = "shard"
    return keys, np.where(has_gpu, count, np.where(shard, shards, 0.0))


def _npu_keys(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    count = np.nan_to_num(_num(frame, "npus"))
    ntype = _texts(frame, "npu_type")
    keys = np.full(len(frame), None, dtype=object)
    has = count > 0
    keys[has] = "npu"
    typed = has & (ntype != None)  # noqa: E711
    keys[typed] = np.char.add("npu:", ntype[typed].astype(str)).astype(object)
    return keys, count


def by_accelerator(
    frame: pd.DataFrame,
    work: pd.DataFrame,
    need: np.ndarray,
    window: Window,
    devices: Mapping[str, float] | None = None,
    jobs_need: np.ndarray | None = None,
) -> tuple[AcceleratorRow, ...]:
    """One row per accelerator kind in the window (and per kind of the capacity `devices`,
    `name:type` -> devices), most device-hours first."""
    hours = _hours_in_window(work, window)
    weight = work["job_weight"].to_numpy()
    devices = dict(devices or {})
    no_need = np.full(len(frame), np.nan)
    rows = []
    families = ((_gpu_keys(frame), need, jobs_need), (_npu_keys(frame), no_need, no_need))
    for (keys, count), run_need, job_need in families:
        for name in sorted({k for k in keys.tolist() if k is not None}):
            sel = keys == name
            rows.append(_row(name, sel, count, hours, weight, run_need, job_need, window, devices))
    seen = {r.accelerator for r in rows}
    none = np.zeros(len(frame), dtype=bool)
    for name in sorted(set(devices) - seen):
        rows.append(_row(name, none, none, hours, weight, need, jobs_need, window, devices))
    return tuple(sorted(rows, key=lambda r: (-r.device_hours, r.accelerator)))


def _row(name, sel, count, hours, weight, need, jobs_need, window, devices) -> AcceleratorRow:
    gres_name, _, gtype = name.partition(":")
    vendor, accel_class = classify(gres_name, gtype or None)
    device_hours = count * hours
    total = float(device_hours[sel].sum())
    cap = devices.get(name)
    span = window.hours
    share = total / (cap * span) if cap and span > 0 else None
    fit = fit_shares(sel, need, device_hours, weight, jobs_need)
    return AcceleratorRow(
        accelerator=name,
        vendor=vendor,
        accel_class=accel_class,
        runs=int(sel.sum()),
        jobs=float(weight[sel].sum()),
        device_hours=total,
        devices=cap,
        alloc_share=share,
        fit=fit,
    )
