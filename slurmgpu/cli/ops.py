"""`slurmgpu install-units`: the operations kit with the installed command's path."""

from __future__ import annotations

import click


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
    help="Only these parts: collect, report, rebalance, idle, store, health, logrotate "
    "(repeatable).",
)
@click.option("--dry-run", is_flag=True, help="Print what would be written; write nothing.")
def install_units(prefix: str, executable: str | None, only: tuple[str, ...], dry_run: bool):
    """Install the systemd units and timers, the HealthCheckProgram wrapper, the epilog
    script and the logrotate config, with ExecStart set to the installed command."""
    from slurmgpu.ops.install import install_units as install
    from slurmgpu.ops.install import next_steps

    installed = install(prefix, executable=executable, only=only, dry_run=dry_run)
    for item in installed:
        verb = ("would write" if dry_run else "wrote") if item.changed else "unchanged"
        click.echo(f"{verb} {item.path}")
        if dry_run and item.changed:
            click.echo("".join(f"    {line}\n" for line in item.text.splitlines()), nl=False)
    for step in next_steps(installed):
        click.echo(f"next: {step}")
