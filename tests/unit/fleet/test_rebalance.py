"""plan_rebalance: which idle nodes move where, floors, hysteresis, cooldown, GPU types."""

from __future__ import annotations

import json

import pytest

from slurmgpu.errors import UsageError
from slurmgpu.fleet.rebalance import RebalanceOptions, plan_rebalance, undo_last
from slurmgpu.model.rebalance import NodeState, Partition, PendingJob

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
    log.write_text(json.dumps({"action": "undo", "undoes": "x", "time": "t"}) + "\n")
    with pytest.raises(UsageError, match="nothing to undo"):
        undo_last(log)


def test_no_move_without_its_log_line(tmp_path):
    from slurmgpu.errors import SlurmgpuError
    from slurmgpu.fleet.rebalance import apply_plan

    plan = plan_rebalance([job(gtype="h100")], PARTS, NODES, OPTS)
    (tmp_path / "file").write_text("")
    with pytest.raises(SlurmgpuError, match="cannot write the change log"):
        apply_plan(plan, tmp_path / "file" / "log.jsonl", env={"PATH": "/nonexistent"})


def test_cli_bad_log_and_bad_snapshot_dir_are_one_line(tmp_path):
    from click.testing import CliRunner

    from slurmgpu.cli import main

    bad = tmp_path / "log.jsonl"
    bad.write_text("garbage\n")
    result = CliRunner().invoke(main, ["rebalance", "apply", "--undo", "--log", str(bad)])
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"slurmgpu: error: {bad}:1: not a rebalance log line: Expecting value: line 1 column 1 "
        "(char 0)"
    )
    result = CliRunner().invoke(main, ["check", "--snapshot-dir", str(tmp_path / "none")])
    assert result.exit_code == 2
    assert result.output.strip().endswith("not a directory")
