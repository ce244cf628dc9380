"""Fleet commands (docs/fleet.md): thin click wiring over `slurmgpu.fleet`.

Only click at import time; the library loads inside the commands.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from slurmgpu.errors import ConfigCheckError
from slurmgpu.util import strict


def gen_cluster_gres(
    snapshot_paths: Sequence[str],
    snapshot_dir: str | None,
    opts,
    output: str,
    check: bool,
    writing: dict,
    node_line: bool,
) -> None:
    """`gen-gres --snapshot A --snapshot B ... | --snapshot-dir DIR`: one cluster-wide file."""
    from slurmgpu.cli.emit_options import exit_with
    from slurmgpu.fleet.cluster_gres import check_cluster_gres
    from slurmgpu.fleet.cluster_gres import gen_cluster_gres as generate
    from slurmgpu.util.emit import emit, emit_node_definition

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

    if output == "-":
        if check:
            validate(result.gres_conf)
        if node_line:
            click.echo(result.node_conf)
        click.echo(result.gres_conf, nl=False)
        return
    status = emit(result.gres_conf, output, check=validate if check else None, **writing)
    if node_line and writing["emit_dir"]:
        emit_node_definition(writing["emit_dir"], result.node_conf)
    if node_line and not writing["diff"]:
        click.echo(result.node_conf, nl=False)
    exit_with(status)


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


@click.command("check")
@click.option("--nodes", help="Nodes to check (hostlist; default: every node Slurm knows).")
@click.option(
    "--snapshot-dir",
    type=click.Path(file_okay=False),
    help="Current inventories, NODE.json (from `inventory --nodes ... --output-dir`).",
)
@click.option(
    "--gres-conf", type=click.Path(dir_okay=False, exists=True), help="Installed gres.conf."
)
@click.option("--local", is_flag=True, help="Check this node: live NVML inventory and health.")
@click.option("--node", "node_name", help="With --local: this node's name (default: host name).")
@click.option("--host-root", default="/", show_default=True, help="With --local: host tree.")
@click.option(
    "--health-check",
    is_flag=True,
    help="HealthCheckProgram mode (implies --local): drain on errors, resume when healthy.",
)
@click.option(
    "--kernel-log",
    type=click.Path(dir_okay=False, exists=True),
    help="With --local: where past Xids are read (default: HOST_ROOT/dev/kmsg, else "
    "var/log/kern.log; or a journalctl -k / dmesg text file).",
)
@click.option(
    "--dcgm-metrics",
    metavar="URL|FILE",
    help="With --local: dcgm-exporter's /metrics (DCGM_FI_DEV_XID_ERRORS, the last Xid per GPU).",
)
@click.option(
    "--xid-state",
    type=click.Path(dir_okay=False),
    help="Where the last run's kernel log position is kept (default: "
    "HOST_ROOT/var/lib/slurmgpu/xid-state.json; --health-check moves it on).",
)
@click.option(
    "--clear-xids",
    is_flag=True,
    help="Forget the critical Xids remembered so far (after the GPU was reset) (implies --local).",
)
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@click.option(
    "--prom-file",
    type=click.Path(dir_okay=False),
    help="Also write a Prometheus textfile here (node_exporter textfile collector).",
)
def check(
    nodes: str | None,
    snapshot_dir: str | None,
    gres_conf: str | None,
    local: bool,
    node_name: str | None,
    host_root: str,
    health_check: bool,
    kernel_log: str | None,
    dcgm_metrics: str | None,
    xid_state: str | None,
    clear_xids: bool,
    fmt: str,
    prom_file: str | None,
) -> None:
    """Compare Slurm's view, the GPUs and the config; check GPU health (docs/fleet.md).

    One line per problem with what to do; exit 1 when any error was found.
    """
    import socket
    from pathlib import Path

    from slurmgpu.fleet import check as lib
    from slurmgpu.util.atomic import write_atomic
    from slurmgpu.views import fleet_check

    gres_text = Path(gres_conf).read_text(encoding="utf-8") if gres_conf else None
    if local or health_check or clear_xids:
        from slurmgpu.fleet.xids import XidOptions

        node = node_name or socket.gethostname().split(".")[0]
        xids = XidOptions(
            host_root, kernel_log, dcgm_metrics, xid_state, save=health_check, clear=clear_xids
        )
        report = lib.check_local(node, host_root=host_root, gres_conf=gres_text, xids=xids)
        if health_check:
            report = lib.apply_health_action(node, report)
            if report.action and report.action.kind == "skipped":
                click.secho(f"slurmgpu: warning: {report.action.reason}", fg="yellow", err=True)
    else:
        report = lib.check_cluster(nodes=nodes, snapshot_dir=snapshot_dir, gres_conf=gres_text)
    render = fleet_check.render_json if fmt == "json" else fleet_check.render_text
    click.echo(render(report), nl=False)
    if prom_file:
        write_atomic(prom_file, fleet_check.render_prometheus(report), backup=False, mode=0o644)
    if report.errors:
        sys.exit(1)


def _rebalance_options(f):
    """The thresholds both `rebalance plan` and `rebalance apply` take."""
    options = [
        click.option(
            "--floor",
            type=strict.IntRange(min=0),
            default=1,
            show_default=True,
            help="Nodes every partition keeps.",
        ),
        click.option(
            "--floor-for", multiple=True, metavar="PARTITION=N", help="Floor of one partition."
        ),
        click.option(
            "--min-pending",
            type=strict.IntRange(min=0),
            default=300,
            show_default=True,
            help="Seconds a GPU job must have waited before nodes move for it.",
        ),
        click.option(
            "--min-idle",
            type=strict.IntRange(min=0),
            default=600,
            show_default=True,
            help="Seconds a node must have been idle to be moved.",
        ),
        click.option(
            "--cooldown",
            type=strict.IntRange(min=0),
            default=1800,
            show_default=True,
            help="Seconds before a moved node may move again.",
        ),
        click.option(
            "--max-moves",
            type=strict.IntRange(min=0),
            default=4,
            show_default=True,
            help="Moves per run.",
        ),
        click.option(
            "--log",
            "log_path",
            default="/var/lib/slurmgpu/rebalance.jsonl",
            show_default=True,
            help="Change log (JSON lines): every move with its reason; --undo reads it.",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _opts(floor, floor_for, min_pending, min_idle, cooldown, max_moves):
    from slurmgpu.errors import UsageError
    from slurmgpu.fleet.rebalance import RebalanceOptions
    from slurmgpu.util import numbers

    floors = {}
    for item in floor_for:
        name, sep, value = item.partition("=")
        if not sep or not numbers.is_ascii_digits(value):  # not `٣` or `²` (isdigit takes them)
            raise UsageError(f"--floor-for {item!r}: use PARTITION=N")
        floors[name] = int(value)
    return RebalanceOptions(floor, floors, min_pending, min_idle, cooldown, max_moves)


@click.group("rebalance")
def rebalance() -> None:
    """Move whole idle nodes to partitions whose GPU jobs wait (docs/rebalance.md)."""


@rebalance.command("plan")
@_rebalance_options
def rebalance_plan(floor, floor_for, min_pending, min_idle, cooldown, max_moves, log_path):
    """Show the moves `apply` would make, with reasons (changes nothing).

    Exit 0: no move; 3: `apply` would move nodes (docs/acting.md, exit codes)."""
    from pathlib import Path

    from slurmgpu.cli.emit_options import exit_with
    from slurmgpu.fleet.rebalance import current_plan
    from slurmgpu.util.emit import changed_status
    from slurmgpu.views.rebalance import render_plan

    opts = _opts(floor, floor_for, min_pending, min_idle, cooldown, max_moves)
    plan = current_plan(opts, Path(log_path))
    click.echo(render_plan(plan, applied=False), nl=False)
    exit_with(changed_status(bool(plan.moves)))


@rebalance.command("apply")
@_rebalance_options
@click.option("--dry-run", is_flag=True, help="Print the plan and change nothing.")
@click.option("--undo", is_flag=True, help="Put back the partitions of the last apply.")
@click.option(
    "--partitions-conf",
    type=click.Path(dir_okay=False),
    help="The slurm.conf include file rebalance owns (its PartitionName= lines): moves are "
    "written there too, so `scontrol reconfigure` keeps them (docs/rebalance.md).",
)
@click.option(
    "--transient",
    is_flag=True,
    help="Without --partitions-conf: make the moves in slurmctld's memory only (the next "
    "`scontrol reconfigure` or restart undoes them); a live apply needs one of the two.",
)
@click.option(
    "--emit",
    "emit_dir",
    type=click.Path(file_okay=False),
    help="Write the new --partitions-conf and a unified diff into this directory; change "
    "nothing live.",
)
def rebalance_apply(
    floor,
    floor_for,
    min_pending,
    min_idle,
    cooldown,
    max_moves,
    log_path,
    dry_run,
    undo,
    partitions_conf,
    transient,
    emit_dir,
):
    """Move the nodes with `scontrol update PartitionName=... Nodes=...` and log each move.

    Exit 0: nothing moved (and, with --dry-run or --emit, nothing would); 3: nodes moved, a
    killed run's move was finished or undone, or --undo set a partition back (with --dry-run
    or --emit: the plan has moves); 1: an error (docs/acting.md, exit codes)."""
    from pathlib import Path

    from slurmgpu.cli.emit_options import exit_with
    from slurmgpu.fleet import rebalance as lib
    from slurmgpu.util.emit import changed_status
    from slurmgpu.views.rebalance import render_plan

    log, conf = Path(log_path), Path(partitions_conf) if partitions_conf else None
    if undo:
        result = lib.undo_last(log, partitions_conf=conf)
        for name, hostlist in sorted(result.restored.items()):
            click.echo(f"restored PartitionName={name} Nodes={hostlist}")
        for name, hostlist in sorted(result.unchanged.items()):
            click.echo(f"unchanged PartitionName={name} Nodes={hostlist} (already so: nothing set)")
        exit_with(changed_status(bool(result.restored) or result.conf_written))
        return
    opts = _opts(floor, floor_for, min_pending, min_idle, cooldown, max_moves)
    notes: list[str] = []
    plan = lib.rebalance_apply(
        opts,
        log,
        partitions_conf=conf,
        dry_run=dry_run,
        emit_dir=Path(emit_dir) if emit_dir else None,
        transient=transient,
        notes=notes,
    )
    for note in notes:  # what a killed run had left pending, and what was done about it
        click.echo(f"recovered: {note}")
    applied = not dry_run and emit_dir is None
    click.echo(render_plan(plan, applied=applied, durable=str(conf) if conf else None), nl=False)
    exit_with(changed_status(bool(plan.moves) or bool(notes)))
