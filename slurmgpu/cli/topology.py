"""`slurmgpu gen-topology`: topology.conf / topology.yaml from snapshots and a switch file."""

from __future__ import annotations

from pathlib import Path

import click

from slurmgpu.cli.emit_options import emit_options, exit_with


def _node_names(ctx: click.Context, param: click.Parameter, value: str | None) -> list[str]:
    """--nodes as a list of valid node names (a hostlist is expanded)."""
    from slurmgpu.model.validate import HOST_NAME
    from slurmgpu.util.hostlist import expand_hostlist

    if not value:
        return []
    try:
        given = expand_hostlist(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from exc
    for name in given:
        bad = HOST_NAME.problem(name)
        if bad:
            raise click.BadParameter(bad, ctx=ctx, param=param)
    return given


@click.command("gen-topology")
@click.argument("snapshots", nargs=-1, type=click.Path(dir_okay=False))
@click.option(
    "--switches",
    "switches_file",
    required=True,
    type=click.Path(dir_okay=False),
    help="TOML description of switches and NVLink domains (see docs/topology.md).",
)
@click.option(
    "--nodes",
    callback=_node_names,
    help="Node names (hostlist) in addition to those of the snapshots.",
)
@click.option("--slurm-version", help="Target Slurm release, e.g. 24.05 (default: installed).")
@click.option(
    "--plugin",
    type=click.Choice(["tree", "block"]),
    default=None,
    help="Layout topology.conf carries (default: tree when switches are given, else block).",
)
@click.option(
    "--output-dir",
    type=click.Path(file_okay=False),
    help="Write topology.conf (and topology.yaml for Slurm >= 25.05) here, atomically.",
)
@emit_options
def gen_topology(
    snapshots: tuple[str, ...],
    switches_file: str,
    nodes: list[str],
    slurm_version: str | None,
    plugin: str | None,
    output_dir: str | None,
    show_diff: bool,
    dry_run: bool,
    emit_dir: str | None,
) -> None:
    """Write Slurm topology files for the nodes in SNAPSHOTS.

    Without --output-dir the files are printed to stdout.
    """
    from slurmgpu.configure.gen_topology import gen_topology as generate

    result = generate(switches_file, snapshots, nodes, slurm_version=slurm_version, plugin=plugin)
    for warning in result.warnings:
        click.secho(f"slurmgpu: warning: {warning}", fg="yellow", err=True)
    if output_dir is None:
        if show_diff or dry_run or emit_dir:
            raise click.UsageError("--diff, --dry-run and --emit need --output-dir DIR")
        for name, text in result.files.items():
            if len(result.files) > 1:
                click.echo(f"# ---- {name} ----")
            click.echo(text, nl=False)
        return
    exit_with(_write_outputs(Path(output_dir), result.files, show_diff, dry_run, emit_dir))


def _write_outputs(
    directory: Path, files: dict[str, str], diff: bool, dry_run: bool, emit_dir: str | None
) -> int:
    from slurmgpu.util.emit import change_of, changed_status, emit, emit_files

    if not directory.is_dir():
        raise click.UsageError(f"--output-dir {directory}: not a directory")
    if emit_dir is not None:
        changes = [change_of(directory / name, text) for name, text in files.items()]
        emit_files(emit_dir, changes)
        return changed_status(any(c.changed for c in changes))
    status = 0
    for name, text in files.items():
        status = max(status, emit(text, directory / name, diff=diff, dry_run=dry_run))
    return status
