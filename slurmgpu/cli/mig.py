"""`slurmgpu mig plan` and `slurmgpu mig apply`: thin click wiring over slurmgpu.mig.

Only click at import time; the planner, renderers and sources load inside the commands.
"""

from __future__ import annotations

import click

FORMATS = ("text", "mig-parted", "gres")


@click.group()
def mig() -> None:
    """Plan MIG layouts from demand, and apply one to a Slurm node (see docs/mig.md)."""


@mig.command("plan")
@click.option(
    "--snapshot",
    "snapshots",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="A node's inventory snapshot (repeatable).",
)
@click.option(
    "--snapshot-dir",
    type=click.Path(file_okay=False),
    help="Every *.json snapshot in this directory.",
)
@click.option(
    "--demand",
    "demand_items",
    multiple=True,
    metavar="PROFILE=COUNT",
    help="Instances wanted at once: 1g.10gb=6, or a slice size 3g=2 (repeatable).",
)
@click.option(
    "--sacct-file",
    "sacct_files",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="Measure the demand from sacct dumps: p95 concurrency per slice size.",
)
@click.option(
    "--gpu-model",
    default=None,
    help="GPU model whose slices --sacct-file demand is counted in (default: the nodes').",
)
@click.option(
    "--keep-whole",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="GPUs per node that stay whole (for training jobs).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="text",
    show_default=True,
    help="text: a table per GPU; mig-parted: its config file; gres: gres.conf + node lines.",
)
@click.option("--config-prefix", default="slurmgpu-", show_default=True, help="mig-parted name.")
@click.option("--slurm-version", default=None, help="Target Slurm for --format gres.")
@click.option("--output", "-o", default="-", show_default=True, help="File to write, or -.")
def plan(
    snapshots: tuple[str, ...],
    snapshot_dir: str | None,
    demand_items: tuple[str, ...],
    sacct_files: tuple[str, ...],
    gpu_model: str | None,
    keep_whole: int,
    fmt: str,
    config_prefix: str,
    slurm_version: str | None,
    output: str,
) -> None:
    """Choose per-GPU MIG layouts that meet a demand with the fewest GPUs carved."""
    from slurmgpu.mig.plan import plan_nodes
    from slurmgpu.render import mig as render_mig

    result = plan_nodes(
        snapshots=snapshots,
        snapshot_dir=snapshot_dir,
        demand_items=demand_items,
        sacct_files=sacct_files,
        gpu_model=gpu_model,
        keep_whole=keep_whole,
        config_prefix=config_prefix,
    )
    if fmt == "mig-parted":
        text = render_mig.render_mig_parted(result)
    elif fmt == "gres":
        from slurmgpu.cli.gres import _slurm_version
        from slurmgpu.render.gres import GresOptions

        text = render_mig.render_gres_preview(
            result, GresOptions(slurm_version=_slurm_version(slurm_version))
        )
    else:
        text = render_mig.render_text(result)
    if output == "-":
        click.echo(text, nl=False)
    else:
        from slurmgpu.util.atomic import write_atomic

        write_atomic(output, text)
        click.echo(f"wrote {output}", err=True)
    if result.unmet:
        missing = ", ".join(f"{k}={v}" for k, v in result.unmet)
        click.secho(f"slurmgpu: warning: demand not met, missing {missing}", fg="yellow", err=True)
