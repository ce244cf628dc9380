"""`gen_gres`: gres.conf and the slurm.conf node line for one node (its live inventory or
a snapshot), and `check_gres`: Slurm's own parser (`slurmd -G`) on the result, record by
record. The cluster-wide form (several snapshots) is `fleet.cluster_gres`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from slurmgpu.errors import ConfigCheckError, UsageError


@dataclass(frozen=True)
class GresFiles:
    """What gen-gres writes for one node, and what it warns about (loud ones start with
    `PARTIAL` or `left out`)."""

    inventory: Any  # model.inventory.Inventory
    options: Any  # render.gres.GresOptions
    gres_conf: str
    node_conf: str
    warnings: tuple[str, ...]


def gres_options(slurm_version: str | None = None, **options: Any) -> tuple[Any, tuple[str, ...]]:
    """`render.gres.GresOptions` for the target Slurm (`slurm_version`, default: sinfo
    --version, else the oldest supported) and a warning when the version was assumed."""
    from slurmgpu.render.gres import DEFAULT_SLURM_VERSION, GresOptions, format_version
    from slurmgpu.sources.slurm import target_slurm_version

    version, source = target_slurm_version(slurm_version, default=DEFAULT_SLURM_VERSION)
    notes: tuple[str, ...] = ()
    if source.startswith("default"):
        notes = (
            "cannot detect the Slurm version (sinfo --version, slurmd -V); assuming "
            f"{format_version(DEFAULT_SLURM_VERSION)}: pass --slurm-version X.Y.Z",
        )
    return GresOptions(slurm_version=version, **options), notes


def read_inventory(snapshot_path: str | None, host_root: str | None, allow_partial: bool):
    """The node's inventory: the snapshot, else the accelerators (NVML, amdsmi, DCMI) and the
    host under `host_root`."""
    from slurmgpu.sources import accelerators, snapshot

    if snapshot_path and host_root is not None:
        raise UsageError("--host-root and --snapshot exclude each other: a snapshot is read as is")
    if snapshot_path:
        return snapshot.load(snapshot_path)
    return accelerators.read_inventory(host_root or "/", allow_partial=allow_partial)


def gen_gres(
    options: Any, snapshot_path: str | None = None, host_root: str | None = None
) -> GresFiles:
    """gres.conf and the node line for the node of `snapshot_path` (else this node, read
    live under `host_root`), rendered with `options` (`gres_options`)."""
    from slurmgpu.render import gres
    from slurmgpu.sources import snapshot

    inv = read_inventory(snapshot_path, host_root, options.allow_partial)
    sha = snapshot.inventory_sha256(inv)
    return GresFiles(
        inventory=inv,
        options=options,
        gres_conf=gres.render_gres_conf(inv, options, inventory_sha256=sha),
        node_conf=gres.render_node_conf(inv, options, inventory_sha256=sha),
        warnings=tuple(gres.plan_warnings(inv, options)),
    )


def check_gres(files: GresFiles, text: str, say: Callable[[str], None] = lambda _: None) -> None:
    """Run `slurmd -G` on `text` (gres.conf for `files`' node) and compare its records with
    the generated ones; `say` hears slurmd's notes and each difference. Raises
    `ConfigCheckError` when slurmd rejects it or parses it differently."""
    from slurmgpu.render import gres
    from slurmgpu.sources import slurmd

    inv, opts = files.inventory, files.options
    result = slurmd.check_gres_conf(
        text,
        gres.node_line(inv, opts),
        gres_types=gres.gres_types(opts, inv),
        expected=gres.expected_records(inv, opts),
    )
    for note in result.notes:
        say(note)
    for difference in result.differences:
        say(f"differs: {difference}")
    if result.errors:
        raise ConfigCheckError(
            "slurmd -G rejected the generated gres.conf: " + " | ".join(result.errors[:3])
        )
    if result.differences:
        raise ConfigCheckError(
            f"slurmd -G parsed the generated gres.conf differently "
            f"({len(result.differences)} difference(s), first: {result.differences[0]})"
        )
    say(
        f"slurmd -G parsed {len(result.records)} GRES records, each as generated (count, type, "
        "files, cores, links)"
    )
