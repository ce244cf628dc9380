"""plan_rebalance: which idle nodes move where, floors, hysteresis, cooldown, GPU types."""

from __future__ import annotations

import json

import pytest

from slurmgpu.errors import UsageError
from slurmgpu.fleet.rebalance import RebalanceOptions, plan_rebalance, undo_last
from slurmgpu.model.rebalance import Move, NodeState, Partition, PendingJob

PARTS = [Partition("train", ("n1", "n2")), Partition("infer", ("n3", "n4", "n5"))]
NODES = [
    NodeState("n1", ("train",), False, 8, "h100", 0),
    NodeState("n2", ("train",), False, 8, "h100", 0),
    NodeState("n3", ("infer",), True, 8, "h100", 900),
    NodeState("n4", ("infer",), True, 8, "h100", 5000),
    NodeState("n5", ("infer",), True, 8, "l40s", 9000),
]
OPTS = RebalanceOptions(min_pending_s=300, min_idle_s=600)


def job(nodes=1, gpus=8, gtype=None, waited=1000, part="train", jid="7"):
    return PendingJob(jid, (part,), nodes, gpus, gtype, waited)


def test_the_longest_idle_fitting_node_moves():
    plan = plan_rebalance([job(gtype="h100")], PARTS, NODES, OPTS)
    assert [(m.node, m.source, m.target) for m in plan.moves] == [("n4", "infer", "train")]
    assert plan.after == {"train": ("n1", "n2", "n4"), "infer": ("n3", "n5")}
    assert "job 7 in train has waited 1000 s" in plan.moves[0].reason


def test_an_untyped_request_takes_any_gpu_node():
    plan = plan_rebalance([job()], PARTS, NODES, OPTS)
    assert [m.node for m in plan.moves] == ["n5"]


def test_hysteresis_a_fresh_job_or_a_briefly_idle_node_does_not_move_anything():
    assert plan_rebalance([job(waited=10)], PARTS, NODES, OPTS).moves == ()
    busy_recently = [NodeState("n3", ("infer",), True, 8, "h100", 100), *NODES[:2]]
    parts = [PARTS[0], Partition("infer", ("n3", "x"))]
    assert plan_rebalance([job()], parts, busy_recently, OPTS).moves == ()


def test_cooldown_keeps_a_moved_node_where_it_is():
    plan = plan_rebalance([job(gtype="h100")], PARTS, NODES, OPTS, {"n4": 60})
    assert [m.node for m in plan.moves] == ["n3"]


def test_floors_are_kept():
    opts = RebalanceOptions(min_pending_s=0, min_idle_s=0, floors={"infer": 3})
    plan = plan_rebalance([job()], PARTS, NODES, opts)
    assert plan.moves == () and "only 0 can move" in plan.notes[0]
    two = plan_rebalance([job(nodes=2, gtype="h100")], PARTS, NODES, OPTS)
    assert sorted(m.node for m in two.moves) == ["n3", "n4"]
    three = plan_rebalance([job(nodes=3, gtype="h100")], PARTS, NODES, OPTS)
    assert three.moves == ()  # a partial move would help nobody
    assert three.after == {"train": ("n1", "n2"), "infer": ("n3", "n4", "n5")}


def test_a_starved_partition_is_never_a_donor():
    jobs = [job(gtype="h100"), job(part="infer", jid="8", gpus=80)]
    plan = plan_rebalance(jobs, PARTS, NODES, OPTS)
    assert plan.moves == ()


def test_undo_without_an_apply_is_a_usage_error(tmp_path):
    log = tmp_path / "log.jsonl"
    undo = {"action": "undo", "undoes": "2026-01-01T00:00:00", "time": "2026-01-01T00:01:00"}
    log.write_text(json.dumps(undo) + "\n")
    with pytest.raises(UsageError, match="nothing to undo"):
        undo_last(log)


def test_no_move_without_its_log_line(tmp_path):
    from slurmgpu.errors import SlurmgpuError
    from slurmgpu.fleet.rebalance import apply_plan

    plan = plan_rebalance([job(gtype="h100")], PARTS, NODES, OPTS)
    (tmp_path / "file").write_text("")
    live = _live(**{k: v for k, v in plan.before.items()})
    with pytest.raises(SlurmgpuError, match=r"cannot write the change log"):
        apply_plan(plan, tmp_path / "file" / "log.jsonl", env={"PATH": "/nonexistent"}, live=live)


