"""Every command's one error path: usage, file system, decoding, nesting, limits, and bugs.

Each case runs in-process (CliRunner) and, where the entry point matters, as a real process.
"""

from __future__ import annotations

import gzip
import os
import subprocess
from pathlib import Path

import pytest

from tests.hostile.conftest import EXAMPLES, ROOT, assert_one_error, cli, proc, tmpfs

H100 = EXAMPLES / "dgx-h100.json"
SWITCHES = EXAMPLES / "switches.toml"
SACCT = ROOT / "tests" / "data" / "sacct" / "synthetic-mix.txt"
GEN = ("gen-gres", "--snapshot", H100, "--slurm-version", "22.05")

USAGE = [
    ("gen-gres", "--gpu-types", "huge"),
    ("--bogus",),
    ("no-such-command",),
    (*GEN, "--shards-per-gpu", "0"),
    (*GEN, "--shards-per-gpu", "-3"),
    (*GEN, "--shards-per-gpu", "1" + "0" * 5000),
    (*GEN, "--host-root", "/"),
    (*GEN, "--diff"),
    (*GEN, "--node-name", "dgx01 Gres=gpu:h100:99"),
    (*GEN, "--node-name", "dgx#1"),
    (*GEN, "--node-name", "n[0-99999999]"),
    ("gen-topology",),
    ("gen-gres", "--snapshot", H100, "--slurm-version="),
    ("gen-gres", "--snapshot", H100, "--slurm-version", "9" * 5000),
    ("gen-gres", "--snapshot", H100, "--node-name", "[]"),
    ("gen-topology", "--switches", SWITCHES, "--slurm-version", "x.y"),
    ("gen-topology", "--switches", SWITCHES, "--nodes", "n[0-99999999]"),
    ("gen-topology", "--switches", SWITCHES, "--nodes", "dgx01,x\nSwitchName=evil"),
]


@pytest.mark.parametrize("args", USAGE, ids=lambda a: " ".join(map(str, a))[:60])
def test_usage_mistakes_are_one_line_exit_2(args):
    assert_one_error(cli(*args), 2)


def test_usage_error_as_a_real_process_is_one_line():
    run = proc("gen-gres", "--gpu-types", "huge")
    line = assert_one_error(run, 2, says="--gpu-types")
    assert "slurmgpu gen-gres --help" in line and run.stdout == ""


def test_unknown_option_of_the_group_as_a_real_process():
    assert_one_error(proc("--bogus"), 2, says="No such option")


# -- output files -----------------------------------------------------------------------------
def _writers(target: Path) -> dict[str, tuple[object, ...]]:
    """One command line per command that writes a file, all writing to `target`."""
    return {
        "gen-gres": (*GEN, "--output", target),
        "gen-topology": ("gen-topology", "--switches", SWITCHES, "--output-dir", target.parent),
        "analyze": ("analyze", "--sacct-file", SACCT, "--output", target),
        "report": ("report", "--sacct-file", SACCT, "--since", "3650d", "--format", "json",
                   "-o", target),
    }  # fmt: skip


@pytest.mark.parametrize("command", ["gen-gres", "analyze"])
def test_output_in_a_missing_directory(tmp_path, command):
    run = cli(*_writers(tmp_path / "missing" / "dir" / "out.conf")[command])
    assert_one_error(run, 1, says="does not exist")
    assert not (tmp_path / "missing").exists()


def test_output_dir_missing_for_gen_topology(tmp_path):
    run = cli("gen-topology", "--switches", SWITCHES, "--output-dir", tmp_path / "nope")
    assert_one_error(run, 2, says="not a directory")


@pytest.mark.parametrize("command", ["gen-gres", "analyze"])
def test_output_that_is_a_directory(tmp_path, command):
    (tmp_path / "out.conf").mkdir()
    assert_one_error(cli(*_writers(tmp_path / "out.conf")[command]), 1, says="is a directory")


def test_gen_topology_output_name_taken_by_a_directory(tmp_path):
    (tmp_path / "topology.conf").mkdir()
    run = cli("gen-topology", "--switches", SWITCHES, "--output-dir", tmp_path)
    assert_one_error(run, 1, says="is a directory")


def test_output_that_is_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "gres.conf"
    os.mkfifo(fifo)
    run = proc(*GEN, "--output", fifo, timeout=60)
    assert_one_error(run, 1, says="not a regular file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gres.conf"]


