"""`slurmgpu idle`: what the idle-GPU policy would have done, or (`--live`) does now."""

from __future__ import annotations

import datetime as dt

import click

from slurmgpu.measure.options import measure_options

FORMATS = ("text", "json", "html")


@click.command("idle")
@click.option(
    "--policy",
    "policy_path",
    metavar="FILE",
    help="Site policy TOML with an [idle] table (default: $SLURMGPU_POLICY, else "
    "/etc/slurmgpu/slurmgpu.toml).",
)
@click.option(
    "--sacct-file",
    "sacct_files",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="Saved `sacct -a -D -P` dump (with steps); repeatable.",
)
@click.option("--since", help="Live window start (30m, 12h, 7d, or an ISO date/time, UTC).")
@click.option("--until", help="Window end, same forms (default: now).")
@click.option("--now", "now_text", help="Take this ISO time as now (tests, replays).")
@click.option("--live", is_flag=True, help="Warn and act on running jobs (run by a timer).")
@click.option("--dry-run", is_flag=True, help="--live: say what would be done, do nothing.")
@click.option(
    "--state-dir",
    default="/var/lib/slurmgpu/idle",
    show_default=True,
    help="--live: where warnings sent and the action journal are kept.",
)
@click.option(
    "--emit",
    "emit_dir",
    metavar="DIR",
    help="--live: send and do nothing; write the mails and the commands (idle-actions.sh) "
    "into DIR.",
)
@click.option("--smtp", metavar="HOST[:PORT]", help="--live: mail server for warnings.")
@click.option("--webhook", metavar="URL", help="--live: also POST each warning/action as JSON.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True)
@click.option("--output", "-o", default="-", show_default=True, help="File, or - for stdout.")
@measure_options
def idle(
    policy_path: str | None,
    sacct_files: tuple[str, ...],
    since: str | None,
    until: str | None,
    now_text: str | None,
    live: bool,
    dry_run: bool,
    state_dir: str,
    emit_dir: str | None,
    smtp: str | None,
    webhook: str | None,
    fmt: str,
    output: str,
    **measure: object,
) -> None:
    """Idle GPUs: flag jobs whose GPUs sat at ~0% for the policy's window (docs/idle.md).

    \b
      slurmgpu idle --sacct-file week.txt --prometheus http://prom:9090
      slurmgpu idle --since 7d --prometheus http://prom:9090 --format html -o idle.html
      slurmgpu idle --live --prometheus http://prom:9090 --smtp localhost:25

    --live exits 3 when it cancelled or requeued a job (with --dry-run or --emit: it would),
    0 when it acted on none (warnings and mails change no job); 1: an error (docs/acting.md).
    """
    from slurmgpu.accounting.when import parse_when
    from slurmgpu.cli.emit_options import exit_with
    from slurmgpu.cli.report import write_report
    from slurmgpu.idle import IdleOptions
    from slurmgpu.idle import idle as run_idle
    from slurmgpu.measure.options import MeasureOptions
    from slurmgpu.sources.policy_file import default_policy_path
    from slurmgpu.util.emit import EXIT_UNCHANGED, changed_status
    from slurmgpu.views.idle import render_idle

    status = EXIT_UNCHANGED  # a report; --live: 3 when it cancelled or requeued a job
    real_now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    now = parse_when(now_text, now=real_now, option="--now") if now_text else real_now
    measure_opts = MeasureOptions.from_kwargs(measure)
    policy = policy_path or default_policy_path()
    if live:
        from slurmgpu.idle.live import LiveOptions, idle_live
        from slurmgpu.views.idle import render_live

        dry = dry_run or emit_dir is not None
        options = LiveOptions(
            policy, now, measure_opts, state_dir, smtp, webhook, dry, emit_dir=emit_dir
        )
        report = idle_live(options)
        text = render_live(report, fmt)
        status = changed_status(bool(report.acted_on))
    else:
        options = IdleOptions(
            policy=policy,
            files=sacct_files,
            since=parse_when(since, now=now, option="--since") if since else None,
            until=parse_when(until, now=now, option="--until") if until else None,
            measure=measure_opts,
            now=now,
        )
        text = render_idle(run_idle(options), fmt)
    if output == "-":
        click.echo(text, nl=False)
    else:
        write_report(output, text, fmt)
    exit_with(status)