def test_cli_bad_log_and_bad_snapshot_dir_are_one_line(tmp_path):
    from click.testing import CliRunner

    from slurmgpu.cli import main

    bad = tmp_path / "log.jsonl"
    bad.write_text("garbage\n")
    result = CliRunner().invoke(main, ["rebalance", "apply", "--undo", "--log", str(bad)])
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"slurmgpu: error: {bad}:1: not a JSON line (Expecting value: line 1 column 1 (char 0))"
    )
    result = CliRunner().invoke(main, ["check", "--snapshot-dir", str(tmp_path / "none")])
    assert result.exit_code == 2
    assert result.output.strip().endswith("not a directory")


# -- issue #20: usable floors, the log read back, undo from the live state ----------------------


def test_the_floor_counts_usable_nodes_only():
    # infer has two nodes, but n4 is drained: n3 is the only one that runs jobs there
    nodes = [
        *NODES[:2],
        NodeState("n3", ("infer",), True, 8, "h100", 900),
        NodeState("n4", ("infer",), False, 8, "h100", 5000, usable=False),
    ]
    parts = [PARTS[0], Partition("infer", ("n3", "n4"))]
    opts = RebalanceOptions(min_pending_s=0, min_idle_s=0)
    plan = plan_rebalance([job()], parts, nodes, opts)
    assert plan.moves == () and "only 0 can move" in plan.notes[0]
    healthy = [*nodes[:3], NodeState("n4", ("infer",), False, 8, "h100", 0)]  # busy, not drained
    assert [m.node for m in plan_rebalance([job()], parts, healthy, opts).moves] == ["n3"]


APPLY = {
    "time": "2026-01-01T10:00:00",
    "action": "apply",
    "moves": [{"node": "n4", "source": "infer", "target": "train", "reason": "job 7 waited"}],
    "before": {"train": "n[1-2]", "infer": "n[3-5]"},
    "after": {"train": "n[1-2,4]", "infer": "n[3,5]"},
}


def _live(**lists):
    return lambda env: [Partition(name, tuple(nodes)) for name, nodes in lists.items()]


NO_SCONTROL = {"PATH": "/nonexistent"}


@pytest.mark.parametrize(
    "line, message",
    [
        ("[1, 2]", "not a JSON object but list"),
        ('"x"', "not a JSON object but str"),
        ("null", "not a JSON object but NoneType"),
        (json.dumps({**APPLY, "action": "boom"}), "none of intent, apply, undo"),
        (json.dumps({**APPLY, "time": 5}), "time: 5 is not str"),
        (json.dumps({**APPLY, "before": {"train": "n[1-"}}), "no valid node list"),
        (json.dumps({**APPLY, "moves": [{"node": "n4"}]}), "field source missing"),
        (json.dumps({**APPLY, "moves": "n4"}), "is not a list"),
        (json.dumps({**APPLY, "extra": 1}), "unknown field"),
        (json.dumps({**APPLY, "sha256": "0" * 64}), "checksum does not match"),
    ],
)
def test_a_log_line_that_is_not_a_valid_entry_is_one_error_and_nothing_changes(
    tmp_path, line, message
):
    from click.testing import CliRunner

    from slurmgpu.cli import main

    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps(APPLY) + "\n" + line + "\n")
    result = CliRunner().invoke(main, ["rebalance", "apply", "--undo", "--log", str(log)])
    assert result.exit_code == 1, result.output
    assert result.output.startswith(f"slurmgpu: error: {log}:2: ") and message in result.output
    assert result.output.count("\n") == 1 and "Traceback" not in result.output


def test_undo_is_logged_only_after_scontrol_did_it(tmp_path):
    from slurmgpu.errors import SlurmCommandError

    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps(APPLY) + "\n")
    live = _live(train=("n1", "n2", "n4"), infer=("n3", "n5"))
    with pytest.raises(SlurmCommandError):
        undo_last(log, NO_SCONTROL, live=live)
    assert log.read_text() == json.dumps(APPLY) + "\n"  # still undoable
    assert [e.action for e in _log(log)] == ["apply"]


def _log(log):
    from slurmgpu.fleet.rebalance import _entries

    return _entries(log)


