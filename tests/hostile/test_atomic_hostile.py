"""Writes that are killed, symlinked, owned by someone else, or leave stale temp files.

Whatever happens, the target and its `.bak` are each some complete version, never a part.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmgpu.util.atomic import write_atomic
from tests.hostile.conftest import EXAMPLES, ROOT, assert_one_error, cli

VERSIONS = 4
LINES = 60_000  # ~1 MB per version, so a kill lands in the middle of a write


def _version(i: int) -> str:
    return "".join(f"version {i} line {n}\n" for n in range(LINES))


WRITER = f"""
import sys
from slurmgpu.util.atomic import write_atomic
lines = range({LINES})
versions = ["".join(f"version {{i}} line {{n}}\\n" for n in lines) for i in range({VERSIONS})]
write_atomic(sys.argv[1], versions[0])
print("writing", flush=True)  # the parent kills only from here on, however loaded the host
i = 1
while True:
    write_atomic(sys.argv[1], versions[i % {VERSIONS}])
    i += 1
"""


def _temps(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_sigkill_during_writes_leaves_whole_files_only(tmp_path):
    target = tmp_path / "gres.conf"
    versions = {_version(i) for i in range(VERSIONS)}
    write_atomic(target, _version(0))
    rng = random.Random(14)
    kills = caught_mid_write = 0
    for _ in range(40):
        child = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(target)], cwd=ROOT, stdout=subprocess.PIPE
        )
        assert child.stdout.readline() == b"writing\n"  # past start-up, in the write loop
        time.sleep(rng.random() * 0.2)
        child.send_signal(signal.SIGKILL)
        child.wait()
        kills += 1
        assert target.read_text() in versions
        backup = target.with_name("gres.conf.bak")
        if backup.exists():
            assert backup.read_text() in versions
        left = _temps(tmp_path)
        assert len(left) <= 2  # at most the killed run's data and backup temps
        caught_mid_write += bool(left)
    assert kills == 40
    assert caught_mid_write > 0  # the kills did land inside writes
    write_atomic(target, "final\n")  # the next write clears what the killed runs left
    assert _temps(tmp_path) == []
    assert target.read_text() == "final\n"


def test_sigkill_of_the_real_cli_mid_gen_gres(tmp_path):
    target = tmp_path / "gres.conf"
    target.write_text("# the old gres.conf\n")
    args = [sys.executable, "-m", "slurmgpu", "gen-gres", "--snapshot"]
    args += [str(EXAMPLES / "dgx-a100-mig.json"), "--slurm-version", "22.05", "-o", str(target)]
    full = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    assert full.returncode == 3, full.stderr  # written (docs/acting.md, exit codes)
    new = target.read_text()
    assert "wrote" in full.stderr
    target.write_text("# the old gres.conf\n")
    rng = random.Random(7)
    for _ in range(12):
        child = subprocess.Popen(args, cwd=ROOT, stderr=subprocess.DEVNULL)
        time.sleep(rng.random() * 0.8)
        child.send_signal(signal.SIGKILL)
        child.wait()
        assert target.read_text() in ("# the old gres.conf\n", new)
    subprocess.run(args, cwd=ROOT, capture_output=True, check=True)
    assert _temps(tmp_path) == [] and target.read_text() == new


def test_backup_is_replaced_by_rename_never_truncated_in_place(tmp_path):
    target = tmp_path / "gres.conf"
    target.write_text("one\n")
    write_atomic(target, "two\n")
    with open(target.with_name("gres.conf.bak")) as old_backup:  # holds the old backup inode
        write_atomic(target, "three\n")
        assert old_backup.read() == "one\n"  # an in-place rewrite would show "two" or ""
    assert target.with_name("gres.conf.bak").read_text() == "two\n"


def test_symlinked_target_is_updated_where_it_points(tmp_path):
    real_dir = tmp_path / "srv"
    real_dir.mkdir()
    real = real_dir / "gres.conf"
    real.write_text("old\n")
    link = tmp_path / "gres.conf"
    link.symlink_to(real)
    backup = cli(
        "gen-gres", "--snapshot", EXAMPLES / "pcie-8gpu.json", "--slurm-version", "22.05",
        "-o", link,
    )  # fmt: skip
    assert backup.code == 3, backup.stderr  # written
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert "Name=gpu" in real.read_text()
    assert (real_dir / "gres.conf.bak").read_text() == "old\n"
    assert not (tmp_path / "gres.conf.bak").exists()


def test_dangling_symlink_into_a_missing_directory_is_one_line(tmp_path):
    link = tmp_path / "gres.conf"
    link.symlink_to(tmp_path / "gone" / "gres.conf")
    run = cli("gen-gres", "--snapshot", EXAMPLES / "pcie-8gpu.json", "-o", link)
    assert_one_error(run, 1, says="does not exist")


def test_owner_group_and_mode_are_kept(tmp_path):
    target = tmp_path / "gres.conf"
    target.write_text("old\n")
    os.chown(target, 4321, 8765)
    os.chmod(target, 0o640)
    write_atomic(target, "new\n")
    st = target.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (4321, 8765, 0o640)
    bak = target.with_name("gres.conf.bak").stat()
    assert (bak.st_uid, bak.st_gid, bak.st_mode & 0o7777) == (4321, 8765, 0o640)


def test_stale_temp_files_of_dead_writers_are_removed_live_ones_kept(tmp_path):
    target = tmp_path / "gres.conf"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".gres.conf.{dead.pid}.deadbeef.tmp"
    stale.write_text("half a file")
    live = tmp_path / ".gres.conf.1.cafe0000.tmp"  # pid 1 is always running
    live.write_text("another writer, still busy")
    other = tmp_path / ".topology.conf.999999.00.tmp"  # another target's: not ours to touch
    other.write_text("x")
    init_start = Path("/proc/1/stat").read_text().rsplit(")", 1)[1].split()[19]
    live_named = tmp_path / f".gres.conf.1-{init_start}.cafe0001.tmp"  # pid 1 as it started
    live_named.write_text("busy too")
    # a killed writer whose PID a new process took (pid_max is often 32768): its start
    # time in the name differs from the running process's, so the temp is stale
    reused = tmp_path / f".gres.conf.1-{int(init_start) + 12345}.beef0000.tmp"
    reused.write_text("half a file of a writer whose pid was reused")
    write_atomic(target, "new\n")
    assert not stale.exists() and not reused.exists()
    assert live.exists() and live_named.exists() and other.exists()


def test_failed_validation_keeps_old_file_and_old_backup(tmp_path):
    target = tmp_path / "gres.conf"
    target.write_text("good\n")
    target.with_name("gres.conf.bak").write_text("older\n")

    def reject(path):
        raise ValueError("no")

    with pytest.raises(ValueError):
        write_atomic(target, "bad\n", validate=reject)
    assert target.read_text() == "good\n"
    assert target.with_name("gres.conf.bak").read_text() == "older\n"
    assert _temps(tmp_path) == []


def test_backup_already_linked_to_the_target_leaves_no_temp(tmp_path):
    # a writer killed between its two renames leaves NAME.bak as a second link to NAME;
    # rename(2) onto a link of the same file does nothing, so the next backup's temp link
    # must be removed by hand
    target = tmp_path / "gres.conf"
    target.write_text("current\n")
    os.link(target, tmp_path / "gres.conf.bak")
    write_atomic(target, "new\n")
    assert _temps(tmp_path) == []
    assert target.read_text() == "new\n"
    assert (tmp_path / "gres.conf.bak").read_text() == "current\n"
