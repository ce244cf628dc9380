"""The GPU GRES the cluster's nodes offer (`sinfo -N -o %N|%G`), cached briefly per user.

The wrapper asks on every submission, so the answer is kept for `ttl_s` seconds in
`$XDG_CACHE_HOME/slurmgpu/` (default `~/.cache/slurmgpu/`), one file per `SLURM_CONF`.
A cache that cannot be read or written is simply skipped. The cache holds the parsed items as
plain lines, so a cache hit imports nothing beyond `os` and `time` (this is the wrapper's
start-up path; see benchmarks/bench_submit.py).
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Mapping

from slurmgpu.model.slicing import NodeGres

DEFAULT_TTL_S = 60.0
_CACHE_VERSION = "slurmgpu-gres-cache 1"


def cache_path(env: Mapping[str, str] | None = None) -> str:
    """The per-user cache file for the cluster `SLURM_CONF` names.

    (os.path, not pathlib: pathlib's import is a measurable part of the wrapper's start-up.)
    """
    environ = {**os.environ, **(env or {})}
    cache_home = environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    conf = environ.get("SLURM_CONF", "/etc/slurm/slurm.conf")
    name = "gres-" + re.sub(r"[^A-Za-z0-9_.-]", "_", conf.strip("/")) + ".txt"
    return os.path.join(cache_home, "slurmgpu", name)


def parse_sinfo_gres(text: str) -> list[NodeGres]:
    """Lines `NODE|GRES` (sinfo -h -N -o '%N|%G') -> one NodeGres per node."""
    from slurmgpu.sources.slurm import parse_gres_string

    nodes: dict[str, NodeGres] = {}
    for line in text.splitlines():
        if "|" not in line:
            continue
        node, _, gres = line.partition("|")
        try:
            items = tuple((g.name, g.type, g.count) for g in parse_gres_string(gres))
        except ValueError:
            continue  # a GRES string this parser does not know: that node offers no slices
        nodes.setdefault(node.strip(), NodeGres(node.strip(), items))
    return list(nodes.values())


def format_cache(nodes: list[NodeGres], now: float) -> str:
    """The cache file text: a header with the time, then `node<TAB>name,type,count;...`."""
    lines = [f"{_CACHE_VERSION} {now:.3f}"]
    for n in nodes:
        items = ";".join(f"{name},{gtype or ''},{count}" for name, gtype, count in n.items)
        lines.append(f"{n.node}\t{items}")
    return "\n".join(lines) + "\n"


def parse_cache(text: str, now: float, ttl_s: float) -> list[NodeGres] | None:
    """The cached nodes, or None when the cache is stale or not ours."""
    header, _, body = text.partition("\n")
    prefix, _, stamp = header.rpartition(" ")
    if prefix != _CACHE_VERSION or now - float(stamp) >= ttl_s:
        return None
    nodes = []
    for line in body.splitlines():
        node, _, items = line.partition("\t")
        parsed = []
        for item in filter(None, items.split(";")):
            name, gtype, count = item.split(",")
            parsed.append((name, gtype or None, int(count)))
        nodes.append(NodeGres(node, tuple(parsed)))
    return nodes


def node_gres(env: Mapping[str, str] | None = None, ttl_s: float = DEFAULT_TTL_S) -> list[NodeGres]:
    """The nodes' GRES, from the cache when younger than `ttl_s`, else from sinfo."""
    path = cache_path(env)
    now = time.time()
    with contextlib.suppress(OSError, ValueError), open(path, encoding="utf-8") as fh:
        cached = parse_cache(fh.read(), now, ttl_s)
        if cached is not None:
            return cached
    from slurmgpu.util.proc import run

    out = run(["sinfo", "-h", "-N", "-o", "%N|%G"], env=env, timeout=20).stdout
    nodes = parse_sinfo_gres(out)
    with contextlib.suppress(OSError):
        from slurmgpu.util.atomic import write_atomic

        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_atomic(path, format_cache(nodes, now), backup=False)
    return nodes