def test_undo_after_a_reconfigure_says_nothing_was_restored(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps(APPLY) + "\n")
    # slurmctld went back to slurm.conf: the lists are as before the apply; no scontrol runs
    result = undo_last(log, NO_SCONTROL, live=_live(train=("n1", "n2"), infer=("n3", "n4", "n5")))
    assert result.restored == {} and result.unchanged == APPLY["before"]
    assert [e.action for e in _log(log)] == ["apply", "undo"]
    with pytest.raises(UsageError, match="nothing to undo"):
        undo_last(log, NO_SCONTROL, live=_live())


def test_undo_of_partitions_changed_since_by_someone_else_stops(tmp_path):
    from slurmgpu.errors import SlurmgpuError

    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps(APPLY) + "\n")
    live = _live(train=("n1",), infer=("n3", "n5"))
    with pytest.raises(SlurmgpuError, match="partition train has Nodes=n1 now, neither"):
        undo_last(log, NO_SCONTROL, live=live)
    assert [e.action for e in _log(log)] == ["apply"]


INCLUDE = (
    "# written by hand, then owned by slurmgpu rebalance\n"
    "PartitionName=train Nodes=n[1-2] Default=YES MaxTime=INFINITE State=UP\n"
    "PartitionName=infer Nodes=n[3-5] MaxTime=INFINITE State=UP\n"
    "PartitionName=debug Nodes=n1 State=UP\n"
)


def test_the_include_file_gets_the_new_node_lists_and_keeps_the_rest(tmp_path):
    from slurmgpu.fleet.rebalance import partitions_conf_text

    path = tmp_path / "slurmgpu-partitions.conf"
    new = partitions_conf_text(INCLUDE, {"train": ["n1", "n2", "n4"], "infer": ["n3", "n5"]}, path)
    assert new.splitlines() == [
        "# written by hand, then owned by slurmgpu rebalance",
        "PartitionName=train Nodes=n[1-2,4] Default=YES MaxTime=INFINITE State=UP",
        "PartitionName=infer Nodes=n[3,5] MaxTime=INFINITE State=UP",
        "PartitionName=debug Nodes=n1 State=UP",
    ]
    with pytest.raises(UsageError, match="no PartitionName= line for gpu"):
        partitions_conf_text(INCLUDE, {"gpu": ["n1"]}, path)


def test_a_failed_scontrol_puts_the_include_file_back(tmp_path):
    from slurmgpu.errors import SlurmCommandError
    from slurmgpu.fleet.rebalance import apply_plan

    conf = tmp_path / "slurmgpu-partitions.conf"
    conf.write_text(INCLUDE)
    plan = plan_rebalance([job(gtype="h100")], PARTS, NODES, OPTS)
    live = _live(**plan.before)
    with pytest.raises(SlurmCommandError):
        apply_plan(plan, tmp_path / "log.jsonl", NO_SCONTROL, partitions_conf=conf, live=live)
    assert conf.read_text() == INCLUDE


def test_emit_writes_the_include_file_and_its_diff_and_touches_nothing(tmp_path):
    from slurmgpu.fleet.rebalance import emit_plan

    conf = tmp_path / "slurmgpu-partitions.conf"
    conf.write_text(INCLUDE)
    plan = plan_rebalance([job(gtype="h100")], PARTS, NODES, OPTS)
    out = tmp_path / "emit"
    written = emit_plan(plan, out, conf)
    assert [p.name for p in written] == ["slurmgpu-partitions.conf", "changes.diff", "steps.txt"]
    assert conf.read_text() == INCLUDE
    emitted = (out / "slurmgpu-partitions.conf").read_text()
    assert "PartitionName=train Nodes=n[1-2,4] Default=YES" in emitted
    diff = (out / "changes.diff").read_text()
    assert f"--- {conf}" in diff and "+PartitionName=infer Nodes=n[3,5]" in diff
    assert (out / "steps.txt").read_text().splitlines()[-1] == "scontrol reconfigure"
    # the diff, applied by hand, gives the emitted file
    import subprocess

    subprocess.run(["patch", "-s", str(conf), str(out / "changes.diff")], check=True)
    assert conf.read_text() == emitted
    with pytest.raises(UsageError, match="--emit needs --partitions-conf"):
        emit_plan(plan, out, None)


