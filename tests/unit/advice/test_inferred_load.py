"""Calibrate on inferred load (`--inferred-load`, issue 34 item 3): the unseen occupancy an
explanation infers held as background load; a plan advised so is marked, its ranges wider."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from slurmgpu.advice.calibrate import calibrate_trace
from slurmgpu.advice.optimize import AdviseOptions, advise_trace
from slurmgpu.cli import main
from slurmgpu.replay import ReplayOptions
from tests.unit.advice.test_explain import H, _dump, _trace


def _half_empty(hours: int = 12) -> list[dict]:
    """Each hour three 4-GPU 20-minute jobs on a 16-GPU partition; the record ran two at once
    (something held 8 GPUs): the third waited 20 minutes with 8 GPUs free."""
    rows = []
    for h in range(hours):
        for i in range(3):
            who = (h + 2 * i) % 6
            rows.append({"submit": h * H, "start": h * H + (1200.0 if i == 2 else 0.0),
                         "duration": 1200.0, "gpus": 4, "user": f"u{who}",
                         "account": f"a{who}"})  # fmt: skip
    return rows


def _idle(hours: int = 12) -> list[dict]:
    return [{"partition": "idle", "submit": h * H + 5, "start": h * H + 5, "duration": 600.0,
             "user": "i", "account": "i"} for h in range(hours)]  # fmt: skip


def test_the_inferred_load_calibrates_the_half_empty_partition():
    trace, owners = _trace(_half_empty())
    opts = ReplayOptions(capacity={"gpu": 16})
    plain = calibrate_trace(trace, opts, owners=owners).partition("gpu")
    assert not plain.calibrated and plain.calibrated_on == "recorded"
    held = calibrate_trace(trace, opts, owners=owners, inferred_load=True).partition("gpu")
    assert held.calibrated and held.calibrated_on == "inferred load", held.why
    # the third job waited with 8 GPUs free: a load of 5 (8 - 4 + 1) holds it; in 10-minute
    # slots, 9 of the first slot's 10 minutes (4.5, held as 5) and the whole second: 2 x 5
    # GPUs x 10 minutes an hour
    assert held.inferred_gpu_hours == pytest.approx(12 * 2 * 5 * 600 / 3600)
    assert held.explanation.cause == "unseen-work"  # the miss the load came from
    assert abs(held.baseline.wait_s.mean / held.recorded.wait_s.mean - 1) < 0.1
    # the real jobs only: the background is load, not jobs
    assert held.jobs == len(trace)


def test_a_plan_on_inferred_load_is_marked_and_its_ranges_wider():
    trace, owners = _trace(_half_empty() + _idle())
    ropts = ReplayOptions(capacity={"gpu": 16, "idle": 16})
    opts = AdviseOptions(replay=ropts, candidates=("move:idle:gpu:8",), max_changes=1)
    plain = advise_trace(trace, opts, owners=owners)
    assert not plain.plan.changes and plain.calibrated_on == "recorded"
    assert plain.rejected[0].why.startswith("not advised: partition gpu's baseline is off")
    advice = advise_trace(trace, AdviseOptions(**{**opts.__dict__, "inferred_load": True}),
                          owners=owners)  # fmt: skip
    assert advice.plan.changes == ("move:idle:gpu:8",)
    assert advice.calibrated_on == "inferred load"
    assert advice.inferred_load == (("gpu", pytest.approx(20.0)),)
    said = "calibrated on inferred load: the baseline held 20.0 GPU-hours on gpu"
    assert any(n.startswith(said) and "autopilot does not act" in n for n in advice.notes)
    gpu = next(p for p in advice.plan.by_partition if p.partition == "gpu")
    fid = advice.fidelity.partition("gpu")
    # the miss widens by the load's share of the partition's GPU-hours: 20 held against the
    # record's 48 allocated (12 hours x 3 jobs x 4 GPUs x 20 minutes)
    assert gpu.calibration_miss == pytest.approx(
        abs(fid.mean_wait_factor - 1) + 20.0 / (20.0 + 48.0), abs=1e-6
    )
    assert gpu.before.mean > 0 and gpu.after.mean < gpu.before.mean
    doc = advice.to_dict()
    assert doc["calibrated_on"] == "inferred load"
    assert doc["inferred_load"] == [{"partition": "gpu", "gpu_hours": pytest.approx(20.0)}]


def test_the_cli_marks_it_and_autopilot_cannot_ask_for_it(tmp_path):
    path = tmp_path / "half.sacct"
    path.write_text(_dump(_half_empty() + _idle()))
    common = ["--sacct-file", str(path), "--capacity", "gpu=16", "--capacity", "idle=16"]

    def run(*args):
        return CliRunner().invoke(main, [*args, *common])

    res = run("replay", "--calibrate", "--inferred-load")
    assert res.exit_code == 0, res.output
    assert "yes (inferred load)" in res.output
    assert "gpu: calibrated on inferred load: the baseline held 20.0 GPU-hours" in res.output
    res = run("advise", "--inferred-load", "--processes", "1", "--candidate", "move:idle:gpu:8")
    assert res.exit_code == 0, res.output
    assert "Plan (changes applied together; CALIBRATED ON INFERRED LOAD): move:idle:gpu:8" in (
        res.output
    )
    res = run("advise", "--inferred-load", "--processes", "1", "--candidate", "move:idle:gpu:8",
              "--format", "html")  # fmt: skip
    assert "<h2>Plan: move:idle:gpu:8 (calibrated on inferred load)</h2>" in res.output
    res = run("replay", "--inferred-load")
    assert res.exit_code == 2
    assert res.output == (
        "slurmgpu: error: --inferred-load goes with --calibrate (or slurmgpu advise)\n"
    )
    # autopilot takes advise's options but not this one: it never acts on inferred load
    help_text = CliRunner().invoke(main, ["autopilot", "--help"]).output
    assert "--inferred-load" not in help_text
    from slurmgpu.cli.autopilot import autopilot, autopilot_options

    policy = tmp_path / "policy.toml"
    policy.write_text('default_tier = "P2"\n[tiers.P2]\nqos = "normal"\npriority = 100\n')
    ctx = autopilot.make_context("autopilot", [*common, "--policy", str(policy)])
    assert autopilot_options(ctx.params).advise.inferred_load is False


def test_no_load_is_held_where_the_replay_is_the_slower_one():
    # the record ran 16 GPUs at once on a model of 8: more load could only make it worse
    rows = [{"submit": h * H, "start": h * H, "duration": H, "gpus": 8, "user": "u",
             "account": "a"} for h in range(6)]  # fmt: skip
    rows += [{**r, "submit": r["submit"] + 1, "start": r["start"] + 1} for r in rows]
    # and one small job that waited half an hour on the empty partition: load to hold there
    rows.append({"submit": 7 * H, "start": 7.5 * H, "duration": 600.0, "gpus": 1, "user": "v",
                 "account": "b"})  # fmt: skip
    trace, owners = _trace(rows)
    p = calibrate_trace(trace, ReplayOptions(capacity={"gpu": 8}), owners=owners,
                        inferred_load=True).partition("gpu")  # fmt: skip
    assert p.calibrated_on == "recorded" and p.inferred_gpu_hours == 0
    assert not p.calibrated and p.explanation.cause == "more-capacity"
    assert p.explanation.held_gpu_hours > 0  # what would have been held
