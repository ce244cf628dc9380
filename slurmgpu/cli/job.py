"""`slurmgpu job JOBID...`: one job's GPU use, efficiency and advice (your own jobs)."""

from __future__ import annotations

import click

from slurmgpu.measure.options import measure_options
from slurmgpu.util import strict


@click.command("job")
@click.argument("job_ids", nargs=-1, required=True)
@click.option("--policy", "policy_path", metavar="FILE", help="Site policy (kinds, idle rule).")
@click.option("--now", "now_text", help="Take this ISO time as now.")
@click.option(
    "--idle-min",
    type=strict.FloatRange(min=0, min_open=True),
    default=10.0,
    show_default=True,
    help="Shortest idle stretch shown (minutes; the policy's util_pct is the threshold).",
)
@click.option("--format", "fmt", type=click.Choice(("text", "json")), default="text")
@measure_options
def job(
    job_ids: tuple[str, ...],
    policy_path: str | None,
    now_text: str | None,
    idle_min: float,
    fmt: str,
    **measure,
) -> None:
    """GPUs held, per-GPU use over time, efficiency, idle stretches and advice for jobs.

    Ordinary users see their own jobs only; root, the SlurmUser and operators see all.

    \b
      slurmgpu job 4242 --prometheus http://prom:9090
    """
    import datetime as dt

    from slurmgpu.accounting.when import parse_when
    from slurmgpu.idle.job import JobOptions, job_report
    from slurmgpu.measure.options import MeasureOptions
    from slurmgpu.views.job import render_job

    real_now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    now = parse_when(now_text, now=real_now, option="--now") if now_text else real_now
    measure_opts = MeasureOptions.from_kwargs(measure)
    options = JobOptions(job_ids, measure_opts, policy_path, now, idle_min=idle_min)
    click.echo(render_job(job_report(options), fmt), nl=False)
