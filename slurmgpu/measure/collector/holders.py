"""Which processes hold an AMD or Ascend device node open: `/proc/PID/fd` under the host root.

NVML lists the processes on a GPU; amdsmi's process list needs the KFD and is empty inside
many containers, and DCMI's per-process call is not on every driver. What every Linux node
has is the open file: a ROCm process holds `/dev/dri/renderD<minor>` of each GPU it uses, an
Ascend process `/dev/davinci<phy>`. slurmd's cgroup device fence lets a job open only the
nodes of its GRES, so the holders of a node, mapped to jobs through their cgroup
(`cgroup.ProcessMapper`), are the jobs on that device.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

_NODE = re.compile(r"^/dev/(?:dri/renderD|davinci)\d+$")


def device_holders(host_root: str | os.PathLike[str] = "/") -> dict[str, tuple[int, ...]]:
    """{device node path: PIDs holding it open}, for render and davinci nodes only."""
    proc = Path(host_root) / "proc"
    found: dict[str, set[int]] = {}
    try:
        entries = [e for e in os.listdir(proc) if e.isdigit()]
    except OSError:
        return {}
    for entry in entries:
        fd_dir = proc / entry / "fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue  # exited, or not ours to read
        for fd in fds:
            try:
                target = os.readlink(fd_dir / fd)
            except OSError:
                continue
            if _NODE.match(target):
                found.setdefault(target, set()).add(int(entry))
    return {node: tuple(sorted(pids)) for node, pids in found.items()}
