"""`slurmgpu collect`: the node agent (a pass per timer tick; `--epilog` at job end)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import click

DEFAULT_STATE = "/var/lib/slurmgpu/collect-state.json"


@click.command("collect")
@click.option(
    "--state",
    type=click.Path(dir_okay=False, path_type=Path),
    default=DEFAULT_STATE,
    show_default=True,
    help="The running per-job summaries (small JSON, replaced atomically).",
)
@click.option(
    "--textfile",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write a Prometheus textfile here (node_exporter's textfile directory, *.prom).",
)
@click.option(
    "--host-root",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default="/",
    show_default=True,
    help="Read /proc and /etc/passwd under this root.",
)
@click.option("--node", help="Slurm node name [default: $SLURMD_NODENAME, else the host name].")
@click.option("--cluster", help="Cluster name [default: $SLURM_CLUSTER_NAME].")
@click.option("--epilog", is_flag=True, help="Store the ending job's summary (Epilog=); exits 0.")
@click.option(
    "--spool",
    type=click.Path(file_okay=False, path_type=Path),
    help="With --epilog: also store the summary in this directory.",
)
@click.option(
    "--admin-comment/--no-admin-comment",
    default=True,
    show_default=True,
    help="With --epilog: merge the summary into the job's AdminComment (sacctmgr).",
)
@click.option(
    "--log-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Append log lines here too (an Epilog's stderr goes nowhere).",
)
def collect(
    state: Path,
    textfile: Path | None,
    host_root: Path,
    node: str | None,
    cluster: str | None,
    epilog: bool,
    spool: Path | None,
    admin_comment: bool,
    log_file: Path | None,
) -> None:
    """Sample this node's GPUs and attribute them to Slurm jobs; at job end store the summary."""
    from slurmgpu.measure import collector

    collector.setup_logging(log_file)
    options = collector.CollectOptions(
        state=state,
        node=node or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0],
        cluster=cluster or os.environ.get("SLURM_CLUSTER_NAME", ""),
        host_root=host_root,
        textfile=textfile,
        spool=spool,
        admin_comment=admin_comment,
    )
    if epilog:
        raise SystemExit(collector.epilog(options))
    result = collector.collect(options)
    blind = f" ({result.without_utilization} without utilization: MIG)"
    click.echo(
        f"{result.devices} GPU devices{blind if result.without_utilization else ''}, "
        f"jobs: {' '.join(result.jobs) or 'none'}"
        + (f", {len(result.errors)} errors" if result.errors else "")
    )
