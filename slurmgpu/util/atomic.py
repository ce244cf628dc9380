"""Writing configuration files safely: temp file in the target dir, validate, backup, rename."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def write_atomic(
    path: str | os.PathLike[str],
    text: str,
    *,
    mode: int | None = None,
    backup: bool = True,
    validate: Callable[[Path], None] | None = None,
) -> Path | None:
    """Write `text` to `path` so that readers only ever see the old or the new whole file.

    The text goes to a temp file in the same directory; `validate(temp_path)` may raise to
    abort (the old file is untouched and the temp file removed). An existing file is kept as
    `path.bak` (hard copy, mode preserved) before the rename. Returns the backup path or None.
    """
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        elif target.exists():
            os.chmod(tmp, target.stat().st_mode & 0o7777)
        else:
            os.chmod(tmp, 0o644)
        if validate is not None:
            validate(tmp)
        backup_path = None
        if backup and target.exists():
            backup_path = target.with_name(target.name + ".bak")
            shutil.copy2(target, backup_path)
        os.replace(tmp, target)
        with contextlib.suppress(OSError):
            dir_fd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        return backup_path
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def diff_against_file(path: str | os.PathLike[str], text: str) -> str:
    """A unified diff from the file at `path` (missing: /dev/null) to `text`, for `--diff`."""
    import difflib

    target = Path(path)
    old = target.read_text(encoding="utf-8") if target.exists() else ""
    return "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True),
            text.splitlines(keepends=True),
            fromfile=str(target) if target.exists() else "/dev/null",
            tofile=f"{target} (generated)",
        )
    )
