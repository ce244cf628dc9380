"""Idle GPUs: the rule, the retrospective (`slurmgpu idle`), the live mode (`idle --live`).

Floors: above `accounting/` and `measure/` (runs and samples), below `views/` and `cli/`.
`rule.py` is pure; `jobs.py` turns sacct rows into runs; `retrospective.py` applies the
policy to past runs; `live.py` warns and acts on running jobs. docs/idle.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from slurmgpu.errors import UsageError
from slurmgpu.idle.retrospective import IdleReport, retrospective
from slurmgpu.measure.options import MeasureOptions


@dataclass(frozen=True)
class IdleOptions:
    """What `slurmgpu idle` was asked (the library's names for the CLI's flags)."""

    policy: str
    files: tuple[str, ...] = ()
    since: datetime | None = None
    until: datetime | None = None
    measure: MeasureOptions = field(default_factory=MeasureOptions)
    now: datetime | None = None
    series_chunk_s: int = 6 * 3600
    series_max_samples: int = 2_000_000


def load_idle_policy(path: str):
    from slurmgpu.sources.policy_file import load_policy

    policy = load_policy(path)
    if policy.idle is None:
        raise UsageError(f"{path}: the policy has no [idle] table (see etc/slurmgpu.toml)")
    return policy


def series_sources(measure: MeasureOptions, now: datetime | None, chunk_s: int, max_samples: int):
    """The per-sample sources the measure options name (Prometheus only, for now)."""
    if not measure.prometheus:
        return []
    from slurmgpu.measure.options import SCHEMA_NAMES, parse_header
    from slurmgpu.measure.prometheus import schema
    from slurmgpu.measure.series import PrometheusSeriesSource

    if not measure.prometheus.startswith(("http://", "https://")):
        raise UsageError(f"--prometheus {measure.prometheus!r}: expected an http(s):// URL")
    if measure.prometheus_schema not in SCHEMA_NAMES:
        raise UsageError(f"--prometheus-schema: one of {', '.join(SCHEMA_NAMES)}")
    chosen = schema(
        measure.prometheus_schema,
        job_label=measure.prometheus_job_label,
        util_metric=measure.prometheus_util_metric,
        mem_used_metric=measure.prometheus_mem_metric,
        cluster_label=measure.prometheus_cluster_label,
    )
    return [
        PrometheusSeriesSource(
            measure.prometheus,
            schema=chosen,
            headers=tuple(parse_header(h) for h in measure.prometheus_headers),
            timeout_s=measure.prometheus_timeout_s,
            chunk_s=chunk_s,
            max_samples=max_samples,
            now=now,
        )
    ]


def summary_sources(measure: MeasureOptions):
    """Collector spool / AdminComment and jobstats summaries (never Prometheus averages)."""
    from dataclasses import replace

    from slurmgpu.measure.options import build_measure_sources

    return build_measure_sources(replace(measure, prometheus=None))


def idle(options: IdleOptions) -> IdleReport:
    """The retrospective: what the policy's `[idle]` table would have done."""
    from slurmgpu.idle.jobs import jobs_from_files, jobs_from_sacct

    policy = load_idle_policy(options.policy)
    now = (options.now or datetime.now(UTC)).astimezone(UTC).replace(tzinfo=None)
    until = options.until.astimezone(UTC).replace(tzinfo=None) if options.until else now
    if options.files:
        for f in options.files:
            if not Path(f).is_file():
                raise UsageError(f"--sacct-file {f}: no such file")
        jobs = jobs_from_files(options.files, policy)
        since = None
    elif options.since is not None:
        since = options.since.astimezone(UTC).replace(tzinfo=None)
        if since >= until:
            raise UsageError("--since must be before --until")
        jobs = jobs_from_sacct(since, until, policy)
    else:
        raise UsageError("give --sacct-file FILE... or --since WHEN")
    series = series_sources(
        options.measure, until, options.series_chunk_s, options.series_max_samples
    )
    summaries = summary_sources(options.measure)
    assert policy.idle is not None
    return retrospective(
        jobs,
        policy.idle,
        series_sources=series,
        summary_sources=summaries,
        until=until,
        since=since,
    )


def idle_for_report(
    policy_path: str | None,
    files: tuple[str, ...],
    since: datetime | None,
    until: datetime | None,
    measure: MeasureOptions,
    now: datetime,
) -> IdleReport | None:
    """The retrospective over `report`'s own window, when its policy has an `[idle]` table."""
    if not policy_path:
        return None
    from slurmgpu.sources.policy_file import load_policy

    if load_policy(policy_path).idle is None:
        return None
    return idle(
        IdleOptions(
            policy=policy_path,
            files=tuple(files),
            since=None if files else since,
            until=until,
            measure=measure,
            now=now,
        )
    )
