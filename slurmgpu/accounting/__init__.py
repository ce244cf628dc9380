"""GPU accounting analysis: sacct/pyslurm -> normalized frame -> metrics -> recommendations.

Library entry point: `analyze(...) -> AnalysisResult` (`.to_dict()` is the JSON contract in
docs/accounting.md, `.frame` the normalized per-run frame). The CLI (`slurmgpu analyze`) and
the reports are thin layers over it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

SCHEMA_VERSION = 1


@dataclass
class AnalysisResult:
    """What `analyze` found: the JSON-ready document and the frame it came from."""

    document: dict[str, Any]
    frame: Any  # pandas.DataFrame (normalized allocation rows, pyarrow dtypes)
    load: Any = field(repr=False, default=None)  # accounting.load.LoadResult

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract (no NaN/inf: unknown is None)."""
        return json_safe(self.document)


def json_safe(value: Any) -> Any:
    """Recursively turn numpy scalars into Python ones and NaN/inf into None."""
    import numpy as np

    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _tier_function(
    tiers: Mapping[str, str] | Callable[[str], str | None] | Any | None,
) -> Callable[[str], str | None] | None:
    """A Policy (with `tier_for_qos`), a {qos: tier} mapping or a function -> a function."""
    if tiers is None:
        return None
    if hasattr(tiers, "tier_for_qos"):
        policy = tiers

        def from_policy(qos: str) -> str | None:
            tier = policy.tier_for_qos(qos)
            return getattr(tier, "name", tier)

        return from_policy
    if isinstance(tiers, Mapping):
        return tiers.get
    return tiers


def _utc(t: datetime | None) -> datetime | None:
    if t is None:
        return None
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


