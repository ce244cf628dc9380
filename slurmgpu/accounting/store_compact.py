"""`slurmgpu store compact` and `slurmgpu store prune`: upkeep of an accounting store.

An ingest that supersedes no stored row of a partition writes only its new rows, as a
delta file beside the partition's files (`store._merge_partitions`). `compact` merges the
files of each partition (of months before `before`) into one; `prune` drops the partitions
of months older than the last `keep_months`. Both as an ingest is crash-safe: new files
under names no manifest lists, then the manifest swapped atomically, then the files no
manifest lists removed (the store's lock held throughout). Neither changes a stored run:
compacting changes no number of any analysis; pruning removes whole months, recorded in the
manifest (`pruned`), the ingested files' row ledger kept as it was read.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from slurmgpu.accounting import store
from slurmgpu.errors import StoreError, UsageError

MONTH = re.compile(r"\d{4}-(0[1-9]|1[0-2])")


@dataclass(frozen=True)
class UpkeepSummary:
    """What one compact or prune did (or, with dry_run, would do)."""

    store: str
    action: str  # "compact" | "prune"
    dry_run: bool
    partitions: tuple[str, ...]  # cluster=C/month=M folders compacted or pruned
    files_before: int  # files of those partitions
    files_after: int
    rows: int  # rows in those partitions (pruned: rows removed)

    def text(self) -> str:
        verb = {"compact": "compacted", "prune": "pruned"}[self.action]
        head = "would be " + verb if self.dry_run else verb
        lines = [
            f"store {self.store}: {len(self.partitions)} partition(s) {head} "
            f"({self.files_before} file(s) -> {self.files_after}, {self.rows} runs)"
        ]
        lines += [f"  {p}" for p in self.partitions]
        return "\n".join(lines) + "\n"


def _open(root: Path) -> dict[str, Any]:
    if not (root / store.MANIFEST).exists():
        raise StoreError(f"{root}: no accounting store here (no {store.MANIFEST})")
    return store.read_manifest(root)


def _this_month(now: datetime | None) -> str:
    return (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m")


def compact(
    path: str | os.PathLike[str],
    *,
    before: str | None = None,
    dry_run: bool = False,
    now: datetime | None = None,
) -> UpkeepSummary:
    """Merge the files of each partition of a month before `before` (YYYY-MM; default: the
    current month, so only closed months) into one file."""
    before = before or _this_month(now)
    if not MONTH.fullmatch(before):
        raise UsageError(f"--before {before!r}: use a month YYYY-MM")
    root = Path(path)
    manifest = _open(root)
    with store._locked(root):
        manifest = _open(root)
        store._remove_unlisted(root, manifest)
        todo = [
            p
            for p in manifest["partitions"]
            if len(store.part_files(p)) > 1 and (p["month"] < before or p["month"] == "unknown")
        ]
        files_before = sum(len(store.part_files(p)) for p in todo)
        if not dry_run and todo:
            ingest_id = uuid.uuid4().hex[:12]
            pause = float(os.environ.get(store.SLEEP_ENV, "0") or 0)
            merged = {}
            for part in todo:
                table = store._read_part(root, part)
                rel = f"{store._folder(part['cluster'], part['month'])}/part-{ingest_id}.parquet"
                store._write_parquet(root / rel, table)
                merged[(part["cluster"], part["month"])] = {
                    "cluster": part["cluster"],
                    "month": part["month"],
                    "path": rel,
                    "rows": table.num_rows,
                }
                if pause:
                    time.sleep(pause)
            manifest["partitions"] = [
                merged.get((p["cluster"], p["month"]), p) for p in manifest["partitions"]
            ]
            store._write_manifest(root, manifest)
            store._remove_unlisted(root, manifest)
    return UpkeepSummary(
        store=os.fspath(root),
        action="compact",
        dry_run=dry_run,
        partitions=tuple(store._folder(p["cluster"], p["month"]) for p in todo),
        files_before=files_before,
        files_after=len(todo),
        rows=sum(int(p["rows"]) for p in todo),
    )


def _months_back(month: str, n: int) -> str:
    """The month `n` months before `month` (YYYY-MM)."""
    year, mon = int(month[:4]), int(month[5:])
    index = year * 12 + (mon - 1) - n
    return f"{index // 12:04d}-{index % 12 + 1:02d}"


def prune(
    path: str | os.PathLike[str],
    *,
    keep_months: int,
    dry_run: bool = False,
    now: datetime | None = None,
) -> UpkeepSummary:
    """Drop the partitions of months before the last `keep_months` (the current month
    counted); the "unknown" month (runs without any time) is kept."""
    if keep_months < 1:
        raise UsageError(f"--keep-months {keep_months}: keep at least 1 month")
    first_kept = _months_back(_this_month(now), keep_months - 1)
    root = Path(path)
    manifest = _open(root)
    with store._locked(root):
        manifest = _open(root)
        store._remove_unlisted(root, manifest)
        old = [p for p in manifest["partitions"] if p["month"] < first_kept]
        if not dry_run and old:
            stamp = (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            gone = {(p["cluster"], p["month"]) for p in old}
            manifest["partitions"] = [
                p for p in manifest["partitions"] if (p["cluster"], p["month"]) not in gone
            ]
            manifest.setdefault("pruned", []).extend(
                {"cluster": p["cluster"], "month": p["month"], "rows": p["rows"], "at": stamp}
                for p in old
            )
            store._write_manifest(root, manifest)
            store._remove_unlisted(root, manifest)
            for p in old:  # the emptied folders (month, then cluster)
                folder = root / store._folder(p["cluster"], p["month"])
                for f in (folder, folder.parent):
                    if f.is_dir() and not any(f.iterdir()):
                        f.rmdir()
    return UpkeepSummary(
        store=os.fspath(root),
        action="prune",
        dry_run=dry_run,
        partitions=tuple(store._folder(p["cluster"], p["month"]) for p in old),
        files_before=sum(len(store.part_files(p)) for p in old),
        files_after=0,
        rows=sum(int(p["rows"]) for p in old),
    )
