"""`replay --what-if idle:FILE`: runs the idle retrospective flagged end at their action."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from slurmgpu.errors import UsageError
from slurmgpu.model.changes import IdleReclaim, parse_change
from slurmgpu.replay import ReplayOptions, replay_trace
from slurmgpu.replay.idle_reclaim import reclaim
from slurmgpu.replay.jobs import ReplayJob, ReplayTrace

T0 = 1_764_547_200


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def history() -> ReplayTrace:
    """A backlog: 4-GPU jobs of an hour every 6 minutes on 16 GPUs; every second one sat
    idle after its first 10 minutes (what the retrospective would flag)."""
    jobs = [
        ReplayJob(f"{100 + i}", "gpu", "normal", "normal", i * 360.0, 3600.0, 7200.0, 4.0,
                  recorded_start_s=i * 360.0)
        for i in range(120)
    ]  # fmt: skip
    return ReplayTrace.from_jobs(jobs, epoch_s=T0)


def idle_doc(tmp_path, trace: ReplayTrace):
    flagged = []
    for i in range(0, len(trace), 2):
        start = T0 + float(trace.recorded_start_s[i])
        flagged.append(
            {
                "job_id": str(trace.job_id[i]),
                "start": iso(start),
                "action_at": iso(start + 600),
                "flagged_at": iso(start + 600),
            }
        )
    path = tmp_path / "idle.json"
    path.write_text(json.dumps({"jobs": flagged, "reclaimable_gpu_hours": 0}))
    return path


def test_the_grammar_round_trips():
    change = parse_change("idle:/var/lib/slurmgpu/idle-week.json")
    assert change == IdleReclaim("/var/lib/slurmgpu/idle-week.json")
    assert change.format() == "idle:/var/lib/slurmgpu/idle-week.json"
    with pytest.raises(UsageError, match="use idle:FILE"):
        parse_change("idle:")


def test_flagged_runs_keep_only_the_work_before_the_action(tmp_path):
    trace = history()
    cut, count = reclaim(trace, IdleReclaim(str(idle_doc(tmp_path, trace))))
    assert count == 60
    assert sorted(set(cut.duration_s.tolist())) == [600.0, 3600.0]
    assert (cut.duration_s == 600.0).sum() == 60


def test_reclaiming_idle_runs_shortens_the_waits(tmp_path):
    trace = history()
    path = idle_doc(tmp_path, trace)
    options = ReplayOptions(capacity={"gpu": 16}, gpu_types={"gpu": "h100"},
                            what_if=(parse_change(f"idle:{path}"),))  # fmt: skip
    report = replay_trace(trace, options)
    base, reclaimed = report.baseline, report.scenarios[0]
    assert base.by_partition[0].wait_s.p95 > 3600  # a real backlog
    assert reclaimed.by_partition[0].wait_s.p95 < base.by_partition[0].wait_s.p95 / 2
    assert reclaimed.jobs_not_run == 0
    assert reclaimed.gpu_hours_allocated < base.gpu_hours_allocated


def test_a_file_that_is_not_an_idle_document_is_refused_before_replaying(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("[1, 2]")
    options = ReplayOptions(capacity={"gpu": 16}, what_if=(parse_change(f"idle:{bad}"),))
    with pytest.raises(UsageError, match="not the JSON of `slurmgpu idle`"):
        replay_trace(history(), options)
    options = ReplayOptions(capacity={"gpu": 16}, what_if=(parse_change("idle:/nonexistent"),))
    with pytest.raises(UsageError, match="idle:/nonexistent"):
        replay_trace(history(), options)
