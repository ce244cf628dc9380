"""Read the site's switch / NVLink-domain description (TOML) into a `TopologySpec`.

Format (documented in docs/topology.md):

    block_sizes = [18]                 # optional, topology/block planning sizes
    [[switch]]
    name = "leaf1"
    nodes = "dgx[01-04]"               # a hostlist, or a list of hostlists
    [[switch]]
    name = "spine"
    switches = "leaf[1-2]"
    link_speed = 400                   # optional, arbitrary units (Slurm ignores it today)
    [[nvlink_domain]]
    name = "rack1"
    nodes = "gb200-r1n[01-18]"
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from slurmgpu.errors import TopologyError
from slurmgpu.model.topology import Block, Switch, TopologySpec
from slurmgpu.model.validate import HOST_NAME, SWITCH_NAME
from slurmgpu.util.hostlist import MAX_HOSTS, ExpansionLimitError, expand_hostlist
from slurmgpu.util.tomlpos import KeyLines

_UINT32 = 2**32 - 1
_TOP_KEYS = {"block_sizes", "switch", "nvlink_domain"}
_SWITCH_KEYS = {"name", "nodes", "switches", "link_speed"}
_DOMAIN_KEYS = {"name", "nodes"}


class _Ctx:
    def __init__(self, path: str, text: str) -> None:
        self.path, self.text = path, text
        self.lines = KeyLines(text)
        self.names_left = MAX_HOSTS  # names expanded in the whole file, not per hostlist

    def line(self, table: str, key: str | None, index: int = 0) -> int | None:
        return self.lines.find(table, key, index)

    def fail(self, table: str, index: int, key: str | None, message: str) -> TopologyError:
        line = self.line(table, key, index)
        where = f"{self.path}:{line}" if line else self.path
        label = f"{table}[{index}].{key}" if key else f"{table}[{index}]"
        if not table:
            label = key or "(top level)"
        return TopologyError(f"{where}: {label}: {message}")


def load_topology_spec(path: str | Path) -> TopologySpec:
    """Parse and shape-check the description; raises TopologyError naming file, line and key."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # a UTF-8 byte order mark is dropped
    except OSError as exc:
        raise TopologyError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise TopologyError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    return parse_topology_spec(text, str(path))


def parse_topology_spec(text: str, source: str = "<topology>") -> TopologySpec:
    ctx = _Ctx(source, text)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TopologyError(f"{source}: not valid TOML: {exc}") from exc
    except RecursionError:
        raise TopologyError(f"{source}: not valid TOML: nested too deeply") from None
    except ValueError as exc:  # e.g. a 5000-digit integer (int max str digits)
        raise TopologyError(f"{source}: not valid TOML: {exc}") from None
    for key in data:
        if key not in _TOP_KEYS:
            raise ctx.fail("", 0, key, f"unknown key (expected one of {sorted(_TOP_KEYS)})")

    switches = tuple(_switch(ctx, i, raw) for i, raw in enumerate(_table_list(ctx, data, "switch")))
    blocks = tuple(
        _block(ctx, i, raw) for i, raw in enumerate(_table_list(ctx, data, "nvlink_domain"))
    )
    sizes_raw = data.get("block_sizes", [])
    if not isinstance(sizes_raw, list) or not all(
        isinstance(s, int) and not isinstance(s, bool) and 0 < s <= MAX_HOSTS for s in sizes_raw
    ):
        raise ctx.fail(
            "", 0, "block_sizes", f"expected a list of positive integers (at most {MAX_HOSTS})"
        )
    return TopologySpec(
        source=source,
        switches=switches,
        blocks=blocks,
        block_sizes=tuple(sizes_raw),
        block_sizes_line=ctx.line("", "block_sizes") if sizes_raw else None,
    )


def _table_list(ctx: _Ctx, data: dict, key: str) -> list[dict]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ctx.fail("", 0, key, f"expected [[{key}]] tables")
    return value


def _name(ctx: _Ctx, table: str, i: int, raw: dict) -> str:
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ctx.fail(table, i, "name" if "name" in raw else None, "a non-empty name is required")
    if len(name) > 64:  # topology.conf(5): "cannot be longer than 64 characters"
        raise ctx.fail(table, i, "name", "longer than 64 characters (Slurm's limit)")
    bad = SWITCH_NAME.problem(name)
    if bad:
        raise ctx.fail(table, i, "name", bad)
    return name


def _hostlists(ctx: _Ctx, table: str, i: int, raw: dict, key: str) -> tuple[str, ...]:
    value = raw.get(key)
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(v, str) for v in items):
        raise ctx.fail(table, i, key, "expected a hostlist string or a list of them")
    names: list[str] = []
    for item in items:
        try:
            names.extend(expand_hostlist(item, limit=max(ctx.names_left - len(names), 0)))
        except ExpansionLimitError as exc:
            raise ctx.fail(table, i, key, f"{exc} (in the whole file)") from exc
        except ValueError as exc:
            raise ctx.fail(table, i, key, str(exc)) from exc
    ctx.names_left -= len(names)
    rule = HOST_NAME if key == "nodes" else SWITCH_NAME
    for name in names:
        bad = rule.problem(name)
        if bad:
            raise ctx.fail(table, i, key, bad)
    return tuple(names)


def _switch(ctx: _Ctx, i: int, raw: dict) -> Switch:
    for key in raw:
        if key not in _SWITCH_KEYS:
            raise ctx.fail("switch", i, key, f"unknown key (expected {sorted(_SWITCH_KEYS)})")
    name = _name(ctx, "switch", i, raw)
    nodes = _hostlists(ctx, "switch", i, raw, "nodes")
    children = _hostlists(ctx, "switch", i, raw, "switches")
    if not nodes and not children:
        raise ctx.fail("switch", i, "name", f"switch {name!r} has neither nodes nor switches")
    speed = raw.get("link_speed")
    if speed is not None and (
        not isinstance(speed, int) or isinstance(speed, bool) or not 0 <= speed <= _UINT32
    ):  # topology.conf LinkSpeed is a 32-bit unsigned number in Slurm
        raise ctx.fail("switch", i, "link_speed", f"expected an integer 0..{_UINT32}")
    return Switch(
        name,
        nodes,
        children,
        speed,
        line=ctx.line("switch", None, i),
        nodes_line=ctx.line("switch", "nodes", i) if nodes else None,
        switches_line=ctx.line("switch", "switches", i) if children else None,
    )


def _block(ctx: _Ctx, i: int, raw: dict) -> Block:
    for key in raw:
        if key not in _DOMAIN_KEYS:
            raise ctx.fail(
                "nvlink_domain", i, key, f"unknown key (expected {sorted(_DOMAIN_KEYS)})"
            )
    name = _name(ctx, "nvlink_domain", i, raw)
    nodes = _hostlists(ctx, "nvlink_domain", i, raw, "nodes")
    if not nodes:
        raise ctx.fail("nvlink_domain", i, "nodes", f"domain {name!r} lists no nodes")
    return Block(name, nodes, ctx.line("nvlink_domain", "nodes", i))
