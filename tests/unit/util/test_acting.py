"""util.emit, util.journal, util.lock: the one writer, the one journal, the one lock."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field

import pytest

from slurmgpu.errors import OutputError, UsageError
from slurmgpu.util.emit import EXIT_CHANGED, emit, emit_files
from slurmgpu.util.journal import (
    JournalError,
    append_record,
    read_record,
    read_records,
    write_record,
)
from slurmgpu.util.lock import NodeLocked, node_locks


def test_emit_diff_exits_3_when_they_differ_and_writes_nothing(tmp_path, capsys):
    target = tmp_path / "gres.conf"
    target.write_text("old\n")
    assert emit("new\n", target, diff=True) == EXIT_CHANGED == 3
    out = capsys.readouterr()
    assert "-old" in out.out and "+new" in out.out and target.read_text() == "old\n"
    assert emit("old\n", target, diff=True) == 0
    assert capsys.readouterr().err == f"{target}: unchanged\n"


def test_emit_does_not_rewrite_an_unchanged_file(tmp_path, capsys):
    target = tmp_path / "gres.conf"
    assert emit("a\n", target) == EXIT_CHANGED and target.read_text() == "a\n"
    assert emit("b\n", target) == EXIT_CHANGED and (tmp_path / "gres.conf.bak").read_text() == "a\n"
    before = target.stat().st_mtime_ns
    assert emit("b\n", target) == 0
    assert target.stat().st_mtime_ns == before and (tmp_path / "gres.conf.bak").read_text() == "a\n"
    assert capsys.readouterr().err.splitlines()[-1] == f"{target}: unchanged"


def test_emit_runs_the_check_first_in_every_mode(tmp_path):
    def refuse(text):
        raise OutputError("rejected")

    target = tmp_path / "x.conf"
    for mode in ({}, {"diff": True}, {"dry_run": True}, {"emit_dir": tmp_path / "d"}):
        with pytest.raises(OutputError, match="rejected"):
            emit("x\n", target, check=refuse, **mode)
    assert not target.exists() and not (tmp_path / "d").exists()


def test_emit_to_stdout_refuses_the_modes_that_need_a_file(capsys):
    with pytest.raises(UsageError, match="need --output PATH"):
        emit("x", "-", diff=True)
    assert emit("x\n", "-") == 0 and capsys.readouterr().out == "x\n"


def test_emit_files_writes_files_diff_and_steps_and_refuses_name_clashes(tmp_path):
    from slurmgpu.util.emit import change_of

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    live = tmp_path / "a" / "slurm.conf"
    live.write_text("x\n")
    out = tmp_path / "out"
    emit_files(out, [change_of(live, "y\n")], ["scontrol reconfigure"])
    assert (out / "slurm.conf").read_text() == "y\n" and live.read_text() == "x\n"
    assert (out / "steps.txt").read_text() == "scontrol reconfigure\n"
    assert f"--- {live}" in (out / "changes.diff").read_text()
    with pytest.raises(UsageError, match=r"holds the live slurm\.conf"):
        emit_files(tmp_path / "a", [change_of(live, "y\n")])
    assert live.read_text() == "x\n"
    other = change_of(tmp_path / "b" / "slurm.conf", "z\n")
    with pytest.raises(UsageError, match="two files would have one name"):
        emit_files(out, [change_of(live, "y\n"), other])


@dataclass
class Record:
    name: str
    count: int = 0
    items: list[str] = field(default_factory=list)
    note: str | None = None

    def check(self):
        return "negative count" if self.count < 0 else None


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "not JSON"),
        ("{", "not JSON"),
        ("[]", "not a JSON object but list"),
        ('{"count": 1}', "field name missing"),
        ('{"name": 1}', "name: 1 is not str"),
        ('{"name": "a", "count": true}', "count: True is not an integer"),
        ('{"name": "a", "items": "x"}', "items: 'x' is not a list"),
        ('{"name": "a", "items": [1]}', r"items\[0\]: 1 is not str"),
        ('{"name": "a", "count": -1}', "negative count"),
        ('{"name": "a", "bogus": 1}', "unknown field"),
        ('{"name": "a", "sha256": "00"}', "checksum does not match"),
    ],
)
def test_a_record_that_cannot_be_trusted_is_one_journal_error(tmp_path, text, message):
    path = tmp_path / "j.json"
    path.write_text(text)
    with pytest.raises(JournalError, match=message) as info:
        read_record(path, Record)
    assert "\n" not in str(info.value)


def test_records_round_trip_sealed(tmp_path):
    path = tmp_path / "j.json"
    record = Record("a", 2, ["x"], None)
    write_record(path, record)
    assert json.loads(path.read_text())["sha256"]
    assert read_record(path, Record, sealed_only=True) == record
    log = tmp_path / "log.jsonl"
    append_record(log, record)
    append_record(log, Record("b"))
    assert read_records(log, Record) == [record, Record("b")]
    log.write_text(log.read_text().replace('"a"', '"c"'))  # a hand edit
    with pytest.raises(JournalError, match=f"{log}:1: its checksum does not match"):
        read_records(log, Record)


def _holder(tmp_path, seconds: float = 60):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from slurmgpu.util.lock import node_locks\n"
            f"with node_locks({str(tmp_path)!r}, ['n1'], 'mig apply x'):\n"
            f"    print('held', flush=True); time.sleep({seconds})",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline() == "held\n"
    return holder


def test_a_lock_held_by_another_process_is_reported_waited_for_boundedly_and_dies_with_it(
    tmp_path,
):
    import time

    holder = _holder(tmp_path)
    try:
        held = rf"n1: .*\(pid {holder.pid}: mig apply x, since .*\(waited 0.5 s\)"
        told: list[str] = []
        start = time.monotonic()
        with (
            pytest.raises(NodeLocked, match=held),
            node_locks(tmp_path, ["n0", "n1"], "x", wait_s=0.5, on_wait=told.append),
        ):
            pass
        assert 0.5 <= time.monotonic() - start < 5  # waited, and not forever
        assert len(told) == 1 and f"pid {holder.pid}: mig apply x" in told[0], told
        holder.kill()  # SIGKILL: the kernel drops the lock, nothing to clean up
        holder.wait()
        with node_locks(tmp_path, ["n0", "n1"], "rebalance apply"):
            pass
    finally:
        holder.kill()


def test_a_lock_released_while_waited_for_is_taken(tmp_path, capsys):
    holder = _holder(tmp_path, seconds=0.5)
    try:
        with node_locks(tmp_path, ["n1"], "autopilot", wait_s=30):
            assert holder.poll() is not None or holder.wait(5) == 0
        err = capsys.readouterr().err  # the default report: one line on stderr
        assert err.startswith("slurmgpu: n1 is held by pid ") and "waiting up to 30 s" in err
    finally:
        holder.kill()


def test_the_default_wait_is_bounded_and_zero_refuses_at_once(tmp_path, monkeypatch):
    import time

    from slurmgpu.util import lock

    assert 0 < lock.DEFAULT_WAIT_S <= 60
    monkeypatch.setattr(lock, "DEFAULT_WAIT_S", 0.3)
    holder = _holder(tmp_path)
    try:
        for kw, least in (({}, 0.3), ({"wait_s": 0}, 0.0)):
            start = time.monotonic()
            with pytest.raises(NodeLocked), node_locks(tmp_path, ["n1"], "x", **kw):
                pass
            assert least <= time.monotonic() - start < least + 3
    finally:
        holder.kill()


def test_read_records_refuses_unsealed_lines_where_asked(tmp_path):
    log = tmp_path / "log.jsonl"
    append_record(log, Record("sealed"))
    with log.open("a") as fh:
        fh.write(json.dumps({"name": "by hand"}) + "\n")
    assert [r.name for r in read_records(log, Record)] == ["sealed", "by hand"]
    assert read_records(log, Record, sealed_only=lambda r: r.name == "other")[1].name == "by hand"
    for only in (True, lambda r: r.name == "by hand"):
        with pytest.raises(JournalError, match=f"{log}:2: no checksum; it cannot be trusted"):
            read_records(log, Record, sealed_only=only)
