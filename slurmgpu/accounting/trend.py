"""`report --trend monthly`: per month and partition, allocation, measured use, queue waits
and fit shares (the view XDMoD's warehouse gives), from dumps or an accounting store.

Each month [first day 00:00 UTC, next month) is analysed by the analysis' own stages
(`pipeline.window_tables`): allocation, use, capacity ratio and fit shares of a month are
those of `slurmgpu analyze --since MONTH --until NEXT` (window-clipped GPU-hours; runs
active in the month). Waits are the month's own: runs that *started* in the month, by
partition (mean, p50, p95 linear, as numpy), so a long run's wait counts once.

From a store the months are read in order, each month's partitions once, with only the
runs still open carried into the next month (End unknown or after the month's end): memory
is one month's runs, not the store's (`store_month_frames`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from slurmgpu.accounting.document import FitShares, iso_utc
from slurmgpu.accounting.options import AnalysisOptions

TREND_SCHEMA = 1
FREQS = ("monthly",)
ALL = "*"  # the month's row over every partition


@dataclass(frozen=True)
class TrendRow:
    """One month of one partition (`partition` "*": all partitions of the month)."""

    month: str  # YYYY-MM
    partition: str
    jobs: int
    gpu_jobs: int
    gpu_hours_allocated: float
    capacity_gpu_hours: float | None  # None: capacity unknown
    allocation_ratio: float | None
    gpu_hours_used: float | None  # allocated x measured utilization where known
    gpu_util_mean: float | None  # percent, over `util_known_gpu_hours`
    util_known_gpu_hours: float
    pending_gpu_hours: float
    runs_started: int  # runs that started in the month (the waits' population)
    wait_mean_s: float | None
    wait_p50_s: float | None
    wait_p95_s: float | None
    fit: FitShares | None  # the partition's fit shares (None on the "*" row)
    # measured GPU energy in the month (docs/energy.md); None: no run of the row measured
    energy_kwh: float | None = None
    energy_kwh_idle: float | None = None

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "fit"}
        out["fit"] = self.fit.to_json() if self.fit is not None else None
        return out


@dataclass(frozen=True)
class TrendDocument:
    """The monthly trend: months in order, each with its rows (the "*" row first)."""

    generated_at: datetime
    since: datetime
    until: datetime
    source: dict[str, Any]
    months: tuple[str, ...]
    rows: tuple[TrendRow, ...]
    freq: str = "monthly"

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "trend",
            "trend_schema": TREND_SCHEMA,
            "freq": self.freq,
            "generated_at": iso_utc(self.generated_at),
            "window": {"since": iso_utc(self.since), "until": iso_utc(self.until)},
            "source": self.source,
            "months": list(self.months),
            "rows": [r.to_json() for r in self.rows],
        }


def month_bounds(since: datetime, until: datetime) -> list[tuple[datetime, datetime]]:
    """[month start, next month start) for every month that [since, until) touches, clipped
    to the window."""
    out = []
    t = since.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    while t < until:
        nxt = t.replace(year=t.year + 1, month=1) if t.month == 12 else t.replace(month=t.month + 1)
        out.append((max(t, since), min(nxt, until)))
        t = nxt
    return out


def trend(options: AnalysisOptions, freq: str = "monthly") -> TrendDocument:
    """The monthly trend of dumps, the live cluster or an accounting store (`options`)."""
    from slurmgpu.errors import UsageError

    if freq not in FREQS:
        raise UsageError(f"--trend {freq}: use one of {', '.join(FREQS)}")
    opts = options.validated()
    if opts.store is not None:
        from slurmgpu.accounting.store import store_slurm_version

        opts = replace(opts, slurm_version=opts.slurm_version or store_slurm_version(opts.store))
        source = {"kind": "store", "store": os.fspath(opts.store), "clusters": list(opts.clusters)}
        months = store_month_frames(opts)
    else:
        source = {"kind": "file" if opts.files else "live", "files": [str(f) for f in opts.files]}
        months = _loaded_month_frames(opts)
    since, until = next(months)
    rows: list[TrendRow] = []
    names = []
    for a, b, frame in months:
        names.append(a.strftime("%Y-%m"))
        rows += month_rows(opts, frame, a, b)
    assert opts.now is not None
    return TrendDocument(opts.now, since, until, source, tuple(names), tuple(rows), freq)


def _loaded_month_frames(opts: AnalysisOptions) -> Iterator[Any]:
    """Dumps or live: read once; yields the window, then (start, end, frame) per month."""
    from slurmgpu.accounting import pipeline, window

    live = pipeline._live(opts)
    got, _ = pipeline._read(opts, live)
    frame = got.loaded.frame
    win = window.window_for(frame, live.since, live.until)
    since, until = win.datetimes()
    yield since, until
    for a, b in month_bounds(since, until):
        yield a, b, frame


def store_month_frames(opts: AnalysisOptions) -> Iterator[Any]:
    """The store month by month: yields the window, then (start, end, runs) per month, the
    runs being the month's partitions and the earlier runs still open at its start."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from slurmgpu.accounting import pipeline, store

    normalize = pipeline.normalize_options(opts, pipeline._live(opts))
    root = store.Path(os.fspath(opts.store))
    manifest, parts, _ = store.store_parts(root, normalize, opts.clusters)
    since, until = store_span(root, parts, opts.since, opts.until)
    yield since, until
    by_month: dict[str, list[dict[str, Any]]] = {}
    for p in parts:
        by_month.setdefault(p["month"], []).append(p)
    bounds = month_bounds(since, until)
    first = bounds[0][0] if bounds else since
    # no Submit/Start/End at all ("unknown"), and months before the first: what is open
    older = [p for m, ps in by_month.items() for p in ps if m == "unknown" or m < _ym(first)]
    open_at = pc.field("end").is_null() | (pc.field("end") >= pa.scalar(_naive(first)))
    carry = store.stored_table(root, older, open_at) if older else None
    for a, b in bounds:
        tables = [] if carry is None else [carry]
        if by_month.get(_ym(a)):
            tables.append(store.stored_table(root, by_month[_ym(a)]))
        if not tables:  # nothing stored yet: no rows, the stored columns
            tables.append(store.stored_table(root, parts[:1], pc.scalar(False)))
        table = pa.concat_tables(tables, promote_options="permissive")
        yield a, b, store.frame_of(table, manifest, normalize)
        end = table.column("end")
        keep = pc.or_kleene(pc.is_null(end), pc.greater_equal(end, pa.scalar(_naive(b), end.type)))
        carry = table.filter(keep)


