"""Check a `TopologySpec` against the nodes, and render topology.conf / topology.yaml."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass

from slurmgpu import __version__
from slurmgpu.errors import TopologyError
from slurmgpu.model.topology import TopologySpec
from slurmgpu.render.guard import check_config_lines
from slurmgpu.render.templating import render
from slurmgpu.util.hostlist import compress_hostlist

# topology/block arrived in Slurm 23.11; topology.yaml (several topologies, chosen per
# partition with Topology=) in 25.05 — earlier releases read only topology.conf.
BLOCK_PLUGIN_SINCE = (23, 11)
TOPOLOGY_YAML_SINCE = (25, 5)


@dataclass(frozen=True)
class TopologyFiles:
    """What gen-topology writes: file name -> text, plus warnings for the admin."""

    files: dict[str, str]
    warnings: tuple[str, ...]


def _where(spec: TopologySpec, line: int | None) -> str:
    return f"{spec.source}:{line}" if line else spec.source


def check_topology(spec: TopologySpec, nodes: list[str] | None = None) -> list[str]:
    """Raise TopologyError for what Slurm would reject or mis-schedule; return warnings.

    `nodes` are the node names from the snapshots; None skips the coverage checks.
    """
    warnings: list[str] = []
    declared = Counter(s.name for s in spec.switches)
    by_name = {s.name: s for s in spec.switches}
    for sw in spec.switches:
        if declared[sw.name] > 1:
            raise TopologyError(f"{_where(spec, sw.line)}: switch {sw.name!r} is declared twice")
    leaf_of: dict[str, str] = {}
    for sw in spec.switches:
        for child in sw.switches:
            if child not in by_name:
                raise TopologyError(
                    f"{_where(spec, sw.switches_line)}: switch {sw.name!r} references unknown "
                    f"switch {child!r}"
                )
            if child == sw.name:
                raise TopologyError(
                    f"{_where(spec, sw.switches_line)}: switch {sw.name!r} lists itself"
                )
        _claim(leaf_of, sw.nodes, sw.name, _where(spec, sw.nodes_line), "under two leaf switches")
    _check_no_cycle(spec)
    parents = {c for s in spec.switches for c in s.switches}
    roots = [s.name for s in spec.switches if s.name not in parents]
    if len(roots) > 1:
        warnings.append(
            f"{len(roots)} top-level switches ({', '.join(sorted(roots))}): jobs cannot span "
            "nodes under different ones; add a switch above them if the fabric is connected"
        )

    block_of: dict[str, str] = {}
    domains = Counter(b.name for b in spec.blocks)
    for block in spec.blocks:
        if domains[block.name] > 1:
            raise TopologyError(f"{_where(spec, block.line)}: domain {block.name!r} declared twice")
        _claim(block_of, block.nodes, block.name, _where(spec, block.line), "in two NVLink domains")
    _check_block_sizes(spec)

    if nodes is not None:
        known = set(nodes)
        for sw in spec.switches:
            for node in sw.nodes:
                if node not in known:
                    raise TopologyError(
                        f"{_where(spec, sw.nodes_line)}: switch {sw.name!r} names node {node!r}, "
                        "which no snapshot describes"
                    )
        for block in spec.blocks:
            for node in block.nodes:
                if node not in known:
                    raise TopologyError(
                        f"{_where(spec, block.line)}: domain {block.name!r} names node "
                        f"{node!r}, which no snapshot describes"
                    )
        if spec.switches:
            # topology.conf(5): "All nodes in the network must be connected to at least one switch"
            orphans = sorted(known - set(leaf_of))
            if orphans:
                raise TopologyError(
                    f"{spec.source}: node(s) {compress_hostlist(orphans)} are under no switch "
                    "(Slurm requires every node to be connected to one)"
                )
        if spec.blocks:
            outside = sorted(known - set(block_of))
            if outside:
                warnings.append(
                    f"node(s) {compress_hostlist(outside)} are in no NVLink domain: "
                    "topology/block will not place jobs there"
                )
    return warnings


def _claim(owner_of: dict[str, str], nodes: tuple[str, ...], owner: str, where: str, what: str):
    """Record `owner` for each node; a node that already has one is an error naming both."""
    for node in nodes:
        if node in owner_of:
            raise TopologyError(
                f"{where}: node {node!r} is {what}, {owner_of[node]!r} and {owner!r}"
            )
        owner_of[node] = owner


def _check_no_cycle(spec: TopologySpec) -> None:
    """Depth-first search with an explicit stack: a 3000-switch chain must not recurse."""
    children = {s.name: s.switches for s in spec.switches}
    lines = {s.name: s.switches_line for s in spec.switches}
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    for sw in spec.switches:
        if sw.name in state:
            continue
        path = [sw.name]
        state[sw.name] = 1
        stack = [iter(children.get(sw.name, ()))]
        while stack:
            child = next(stack[-1], None)
            if child is None:
                state[path.pop()] = 2
                stack.pop()
                continue
            if state.get(child) == 1:
                cycle = " -> ".join([*path[path.index(child) :], child])
                if len(cycle) > 300:
                    cycle = cycle[:297] + "..."
                raise TopologyError(f"{_where(spec, lines[path[-1]])}: switch cycle {cycle}")
            if state.get(child) is None:
                state[child] = 1
                path.append(child)
                stack.append(iter(children.get(child, ())))


def _check_block_sizes(spec: TopologySpec) -> None:
    sizes = spec.block_sizes
    where = _where(spec, spec.block_sizes_line)
    if sizes and not spec.blocks:
        raise TopologyError(f"{where}: block_sizes given but no [[nvlink_domain]] declared")
    # topology.conf(5): successive BlockSizes must be a power of two larger than the prior one
    for lower, upper in itertools.pairwise(sizes):
        ratio, rest = divmod(upper, lower)
        if upper <= lower or rest or ratio & (ratio - 1):
            raise TopologyError(
                f"{where}: block_sizes {list(sizes)}: {upper} is not a power-of-two multiple "
                f"of {lower}"
            )
    if sizes:
        for block in spec.blocks:
            if len(block.nodes) < sizes[0]:
                raise TopologyError(
                    f"{_where(spec, block.line)}: domain {block.name!r} has "
                    f"{len(block.nodes)} nodes, fewer than the base block size {sizes[0]}"
                )


def _header(spec: TopologySpec, snapshot_names: list[str]) -> list[str]:
    # no path: the same description renders the same bytes wherever it was read from
    origin = "from a switch description"
    if snapshot_names:
        origin += (
            f" and {len(snapshot_names)} node snapshot(s): {compress_hostlist(snapshot_names)}"
        )
    return [f"Generated by slurmgpu {__version__} {origin}", "Do not edit: regenerate instead."]


def _statements(plugin: str, spec: TopologySpec) -> list[str]:
    """The topology.conf lines the plugin's layout consists of (one per switch or block)."""
    if plugin == "tree":
        return [
            f"SwitchName={s.name}"
            + (f" Nodes={compress_hostlist(s.nodes)}" if s.nodes else "")
            + (f" Switches={compress_hostlist(s.switches)}" if s.switches else "")
            + (f" LinkSpeed={s.link_speed}" if s.link_speed is not None else "")
            for s in spec.switches
        ]
    lines = [f"BlockName={b.name} Nodes={compress_hostlist(b.nodes)}" for b in spec.blocks]
    if spec.block_sizes:
        lines.append("BlockSizes=" + ",".join(str(s) for s in spec.block_sizes))
    return lines


