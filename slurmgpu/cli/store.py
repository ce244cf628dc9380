"""`slurmgpu ingest`: sacct dumps or a live sacct window into the accounting store
(docs/store.md)."""

from __future__ import annotations

import click

from slurmgpu.util import strict


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
    type=strict.FloatRange(min=0, min_open=True),
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


@click.group("store")
def store() -> None:
    """Upkeep of an accounting store: compact a month's files into one, prune old months."""


_STORE = click.option("--store", "path", required=True, type=click.Path(), help="The store.")
_DRY = click.option("--dry-run", is_flag=True, help="Say what would change; change nothing.")


@store.command("compact")
@_STORE
@click.option(
    "--before",
    metavar="YYYY-MM",
    help="Compact the months before this one (default: the current month, so closed months).",
)
@_DRY
def compact(path: str, before: str | None, dry_run: bool) -> None:
    """Merge each month partition's files (an ingest's delta files) into one, atomically."""
    from slurmgpu.accounting.store_compact import compact as run

    click.echo(run(path, before=before, dry_run=dry_run).text(), nl=False)


@store.command("prune")
@_STORE
@click.option(
    "--keep-months",
    required=True,
    type=strict.Int(),
    help="Keep this many months, the current one counted; drop older month partitions.",
)
@_DRY
def prune(path: str, keep_months: int, dry_run: bool) -> None:
    """Drop the month partitions older than --keep-months (recorded in the manifest)."""
    from slurmgpu.accounting.store_compact import prune as run

    click.echo(run(path, keep_months=keep_months, dry_run=dry_run).text(), nl=False)