# -- issue 33: re-checked under the locks, killed runs recovered, durable or refused ------------


class FakeSlurm:
    """A `scontrol` on PATH that records each `update` into a file; `live` reads the node
    lists back from there (the partitions slurmctld would show)."""

    def __init__(self, tmp_path, **lists):
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        self.calls = tmp_path / "scontrol.calls"
        self.lists = {k: tuple(v) for k, v in lists.items()}
        script = self.bin / "scontrol"
        script.write_text(f'#!/bin/sh\necho "$@" >> {self.calls}\n')
        script.chmod(0o755)
        self.env = {"PATH": f"{self.bin}:/usr/bin:/bin"}

    def updates(self) -> list[str]:
        return self.calls.read_text().splitlines() if self.calls.exists() else []

    def live(self, env):
        from slurmgpu.util.hostlist import expand_hostlist

        lists = dict(self.lists)
        for line in self.updates():
            words = dict(w.split("=", 1) for w in line.split()[1:])
            lists[words["PartitionName"]] = tuple(expand_hostlist(words["Nodes"]))
        return [Partition(k, v) for k, v in lists.items()]


def _plan():
    plan = plan_rebalance([job(gtype="h100")], PARTS, NODES, OPTS)
    assert [(m.node, m.source, m.target) for m in plan.moves] == [("n4", "infer", "train")]
    return plan


def test_an_admins_partition_edit_since_the_plan_stops_the_move_and_is_kept(tmp_path):
    from slurmgpu.fleet.rebalance import MoveRefused, apply_plan

    # the admin took n5 out of infer after the plan read the partitions
    slurm = FakeSlurm(tmp_path, train=("n1", "n2"), infer=("n3", "n4"))
    log = tmp_path / "log.jsonl"
    with pytest.raises(MoveRefused, match=r"partition infer has Nodes=n\[3-4\] now, not "):
        apply_plan(_plan(), log, slurm.env, live=slurm.live)
    assert slurm.updates() == [] and not log.exists()  # nothing set back, nothing logged


def test_the_callers_recheck_under_the_locks_stops_the_move(tmp_path):
    from slurmgpu.fleet.rebalance import MoveRefused, apply_plan, node_problems
    from slurmgpu.util.lock import NodeLocked, lock_dir, node_locks

    slurm = FakeSlurm(tmp_path, **_plan().before)
    log = tmp_path / "log.jsonl"
    seen = []

    def recheck():  # runs with n4's lock held: another command cannot take it now
        with pytest.raises(NodeLocked), node_locks(lock_dir(), ["n4"], "other", wait_s=0):
            pass
        seen.append("checked")
        drained = NodeState("n4", ("infer",), False, 8, "h100", 5000, usable=False)
        return node_problems(_plan().moves, [drained])

    with pytest.raises(MoveRefused, match="n4 is drained or down now: not moved"):
        apply_plan(_plan(), log, slurm.env, live=slurm.live, recheck=recheck)
    assert seen == ["checked"] and slurm.updates() == [] and not log.exists()
    busy = NodeState("n4", ("infer",), False, 8, "h100", 0)
    assert node_problems(_plan().moves, [busy]) == ["n4 runs a job now: not moved"]
    assert node_problems(_plan().moves, []) == ["n4 is no longer a node slurmctld knows: not moved"]


def test_a_move_is_journaled_as_an_intent_before_scontrol_and_completed_after(tmp_path):
    from slurmgpu.fleet.rebalance import apply_plan, pending_intents

    slurm = FakeSlurm(tmp_path, **_plan().before)
    log = tmp_path / "log.jsonl"
    stamp = apply_plan(_plan(), log, slurm.env, live=slurm.live, by="autopilot ap-1")
    assert [(e.action, e.time, e.by) for e in _log(log)] == [
        ("intent", stamp, "autopilot ap-1"),
        ("apply", stamp, "autopilot ap-1"),
    ]
    assert pending_intents(log) == [] and len(slurm.updates()) == 2


def _killed(tmp_path, conf=None):
    """The log a run killed after its intent leaves (no apply, no undo)."""
    from slurmgpu.fleet.rebalance import LogEntry
    from slurmgpu.util.journal import append_record

    log = tmp_path / "log.jsonl"
    entry = LogEntry(**{**APPLY, "action": "intent", "by": "autopilot ap-1"})
    entry = dataclasses_replace(entry, moves=tuple(Move(**m) for m in APPLY["moves"]))
    if conf is not None:
        entry = dataclasses_replace(entry, partitions_conf=str(conf))
    append_record(log, entry)
    return log


