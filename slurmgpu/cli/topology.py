"""`slurmgpu gen-topology`: topology.conf / topology.yaml from snapshots and a switch file."""

from __future__ import annotations

from pathlib import Path

import click

from slurmgpu.cli.emit_options import emit_options, exit_with


@click.command("gen-topology")
@click.argument("snapshots", nargs=-1, type=click.Path(dir_okay=False))
@click.option(
    "--switches",
    "switches_file",
    required=True,
    type=click.Path(dir_okay=False),
    help="TOML description of switches and NVLink domains (see docs/topology.md).",
)
@click.option("--nodes", help="Node names (hostlist) in addition to those of the snapshots.")
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
    nodes: str | None,
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
    from slurmgpu.model.validate import HOST_NAME
    from slurmgpu.render.topology import render_topology
    from slurmgpu.sources.slurm import target_slurm_version
    from slurmgpu.sources.topology_file import load_topology_spec
    from slurmgpu.util.hostlist import expand_hostlist

    spec = load_topology_spec(switches_file)
    names: list[str] = []
    if snapshots:
        from slurmgpu.sources.snapshot import load_snapshot

        for path in snapshots:
            names.append(load_snapshot(path).node_name)
    if nodes:
        try:
            given = expand_hostlist(nodes)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--nodes") from exc
        for name in given:
            bad = HOST_NAME.problem(name)
            if bad:
                raise click.BadParameter(bad, param_hint="--nodes")
        names.extend(given)
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise click.UsageError(f"node(s) given twice: {', '.join(duplicates)}")
    version, _ = target_slurm_version(slurm_version)
    chosen = plugin or ("tree" if spec.switches else "block")
    result = render_topology(
        spec, slurm_version=version[:2], plugin=chosen, nodes=names if names else None
    )
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
    from slurmgpu.util.emit import change_of, emit, emit_files

    if not directory.is_dir():
        raise click.UsageError(f"--output-dir {directory}: not a directory")
    if emit_dir is not None:
        emit_files(emit_dir, [change_of(directory / name, text) for name, text in files.items()])
        return 0
    status = 0
    for name, text in files.items():
        status = max(status, emit(text, directory / name, diff=diff, dry_run=dry_run))
    return status
