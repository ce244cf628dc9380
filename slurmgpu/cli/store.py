"""`slurmgpu ingest`: sacct dumps or a live sacct window into the accounting store
(docs/store.md)."""

from __future__ import annotations

import click


@click.command("ingest")
@click.option("--store", required=True, type=click.Path(), help="The store directory.")
@click.option(
    "--sacct-file",
    "sacct_files",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="Saved `sacct -P` output with its header (plain or gzip); repeatable.",
)
@click.option("--since", help="Instead of files: query sacct from then (ISO date/time or 7d).")
@click.option("--until", help="End of the live query (default: now).")
@click.option(
    "--cluster",
    default="",
    help="The cluster: names dumps without a Cluster column; live, the cluster queried (-M).",
)
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
    help="Slurm that wrote the dumps (24.05+ sums gres/gpuutil over a step's GPUs); live: "
    "asked from Slurm.",
)
@click.option(
    "--chunk-hours",
    type=click.FloatRange(min=0, min_open=True),
    default=24.0,
    show_default=True,
    help="Live query: one sacct call per this many hours (bounds memory).",
)
def ingest(
    store: str,
    sacct_files: tuple[str, ...],
    since: str | None,
    until: str | None,
    cluster: str,
    tz: str,
    slurm_version: str | None,
    chunk_hours: float,
) -> None:
    """Add sacct dumps (or a live sacct window) to an accounting store: Parquet by cluster
    and month, idempotent and crash-safe."""
    from slurmgpu.accounting.store import ingest_command

    summary = ingest_command(
        store,
        list(sacct_files),
        since=since,
        until=until,
        cluster=cluster,
        timezone=tz,
        slurm_version=slurm_version,
        chunk_hours=chunk_hours,
    )
    click.echo(summary.text(), nl=False)
