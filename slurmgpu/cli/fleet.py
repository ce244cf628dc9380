"""Fleet commands (docs/fleet.md): thin click wiring over `slurmgpu.fleet`.

Only click at import time; the library loads inside the commands.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from slurmgpu.errors import ConfigCheckError


def gen_cluster_gres(
    snapshot_paths: Sequence[str],
    snapshot_dir: str | None,
    opts,
    output: str,
    check: bool,
    show_diff: bool,
    node_line: bool,
) -> None:
    """`gen-gres --snapshot A --snapshot B ... | --snapshot-dir DIR`: one cluster-wide file."""
    from pathlib import Path

    from slurmgpu.fleet.cluster_gres import check_cluster_gres
    from slurmgpu.fleet.cluster_gres import gen_cluster_gres as generate
    from slurmgpu.util.atomic import diff_against_file, write_atomic

    result = generate(snapshot_paths, snapshot_dir, opts)
    for warning in result.warnings:
        click.secho(f"slurmgpu: warning: {warning}", fg="yellow", err=True)

    def validate(text: str) -> None:
        checks = check_cluster_gres(result, text)
        bad = [c for c in checks if not c.check.ok]
        if bad:
            raise ConfigCheckError(
                "slurmd -G rejected the generated gres.conf for "
                + "; ".join(f"{c.node}: {' | '.join(c.check.errors[:2])}" for c in bad)
            )
        records = sum(len(c.check.records) for c in checks)
        click.echo(
            f"slurmgpu: check: slurmd -G accepted it for all {len(checks)} nodes "
            f"({records} GRES records)",
            err=True,
        )

    if show_diff:
        sys.stdout.write(diff_against_file(output, result.gres_conf))
        if check:
            validate(result.gres_conf)
        return
    if output == "-":
        if check:
            validate(result.gres_conf)
        if node_line:
            click.echo(result.node_conf)
        click.echo(result.gres_conf, nl=False)
        return
    backup = write_atomic(
        output,
        result.gres_conf,
        validate=(lambda tmp: validate(Path(tmp).read_text(encoding="utf-8"))) if check else None,
    )
    click.echo(f"wrote {output}" + (f" (previous kept as {backup})" if backup else ""), err=True)
    if node_line:
        click.echo(result.node_conf, nl=False)


def inventory_nodes(
    nodes: str | None,
    output_dir: str | None,
    host_root: str,
    remote_command: str,
    srun_args: Sequence[str],
) -> None:
    """`inventory --nodes HOSTLIST --output-dir DIR`: one snapshot per node through srun."""
    import shlex

    from slurmgpu.errors import InventoryError, UsageError
    from slurmgpu.sources.fleet_inventory import inventory_nodes as gather
    from slurmgpu.sources.fleet_inventory import write_snapshots

    if not nodes or not output_dir:
        raise UsageError("--nodes and --output-dir go together")
    results = gather(
        nodes, remote_command=shlex.split(remote_command), host_root=host_root, srun_args=srun_args
    )
    write_snapshots(results, output_dir)
    for r in results:
        for warning in r.warnings:
            click.secho(f"slurmgpu: {r.node}: {warning}", fg="yellow", err=True)
        if r.ok:
            name = r.inventory.node_name
            note = "" if name == r.node else f" (its snapshot names host {name})"
            click.echo(
                f"{r.node}: {len(r.inventory.gpus)} GPUs -> {output_dir}/{r.node}.json{note}"
            )
        else:
            click.echo(f"{r.node}: FAILED: {r.error}")
    failed = [r.node for r in results if not r.ok]
    if failed:
        raise InventoryError(
            f"{len(failed)} of {len(results)} node(s) gave no inventory: {', '.join(failed)} "
            "(the others were written)"
        )
