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
