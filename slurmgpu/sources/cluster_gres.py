"""The GPU GRES the cluster's nodes offer (`sinfo -N -o %N|%G`), cached briefly per user.

The wrapper asks on every submission, so the answer is kept for `ttl_s` seconds in
`$XDG_CACHE_HOME/slurmgpu/` (default `~/.cache/slurmgpu/`), one file per `SLURM_CONF`.
A cache that cannot be read or written is simply skipped.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path

from slurmgpu.model.slicing import NodeGres
from slurmgpu.sources.slurm import parse_gres_string
from slurmgpu.util.proc import run

DEFAULT_TTL_S = 60.0


def cache_path(env: Mapping[str, str] | None = None) -> Path:
    """The per-user cache file for the cluster `SLURM_CONF` names."""
    environ = {**os.environ, **(env or {})}
    base = Path(environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "slurmgpu"
    conf = environ.get("SLURM_CONF", "/etc/slurm/slurm.conf")
    digest = hashlib.sha256(conf.encode()).hexdigest()[:16]
    return base / f"gres-{digest}.json"


def parse_sinfo_gres(text: str) -> list[NodeGres]:
    """Lines `NODE|GRES` (sinfo -h -N -o '%N|%G') -> one NodeGres per node."""
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


def node_gres(env: Mapping[str, str] | None = None, ttl_s: float = DEFAULT_TTL_S) -> list[NodeGres]:
    """The nodes' GRES, from the cache when younger than `ttl_s`, else from sinfo."""
    path = cache_path(env)
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        cached = json.loads(path.read_text(encoding="utf-8"))
        if time.time() - float(cached["time"]) < ttl_s:
            return parse_sinfo_gres(cached["sinfo"])
    out = run(["sinfo", "-h", "-N", "-o", "%N|%G"], env=env, timeout=20).stdout
    with contextlib.suppress(OSError):
        from slurmgpu.util.atomic import write_atomic

        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps({"time": time.time(), "sinfo": out}), backup=False)
    return parse_sinfo_gres(out)