def analyze(
    sacct_files: Sequence[str | os.PathLike[str]] = (),
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    backend: str = "auto",
    tiers: Any = None,
    capacity: Mapping[str, float] | None = None,
    shards_per_gpu: Mapping[str, float] | None = None,
    gpu_types: Mapping[str, str] | None = None,
    inventories: Sequence[str | os.PathLike[str]] = (),
    env: Mapping[str, str] | None = None,
    freq: str | None = None,
    timezone_name: str = "UTC",
    now: datetime | None = None,
    live_chunk_hours: float = 24.0,
) -> AnalysisResult:
    """Analyze saved sacct dumps, or the live cluster when no file is given.

    backend (live only): "auto" (pyslurm when importable and matching Slurm, else sacct text),
    "sacct" (parsable text, the default path), "sacct-json" (`sacct --json`), "pyslurm".
    capacity: {partition: GPUs} overriding what scontrol reports; shards_per_gpu:
    {partition or "*": shards per GPU}; gpu_types: {partition: GPU type} for GPU memory;
    inventories: `slurmgpu inventory` snapshots whose measured GPU memory wins over the
    catalogue's. live_chunk_hours: a live text query is one sacct call per this many hours of
    the window (memory holds one call's output at a time).
    """
    from slurmgpu.accounting import capacity as cap_mod
    from slurmgpu.accounting import load as load_mod
    from slurmgpu.errors import SacctParseError, SlurmCommandError, UsageError

    try:
        import zoneinfo

        zoneinfo.ZoneInfo(timezone_name)
    except (ValueError, zoneinfo.ZoneInfoNotFoundError):
        raise UsageError(f"--timezone {timezone_name!r}: not a time zone name") from None
    if not live_chunk_hours > 0:
        raise UsageError(f"--chunk-hours {live_chunk_hours}: must be more than 0")
    now = _utc(now) or datetime.now(UTC)
    since, until = _utc(since), _utc(until)
    if since and until and until <= since:
        raise UsageError(f"--until {until:%Y-%m-%dT%H:%M:%S} is not after --since")
    cap = cap_mod.Capacity()
    source: dict[str, Any] = {"kind": "file", "files": [os.fspath(p) for p in sacct_files]}
    slurm_version = None
    if not sacct_files:
        from slurmgpu.sources import slurm as slurm_src

        try:
            slurm_version = slurm_src.slurm_version(env)
        except SlurmCommandError:
            slurm_version = None
        # as Slurm writes it: 22.05.8
        source["slurm_version"] = "{}.{:02d}.{}".format(*slurm_version) if slurm_version else None
        try:
            cap = cap_mod.capacity_from_scontrol(
                slurm_src.scontrol_show("node", env=env),
                slurm_src.scontrol_show("partition", env=env),
            )
        except SlurmCommandError as exc:
            source["capacity_error"] = str(exc)
    else:
        source["slurm_version"] = None
    merged_shards = dict(cap.shards_per_gpu)
    merged_shards.update(shards_per_gpu or {})
    options = load_mod.Options(
        timezone=timezone_name,
        tier_for_qos=_tier_function(tiers),
        shards_per_gpu=merged_shards,
    )

    if sacct_files:
        loaded = load_mod.load_files(sacct_files, options=options)
    else:
        since = since or (now.replace(microsecond=0) - _days(7))
        until = until or now.replace(microsecond=0)
        loaded, kind, note = _load_live(
            backend, since, until, env, slurm_version, options, live_chunk_hours
        )
        source.update(kind=kind, files=[], backend_note=note)

    from slurmgpu.accounting import metrics, recommend

    frame = loaded.frame
    window = metrics.window_for(frame, since, until)
    in_window = _active_in(frame, window)
    outside = int((~in_window).sum())
    frame = frame[in_window].reset_index(drop=True)
    part_gpus = dict(cap.partition_gpus)
    part_gpus.update(capacity or {})
    types = dict(cap.gpu_types)
    types.update(gpu_types or {})
    gpu_mem = metrics.gpu_memory_mib(frame, types, _inventory_memory(inventories))
    work = metrics.prepare(frame, window, gpu_mem)
    total_gpus = cap.total_gpus if not capacity else sum(part_gpus.values())
    if not part_gpus:
        total_gpus = None

    totals = metrics.summarize(work, total_gpus, window)
    totals.update(
        rows_read=loaded.rows_read,
        rows_analyzed=loaded.rows_analyzed,
        rows_rejected=loaded.rows_rejected,
        step_rows=loaded.step_rows,
        allocation_rows=len(frame) + outside,
        rows_outside_window=outside,
        rows_overlap_skipped=loaded.rows_overlap,
        blank_lines=loaded.blank_lines,
        rejected_reasons=dict(loaded.rejected_reasons),
        shard_runs_unknown_fraction=int(
            (~frame["shard_fraction_known"].to_numpy(dtype=bool, na_value=True)).sum()
        ),
    )
    if loaded.rows_read != loaded.rows_analyzed + loaded.rows_rejected:
        raise SacctParseError("internal: row accounting does not reconcile")
    by_partition = metrics.by_group(frame, work, "partition", window, part_gpus)
    by_qos = metrics.by_group(frame, work, "qos", window, None, extra=("tier",))
    by_tier = metrics.by_group(frame, work, "tier", window, None)
    need, measured, sliced = metrics.run_need(frame, work, gpu_mem)
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "generated_at": now.replace(microsecond=0).isoformat().replace("+00:00", "Z"),
        "window": window.iso(),
        "source": source,
        "totals": totals,
        "by_partition": by_partition,
        "by_qos": by_qos,
        "by_tier": by_tier,
        "by_account": metrics.by_group(frame, work, "account", window, None),
        "by_user": metrics.by_group(frame, work, "user", window, None),
        "by_kind": metrics.by_group(frame, work, "kind", window, None),
        "fit_fraction": metrics.fit_fraction(work, need, measured, sliced),
        "timeseries": metrics.timeseries(
            work,
            window,
            total_gpus,
            freq,
            partitions=frame["partition"].to_numpy(dtype=object, na_value=""),
        ),
        "rejected": [{"file": r.file, "line": r.line, "reason": r.reason} for r in loaded.rejected],
    }
    nodes_per_part = dict(cap.gpus_per_node)
    doc["recommendations"] = recommend.recommend(
        frame,
        work,
        need=need,
        measured=measured,
        by_partition=by_partition,
        by_tier=by_tier,
        totals=totals,
        hours=window.hours,
        partition_types=types,
        gpus_per_node=nodes_per_part,
    )
    return AnalysisResult(document=doc, frame=frame, load=loaded)