def render_topology(
    spec: TopologySpec,
    *,
    slurm_version: tuple[int, int],
    plugin: str = "tree",
    nodes: list[str] | None = None,
) -> TopologyFiles:
    """The files Slurm `slurm_version` reads for this fabric.

    topology.conf holds one plugin's layout (`plugin` = tree or block); from 25.05 a
    topology.yaml carries both (tree as the cluster default, the NVLink domains as a block
    topology named `nvlink` that partitions select with `Topology=nvlink`).
    """
    warnings = check_topology(spec, nodes)
    if plugin not in ("tree", "block"):
        raise TopologyError(f"unknown topology plugin {plugin!r} (use tree or block)")
    if plugin == "tree" and not spec.switches:
        raise TopologyError(f"{spec.source}: topology/tree needs at least one [[switch]]")
    if plugin == "block" and not spec.blocks:
        raise TopologyError(f"{spec.source}: topology/block needs at least one [[nvlink_domain]]")
    if plugin == "block" and slurm_version < BLOCK_PLUGIN_SINCE:
        raise TopologyError(
            "topology/block needs Slurm >= 23.11 "
            f"(target is {slurm_version[0]}.{slurm_version[1]:02d})"
        )
    header = _header(spec, sorted(nodes or []))
    switches = [
        {
            "name": s.name,
            "nodes": compress_hostlist(s.nodes) if s.nodes else "",
            "switches": compress_hostlist(s.switches) if s.switches else "",
            "link_speed": s.link_speed,
        }
        for s in spec.switches
    ]
    blocks = [{"name": b.name, "nodes": compress_hostlist(b.nodes)} for b in spec.blocks]
    conf = render(
        "topology.conf.j2",
        header=header,
        plugin=plugin,
        switches=switches,
        blocks=blocks,
        block_sizes=",".join(str(s) for s in spec.block_sizes),
    )
    files = {"topology.conf": check_config_lines(conf, _statements(plugin, spec), "topology")}
    if slurm_version >= TOPOLOGY_YAML_SINCE:
        files["topology.yaml"] = render(
            "topology.yaml.j2",
            header=header,
            default=plugin,
            switches=switches,
            blocks=blocks,
            block_sizes=list(spec.block_sizes),
        )
        warnings.append("Slurm reads topology.yaml first and ignores topology.conf when both exist")
    return TopologyFiles(files=files, warnings=tuple(warnings))
