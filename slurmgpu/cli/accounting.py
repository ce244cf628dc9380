"""`slurmgpu analyze`: GPU accounting analysis from sacct dumps or the live cluster."""

from __future__ import annotations

from datetime import UTC

import click

from slurmgpu.cli.analysis_options import analysis_options, analysis_options_from


@click.command("analyze")
@click.option("--sacct-file", "sacct_files", multiple=True, type=click.Path(dir_okay=False),
              help="Saved `sacct -P` output with its header (plain or gzip); repeatable. "
              "Without it the live cluster is queried.")  # fmt: skip
@click.option("--since", help="Window start: ISO date/time (UTC) or age like 7d, 12h.")
@click.option("--until", help="Window end (default now for live queries).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True)  # fmt: skip
@analysis_options
@click.option("--output", "-o", default="-", show_default=True, help="File to write, or -.")
def analyze(
    sacct_files: tuple[str, ...],
    since: str | None,
    until: str | None,
    fmt: str,
    output: str,
    **analysis: object,
) -> None:
    """GPU-hours, utilization, waits, preemption losses and partition recommendations."""
    from datetime import datetime

    from slurmgpu.accounting.when import parse_when
    from slurmgpu.advice import analyze as run_analysis
    from slurmgpu.util.atomic import write_atomic
    from slurmgpu.views.report import render_report

    now = datetime.now(UTC).replace(microsecond=0)
    t_since = parse_when(since, now=now, option="--since") if since else None
    t_until = parse_when(until, now=now, option="--until") if until else None
    options = analysis_options_from(
        analysis, files=list(sacct_files), since=t_since, until=t_until, now=now
    )
    text = render_report(run_analysis(options).document, fmt)
    if output == "-":
        click.echo(text, nl=False)
    else:
        write_atomic(output, text, backup=False)
