"""Where a MIG plan's nodes come from: snapshot files and directories of them."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from slurmgpu.errors import SnapshotError, UsageError
from slurmgpu.model.inventory import Inventory


def load_nodes(
    snapshots: Sequence[str | os.PathLike[str]] = (),
    snapshot_dir: str | os.PathLike[str] | None = None,
) -> list[Inventory]:
    """Inventories from `--snapshot` files and every `*.json` of `--snapshot-dir`, in order."""
    from slurmgpu.sources import snapshot

    paths = [Path(p) for p in snapshots]
    if snapshot_dir is not None:
        directory = Path(snapshot_dir)
        if not directory.is_dir():
            raise UsageError(f"--snapshot-dir {directory}: not a directory")
        found = sorted(directory.glob("*.json"))
        if not found:
            raise UsageError(f"--snapshot-dir {directory}: no *.json snapshot in it")
        paths += found
    out = []
    for path in paths:
        try:
            out.append(snapshot.load(path))
        except UnicodeDecodeError as exc:  # a binary file given as a snapshot
            raise SnapshotError(f"{path}: not a JSON snapshot ({exc.reason})") from None
    return out