def dataclasses_replace(obj, **kw):
    import dataclasses

    return dataclasses.replace(obj, **kw)


def test_a_run_killed_between_its_scontrol_updates_is_undone_node_in_one_partition(tmp_path):
    from slurmgpu.fleet.rebalance import pending_intents, recover_pending

    conf = tmp_path / "slurmgpu-partitions.conf"
    conf.write_text(INCLUDE.replace("n[1-2] ", "n[1-2,4] ").replace("n[3-5]", "n[3,5]"))
    log = _killed(tmp_path, conf)  # the include file was ahead: it had the move
    # train got n4, infer was not updated yet: n4 in two partitions
    slurm = FakeSlurm(tmp_path, train=("n1", "n2", "n4"), infer=("n3", "n4", "n5"))
    done = recover_pending(log, slurm.env, live=slurm.live)
    assert len(done) == 1 and done[0].startswith("undid the move of 2026-01-01T10:00:00")
    assert slurm.updates() == ["update PartitionName=train Nodes=n[1-2]"]
    assert {p.name: p.nodes for p in slurm.live(None)} == {
        "train": ("n1", "n2"),
        "infer": ("n3", "n4", "n5"),
    }
    assert conf.read_text() == INCLUDE  # the include file agrees with the live partitions
    assert [e.action for e in _log(log)] == ["intent", "undo"] and pending_intents(log) == []
    assert recover_pending(log, slurm.env, live=slurm.live) == []  # once


def test_a_run_killed_after_its_scontrol_updates_is_finished(tmp_path):
    from slurmgpu.fleet.rebalance import recover_pending

    conf = tmp_path / "slurmgpu-partitions.conf"
    conf.write_text(INCLUDE)  # as before the move (put back by hand): recovery sets it too
    log = _killed(tmp_path, conf)
    slurm = FakeSlurm(tmp_path, train=("n1", "n2", "n4"), infer=("n3", "n5"))
    done = recover_pending(log, slurm.env, live=slurm.live)
    assert done and done[0].startswith("finished the move of 2026-01-01T10:00:00")
    assert slurm.updates() == []
    assert "PartitionName=train Nodes=n[1-2,4] " in conf.read_text()
    assert [e.action for e in _log(log)] == ["intent", "apply"]


def test_a_killed_run_whose_partitions_were_changed_by_hand_since_is_one_error_line(tmp_path):
    from slurmgpu.errors import SlurmgpuError
    from slurmgpu.fleet.rebalance import recover_pending

    log = _killed(tmp_path)
    slurm = FakeSlurm(tmp_path, train=("n1",), infer=("n3", "n4", "n5"))
    with pytest.raises(SlurmgpuError, match="pending, and partition train is now neither") as err:
        recover_pending(log, slurm.env, live=slurm.live)
    assert "\n" not in str(err.value) and slurm.updates() == []
    assert [e.action for e in _log(log)] == ["intent"]


def test_undo_recovers_a_killed_run_first(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps(APPLY) + "\n")
    from slurmgpu.fleet.rebalance import LogEntry
    from slurmgpu.util.journal import append_record

    later = LogEntry(
        time="2026-01-01T11:00:00", action="intent",
        moves=(Move("n3", "infer", "train", "x"),),
        before={"train": "n[1-2,4]", "infer": "n[3,5]"},
        after={"train": "n[1-4]", "infer": "n5"},
    )  # fmt: skip
    append_record(log, later)
    slurm = FakeSlurm(tmp_path, train=("n1", "n2", "n4"), infer=("n3", "n5"))  # never acted
    result = undo_last(log, slurm.env, live=slurm.live)
    assert result.restored == {"train": "n[1-2]", "infer": "n[3-5]"}  # the first apply undone
    assert [e.action for e in _log(log)] == ["apply", "intent", "undo", "undo"]


