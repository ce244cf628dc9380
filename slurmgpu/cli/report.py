"""`slurmgpu report`: the accounting analysis as text, JSON, HTML or a Prometheus textfile.

Built to run from cron/systemd: output files are written atomically (a reader or
node_exporter never sees half a file), no progress bar unless stderr is a terminal, and
every user mistake is one `slurmgpu: error:` line with a non-zero exit.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import click

from slurmgpu.cli.analysis_options import (
    analysis_options,
    analysis_options_from,
    policy_from_environment,
)

FORMATS = ("text", "json", "html", "prom")


def expand_output(path: str, when: dt.datetime) -> str:
    """Expand strftime codes (`report-%Y-%m-%d.html`) with the report time in UTC."""
    return when.strftime(path) if "%" in path else path


def write_report(path: str | os.PathLike[str], text: str, fmt: str) -> Path:
    """Write a report file atomically (mode 0644, no backup), validating JSON/Prometheus."""
    from slurmgpu.errors import SlurmgpuError, UsageError
    from slurmgpu.util.atomic import write_atomic
    from slurmgpu.views.report import check_prom_text

    target = Path(path)
    if target.is_dir():
        raise UsageError(f"--output {target}: is a directory, give a file name")
    if not target.parent.is_dir():
        raise UsageError(f"--output {target}: directory {target.parent} does not exist")

    def validate(tmp: Path) -> None:
        with open(tmp, encoding="utf-8", newline="") as fh:  # no "\r" read as a newline
            written = fh.read()
        try:
            if fmt == "json":
                import json

                json.loads(written)
            elif fmt == "prom":
                check_prom_text(written)
        except ValueError as exc:  # a renderer bug, never a user mistake: say so
            raise SlurmgpuError(f"internal error: {fmt} report failed validation: {exc}") from exc

    try:
        # The temp name is `.NAME.XXXX.tmp`: node_exporter only reads `*.prom`, so it never
        # sees a partial file; backup=False so no `NAME.bak` piles up beside the reports.
        write_atomic(target, text, mode=0o644, backup=False, validate=validate)
    except PermissionError as exc:
        raise SlurmgpuError(f"--output {target}: cannot write: {exc.strerror}") from exc
    return target


@click.command("report")
@click.option(
    "--since",
    help="Window start: an age back from --until (30m, 12h, 7d, 2w) or an ISO date/time "
    "(2026-11-01, 2026-11-01T08:00; UTC unless an offset is given). Default: 7d live; "
    "the dumps' whole span with --sacct-file.",
)
@click.option("--until", help="Window end, same forms (default: now live; the dumps' end).")
@click.option(
    "--sacct-file",
    "sacct_files",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    help="Saved `sacct -P` dump with its header line (plain or .gz); repeatable. "
    "Without it the live cluster is queried.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="text",
    show_default=True,
    help="text: tables for a terminal; json: the analysis (docs/accounting.md); html: one "
    "self-contained page with plots; prom: node_exporter textfile gauges.",
)
@click.option(
    "--output",
    "-o",
    default="-",
    show_default=True,
    help="File to write atomically, or - for stdout. strftime codes are expanded with the "
    "report time in UTC (report-%Y-%m-%d.html).",
)
@click.option(
    "--idle/--no-idle",
    "with_idle",
    default=True,
    show_default=True,
    help="Add the idle policy's retrospective (waste ranking, reclaimable GPU-hours) when "
    "--policy has an [idle] table (docs/idle.md).",
)
@click.option(
    "--trend",
    type=click.Choice(["monthly"]),
    help="Instead of one window: per month and partition, allocation, measured use, waits "
    "and fit shares (docs/store.md); with --store, read a month at a time.",
)
@analysis_options
def report(
    since: str | None,
    until: str | None,
    sacct_files: tuple[str, ...],
    fmt: str,
    output: str,
    with_idle: bool,
    trend: str | None,
    **analysis: object,
) -> None:
    """Analyze GPU accounting and write a report (for people, scripts, or Prometheus).

    The analysis options are those of `slurmgpu analyze`.

    \b
      slurmgpu report --since 7d
      slurmgpu report --sacct-file week.txt --format html --output week.html
      slurmgpu report --since 1d --format prom \\
          --output /var/lib/prometheus/node-exporter/slurmgpu.prom
    """
    from slurmgpu.accounting.when import parse_when
    from slurmgpu.advice import analyze
    from slurmgpu.cli.progress import LoadProgress
    from slurmgpu.errors import UsageError
    from slurmgpu.idle import idle_for_report
    from slurmgpu.measure.options import MeasureOptions
    from slurmgpu.views.report import render_report

    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    if not sacct_files and not analysis.get("store"):  # live: the last 7 days unless told
        until, since = until or "now", since or "7d"
    until_t = parse_when(until, now=now, option="--until") if until else None
    since_t = parse_when(since, now=until_t or now, option="--since") if since else None
    if since_t and until_t and since_t >= until_t:
        raise UsageError(f"--since {since} is not before --until {until}")
    measure = MeasureOptions.from_kwargs(dict(analysis))  # a copy: the analysis pops them
    given = analysis.get("policy") or policy_from_environment()
    policy_path = str(given) if with_idle and given else None
    options = analysis_options_from(
        analysis, files=list(sacct_files), since=since_t, until=until_t, now=now
    )
    label = "reading sacct dumps" if sacct_files else "querying sacct"
    if options.store is not None:
        label = "reading the accounting store"
    if trend:
        from slurmgpu.accounting.trend import trend as monthly
        from slurmgpu.views.report.trend import render_trend

        with LoadProgress(label, sacct_files):
            text = render_trend(monthly(options, trend), fmt)
        _emit(text, output, fmt, now)
        return
    with LoadProgress(label, sacct_files):
        result = analyze(options)
        idle = idle_for_report(policy_path, sacct_files, since_t, until_t, measure, now)
    _emit(render_report(result.document, fmt, idle=idle), output, fmt, now)


def _emit(text: str, output: str, fmt: str, now: dt.datetime) -> None:
    if output == "-":
        click.echo(text, nl=False)
        return
    write_report(expand_output(output, now), text, fmt)
