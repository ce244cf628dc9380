"""write_atomic: readers see the old or the new whole file, never a half or a temp file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slurmgpu.util.atomic import write_atomic


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_new_file_written_without_backup(tmp_path: Path) -> None:
    target = tmp_path / "gres.conf"
    assert write_atomic(target, "Name=gpu\n") is None
    assert target.read_text() == "Name=gpu\n"
    assert (target.stat().st_mode & 0o777) == 0o644
    assert not (tmp_path / "gres.conf.bak").exists()
    assert _leftovers(tmp_path) == []


def test_existing_file_backed_up_and_mode_kept(tmp_path: Path) -> None:
    target = tmp_path / "slurm.conf"
    target.write_text("old\n")
    os.chmod(target, 0o640)
    backup = write_atomic(target, "new\n")
    assert backup == tmp_path / "slurm.conf.bak"
    assert backup.read_text() == "old\n"
    assert target.read_text() == "new\n"
    assert (target.stat().st_mode & 0o777) == 0o640
    assert _leftovers(tmp_path) == []


def test_explicit_mode_and_no_backup(tmp_path: Path) -> None:
    target = tmp_path / "slurmdbd.conf"
    target.write_text("old\n")
    assert write_atomic(target, "new\n", mode=0o600, backup=False) is None
    assert (target.stat().st_mode & 0o777) == 0o600
    assert not (tmp_path / "slurmdbd.conf.bak").exists()


def test_validate_sees_the_new_text_in_the_target_directory(tmp_path: Path) -> None:
    target = tmp_path / "job_submit.lua"
    seen: list[tuple[Path, str]] = []
    write_atomic(target, "return 0\n", validate=lambda p: seen.append((p, p.read_text())))
    ((path, text),) = seen
    assert path.parent == tmp_path and path != target
    assert text == "return 0\n"


def test_failed_validation_leaves_old_file_untouched(tmp_path: Path) -> None:
    target = tmp_path / "gres.conf"
    target.write_text("good\n")
    os.chmod(target, 0o644)
    before = target.stat()

    def reject(path: Path) -> None:
        raise ValueError("parser said no")

    with pytest.raises(ValueError, match="parser said no"):
        write_atomic(target, "bad\n", validate=reject)
    assert target.read_text() == "good\n"
    assert target.stat().st_ino == before.st_ino
    assert not (tmp_path / "gres.conf.bak").exists()
    assert _leftovers(tmp_path) == []


def test_failed_validation_of_a_new_file_leaves_nothing(tmp_path: Path) -> None:
    def reject(path: Path) -> None:
        raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        write_atomic(tmp_path / "new.conf", "x", validate=reject)
    assert list(tmp_path.iterdir()) == []


def test_backup_is_replaced_on_the_next_write(tmp_path: Path) -> None:
    target = tmp_path / "gres.conf"
    write_atomic(target, "one\n")
    write_atomic(target, "two\n")
    write_atomic(target, "three\n")
    assert target.read_text() == "three\n"
    assert (tmp_path / "gres.conf.bak").read_text() == "two\n"
