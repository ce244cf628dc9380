"""`advise` on the generated month: the plan and the rejected moves, each checked against the
per-node reference scheduler run on the changed cluster (independent of the replay engine)."""

import numpy as np
import pytest

from slurmgpu.advice.objective import verdict
from slurmgpu.advice.optimize import AdviseOptions, advise_trace, perturbed
from slurmgpu.model.policy import Objective, WaitWeight
from tests.unit.advice.conftest import options
from tests.unit.advice.helios_month import PARTS, helios_month, reference_schedule

OBJ = Objective()  # the defaults: no partition's mean or p95 wait may grow > 10 % + 60 s


@pytest.fixture(scope="module")
def advice(month_trace):
    return advise_trace(month_trace, AdviseOptions(options(processes=2), OBJ, max_changes=2))


def reference_waits(parts):
    """{partition: (mean, p95)} of the reference scheduler's waits on `parts`."""
    jobs = reference_schedule(helios_month(3, days=2), parts)
    out = {}
    for name in parts:
        w = np.array(
            [j.start - j.submit for j in jobs if j.partition == name and j.start is not None]
        )
        out[name] = (float(w.mean()), float(np.percentile(w, 95)))
    return out


def moved(parts, source, target, gpus):
    n = gpus // 8
    out = dict(parts)
    out[source] = (parts[source][0] - n, 8)
    out[target] = (parts[target][0] + n, 8)
    return out


def test_the_plan_cuts_the_backlog_by_30_percent_and_no_p95_grows_past_the_objective(advice):
    plan = advice.plan
    assert plan.changes and all(c.startswith("move:") for c in plan.changes)
    rows = {p.partition: p for p in plan.by_partition}
    big = rows["big"]
    assert big.gpus_after > big.gpus_before
    assert big.after.mean <= 0.7 * big.before.mean
    for p in rows.values():  # the replay's own verdict: no limit broken
        assert p.after.p95 <= p.before.p95 * 1.1 + 60, p.partition
    assert plan.useful_gpu_hours[1] >= 0.99 * plan.useful_gpu_hours[0]
    assert plan.gpu_hours_lost == (0.0, 0.0)
    # uncertainty: 4 perturbed replays, the backlog's change negative in all of them
    assert plan.perturbed_replays == 4
    assert (
        big.mean_wait_change_s.high < 0
        and big.mean_wait_change_s.low <= big.mean_wait_change_s.high
    )
    # independently: the reference scheduler on the planned cluster
    parts = dict(PARTS)
    for c in plan.changes:
        _, src, dst, gpus = c.split(":")
        parts = moved(parts, src, dst, int(gpus))
    before, after = reference_waits(PARTS), reference_waits(parts)
    assert after["big"][0] <= 0.7 * before["big"][0]
    for name in PARTS:
        assert after[name][1] <= before[name][1] * 1.1 + 60, (name, before[name], after[name])


def test_the_heuristics_move_from_the_bursty_partition_is_rejected_with_its_reason(advice):
    why = {r.change: r.why for r in advice.rejected}
    harm = why["move:burst:big:16"]
    assert harm.startswith("replay shows harm: ") and "burst's p95 wait grows" in harm
    assert "move:burst:big:16" not in advice.plan.changes
    # independently: 2 burst nodes fewer makes the reference's burst p95 grow past the limit
    before = reference_waits(PARTS)["burst"]
    after = reference_waits(moved(PARTS, "burst", "big", 16))["burst"]
    assert after[1] > before[1] * 1.1 + 60
    # big (the backlog) keeps 88 % of its 64 GPUs busy: no node of it is offered at all
    assert not any(c.startswith("move:big:") for c in why)
    assert advice.candidates == len(advice.rejected) + len(advice.accepted)


def test_json_has_the_issues_shape(advice):
    doc = advice.to_dict()
    fid = doc["fidelity"]["by_partition"][0]
    assert {"partition", "recorded", "baseline"} <= set(fid)
    assert {"allocation_ratio", "wait_s"} <= set(fid["recorded"])
    assert {"mean", "p95"} <= set(fid["recorded"]["wait_s"])
    plan = doc["plan"]
    assert plan["changes"] == list(advice.plan.changes)
    row = plan["by_partition"][0]
    assert {"partition", "before", "after"} <= set(row)
    assert set(row["after"]["wait_s"]) == {"mean", "p50", "p95"}
    assert all(set(r) == {"change", "why"} for r in doc["rejected"])
    assert doc["candidates"] == len(advice.rejected) + len(advice.accepted)