def _ym(t: datetime) -> str:
    return t.strftime("%Y-%m")


def _naive(t: datetime) -> datetime:
    return t.astimezone(UTC).replace(tzinfo=None)


def store_span(
    root: Any, parts: list[dict[str, Any]], since: datetime | None, until: datetime | None
) -> tuple[datetime, datetime]:
    """The window: the given bounds, else the stored runs' span as for dumps
    (`window.window_for`), from the time columns only."""
    import pandas as pd
    import pyarrow as pa

    from slurmgpu.accounting import store, window

    if since is not None and until is not None:
        return since.astimezone(UTC), until.astimezone(UTC)
    cols = ["submit", "start", "end", "elapsed_s"]
    tables = [store._read_part(root, p, columns=cols) for p in parts]
    frame = pa.concat_tables(tables).to_pandas(types_mapper=pd.ArrowDtype)
    start = window.dt_column(frame, "start")
    end = window.dt_column(frame, "end")
    import numpy as np

    elapsed = frame["elapsed_s"].to_numpy(dtype=float, na_value=np.nan)
    frame["run_end"] = np.where(
        np.isnat(end), start + np.nan_to_num(elapsed).astype("timedelta64[s]"), end
    ).astype("datetime64[s]")
    win = window.window_for(frame, since, until)
    return win.datetimes()


def month_rows(opts: AnalysisOptions, frame: Any, a: datetime, b: datetime) -> list[TrendRow]:
    """The rows of one month: "*" then each partition (as `analyze`'s by_partition)."""
    from slurmgpu.accounting import pipeline
    from slurmgpu.accounting.energy import energy_of

    month = a.strftime("%Y-%m")
    t = pipeline.window_tables(opts, frame, a, b)
    waits = _month_waits(t)
    e = energy_of(t.frame, t.work, opts.idle_util_pct)
    measured = e.coverage > 0
    kwh = {p.partition: (p.kwh, p.kwh_idle) for p in e.by_partition if measured and p.kwh > 0}
    all_kwh = (e.kwh, e.kwh_idle) if measured else None
    out = [replace(_row(month, ALL, t.totals, waits.get(None), None), **_energy(all_kwh))]
    for r in t.by_partition:
        row = _row(month, r.name, r, waits.get(r.name), r.fit_fraction)
        out.append(replace(row, **_energy(kwh.get(r.name))))
    return out


def _energy(pair: tuple[float, float] | None) -> dict[str, float | None]:
    """A row's energy fields: (kWh, idle kWh), or unknown when nothing was measured."""
    kwh, idle = pair if pair is not None else (None, None)
    return {"energy_kwh": kwh, "energy_kwh_idle": idle}


def _month_waits(t: Any) -> dict[Any, tuple[int, float | None, float | None, float | None]]:
    """Waits of the runs that started in the month: per partition label, None: all."""
    import numpy as np

    start = t.work["start"].to_numpy()
    wait = t.work["wait_s"].to_numpy(dtype=float)
    inside = ~np.isnat(start) & (start >= t.window.since) & (start < t.window.until)
    inside &= ~np.isnan(wait)
    parts = t.frame["partition"].to_numpy(dtype=object, na_value="")

    def stats(sel: Any) -> tuple[int, float | None, float | None, float | None]:
        w = wait[sel]
        if not len(w):
            return 0, None, None, None
        p50, p95 = np.percentile(w, [50, 95])
        return len(w), float(w.mean()), float(p50), float(p95)

    out: dict[Any, Any] = {None: stats(inside)}
    for name in set(parts[inside]):
        out[str(name)] = stats(inside & (parts == name))
    return out


def _row(month: str, name: str, s: Any, waits: Any, fit: Any) -> TrendRow:
    n, mean, p50, p95 = waits or (0, None, None, None)
    return TrendRow(
        month=month,
        partition=name,
        jobs=s.jobs,
        gpu_jobs=s.gpu_jobs,
        gpu_hours_allocated=s.gpu_hours_allocated,
        capacity_gpu_hours=s.capacity_gpu_hours,
        allocation_ratio=s.allocation_ratio,
        gpu_hours_used=s.gpu_hours_used,
        gpu_util_mean=s.gpu_util_mean,
        util_known_gpu_hours=s.util_known_gpu_hours,
        pending_gpu_hours=s.pending_gpu_hours,
        runs_started=n,
        wait_mean_s=mean,
        wait_p50_s=p50,
        wait_p95_s=p95,
        fit=fit,
    )
