"""`gen_topology`: topology.conf / topology.yaml for the nodes of snapshots and a switch file."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from slurmgpu.errors import UsageError


def gen_topology(
    switches_file: str,
    snapshots: Sequence[str] = (),
    nodes: Sequence[str] = (),
    *,
    slurm_version: str | None = None,
    plugin: str | None = None,
) -> Any:
    """The topology files (`render.topology.TopologyResult`: `files`, `warnings`) for the
    nodes of `snapshots` plus `nodes` (names), laid out by `plugin` (default: tree when the
    switch file has switches, else block) for `slurm_version` (default: installed)."""
    from slurmgpu.render.topology import render_topology
    from slurmgpu.sources.slurm import target_slurm_version
    from slurmgpu.sources.topology_file import load_topology_spec

    spec = load_topology_spec(switches_file)
    names: list[str] = []
    if snapshots:
        from slurmgpu.sources.snapshot import load_snapshot

        for path in snapshots:
            names.append(load_snapshot(path).node_name)
    names.extend(nodes)
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise UsageError(f"node(s) given twice: {', '.join(duplicates)}")
    version, _ = target_slurm_version(slurm_version)
    chosen = plugin or ("tree" if spec.switches else "block")
    return render_topology(
        spec, slurm_version=version[:2], plugin=chosen, nodes=names if names else None
    )