def test_output_that_is_a_device_is_refused(tmp_path):
    # /dev/full read back by a backup copy fills /dev: a device is never opened or replaced
    run = cli(*GEN, "--output", "/dev/full")
    assert_one_error(run, 1, says="not a regular file")
    assert not Path("/dev/full.bak").exists()


@pytest.mark.parametrize("command", ["gen-gres", "gen-topology", "analyze", "report"])
def test_read_only_directory(tmp_path, command):
    mnt = tmp_path / "ro"
    with tmpfs(mnt, "size=64k"):
        (mnt / "out.conf").write_text("old\n")
        (mnt / "topology.conf").write_text("old\n")
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        assert_one_error(cli(*_writers(mnt / "out.conf")[command]), 1, says="read-only")
        assert (mnt / "out.conf").read_text() == "old\n"
        assert sorted(p.name for p in mnt.iterdir()) == ["out.conf", "topology.conf"]


@pytest.mark.parametrize("command", ["gen-gres", "gen-topology", "analyze", "report"])
def test_full_disk_keeps_old_file_and_old_backup(tmp_path, command):
    mnt = tmp_path / "full"
    with tmpfs(mnt, "size=64k"):
        name = "topology.conf" if command == "gen-topology" else "out.conf"
        (mnt / name).write_text("old\n")
        (mnt / f"{name}.bak").write_text("older\n")
        fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT)
        with pytest.raises(OSError):
            while True:  # fill every block
                os.write(fd, b"\0" * 4096)
        os.close(fd)
        run = cli(*_writers(mnt / "out.conf")[command])
        assert_one_error(run, 1, says="no space left")
        assert (mnt / name).read_text() == "old\n"
        assert (mnt / f"{name}.bak").read_text() == "older\n"
        assert sorted(p.name for p in mnt.iterdir()) == sorted(["filler", name, f"{name}.bak"])


# -- input that cannot be decoded or parsed --------------------------------------------------
def test_snapshot_not_utf8(tmp_path):
    (tmp_path / "bad.json").write_bytes(b"\xff{}")
    assert_one_error(proc("gen-gres", "--snapshot", tmp_path / "bad.json"), 1, says="UTF-8")


def test_switch_file_not_utf8(tmp_path):
    (tmp_path / "sw.toml").write_bytes(b'[[switch]]\nname = "l\xe9af"\nnodes = "a"\n')
    assert_one_error(cli("gen-topology", "--switches", tmp_path / "sw.toml"), 1, says="UTF-8")


def test_snapshot_nested_too_deeply(tmp_path):
    (tmp_path / "deep.json").write_text("[" * 200_000 + "]" * 200_000)
    assert_one_error(proc("gen-gres", "--snapshot", tmp_path / "deep.json"), 1, says="deeply")


def test_switch_file_nested_too_deeply(tmp_path):
    (tmp_path / "deep.toml").write_text("block_sizes = " + "[" * 100_000 + "]" * 100_000)
    run = cli("gen-topology", "--switches", tmp_path / "deep.toml")
    assert_one_error(run, 1, says="TOML")


def test_snapshot_with_a_5000_digit_number(tmp_path):
    (tmp_path / "big.json").write_text('{"schema_version": ' + "9" * 5000 + "}")
    assert_one_error(cli("gen-gres", "--snapshot", tmp_path / "big.json"), 1, says="digits")


def test_snapshot_with_a_huge_memory_value(tmp_path):
    text = H100.read_text().replace('"memory_mib": 81559', '"memory_mib": 1' + "0" * 4000, 1)
    (tmp_path / "mem.json").write_text(text)
    assert_one_error(cli("gen-gres", "--snapshot", tmp_path / "mem.json"), 1, says="memory_mib")


def test_switch_file_with_a_5000_digit_number(tmp_path):
    (tmp_path / "big.toml").write_text("block_sizes = [" + "7" * 5000 + "]\n")
    assert_one_error(cli("gen-topology", "--switches", tmp_path / "big.toml"), 1, says="TOML")


def test_snapshot_missing_and_snapshot_is_a_directory(tmp_path):
    assert_one_error(cli("gen-gres", "--snapshot", tmp_path / "none.json"), 1)
    (tmp_path / "dir.json").mkdir()
    assert_one_error(cli("gen-gres", "--snapshot", tmp_path / "dir.json"), 2)


