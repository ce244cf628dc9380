"""`slurmgpu install-units`: the operations kit with the installed command's path."""

from __future__ import annotations

import click

from slurmgpu.cli.emit_options import exit_with


def _site_policy(policy_path: str | None):
    """(the policy's absolute path, the Policy) from --policy, else $SLURMGPU_POLICY, else
    the system-wide file when it exists; (None, None) when there is none."""
    import os
    from pathlib import Path

    from slurmgpu.sources.policy_file import DEFAULT_POLICY_PATH, load_policy

    given = policy_path or os.environ.get("SLURMGPU_POLICY")
    if not given and not Path(DEFAULT_POLICY_PATH).is_file():
        return None, None
    path = os.path.abspath(given or DEFAULT_POLICY_PATH)
    return path, load_policy(path)


@click.command("install-units")
@click.option(
    "--prefix",
    default="/",
    show_default=True,
    metavar="DIR",
    help="Install under DIR (e.g. a staging tree for a package or config management).",
)
@click.option(
    "--bin",
    "executable",
    metavar="PATH",
    help="The slurmgpu command the units run (default: this installation's, e.g. a venv's).",
)
@click.option(
    "--only",
    multiple=True,
    metavar="GROUP",
    help="Only these parts: collect, report, rebalance, idle, store, autopilot, health, "
    "logrotate (repeatable).",
)
@click.option(
    "--policy",
    "policy_path",
    metavar="FILE",
    help="The site policy the units read (default: $SLURMGPU_POLICY, else "
    "/etc/slurmgpu/slurmgpu.toml when it exists): the reports get its tiers, and only the "
    "timers it turns on are suggested.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print what would be written; write nothing (exit 3: something would change).",
)
@click.option(
    "--diff",
    "show_diff",
    is_flag=True,
    help="Print a unified diff of each file that would change; write nothing (exit 3: "
    "something would change, 0: nothing would).",
)
def install_units(
    prefix: str,
    executable: str | None,
    only: tuple[str, ...],
    policy_path: str | None,
    dry_run: bool,
    show_diff: bool,
):
    """Install the systemd units and timers, the HealthCheckProgram wrapper, the epilog
    script and the logrotate config, with ExecStart set to the installed command.

    The `next:` lines enable only the timers this install can run (the light install has no
    analysis extra: no report, ingest or autopilot units) and, of the acting ones, those the
    policy turns on: idle with an [idle] table, autopilot with an [autopilot] table,
    rebalance only when asked for with --only rebalance and no [autopilot]. Exit 0: nothing
    changed; 3: files were written (or would be, with --dry-run)."""
    from slurmgpu.ops.install import (
        analysis_installed,
        chosen_groups,
        next_steps,
        timer_verdicts,
        turned_on,
    )
    from slurmgpu.ops.install import install_units as install
    from slurmgpu.util.emit import changed_status

    analysis = analysis_installed()
    _, left_out = chosen_groups(only, analysis)
    path, policy = _site_policy(policy_path)
    looking = dry_run or show_diff
    installed = install(
        prefix, executable=executable, only=only, dry_run=looking, policy=path, analysis=analysis
    )
    if show_diff:
        from slurmgpu.util.emit import change_of

        for item in installed:
            if item.changed:
                click.echo(change_of(item.path, item.text).diff(), nl=False)
        exit_with(changed_status(any(i.changed for i in installed)))
        return
    for item in installed:
        verb = ("would write" if dry_run else "wrote") if item.changed else "unchanged"
        click.echo(f"{verb} {item.path}")
        if dry_run and item.changed:
            click.echo("".join(f"    {line}\n" for line in item.text.splitlines()), nl=False)
    if left_out:
        click.echo(
            f"note: left out {', '.join(left_out)}: they need the analysis extra "
            "(pip install 'slurmgpu[analysis]')"
        )
    if path is None:
        click.echo(
            "note: no site policy (--policy, $SLURMGPU_POLICY, /etc/slurmgpu/slurmgpu.toml): "
            "the reports show QOS names, no acting timer is enabled"
        )
    on = turned_on(path, policy, only)
    timers = [i.path.name for i in installed if i.path.suffix == ".timer"]
    for note in timer_verdicts(timers, on)[1]:
        click.echo(f"note: {note}")
    for step in next_steps(installed, on):
        click.echo(f"next: {step}")
    exit_with(changed_status(any(i.changed for i in installed)))
