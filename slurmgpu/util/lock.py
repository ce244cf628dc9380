"""One lock per node for every command that changes it (`mig apply`, `rebalance apply` and
`--undo`, `autopilot`, `check --health-check`), all in one directory: `lock_dir()`.

A lock is `DIR/NODE.lock`, held with flock(2) for as long as the command runs: the kernel
drops it when the process ends, however it ends (SIGKILL included), so a lock never has to be
broken by hand. A second command that wants a node some other command holds says so on stderr
(one line naming the holder: its pid, command and start time, written into the lock file by
the holder), waits for it at most `wait_s` seconds (`DEFAULT_WAIT_S`, 10 s, unless the caller
gives another), then refuses with one line naming the holder - never waits forever. Locks are
taken in sorted node order, so two commands that want overlapping nodes cannot deadlock.

flock works between the processes of one host, and over NFSv4 between hosts: commands that
change a node from different hosts (`mig apply` runs on the node, `rebalance` on the
controller) share a lock only where DIR is on such a shared file system (docs/mig.md).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

from slurmgpu.errors import SlurmgpuError

DEFAULT_LOCK_DIR = Path("/var/lib/slurmgpu/locks")
LOCK_DIR_ENV = "SLURMGPU_LOCK_DIR"
# how long a command waits for a node another command holds before it refuses (seconds)
DEFAULT_WAIT_S = 10.0


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


def _say(line: str) -> None:
    print(f"slurmgpu: {line}", file=sys.stderr, flush=True)


def _acquire(fd: int, path: Path, node: str, wait_s: float, on_wait: Callable[[str], None]) -> None:
    """flock `fd`, waiting at most `wait_s` seconds for its holder; NodeLocked after that."""
    deadline = time.monotonic() + max(0.0, wait_s)
    told = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        if time.monotonic() >= deadline:
            waited = f" (waited {wait_s:g} s)" if wait_s > 0 else ""
            raise NodeLocked(
                f"{node}: another slurmgpu command is changing it ({_holder(path)}; lock "
                f"{path}){waited}; try again when it has finished"
            )
        if not told:
            told = True
            on_wait(f"{node} is held by {_holder(path)} (lock {path}); waiting up to {wait_s:g} s")
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


@contextlib.contextmanager
def node_locks(
    directory: Path,
    nodes: Iterable[str],
    command: str,
    *,
    wait_s: float | None = None,
    on_wait: Callable[[str], None] | None = None,
) -> Iterator[None]:
    """Hold the lock of every node in `nodes` for the `with` block. A node another command
    holds: `on_wait` (default: one line on stderr) names the holder, the lock is waited for
    at most `wait_s` seconds (None: `DEFAULT_WAIT_S`; 0: not at all), then NodeLocked."""
    directory = Path(directory)
    wait = DEFAULT_WAIT_S if wait_s is None else float(wait_s)
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
                _acquire(fd, path, node, wait, on_wait or _say)
            except BaseException:
                os.close(fd)
                raise
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