def _inventory_memory(paths: Sequence[str | os.PathLike[str]]) -> dict[str, float]:
    """{GPU type name: memory MiB} from inventory snapshots (every name Slurm may use)."""
    if not paths:
        return {}
    from slurmgpu.model.catalog import model_for_name
    from slurmgpu.sources import snapshot

    out: dict[str, float] = {}
    for path in paths:
        for gpu in snapshot.load(path).gpus:
            model = model_for_name(gpu.name)
            names = {model.short_type, model.autodetect_type, model.key} if model else set()
            for name in names | {gpu.name}:
                out[name] = float(gpu.memory_mib)
            for mig in gpu.mig_devices:
                out[mig.profile] = float(mig.memory_mib)
    return out


def _days(n: float):
    from datetime import timedelta

    return timedelta(days=n)


def _active_in(frame, window) -> Any:
    """Runs that overlap the window, and jobs submitted before its end that never started."""
    import numpy as np

    start = frame["start"].to_numpy(dtype="datetime64[s]", na_value=np.datetime64("NaT"))
    end = frame["run_end"].to_numpy(dtype="datetime64[s]", na_value=np.datetime64("NaT"))
    submit = frame["submit"].to_numpy(dtype="datetime64[s]", na_value=np.datetime64("NaT"))
    ran = ~np.isnat(start) & (start < window.until) & (np.isnat(end) | (end >= window.since))
    fin = frame["end"].to_numpy(dtype="datetime64[s]", na_value=np.datetime64("NaT"))
    never = (
        np.isnat(start)
        & (np.isnat(submit) | (submit < window.until))
        & (np.isnat(fin) | (fin >= window.since))
    )
    return ran | never


def _load_live(backend, since, until, env, slurm_version, options, live_chunk_hours):
    """Query the live cluster with the chosen backend -> (LoadResult, source kind, note)."""
    from slurmgpu.accounting import load as load_mod
    from slurmgpu.errors import UsageError
    from slurmgpu.sources import pyslurm_db, sacct

    if backend in ("auto", "pyslurm"):
        decision = pyslurm_db.pyslurm_decision(slurm_version)
        if decision.usable:
            records = pyslurm_db.pyslurm_records(decision.module, since, until)
            return (
                load_mod.load_records(records, name="pyslurm", options=options),
                "pyslurm",
                (decision.reason),
            )
        if backend == "pyslurm":
            raise UsageError(f"--backend pyslurm: {decision.reason}")
        note = f"sacct text ({decision.reason})"
    else:
        note = backend
    if backend == "sacct-json":
        doc = sacct.sacct_json(since, until, env=env)
        records = sacct.json_records(doc)
        return load_mod.load_records(records, name="sacct --json", options=options), "sacct", note
    if backend not in ("auto", "sacct"):
        raise UsageError(f"unknown backend {backend!r}: use auto, sacct, sacct-json or pyslurm")
    bounds = _sub_windows(since, until, live_chunk_hours)
    loaded = load_mod.load_windows(
        bounds,
        lambda a, b: sacct.sacct_text(a, b, env=env),
        name="sacct",
        options=options,
        delimiter=sacct.DELIMITER,
    )
    if len(bounds) > 1:
        note += f"; {len(bounds)} sacct calls of {live_chunk_hours:g} h"
    return loaded, "sacct", note


def _sub_windows(since: datetime, until: datetime, hours: float) -> list[tuple[datetime, datetime]]:
    """[since, until) cut into consecutive pieces of at most `hours`."""
    from datetime import timedelta

    step = timedelta(hours=hours)
    out = []
    a = since
    while a < until:
        b = min(a + step, until)
        out.append((a, b))
        a = b
    return out or [(since, until)]