@pytest.mark.parametrize("data", [b"\x1f\x8b\x08\x00", b"\x1f\x8b\x08\x00" + b"\xff" * 64])
def test_truncated_or_corrupt_gzip(tmp_path, data):
    (tmp_path / "cut.gz").write_bytes(data)
    run = proc("analyze", "--sacct-file", tmp_path / "cut.gz")
    assert "Aborted!" not in run.stderr
    assert_one_error(run, 1)


@pytest.mark.parametrize(("since", "code"), [("99999999d", 2), ("9999-12-31T23:59:59", 2)])
def test_dates_out_of_range_are_one_line(since, code):
    run = proc("analyze", "--sacct-file", SACCT, "--since", since, "--until", "9999-12-31")
    assert_one_error(run, code)


def test_gzip_cut_in_the_middle(tmp_path):
    whole = gzip.compress(SACCT.read_bytes())
    (tmp_path / "half.gz").write_bytes(whole[: len(whole) // 2])
    assert_one_error(cli("analyze", "--sacct-file", tmp_path / "half.gz"), 1)


# -- a real bug is not dressed up as a user mistake -------------------------------------------
def test_a_bug_shows_the_traceback_and_says_it_is_a_bug(monkeypatch):
    from slurmgpu.render import gres

    def broken(*args, **kwargs):
        raise KeyError("oops")

    monkeypatch.setattr(gres, "render_gres_conf", broken)
    run = cli(*GEN)
    assert run.code == 70
    assert "Traceback" in run.stderr and "KeyError" in run.stderr
    assert run.stderr.splitlines()[-1].startswith("slurmgpu: error: internal error, a bug")


def test_a_message_quoting_a_line_break_stays_one_line(tmp_path):
    run = cli(*GEN, "--output", tmp_path / "no\nSwitchName=x" / "gres.conf")
    line = assert_one_error(run, 1, says="does not exist")
    assert "no\\nSwitchName=x" in line  # shown escaped, on the one line


def test_a_very_long_message_is_cut(tmp_path):
    run = cli(*GEN, "--output", tmp_path / ("d" * 3000) / "gres.conf")
    line = assert_one_error(run, 1)
    assert len(line) <= len("slurmgpu: error: ") + 400 and line.endswith("...")


def test_a_policy_with_several_problems_lists_each_on_its_own_line(tmp_path):
    # issue #20: joined on one line and cut at 400 characters, a 4th problem was never shown
    policy = tmp_path / "pol.toml"
    policy.write_text('[gpu_memory]\nt4 = "16G"\n')
    dump = ROOT / "tests" / "data" / "sacct" / "synthetic-mix.txt"
    res = cli("analyze", "--sacct-file", dump, "--policy", policy)
    assert_one_error(res, 1, says="the policy has 2 problems")
    assert "\\n" not in res.stderr  # no escaped line break inside a problem
    listed = [ln for ln in res.stderr.splitlines() if ln.startswith("slurmgpu: policy: ")]
    assert listed == [
        f"slurmgpu: policy: {policy}:1: tiers: missing" + listed[0].split("tiers: missing")[1],
        f"slurmgpu: policy: {policy}:1: default_tier: missing"
        + listed[1].split("default_tier: missing")[1],
    ]


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b'{"jobs": [{"job_id": 1}]}\n', "this looks like JSON"),
        ("JobIDRaw|State\n1|COMPLETED\n".encode("utf-16"), "this looks like UTF-16 text"),
        (b"JobIDRaw|JobID|Cluster|State\r1|1|c1|COMPLETED\r2|2|c1|COMPLETED\r", "lone CR"),
        (b"JobIDRaw,JobID,State\n1,1,COMPLETED\n", "save `sacct -P`"),
    ],
)
def test_a_dump_that_is_not_sacct_text_says_what_it_looks_like(tmp_path, content, says):
    dump = tmp_path / "dump.txt"
    dump.write_bytes(content)
    res = cli("analyze", "--sacct-file", dump)
    assert res.code == 1 and res.stderr.count("\n") == 1, res.stderr
    assert res.stderr.startswith("slurmgpu: error: ") and says in res.stderr, res.stderr
