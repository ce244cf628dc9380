"""The options every command that writes a generated file shares (`util.emit` behind them)."""

from __future__ import annotations

import click


def emit_options(f):
    """`--diff`, `--dry-run` and `--emit DIR`, passed on as show_diff, dry_run and emit_dir."""
    options = [
        click.option(
            "--diff",
            "show_diff",
            is_flag=True,
            help="Show a unified diff against the output file and write nothing; exit 3 when "
            "they differ, 0 when equal (docs/acting.md, exit codes).",
        ),
        click.option(
            "--dry-run",
            is_flag=True,
            help="Say what would be written, with its diff; write nothing (exit 3: it would "
            "change, 0: it would not).",
        ),
        click.option(
            "--emit",
            "emit_dir",
            type=click.Path(file_okay=False),
            help="Write the new file and a unified diff against the live one into this "
            "directory (for Ansible/Salt/git); leave the live file alone (exit 3: the live "
            "file would change, 0: it would not).",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def exit_with(status: int) -> None:
    """End the command with `emit`'s status (util.emit.EXIT_CHANGED: it changed or would)."""
    if status:
        raise SystemExit(status)
