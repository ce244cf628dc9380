"""Calibration: the baseline against the recorded history, per partition."""

from dataclasses import replace

import numpy as np
import pytest

from slurmgpu.advice.calibrate import Tolerance, calibrate_trace
from slurmgpu.replay.jobs import ReplayJob, ReplayTrace
from tests.unit.advice.conftest import options


def test_the_generated_month_is_calibrated_partition_by_partition(month_trace):
    cal = calibrate_trace(month_trace, options())
    rows = {p.partition: p for p in cal.by_partition}
    assert set(rows) == {"big", "burst", "idle"}
    for name, p in rows.items():
        assert p.calibrated, (name, p.why)
        mine = month_trace.partition == month_trace.partitions.index(name)
        # every job that started in the record (the cancelled-while-pending ones did not)
        assert p.jobs == int((mine & ~month_trace.cancelled_pending()).sum())
        # allocation is conserved (the same jobs, the same durations, the window's GPU-hours)
        assert abs(p.recorded.allocation_ratio - p.baseline.allocation_ratio) < 0.01
    # the waits the reference scheduler recorded, computed here from the trace itself
    k = month_trace.partitions.index("burst")
    waits = (month_trace.recorded_start_s - month_trace.submit_s)[month_trace.partition == k]
    waits = waits[np.isfinite(waits)]
    assert rows["burst"].recorded.wait_s.mean == pytest.approx(float(waits.mean()))
    assert rows["burst"].recorded.wait_s.p95 == pytest.approx(float(np.percentile(waits, 95)))
    # the bursty partition: mean wait within 10 % and >= 95 % of jobs in the recorded order
    b = rows["burst"]
    assert abs(b.baseline.wait_s.mean / b.recorded.wait_s.mean - 1) < 0.10
    assert b.same_order_fraction >= 0.95
    assert abs(rows["big"].mean_wait_factor - 1) < 0.10
    doc = cal.to_dict()
    assert set(doc["by_partition"][0]) >= {"partition", "recorded", "baseline"}
    assert set(doc["by_partition"][0]["recorded"]["wait_s"]) >= {"mean", "p95"}


def test_a_partition_whose_record_the_model_misses_is_not_calibrated(month_trace):
    k = month_trace.partitions.index("burst")
    mine = month_trace.partition == k
    # a record whose burst waits were 5x what the model replays (the Helios case)
    rec = month_trace.recorded_start_s.copy()
    rec[mine] = month_trace.submit_s[mine] + 5 * (rec[mine] - month_trace.submit_s[mine]) + 600
    end = rec + month_trace.duration_s
    off = replace(month_trace, recorded_start_s=rec, recorded_end_s=end, recorded_runs=None)
    cal = calibrate_trace(off, options())
    burst = cal.partition("burst")
    assert not burst.calibrated and not cal.calibrated("burst")
    assert "baseline mean wait" in burst.why and "tolerance x2" in burst.why
    assert cal.calibrated("big") and cal.calibrated("new-partition-of-a-move")
    # a wider tolerance accepts it
    wide = calibrate_trace(off, options(), Tolerance(wait_factor=100.0, allocation_points=50))
    assert wide.calibrated("burst"), wide.partition("burst").why


def test_hand_worked_two_jobs():
    """One 8-GPU node: job a (8 GPUs, 100 s) runs first, b (8 GPUs) waits for it: recorded
    b at 150 s (slurmctld was late), the replay starts it at 100 s."""
    jobs = [
        ReplayJob("a", "p", "q", "q", 0.0, 100.0, 200.0, 8.0, recorded_start_s=0.0,
                  recorded_end_s=100.0),
        ReplayJob("b", "p", "q", "q", 10.0, 50.0, 200.0, 8.0, recorded_start_s=150.0,
                  recorded_end_s=200.0),
    ]  # fmt: skip
    trace = ReplayTrace.from_jobs(jobs)
    from slurmgpu.replay import ReplayOptions
    from slurmgpu.replay.engine import SchedConfig

    exact = SchedConfig(sched_tick_s=0, release_delay_s=0, spread_submits=False)
    cal = calibrate_trace(trace, ReplayOptions(capacity={"p": 8}, config=exact))
    [p] = cal.by_partition
    assert p.recorded.wait_s.mean == pytest.approx((0 + 140) / 2)
    assert p.baseline.wait_s.mean == pytest.approx((0 + 90) / 2)
    assert p.mean_wait_factor == pytest.approx(45 / 70)
    assert p.same_order_fraction == 1.0
    assert p.calibrated  # 25 s apart: within the minute of slack
    strict = calibrate_trace(trace, ReplayOptions(capacity={"p": 8}, config=exact),
                             Tolerance(wait_factor=1.2, wait_slack_s=0))  # fmt: skip
    assert not strict.partition("p").calibrated
