"""Where a MIG plan's nodes come from: snapshot files and directories of them."""

from __future__ import annotations

import os
from collections.abc import Sequence

from slurmgpu.model.inventory import Inventory


def load_nodes(
    snapshots: Sequence[str | os.PathLike[str]] = (),
    snapshot_dir: str | os.PathLike[str] | None = None,
) -> list[Inventory]:
    """Inventories from `--snapshot` files and every `*.json` of `--snapshot-dir`, in order."""
    from slurmgpu.sources import snapshot

    return snapshot.load_many(snapshots, snapshot_dir)
