"""The measure options `analyze` and `report` share, and the sources they build.

The lead wires these into `cli/analysis_options.py` (AnalysisOptions gets `measure_sources`):

    @measure_options
    def analyze(..., **kwargs):
        sources = build_measure_sources(MeasureOptions.from_kwargs(kwargs))
        result = slurmgpu.measure.apply.measure_runs(run_refs, sources)

Order of the returned list = preference when two time-averaged sources measured one run:
the node collector (it knows MIG instances and the job's own processes), then jobstats, then
Prometheus. All of them take precedence over Slurm's high-water `gres/gpuutil`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from slurmgpu.errors import UsageError
from slurmgpu.model.measure import MeasureSource
from slurmgpu.util import strict

SCHEMA_NAMES = ("dcgm", "jobstats", "slurmgpu")


@dataclass(frozen=True)
class MeasureOptions:
    """Which measure sources to use and how to reach them."""

    jobstats: bool = True
    collector_admin_comment: bool = True
    measure_spool: Path | None = None
    prometheus: str | None = None
    prometheus_schema: str = "dcgm"
    prometheus_headers: tuple[str, ...] = ()
    prometheus_timeout_s: float = 30.0
    prometheus_batch: int = 40
    prometheus_job_label: str | None = None
    prometheus_util_metric: str | None = None
    prometheus_mem_metric: str | None = None
    prometheus_cluster_label: str | None = None

    @classmethod
    def from_kwargs(cls, kwargs: dict[str, Any]) -> MeasureOptions:
        """Take (pop) this dataclass's fields out of a click command's keyword arguments."""
        names = cls.__dataclass_fields__
        values = {k: kwargs.pop(k) for k in list(kwargs) if k in names}
        if "prometheus_headers" in values:
            values["prometheus_headers"] = tuple(values["prometheus_headers"])
        return cls(**values)


def parse_header(text: str) -> tuple[str, str]:
    """`Name: value` -> (name, value); UsageError naming the option otherwise."""
    name, sep, value = text.partition(":")
    name, value = name.strip(), value.strip()
    if not sep or not name or any(c in name for c in " \t\r\n") or "\n" in value or "\r" in value:
        raise UsageError(f"--prometheus-header {text!r}: expected 'Name: value'")
    return name, value


def build_measure_sources(options: MeasureOptions) -> list[MeasureSource]:
    """The sources these options ask for, in order of preference."""
    from slurmgpu.measure.http import HttpError, check_url
    from slurmgpu.measure.jobstats import JobstatsSource
    from slurmgpu.measure.prometheus import PrometheusSource, schema
    from slurmgpu.measure.summary import CollectorSource

    sources: list[MeasureSource] = []
    if options.collector_admin_comment or options.measure_spool is not None:
        if options.measure_spool is not None and not options.measure_spool.is_dir():
            raise UsageError(f"--measure-spool {options.measure_spool}: not a directory")
        sources.append(CollectorSource(options.measure_spool))
    if options.jobstats:
        sources.append(JobstatsSource())
    if options.prometheus:
        try:
            check_url(options.prometheus)
        except HttpError as exc:
            raise UsageError(f"--prometheus: {exc}") from exc
        if options.prometheus_schema not in SCHEMA_NAMES:
            raise UsageError(f"--prometheus-schema: one of {', '.join(SCHEMA_NAMES)}")
        chosen = schema(
            options.prometheus_schema,
            job_label=options.prometheus_job_label,
            util_metric=options.prometheus_util_metric,
            mem_used_metric=options.prometheus_mem_metric,
            cluster_label=options.prometheus_cluster_label,
        )
        sources.append(
            PrometheusSource(
                options.prometheus,
                schema=chosen,
                headers=[parse_header(h) for h in options.prometheus_headers],
                timeout_s=options.prometheus_timeout_s,
                batch_size=options.prometheus_batch,
            )
        )
    return sources


def measure_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add the measure options to a click command (keyword names = MeasureOptions fields)."""
    decorators = [
        click.option(
            "--jobstats/--no-jobstats",
            default=True,
            show_default=True,
            help="Read jobstats summaries (JS1:) in AdminComment.",
        ),
        click.option(
            "--collector-admin-comment/--no-collector-admin-comment",
            default=True,
            show_default=True,
            help="Read `slurmgpu collect` summaries (SG1:) in AdminComment.",
        ),
        click.option(
            "--measure-spool",
            type=click.Path(file_okay=False, path_type=Path),
            help="Spool directory where `slurmgpu collect --epilog --spool` stores summaries.",
        ),
        click.option("--prometheus", metavar="URL", help="Prometheus server to query."),
        click.option(
            "--prometheus-schema",
            type=click.Choice(SCHEMA_NAMES),
            default="dcgm",
            show_default=True,
            help="Series names: DCGM exporter (hpc_job label), jobstats' exporter (jobid) or "
            "slurmgpu collect's textfile (jobid).",
        ),
        click.option(
            "--prometheus-header",
            "prometheus_headers",
            multiple=True,
            metavar="'NAME: VALUE'",
            help="HTTP header for every request, e.g. 'Authorization: Bearer TOKEN'.",
        ),
        click.option(
            "--prometheus-timeout",
            "prometheus_timeout_s",
            type=strict.FloatRange(min=0.1),
            default=30.0,
            show_default=True,
            help="Seconds for a whole request (connect, headers, body).",
        ),
        click.option(
            "--prometheus-batch",
            type=strict.IntRange(min=1, max=500),
            default=40,
            show_default=True,
            help="Runs per request.",
        ),
        click.option("--prometheus-job-label", help="Label holding the job id."),
        click.option("--prometheus-util-metric", help="Utilization metric (percent)."),
        click.option("--prometheus-mem-metric", help="Memory-used metric."),
        click.option(
            "--prometheus-cluster-label",
            help="Label holding the cluster name ('' for none).",
        ),
    ]
    for decorate in reversed(decorators):
        command = decorate(command)
    return command
