"""A forecast as MIG demand: what `mig plan` should carve for the coming horizon.

`mig plan` measures demand as the past window's p95 concurrency per slice size
(`mig/demand.py`); here it is the forecast's peak per slice size over the horizon instead.
The glue lives in advice/ because mig/ (floor 7) may not import forecast/ (floor 6 on a
separate branch of the floors; docs/architecture.md): this module reads a `Forecast` made
`--by slice` and returns the `mig.demand.Demand` that `mig.plan.plan` takes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from slurmgpu.errors import UsageError
from slurmgpu.forecast.pipeline import Forecast
from slurmgpu.mig.demand import Demand, profile_for
from slurmgpu.model.catalog import GpuModel

_SIZE = re.compile(r"([1-7])g")
# a bucket-averaged peak of 2.0000001 instances is 2 instances, not 3
_ROUND_TOLERANCE = 1e-6


def demand_from_forecast(
    forecast: Forecast,
    model: GpuModel,
    partitions: Sequence[str] | None = None,
    *,
    use: str = "gpus",
) -> Demand:
    """MIG instances per slice size (`1g`, `3g`, ...) = ceil(peak over the horizon of the
    slice's forecast, in GPU equivalents, x `model.compute_slices` / N), summed over
    `partitions` (default: every partition of the forecast). `use="high"` takes the top of
    the interval instead of the point forecast (a cautious plan). Whole-GPU and shard demand
    are not MIG instances: they are named in the notes. A forecast not made by slice, a
    model without MIG, or an unknown partition is a UsageError; no MIG demand at all is an
    empty Demand with a note."""
    if forecast.by != "slice":
        raise UsageError("the forecast is per partition: make it with --by slice for MIG demand")
    if not model.mig_profiles or model.compute_slices <= 0:
        raise UsageError(f"GPU model {model.key!r} has no MIG profiles: nothing to carve")
    if use not in ("gpus", "high"):
        raise UsageError(f"use={use!r}: take the forecast's 'gpus' or its interval's 'high'")
    known = sorted({p.partition for p in forecast.by_partition})
    wanted = list(partitions) if partitions is not None else known
    missing = [p for p in wanted if p not in known]
    if missing:
        raise UsageError(
            f"partition {', '.join(missing)} is not in the forecast (it has {', '.join(known)})"
        )
    counts: dict[str, int] = {}
    notes: list[str] = []
    for part in wanted:
        for series in forecast.slices(part):
            peak = series.peak(use)
            m = _SIZE.fullmatch(series.slice or "")
            if m is None:
                if peak > 0:
                    notes.append(f"{series.label}: peak {peak:.2f} GPUs not in MIG instances")
                continue
            size = int(m.group(1))
            if profile_for(model, series.slice) is None:
                notes.append(f"{series.label}: {model.key} offers no {series.slice} profile")
                continue
            instances = math.ceil(peak * model.compute_slices / size - _ROUND_TOLERANCE)
            if instances > 0:
                counts[series.slice] = counts.get(series.slice, 0) + instances
    if not counts:
        notes.append("the forecast holds no MIG demand for these partitions")
    items = tuple(sorted(counts.items(), key=lambda kv: int(kv[0][:-1])))
    until = forecast.train_until.strftime("%Y-%m-%d %H:%M")
    source = (
        f"forecast peak ({use}) over {forecast.horizon_buckets} buckets of "
        f"{forecast.freq_s} s from {until} UTC ({model.key} slices)"
    )
    return Demand(items, source=source, notes=tuple(notes))
