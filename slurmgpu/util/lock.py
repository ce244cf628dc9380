"""One lock per node for every command that changes it (`mig apply`, `rebalance apply`).

A lock is `DIR/NODE.lock`, held with flock(2) for as long as the command runs: the kernel
drops it when the process ends, however it ends (SIGKILL included), so a lock never has to be
broken by hand. A second command that wants a node some other command holds refuses at once,
with one line naming the holder (its pid, command and start time, written into the lock file
by the holder). Locks are taken in sorted node order, so two commands that want overlapping
nodes cannot deadlock.

flock works between the processes of one host, and over NFSv4 between hosts: commands that
change a node from different hosts (`mig apply` runs on the node, `rebalance` on the
controller) share a lock only where DIR is on such a shared file system (docs/mig.md).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from slurmgpu.errors import SlurmgpuError

DEFAULT_LOCK_DIR = Path("/var/lib/slurmgpu/locks")
LOCK_DIR_ENV = "SLURMGPU_LOCK_DIR"


def lock_dir(env: Mapping[str, str] | None = None) -> Path:
    """The one lock directory that every command changing a node shares:
    `$SLURMGPU_LOCK_DIR` where it is set (tests, a shared file system), else
    `/var/lib/slurmgpu/locks`."""
    value = (os.environ if env is None else env).get(LOCK_DIR_ENV, "")
    return Path(value) if value else DEFAULT_LOCK_DIR


class NodeLocked(SlurmgpuError):
    """Another command is changing the node right now."""


class LockUnavailable(SlurmgpuError):
    """The lock directory or file cannot be made or opened here (permissions, read-only)."""


def _holder(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        return "unknown"
    return " ".join(text.split())[:160] or "unknown"


@contextlib.contextmanager
def node_locks(directory: Path, nodes: Iterable[str], command: str) -> Iterator[None]:
    """Hold the lock of every node in `nodes` for the `with` block; refuse at once if one is
    held by another command."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        reason = exc.strerror
        raise LockUnavailable(f"cannot create the lock directory {directory}: {reason}") from None
    held: list[int] = []
    try:
        for node in sorted(set(nodes)):
            if not node or "/" in node or node.startswith("."):
                raise LockUnavailable(f"{node!r}: not a node name that can be locked")
            path = directory / f"{node}.lock"
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise LockUnavailable(f"cannot open the lock {path}: {exc.strerror}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise NodeLocked(
                    f"{node}: another slurmgpu command is changing it ({_holder(path)}; lock "
                    f"{path}); try again when it has finished"
                ) from None
            held.append(fd)
            stamp = dt.datetime.now().isoformat(timespec="seconds")
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()}: {command}, since {stamp}\n".encode(), 0)
        yield
    finally:
        for fd in held:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)  # closing the descriptor releases the flock
