"""Writing configuration files safely: temp file in the target dir, validate, backup, rename.

What a reader of the target can ever see: the old whole file or the new whole file. What
survives a SIGKILL or a full disk at any moment: the old file, the old backup (or the new
backup, which is the old file), and at most one temp file, which the next run removes.

- The temp file is named `.NAME.PID.RANDOM.tmp` (hidden, never `*.prom` or `*.conf`, so
  node_exporter and Slurm never read it). A later write to the same target removes the temp
  files of writers that are no longer running on this host (their PID is gone).
- The backup `NAME.bak` is made atomically: a hard link to the old file under a temp name,
  renamed over the old backup (a copy into a temp file where the file system has no hard
  links). The previous good backup is never truncated in place.
- A target that is a symlink is written where it points (the link itself stays, the backup
  and temp file sit beside the real file): `/etc/slurm/gres.conf -> /srv/cfg/gres.conf`
  updates `/srv/cfg/gres.conf`. A target that exists and is not a regular file (a
  directory, `/dev/null`, a FIFO) is refused: renaming over it would replace a device node.
- The new file keeps the old file's owner, group and mode (a new file: 0644, or `mode`).
Every file-system failure is an `OutputError` naming the target and the reason.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

from slurmgpu.errors import OutputError


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__


def resolve_target(path: str | os.PathLike[str]) -> Path:
    """The regular file a write to `path` replaces (symlinks followed); refuses anything else."""
    return _resolve(path)[0]


def _resolve(path: str | os.PathLike[str]) -> tuple[Path, os.stat_result | None]:
    """`resolve_target`, plus the target's stat (None: it does not exist yet)."""
    given = Path(path)
    if str(path) == "":
        raise OutputError("output path is empty")
    real = Path(os.path.realpath(given))
    try:
        st = os.stat(real)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise OutputError(f"{given}: cannot write: {_reason(exc)}") from exc
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise OutputError(f"{given}: is a directory, expected a file path")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise OutputError(
            f"{given}: is not a regular file (a device, FIFO or socket); refusing to replace it"
        )
    if not real.parent.is_dir():
        raise OutputError(f"{given}: directory {real.parent} does not exist")
    return real, st


def _temp_pattern(target: Path) -> re.Pattern[str]:
    return re.compile(
        rf"^\.{re.escape(target.name)}\.(?P<pid>\d+)(?:-(?P<start>\d+))?\.[0-9a-f]+\.tmp$"
    )


def _start_time(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot, /proc/PID/stat field 22), or None
    where /proc does not tell. With the PID it names one process: PIDs are reused (pid_max is
    32768 on many hosts), start times are not."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _pid_alive(pid: int, start: int | None = None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        pass
    if start is not None:  # the same PID, but is it still the writer that made the temp?
        now = _start_time(pid)
        return now is None or now == start
    return True


def remove_stale_temps(target: Path) -> list[Path]:
    """Remove temp files left by earlier writers of `target` killed mid-write; return them."""
    pattern = _temp_pattern(target)
    removed = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(target.parent):
            m = pattern.match(entry.name)
            if not m or int(m.group("pid")) == os.getpid():
                continue
            start = int(m.group("start")) if m.group("start") else None
            if not _pid_alive(int(m.group("pid")), start):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
                    removed.append(Path(entry.path))
    return removed


def _temp_path(target: Path) -> Path:
    """`.NAME.PID-START.RANDOM.tmp`: the writer (PID and its start time) is in the name, so a
    later write can tell a killed writer's leftovers from a live one's."""
    pid = os.getpid()
    start = _start_time(pid)
    writer = f"{pid}-{start}" if start is not None else str(pid)
    return target.with_name(f".{target.name}.{writer}.{secrets.token_hex(4)}.tmp")


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _keep_owner_and_mode(tmp: Path, old: os.stat_result | None, mode: int | None) -> None:
    if old is not None and (hasattr(os, "geteuid") and os.geteuid() == 0):
        os.chown(tmp, old.st_uid, old.st_gid)
    if mode is not None:
        os.chmod(tmp, mode)
    elif old is not None:
        os.chmod(tmp, stat.S_IMODE(old.st_mode))
    else:
        os.chmod(tmp, 0o644)


def _backup(target: Path) -> Path:
    """`target.bak` := the current target, atomically (link or copy to a temp, then rename)."""
    backup = target.with_name(target.name + ".bak")
    tmp = _temp_path(target)
    try:
        try:
            os.link(target, tmp)
        except OSError:  # no hard links here (some FUSE/SMB mounts): a full copy instead
            shutil.copy2(target, tmp)
            st = os.stat(target)
            with contextlib.suppress(PermissionError):
                os.chown(tmp, st.st_uid, st.st_gid)
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
        os.replace(tmp, backup)
        # rename(2) does nothing when both names are links to one file: the backup already
        # is the current target (a writer killed between its two renames left it so), and
        # the temp link would stay behind
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    return backup


def write_atomic(
    path: str | os.PathLike[str],
    text: str,
    *,
    mode: int | None = None,
    backup: bool = True,
    validate: Callable[[Path], None] | None = None,
) -> Path | None:
    """Write `text` to `path` so that readers only ever see the old or the new whole file.

    The text goes to a temp file beside the real target; `validate(temp_path)` may raise to
    abort (the old file is untouched and the temp file removed). An existing file is kept as
    `NAME.bak` before the rename. Returns the backup path or None.
    """
    target, old = _resolve(path)
    remove_stale_temps(target)
    tmp = _temp_path(target)
    try:
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            _keep_owner_and_mode(tmp, old, mode)
        except OSError as exc:
            raise OutputError(f"{path}: cannot write: {_reason(exc)}") from exc
        if validate is not None:
            validate(tmp)
        try:
            backup_path = _backup(target) if backup and old is not None else None
            os.replace(tmp, target)
        except OSError as exc:
            raise OutputError(f"{path}: cannot replace: {_reason(exc)}") from exc
        _fsync_dir(target.parent)
        return backup_path
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def read_existing(path: str | os.PathLike[str]) -> str | None:
    """The current text of an output file, or None when there is none yet (for --diff)."""
    target = Path(path)
    try:
        return target.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except IsADirectoryError as exc:
        raise OutputError(f"{target}: is a directory, expected a file path") from exc
    except OSError as exc:
        raise OutputError(f"{target}: cannot read: {_reason(exc)}") from exc
    except UnicodeDecodeError as exc:
        raise OutputError(f"{target}: is not UTF-8 text (byte {exc.start}), cannot diff") from exc


def diff_against_file(path: str | os.PathLike[str], text: str) -> str:
    """A unified diff from the file at `path` (missing: /dev/null) to `text`, for `--diff`."""
    import difflib

    target = Path(path)
    old = read_existing(target)
    return "".join(
        difflib.unified_diff(
            (old or "").splitlines(keepends=True),
            text.splitlines(keepends=True),
            fromfile=str(target) if old is not None else "/dev/null",
            tofile=f"{target} (generated)",
        )
    )
