"""`slurmgpu forecast`: GPU demand per partition for the coming horizon (docs/forecast.md)."""

from __future__ import annotations

from datetime import UTC

import click

from slurmgpu.cli.analysis_options import some_analysis_options


@click.command("forecast")
@click.option("--sacct-file", "sacct_files", multiple=True, type=click.Path(dir_okay=False),
              help="Saved `sacct -P` output with its header; repeatable. Without it the live "
              "cluster is queried.")  # fmt: skip
@click.option("--demand-file", type=click.Path(dir_okay=False),
              help="The demand series itself instead of the accounting: CSV with columns "
              "time,partition,gpus (e.g. exported from Prometheus).")  # fmt: skip
@click.option("--since", help="History start: ISO date/time (UTC) or age like 28d.")
@click.option("--train-until", help="History end: nothing after it is used (default: the "
              "files' end, or now).")  # fmt: skip
@click.option("--horizon", default="7d", show_default=True, help="How far ahead (1d, 7d, 12h).")
@click.option("--freq", default="1h", show_default=True, help="Bucket: 1m..1d dividing a day.")
@click.option("--by", type=click.Choice(["partition", "slice"]), default="partition",
              show_default=True, help="One series per partition, or per partition and slice "
              "size (whole GPUs, each MIG size 1g..7g, shards).")  # fmt: skip
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True)  # fmt: skip
@some_analysis_options(
    "store", "clusters", "shards", "slurm_version", "backend", "tz", "chunk_hours"
)
@click.option("--output", "-o", default="-", show_default=True, help="File to write, or -.")
def forecast(
    sacct_files: tuple[str, ...],
    demand_file: str | None,
    since: str | None,
    train_until: str | None,
    horizon: str,
    freq: str,
    by: str,
    fmt: str,
    output: str,
    **analysis: object,
) -> None:
    """Demand (running + pending GPUs) per partition or slice: back-tested model, forecast,
    interval."""
    from datetime import datetime

    from slurmgpu.accounting.when import parse_when
    from slurmgpu.cli.analysis_options import analysis_options_from
    from slurmgpu.forecast import ForecastOptions
    from slurmgpu.forecast import forecast as run_forecast
    from slurmgpu.util.atomic import write_atomic
    from slurmgpu.views.forecast import render_forecast

    now = datetime.now(UTC).replace(microsecond=0)
    t_since = parse_when(since, now=now, option="--since") if since else None
    t_until = parse_when(train_until, now=now, option="--train-until") if train_until else None
    history = analysis_options_from(
        analysis, files=list(sacct_files), since=t_since, until=t_until, now=now
    )
    result = run_forecast(ForecastOptions(history, freq, horizon, by, demand_file))
    for warning in result.warnings:
        click.secho(f"slurmgpu: warning: {warning}", err=True, fg="yellow")
    text = render_forecast(result, fmt)
    if output == "-":
        click.echo(text, nl=False)
    else:
        write_atomic(output, text, backup=False)
