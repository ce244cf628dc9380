"""The Debian-root bookkeeping of the test harness: cache keys, markers, release names.

No root, no debootstrap: building and running a root is covered by
`tests/integration/test_slurm_releases.py` in a `--slurm 24.11` session.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.harness import debian_root
from tests.harness.debian_root import (
    RELEASES,
    DebianRoot,
    RootError,
    mounts_under,
    release,
    safe_rmtree,
)


def test_the_cache_key_follows_the_recipe(tmp_path: Path) -> None:
    base = DebianRoot("trixie", ("slurmd", "munge"), cache_dir=tmp_path, mirror="http://m/d")
    same = DebianRoot("trixie", ("munge", "slurmd"), cache_dir=tmp_path, mirror="http://m/d")
    assert base.key == same.key and base.path == same.path  # the order does not matter
    for other in (
        DebianRoot(
            "trixie", ("slurmd", "munge", "lua5.1"), cache_dir=tmp_path, mirror="http://m/d"
        ),
        DebianRoot("forky", ("slurmd", "munge"), cache_dir=tmp_path, mirror="http://m/d"),
        DebianRoot("trixie", ("slurmd", "munge"), cache_dir=tmp_path, mirror="http://x/d"),
    ):
        assert other.key != base.key and other.path != base.path
    assert base.path == tmp_path / f"debian-trixie-{base.key}" / "root"


def test_a_root_counts_as_built_only_with_its_own_marker(tmp_path: Path) -> None:
    root = DebianRoot("trixie", ("slurmd",), cache_dir=tmp_path)
    assert not root.built()
    root.home.mkdir(parents=True)
    root.marker.write_text("{half a file")
    assert not root.built()
    root.marker.write_text(json.dumps({"key": "0" * 12}))
    assert not root.built()
    root.marker.write_text(json.dumps({"key": root.key}))
    assert root.built()


def test_wrappers_exec_the_root_programs(tmp_path: Path) -> None:
    root = DebianRoot("trixie", ("slurmd",), cache_dir=tmp_path)
    (root.path / "usr" / "sbin").mkdir(parents=True)
    (root.path / "usr" / "bin").mkdir(parents=True)
    (root.path / "usr" / "sbin" / "slurmd").touch()
    (root.path / "usr" / "bin" / "sacct").touch()
    root.write_wrappers()
    names = sorted(p.name for p in root.bin_dir.iterdir())
    assert names == [".enter", "sacct", "slurmd"]  # no wrapper for what the root lacks
    wrapper = (root.bin_dir / "slurmd").read_text()
    assert wrapper.startswith("#!/bin/sh\n")
    assert f'exec "{root.bin_dir / ".enter"}" /usr/sbin/slurmd "$@"' in wrapper
    enter = (root.bin_dir / ".enter").read_text()
    assert "unshare --mount --propagation private" in enter
    assert 'mount --rbind "/tmp" "$r/tmp"' in enter and str(root.path) in enter
    # the root's munge socket is the caller's: a test session's private /run/munge
    assert 'mount --bind /run/munge "$r/run/munge"' in enter
    # the checkout (its venv) and the interpreter that venv runs are bound at the same path
    for path in root.binds:
        assert f'mount --rbind "{path}" "$r{path}"' in enter
        assert (root.path / path.lstrip("/")).exists()  # its mount point inside the root
    # the checkout, unless it lies under /tmp (a CI clone there): bound with /tmp then
    repo = str(debian_root.REPO)
    assert repo in root.binds or repo.startswith("/tmp/")
    assert (root.bin_dir / "slurmd").stat().st_mode & 0o111


def test_host_binds_cover_the_interpreter(tmp_path: Path, monkeypatch) -> None:
    # the system's Python: its binary, each name the venv's link goes through, its stdlib
    repo = tmp_path / "repo"
    (repo / ".venv" / "bin").mkdir(parents=True)
    (repo / ".venv" / "bin" / "python3").symlink_to("/usr/bin/python3")
    monkeypatch.setattr(debian_root.sys, "base_prefix", "/usr")
    monkeypatch.setattr(debian_root.sys, "version_info", (3, 11, 2))
    binds = debian_root.host_binds(repo)
    assert binds[0] == "/tmp" and str(repo) not in binds  # under /tmp: bound with it
    assert {"/usr/lib/python3.11", "/usr/bin/python3", "/usr/bin/python3.11"} <= set(binds)
    assert "/usr" not in binds  # never the root's whole /usr
    # a private prefix (pyenv) is bound whole; a checkout under /tmp is not bound twice
    monkeypatch.setattr(debian_root.sys, "base_prefix", "/opt/py311")
    assert debian_root.host_binds(Path("/tmp/ci")) == ("/tmp", "/opt/py311")
    assert debian_root.host_binds(Path("/srv/co")) == ("/tmp", "/srv/co", "/opt/py311")


def test_ubuntu_roots_use_ubuntus_archive_and_key(tmp_path: Path) -> None:
    ubuntu = DebianRoot("resolute", ("slurmd",), cache_dir=tmp_path, distro="ubuntu")
    debian = DebianRoot("resolute", ("slurmd",), cache_dir=tmp_path)
    assert ubuntu.mirror == debian_root.UBUNTU_MIRROR and ubuntu.key != debian.key
    assert ubuntu.home.name.startswith("ubuntu-resolute-") and ubuntu.label == "Ubuntu resolute"
    assert debian_root.UBUNTU_KEYRING.is_file()
    with pytest.raises(RootError, match="unknown distribution"):
        DebianRoot("x", (), cache_dir=tmp_path, distro="arch")


def test_release_names() -> None:
    assert release("24.11") is RELEASES["24.11"]
    assert RELEASES["24.11"].version == (24, 11) and RELEASES["24.11"].suite == "trixie"
    assert RELEASES["25.11"].distro == "ubuntu" and RELEASES["25.11"].suite == "resolute"
    host = release(None)
    assert host.suite is None and host.root() is None
    assert release(host.series) == host
    with pytest.raises(RootError, match=r"no Slurm 19\.05 for the tests: known releases are"):
        release("19.05")


def test_mounts_under_reads_this_namespace() -> None:
    assert "/proc" in mounts_under(Path("/"))
    assert mounts_under(Path("/proc")) and not mounts_under(Path("/nonexistent-sg"))


def test_safe_rmtree_refuses_a_directory_with_a_mount_in_it(tmp_path: Path, monkeypatch) -> None:
    # a root whose /tmp is still bound (a wrapper's namespace gone wrong) must never be deleted:
    # rmtree would empty the host's /tmp through it
    doomed = tmp_path / "root.old"
    (doomed / "tmp").mkdir(parents=True)
    monkeypatch.setattr(debian_root, "mounts_under", lambda path: [str(path / "tmp")])
    with pytest.raises(RootError, match=r"refusing to delete .*root\.old: still mounted there"):
        safe_rmtree(doomed)
    assert (doomed / "tmp").is_dir()
    monkeypatch.undo()
    safe_rmtree(doomed)
    assert not doomed.exists()
