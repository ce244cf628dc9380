"""`slurmgpu mig plan` and `slurmgpu mig apply`: thin click wiring over slurmgpu.mig.

Only click at import time; the planner, renderers and sources load inside the commands.
"""

from __future__ import annotations

import click

from slurmgpu.util import strict

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
    type=strict.IntRange(min=0),
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
    """Choose per-GPU MIG layouts that meet a demand with the fewest GPUs carved.

    Exit 0: printed, or --output FILE already held it; 3: --output FILE written (the plan
    changes nothing on the nodes: `mig apply --dry-run` tells whether a node would change)."""
    from slurmgpu.mig.plan import plan_nodes
    from slurmgpu.views import mig as render_mig

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
    from slurmgpu.cli.emit_options import exit_with
    from slurmgpu.util.emit import emit

    status = emit(text, output)
    if result.unmet:
        missing = ", ".join(f"{k}={v}" for k, v in result.unmet)
        click.secho(f"slurmgpu: warning: demand not met, missing {missing}", fg="yellow", err=True)
    exit_with(status)


@mig.command("apply")
@click.option("--node", required=True, help="The Slurm node (and host) to re-lay out.")
@click.option("--config", "config_name", default=None, help="mig-parted config name to apply.")
@click.option(
    "--config-file",
    type=click.Path(dir_okay=False),
    default="/etc/nvidia-mig-manager/config.yaml",
    show_default=True,
    help="mig-parted config file (slurmgpu mig plan --format mig-parted).",
)
@click.option(
    "--gres-conf",
    type=click.Path(dir_okay=False),
    default="/etc/slurm/gres.conf",
    show_default=True,
    help="gres.conf to rewrite (atomically, validated with slurmd -G).",
)
@click.option(
    "--slurm-conf",
    type=click.Path(dir_okay=False),
    default=None,
    help="File with the node's NodeName= line; its Gres= is updated when counts change.",
)
@click.option(
    "--journal-dir",
    type=click.Path(file_okay=False),
    default="/var/lib/slurmgpu",
    show_default=True,
    help="Where the step journal lives (what --recover reads).",
)
@click.option("--host-root", default="/", show_default=True, help="Host tree for inventory.")
@click.option(
    "--drain-timeout",
    type=strict.FloatRange(min=0),
    default=3600.0,
    show_default=True,
    help="Seconds to wait for jobs.",
)
@click.option(
    "--poll",
    type=strict.FloatRange(min=0, min_open=True),
    default=10.0,
    show_default=True,
    help="Seconds between looks at the node's jobs.",
)
@click.option(
    "--verify-timeout",
    type=strict.FloatRange(min=0),
    default=60.0,
    show_default=True,
    help="Seconds to wait for slurmctld to show the new Gres.",
)
@click.option("--requeue-qos", multiple=True, help="Requeue running jobs of this QOS (repeatable).")
@click.option(
    "--stop-slurmd",
    default="systemctl stop slurmd",
    show_default=True,
    help="Command that stops slurmd on the node.",
)
@click.option(
    "--start-slurmd",
    default="systemctl start slurmd",
    show_default=True,
    help="Command that starts slurmd on the node.",
)
@click.option(
    "--restart-slurmctld",
    default="",
    help="Command run instead of `scontrol reconfigure` when the node's Gres changes "
    "(Slurm 22.05 only takes a new GPU count with File= on a slurmctld restart).",
)
@click.option("--no-check", is_flag=True, help="Do not validate the new gres.conf with slurmd -G.")
@click.option("--slurm-version", default=None, help="Target Slurm X.Y[.Z] for gres.conf.")
@click.option("--recover", is_flag=True, help="Finish or roll back an interrupted apply.")
@click.option(
    "--dry-run", is_flag=True, help="Print the steps and the files' diffs; change nothing."
)
@click.option(
    "--emit",
    "emit_dir",
    type=click.Path(file_okay=False),
    help="Write the new gres.conf (and slurm.conf), a unified diff and the steps into this "
    "directory; change nothing live (docs/mig.md).",
)
def apply(
    node: str,
    config_name: str | None,
    config_file: str,
    gres_conf: str,
    slurm_conf: str | None,
    journal_dir: str,
    host_root: str,
    drain_timeout: float,
    poll: float,
    verify_timeout: float,
    requeue_qos: tuple[str, ...],
    stop_slurmd: str,
    start_slurmd: str,
    restart_slurmctld: str,
    no_check: bool,
    slurm_version: str | None,
    recover: bool,
    dry_run: bool,
    emit_dir: str | None,
) -> None:
    """Drain NODE, apply a MIG layout, rewrite gres.conf, restart slurmd, resume (journaled).

    Exit 3: the node was re-laid out (a run always drains it and restarts slurmd), or
    --recover finished or rolled back a run; 0: --recover found nothing pending; with
    --dry-run or --emit: 3 when a GPU's layout, gres.conf or slurm.conf would change, else 0;
    1: an error, 2: a usage error (docs/acting.md, exit codes)."""
    import shlex
    from pathlib import Path

    from slurmgpu.cli.emit_options import exit_with
    from slurmgpu.cli.gres import _slurm_version
    from slurmgpu.errors import UsageError
    from slurmgpu.mig import apply as apply_mod
    from slurmgpu.render.gres import GresOptions
    from slurmgpu.util.emit import changed_status

    if not recover and not config_name:
        raise UsageError("mig apply: give --config NAME (or --recover)")
    opts = apply_mod.ApplyOptions(
        node=node,
        config_name=config_name or "",
        config_file=Path(config_file),
        gres_conf=Path(gres_conf),
        slurm_conf=Path(slurm_conf) if slurm_conf else None,
        journal_dir=Path(journal_dir),
        host_root=host_root,
        drain_timeout_s=drain_timeout,
        poll_s=poll,
        verify_timeout_s=verify_timeout,
        requeue_qos=requeue_qos,
        stop_slurmd=tuple(shlex.split(stop_slurmd)),
        start_slurmd=tuple(shlex.split(start_slurmd)),
        restart_slurmctld=tuple(shlex.split(restart_slurmctld)),
        # Cores= rules differ by release (gen-gres's --slurm-version): the live one by default
        gres_options=GresOptions(slurm_version=_slurm_version(slurm_version), node_name=node),
    )
    validate = None if no_check else apply_mod.slurmd_check
    if (dry_run or emit_dir) and recover:
        raise UsageError("mig apply: --recover acts on a journal; no --dry-run or --emit with it")
    if dry_run or emit_dir:
        if emit_dir:
            preview = apply_mod.emit(opts, Path(emit_dir), validate_gres=validate)
        else:
            preview = apply_mod.preview(opts, validate_gres=validate)
            click.echo(preview.text(), nl=False)
        exit_with(changed_status(preview.changed))
        return
    if recover:
        journal, acted = apply_mod.recover_run(opts, validate_gres=validate)
    else:
        journal, acted = apply_mod.apply_config(opts, validate_gres=validate), True
    click.echo(f"{node}: mig apply {journal.config_name}: {journal.state}", err=True)
    exit_with(changed_status(acted))