def test_an_uncalibrated_partition_is_not_advised_on(month_trace):
    from dataclasses import replace

    k = month_trace.partitions.index("idle")
    mine = month_trace.partition == k
    rec = month_trace.recorded_start_s.copy()
    rec[mine] += 7200.0  # recorded: idle's jobs waited two hours; the model says seconds
    off = replace(month_trace, recorded_start_s=rec, recorded_end_s=rec + month_trace.duration_s,
                  recorded_runs=None)  # fmt: skip
    got = advise_trace(off, AdviseOptions(options(), OBJ, candidates=("move:idle:big:16",)))
    assert got.plan.changes == ()
    [r] = got.rejected
    assert r.change == "move:idle:big:16"
    assert r.why.startswith("not advised: partition idle's baseline is off")
    assert any("not advised on" in n and "idle" in n for n in got.notes)


def test_weights_change_the_score_not_the_limits(month_trace):
    from slurmgpu.advice.calibrate import calibrate_trace

    base = calibrate_trace(month_trace, options()).baseline
    heavy = Objective(partitions=(WaitWeight("big", mean_wait=10.0),))
    light = Objective(partitions=(WaitWeight("big", mean_wait=0.0),))
    moved_block = advise_trace(
        month_trace, AdviseOptions(options(), OBJ, candidates=("move:idle:big:16",))
    )
    assert moved_block.accepted  # accepted under the defaults
    from slurmgpu.advice.optimize import _block
    from slurmgpu.model.changes import parse_change
    from slurmgpu.replay import build_model
    from slurmgpu.replay.results import window_of

    model = build_model(options())
    after = _block((month_trace, model, parse_change("move:idle:big:16"), options().config,
                    window_of(month_trace)))  # fmt: skip
    vh, vl = verdict(base, after, heavy), verdict(base, after, light)
    assert vh.score < vl.score and vh.violations == vl.violations == ()


def test_perturbed_traces_are_seeded_sorted_and_keep_limits(month_trace):
    a = perturbed(month_trace, np.random.default_rng(1), OBJ)
    b = perturbed(month_trace, np.random.default_rng(1), OBJ)
    assert np.array_equal(a.submit_s, b.submit_s) and np.array_equal(a.duration_s, b.duration_s)
    assert np.all(np.diff(a.submit_s) >= 0) and a.submit_s.min() >= 0
    assert np.all(a.duration_s <= a.timelimit_s)
    assert not np.array_equal(a.duration_s, np.sort(month_trace.duration_s))
    assert len(a) == len(month_trace)


def test_a_partitions_calibration_miss_widens_its_range(advice):
    from slurmgpu.advice.optimize import Range, _range

    # perturbed changes -10 and -5 s, nominal change 100 -> 50 s, baseline 20 % off: +-10 s
    assert _range([-10.0, -5.0], 100.0, 50.0, 0.2) == Range(-20.0, 5.0)
    assert _range([], 100.0, 50.0, 0.2) == Range(None, None)
    big = next(p for p in advice.plan.by_partition if p.partition == "big")
    fid = advice.fidelity.partition("big")
    assert big.calibration_miss == pytest.approx(abs(fid.mean_wait_factor - 1))
    assert 0 < big.calibration_miss < 0.1


def test_more_jobs_left_pending_at_their_recorded_cancel_is_not_a_harm(month_trace):
    from dataclasses import replace

    from slurmgpu.advice.calibrate import calibrate_trace
    from slurmgpu.replay.engine import CANCELLED_PENDING

    base = calibrate_trace(month_trace, options()).baseline
    slower = replace(
        base,
        jobs_not_run=base.jobs_not_run + 5,
        not_run_reasons={**base.not_run_reasons,
                         CANCELLED_PENDING: base.not_run_reasons.get(CANCELLED_PENDING, 0) + 5},
    )  # fmt: skip
    assert verdict(base, slower, OBJ).violations == ()
    reasons = {**base.not_run_reasons, "asks more whole GPUs": 1}
    worse = replace(base, jobs_not_run=base.jobs_not_run + 1, not_run_reasons=reasons)
    others = base.jobs_not_run - base.not_run_reasons.get(CANCELLED_PENDING, 0)
    assert verdict(base, worse, OBJ).violations == (
        f"jobs that cannot run grow from {others} to {others + 1}",
    )
    assert base.not_run_reasons.get(CANCELLED_PENDING, 0) > 0  # the month has such jobs