def test_a_live_apply_is_durable_or_asked_transient_by_name(tmp_path):
    from click.testing import CliRunner

    from slurmgpu.cli import main

    log = tmp_path / "log.jsonl"
    result = CliRunner().invoke(main, ["rebalance", "apply", "--log", str(log)])
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert result.output.startswith("slurmgpu: error: a live rebalance apply needs ")
    assert "--partitions-conf" in result.output and "--transient" in result.output
    assert not log.exists()


# -- issue 33: exit codes (docs/acting.md): 3 changed or would, 0 nothing --------------------


def _cli_cluster(tmp_path, monkeypatch, jobs):
    """The CLI's live reads answered from NODES and `jobs` (a list the test may empty: the
    job started); `scontrol update` recorded by a FakeSlurm on PATH, the partitions read
    back from it."""
    from slurmgpu.sources import queue

    slurm = FakeSlurm(tmp_path, **{p.name: p.nodes for p in PARTS})
    monkeypatch.setenv("PATH", slurm.env["PATH"])
    monkeypatch.setattr(queue, "pending_jobs", lambda env, now: list(jobs))
    monkeypatch.setattr(queue, "partitions", slurm.live)
    monkeypatch.setattr(queue, "nodes", lambda env, now=None: list(NODES))
    return slurm


def _rebalance(*args):
    from click.testing import CliRunner

    from slurmgpu.cli import main

    return CliRunner().invoke(main, ["rebalance", *args])


def test_rebalance_plan_exits_3_with_moves_and_0_without(tmp_path, monkeypatch):
    jobs = [job(gtype="h100")]
    slurm = _cli_cluster(tmp_path, monkeypatch, jobs)
    log = str(tmp_path / "log.jsonl")
    moves = _rebalance("plan", "--log", log)
    assert moves.exit_code == 3, moves.output
    assert "n4" in moves.output
    jobs.clear()
    none = _rebalance("plan", "--log", log)
    assert none.exit_code == 0, none.output
    assert slurm.updates() == []


def test_rebalance_apply_exits_3_when_it_moved_or_would_and_0_when_nothing(tmp_path, monkeypatch):
    jobs = [job(gtype="h100")]
    slurm = _cli_cluster(tmp_path, monkeypatch, jobs)
    conf = tmp_path / "slurmgpu-partitions.conf"
    conf.write_text(INCLUDE)
    log = str(tmp_path / "log.jsonl")
    common = ("--log", log, "--partitions-conf", str(conf))
    dry = _rebalance("apply", *common, "--dry-run")
    assert dry.exit_code == 3, dry.output
    emitted = _rebalance("apply", *common, "--emit", str(tmp_path / "out"))
    assert emitted.exit_code == 3, emitted.output
    assert slurm.updates() == [] and conf.read_text() == INCLUDE  # nothing live yet
    applied = _rebalance("apply", *common)
    assert applied.exit_code == 3, applied.output
    assert len(slurm.updates()) == 2 and "n[1-2,4]" in conf.read_text()
    jobs.clear()  # the job started on n4
    again = _rebalance("apply", *common)
    assert again.exit_code == 0, again.output
    assert len(slurm.updates()) == 2
    for mode in ("--dry-run", "--emit"):
        extra = (mode, str(tmp_path / "out2")) if mode == "--emit" else (mode,)
        quiet = _rebalance("apply", *common, *extra)
        assert quiet.exit_code == 0, quiet.output
    undone = _rebalance("apply", "--log", log, "--undo")
    assert undone.exit_code == 3, undone.output
    assert conf.read_text() == INCLUDE and len(slurm.updates()) == 4


def test_rebalance_undo_of_a_move_already_undone_exits_0(tmp_path, monkeypatch):
    """slurmctld and the include file already hold the lists from before the apply (a
    reconfigure undid it): the undo sets nothing and writes nothing: 0."""
    slurm = _cli_cluster(tmp_path, monkeypatch, [])
    conf = tmp_path / "slurmgpu-partitions.conf"
    conf.write_text(INCLUDE)
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps(APPLY) + "\n")
    monkeypatch.setattr(
        "slurmgpu.sources.queue.partitions",
        _live(train=("n1", "n2"), infer=("n3", "n4", "n5")),
    )
    result = _rebalance("apply", "--log", str(log), "--undo", "--partitions-conf", str(conf))
    assert result.exit_code == 0, result.output
    assert "unchanged PartitionName=train" in result.output
    assert slurm.updates() == [] and conf.read_text() == INCLUDE
