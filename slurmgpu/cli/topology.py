"""`slurmgpu gen-topology`: topology.conf / topology.yaml from snapshots and a switch file."""

from __future__ import annotations

from pathlib import Path

import click


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
@click.option("--diff", is_flag=True, help="Show what would change in --output-dir; write nothing.")
def gen_topology(
    snapshots: tuple[str, ...],
    switches_file: str,
    nodes: str | None,
    slurm_version: str | None,
    plugin: str | None,
    output_dir: str | None,
    diff: bool,
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
        for name, text in result.files.items():
            if len(result.files) > 1:
                click.echo(f"# ---- {name} ----")
            click.echo(text, nl=False)
        return
    _write_outputs(Path(output_dir), result.files, diff)


def _write_outputs(directory: Path, files: dict[str, str], diff: bool) -> None:
    from slurmgpu.util.atomic import diff_against_file, read_existing, write_atomic

    if not directory.is_dir():
        raise click.UsageError(f"--output-dir {directory}: not a directory")
    for name, text in files.items():
        target = directory / name
        if diff:
            click.echo(diff_against_file(target, text), nl=False)
            continue
        if read_existing(target) == text:
            click.echo(f"{target}: unchanged", err=True)
            continue
        backup = write_atomic(target, text)
        note = f" (previous kept as {backup})" if backup else ""
        click.echo(f"{target}: written{note}", err=True)
