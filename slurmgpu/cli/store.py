"""`slurmgpu ingest`: sacct dumps into the accounting store (docs/store.md)."""

from __future__ import annotations

import click


@click.command("ingest")
@click.option("--store", required=True, type=click.Path(), help="The store directory.")
@click.option(
    "--sacct-file",
    "sacct_files",
    multiple=True,
    required=True,
    type=click.Path(dir_okay=False),
    help="Saved `sacct -P` output with its header (plain or gzip); repeatable.",
)
@click.option("--cluster", default="", help="Cluster name for dumps without a Cluster column.")
@click.option(
    "--timezone",
    "tz",
    default="UTC",
    show_default=True,
    help="Zone of ISO times in the dumps (sacct prints local time).",
)
@click.option(
    "--slurm-version",
    metavar="X.Y",
    help="Slurm that wrote the dumps (24.05+ sums gres/gpuutil over a step's GPUs).",
)
def ingest(
    store: str, sacct_files: tuple[str, ...], cluster: str, tz: str, slurm_version: str | None
) -> None:
    """Add sacct dumps to an accounting store (Parquet by cluster and month); idempotent."""
    from slurmgpu.accounting.store import ingest as run_ingest
    from slurmgpu.accounting.store import usage_sums_for

    summary = run_ingest(
        store,
        list(sacct_files),
        cluster=cluster,
        timezone=tz,
        usage_sums_gpus=usage_sums_for(slurm_version, tz),
    )
    click.echo(summary.text(), nl=False)
