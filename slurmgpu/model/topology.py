"""The network above the nodes: switches (topology/tree) and NVLink domains (topology/block)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Switch:
    """A `SwitchName=` line: a leaf lists nodes, an upper switch lists child switches."""

    name: str
    nodes: tuple[str, ...] = ()
    switches: tuple[str, ...] = ()
    link_speed: int | None = None
    line: int | None = None  # where it was declared, for messages
    nodes_line: int | None = None
    switches_line: int | None = None


@dataclass(frozen=True)
class Block:
    """A `BlockName=` line: nodes sharing one NVLink domain (e.g. a GB200 NVL72 rack)."""

    name: str
    nodes: tuple[str, ...]
    line: int | None = None


@dataclass(frozen=True)
class TopologySpec:
    """What the site's switch description says, after parsing (not yet checked)."""

    source: str
    switches: tuple[Switch, ...] = ()
    blocks: tuple[Block, ...] = ()
    block_sizes: tuple[int, ...] = ()
    block_sizes_line: int | None = None
