"""`qos apply --undo`: the inverse sacctmgr commands from the journal's state before an apply."""

from __future__ import annotations

import json

import pytest

from slurmgpu.fleet.qos import QosLogEntry, _touched, undo_commands
from slurmgpu.model.accounts import Association, QosRecord

P2 = QosRecord("tier_p2", 100, (), "requeue", 0, "", "", "slurmgpu tier p2")
P0 = QosRecord("tier_p0", 1000, ("tier_p2",), "cluster", 0, "", "", "slurmgpu tier p0")
NORMAL = QosRecord("normal")
APPLY = (
    ("add", "qos", "tier_p2", "Priority=100", "PreemptMode=requeue"),
    ("add", "qos", "tier_p0", "Priority=1000", "Preempt=tier_p2"),
    ("modify", "qos", "where", "name=tier_p1", "set", "Priority=500"),
    ("modify", "account", "where", "name=prod", "cluster=c", "set", "qos+=tier_p0,tier_p2"),
    ("modify", "user", "where", "name=ann", "account=prod", "cluster=c", "set", "qos-=tier_p1"),
)


def test_the_commands_name_what_they_touched():
    qos, assocs = _touched(APPLY)
    assert qos == {"tier_p2", "tier_p0", "tier_p1"}
    assert assocs == {("c", "prod", None), ("c", "prod", "ann")}


def test_undo_deletes_what_was_added_restores_what_changed_and_keeps_the_rest():
    p1_old = QosRecord("tier_p1", 400, description="slurmgpu tier p1")
    p1_new = QosRecord("tier_p1", 500, description="slurmgpu tier p1")
    before_qos = (NORMAL, p1_old)
    live_qos = (NORMAL, p1_new, P2, P0)
    before_assocs = (
        Association("c", "prod", None, ("normal",)),
        Association("c", "prod", "ann", ("normal", "tier_p1")),
        Association("c", "other", None, ("normal",)),
    )
    live_assocs = (
        Association("c", "prod", None, ("normal", "tier_p0", "tier_p2")),
        Association("c", "prod", "ann", ("normal",)),
        Association("c", "other", None, ("normal", "tier_p2")),  # not the apply's: left alone
    )
    qos, assocs = _touched(APPLY)
    cmds = undo_commands(before_qos, before_assocs, qos, assocs, live_qos, live_assocs)
    assert cmds == [
        ("modify", "qos", "where", "name=tier_p1", "set", "Priority=400"),
        ("modify", "account", "where", "name=prod", "cluster=c", "set", "qos-=tier_p0,tier_p2"),
        ("modify", "user", "where", "name=ann", "account=prod", "cluster=c", "set",
         "qos+=tier_p1"),
        ("delete", "qos", "where", "name=tier_p0"),  # the preemptor before its victim
        ("delete", "qos", "where", "name=tier_p2"),
    ]  # fmt: skip
    # once slurmdbd is as before, nothing is left to do
    assert undo_commands(before_qos, before_assocs, qos, assocs, before_qos, before_assocs) == []


def test_a_deleted_qos_is_added_back_with_its_settings():
    cmds = undo_commands((P2,), (), {"tier_p2"}, set(), (), ())
    assert cmds == [
        ("add", "qos", "tier_p2", "Priority=100", "PreemptMode=requeue",
         "Description=slurmgpu tier p2"),
    ]  # fmt: skip


def test_undo_with_an_untrustworthy_log_is_one_error(tmp_path):
    from click.testing import CliRunner

    from slurmgpu.cli import main

    log = tmp_path / "qos.jsonl"
    entry = {"time": "2026-01-01T00:00:00", "action": "apply", "commands": [["rm", "-rf"]],
             "qos_before": [], "associations_before": []}  # fmt: skip
    for line in ("[]", json.dumps(entry), json.dumps({**entry, "qos_before": [{"name": 3}]})):
        log.write_text(line + "\n")
        result = CliRunner().invoke(main, ["qos", "apply", "--undo", "--log", str(log)])
        assert result.exit_code == 1, result.output
        assert result.output.startswith(f"slurmgpu: error: {log}:1: ")
        assert result.output.count("\n") == 1


def test_a_log_entry_round_trips_typed(tmp_path):
    from slurmgpu.util.journal import append_record, read_records

    log = tmp_path / "qos.jsonl"
    assoc = Association("c", "prod", None, ("normal",))
    stamp = "2026-01-01T00:00:00"
    entry = QosLogEntry(stamp, "apply", APPLY, (NORMAL, P0), (assoc,), run=stamp)
    append_record(log, entry)
    assert read_records(log, QosLogEntry) == [entry]
    with pytest.raises(Exception, match="nothing to undo"):
        from slurmgpu.fleet.qos import qos_undo

        append_record(log, QosLogEntry("2026-01-01T00:01:00", "undo", (), (), (),
                                       undoes="2026-01-01T00:00:00"))  # fmt: skip
        qos_undo(log)
