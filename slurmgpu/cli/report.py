"""`slurmgpu report`: the accounting analysis as text, JSON, HTML or a Prometheus textfile.

Built to run from cron/systemd: output files are written atomically (a reader or
node_exporter never sees half a file), no progress bar unless stderr is a terminal, and
every user mistake is one `slurmgpu: error:` line with a non-zero exit.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from pathlib import Path

import click

FORMATS = ("text", "json", "html", "prom")

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|min|h|d|w)$", re.IGNORECASE)
_UNIT_S = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_when(text: str, *, now: dt.datetime, option: str) -> dt.datetime:
    """`7d`/`12h`/`30m`/`2w` before `now`, `now`, or an ISO date/time (naive = UTC) -> UTC."""
    from slurmgpu.errors import UsageError

    value = text.strip()
    if value.lower() == "now":
        return now
    match = _DURATION.match(value)
    if match:
        return now - dt.timedelta(seconds=float(match.group(1)) * _UNIT_S[match.group(2).lower()])
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"{option} {text!r}: expected a duration back from now (7d, 12h, 30m, 2w), "
            "'now', or a date/time such as 2026-11-01 or 2026-11-01T08:00"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed.astimezone(dt.UTC)


def expand_output(path: str, when: dt.datetime) -> str:
    """Expand strftime codes (`report-%Y-%m-%d.html`) with the report time in UTC."""
    return when.strftime(path) if "%" in path else path


def write_report(path: str | os.PathLike[str], text: str, fmt: str) -> Path:
    """Write a report file atomically (mode 0644, no backup), validating JSON/Prometheus."""
    from slurmgpu.errors import SlurmgpuError, UsageError
    from slurmgpu.render.report import check_prom_text
    from slurmgpu.util.atomic import write_atomic

    target = Path(path)
    if target.is_dir():
        raise UsageError(f"--output {target}: is a directory, give a file name")
    if not target.parent.is_dir():
        raise UsageError(f"--output {target}: directory {target.parent} does not exist")

    def validate(tmp: Path) -> None:
        written = tmp.read_text(encoding="utf-8")
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
    default="7d",
    show_default=True,
    help="Window start: a duration back from --until (7d, 12h, 30m, 2w) or a date/time "
    "(2026-11-01, 2026-11-01T08:00; UTC unless an offset is given).",
)
@click.option("--until", default="now", show_default=True, help="Window end, same forms.")
@click.option(
    "--sacct-file",
    "sacct_files",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    help="Saved `sacct -P` dump with its header line (plain or .gz); repeatable. "
    "Without it the live cluster is queried with sacct.",
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
    "--policy",
    type=click.Path(exists=True, dir_okay=False),
    help="Site policy (tiers, job kinds, GPU types) for tier/kind names and GPU memory.",
)
@click.option(
    "--inventory",
    type=click.Path(exists=True, dir_okay=False),
    help="Node inventory snapshot for partition capacity (else scontrol show node on a live "
    "cluster; unknown for saved dumps).",
)
def report(
    since: str,
    until: str,
    sacct_files: tuple[str, ...],
    fmt: str,
    output: str,
    policy: str | None,
    inventory: str | None,
) -> None:
    """Analyze GPU accounting and write a report (for people, scripts, or Prometheus).

    \b
      slurmgpu report --since 7d
      slurmgpu report --sacct-file week.txt --format html --output week.html
      slurmgpu report --since 1d --format prom \\
          --output /var/lib/prometheus/node-exporter/slurmgpu.prom
    """
    from slurmgpu.accounting import analyze
    from slurmgpu.cli.progress import LoadProgress
    from slurmgpu.errors import UsageError
    from slurmgpu.render.report import render_report

    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    until_t = parse_when(until, now=now, option="--until")
    since_t = parse_when(since, now=until_t, option="--since")
    if since_t >= until_t:
        raise UsageError(f"--since {since} is not before --until {until}")
    label = "reading sacct dumps" if sacct_files else "querying sacct"
    with LoadProgress(label, sacct_files):
        result = analyze(
            sacct_files=list(sacct_files) or None,
            since=since_t,
            until=until_t,
            policy=policy,
            inventory=inventory,
        )
    text = render_report(result.to_dict(), fmt)
    if output == "-":
        click.echo(text, nl=False)
        return
    write_report(expand_output(output, now), text, fmt)
