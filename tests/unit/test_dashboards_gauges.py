"""The gauges the Grafana dashboards (etc/grafana, docs/dashboards.md) need beyond what the
writers had: idle GPU-hours and reclaimable GPU-hours per partition, flagged runs and exempt
idle GPU-hours (`report --format prom` with the idle retrospective); the autopilot's pending
proposal with its predicted effect, and the calibration of the last pass's replay."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

from click.testing import CliRunner

from slurmgpu.advice.calibrate import PartitionFidelity, Side, WaitSummary
from slurmgpu.autopilot import approve
from slurmgpu.autopilot.prom import pending_proposal, prom_text
from slurmgpu.autopilot.records import ChangeRecord, Predicted, read_changes
from slurmgpu.cli import main
from slurmgpu.model.rebalance import Move
from slurmgpu.views.report import check_prom_text
from tests.unit.autopilot.test_autopilot import NOW, advice
from tests.unit.autopilot.test_autopilot import setup as setup
from tests.unit.idle.test_cli import js1, row, write


def samples(text: str) -> dict[str, float]:
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def test_report_prom_gives_idle_hours_per_partition_and_the_flagged_runs(tmp_path):
    rows = row(1, 2, js1(0.0, gpus=2), gpus=2) + row(3, 2, js1(50)) + row(4, 3, js1(0.0))
    out = CliRunner().invoke(main, ["report", *write(tmp_path, rows), "--format", "prom"])
    assert out.exit_code == 0, out.output
    check_prom_text(out.output)
    got = samples(out.output)
    # job 1: flagged after the 60 min window, 1 h x 2 GPUs; job 4: 2 h x 1 GPU; job 3 busy
    assert got['slurmgpu_idle_partition_gpu_hours{partition="gpu"}'] == 4.0
    assert got['slurmgpu_idle_partition_reclaimable_gpu_hours{partition="gpu"}'] == 4.0
    assert got["slurmgpu_idle_flagged_runs"] == 2
    assert got["slurmgpu_idle_exempt_gpu_hours"] == 0.0
    assert got["slurmgpu_idle_reclaimable_gpu_hours"] == 4.0
    flagged = {k: v for k, v in got.items() if k.startswith("slurmgpu_idle_flagged_job_")}
    name = "slurmgpu_idle_flagged_job_gpu_hours"
    assert flagged == {
        f'{name}{{jobid="1",user="bob",account="ml",partition="gpu"}}': 2.0,
        f'{name}{{jobid="4",user="bob",account="ml",partition="gpu"}}': 2.0,
    }


def test_flagged_jobs_are_one_series_each_and_bounded(monkeypatch):
    from slurmgpu.views import idle

    def run(job, hours, user="u"):
        return SimpleNamespace(job_id=job, user=user, account="a", partition="p",
                               reclaimable_gpu_hours=hours)  # fmt: skip

    summary = {"reclaimable_gpu_hours": 0.0, "flagged_runs": 3, "exempt_idle_gpu_hours": 0.0,
               "ranking": {"users": [], "accounts": []}}  # fmt: skip
    # a requeued job's two runs: one series (two would be a duplicate sample), their sum
    text = idle._prom_lines(summary, [], [run("7", 1.5), run("7", 0.5), run("8", 1.0, 'x"y')])
    check_prom_text(text)
    got = samples(text)
    assert (
        got['slurmgpu_idle_flagged_job_gpu_hours{jobid="7",user="u",account="a",partition="p"}']
        == 2.0
    )
    assert (
        got['slurmgpu_idle_flagged_job_gpu_hours{jobid="8",user="x\\"y",account="a",partition="p"}']
        == 1.0
    )
    monkeypatch.setattr(idle, "PROM_FLAGGED_JOBS", 1)
    text = idle._prom_lines(summary, [], [run("8", 1.0), run("7", 1.5), run("9", 3.0)])
    assert [k for k in samples(text) if "flagged_job" in k] == [
        'slurmgpu_idle_flagged_job_gpu_hours{jobid="9",user="u",account="a",partition="p"}'
    ]


def fidelity(name: str, factor: float | None, calibrated: bool) -> PartitionFidelity:
    side = Side(0.5, WaitSummary(100.0, 50.0, 300.0))
    return PartitionFidelity(name, 10, side, side, 1.0, factor, calibrated, "")


def test_the_pending_proposal_and_its_predicted_effect():
    moves = (Move("gpu02", "train", "infer", ""),)
    predicted = (
        Predicted("infer", 900.0, 300.0, -700.0, -400.0),
        Predicted('odd"name', None, None, None, None),  # no prediction: no sample
    )
    propose = ChangeRecord(
        NOW.isoformat(), "propose", id="ap-1", moves=moves, score=-0.4, predicted=predicted
    )
    result = SimpleNamespace(time=NOW.isoformat(), status="proposed", refusals=())
    cal = SimpleNamespace(
        by_partition=(fidelity("infer", 1.25, True), fidelity('odd"name', float("inf"), False))
    )
    text = prom_text(result, [propose], cal)
    check_prom_text(text)
    got = samples(text)
    base = 'proposal="ap-1",partition="infer"'
    assert got["slurmgpu_autopilot_pending_proposals"] == 1
    assert got['slurmgpu_autopilot_pending_proposal_score{proposal="ap-1"}'] == -0.4
    assert (
        got[f'slurmgpu_autopilot_pending_predicted_mean_wait_seconds{{{base},when="before"}}']
        == 900
    )
    assert (
        got[f'slurmgpu_autopilot_pending_predicted_mean_wait_seconds{{{base},when="after"}}'] == 300
    )
    assert (
        got[f'slurmgpu_autopilot_pending_predicted_wait_change_seconds{{{base},bound="low"}}']
        == -700
    )
    assert not any('odd\\"name",when' in k for k in got)
    assert got['slurmgpu_autopilot_partition_calibrated{partition="infer"}'] == 1
    assert got['slurmgpu_autopilot_partition_calibrated{partition="odd\\"name"}'] == 0
    assert got['slurmgpu_autopilot_calibration_mean_wait_factor{partition="infer"}'] == 1.25
    assert 'mean_wait_factor{partition="odd' not in text  # an infinite factor is left out
    # applied, or older than a day: nothing pending; no replay: no calibration family
    applied = ChangeRecord(NOW.isoformat(), "apply", id="ap-1", moves=moves)
    assert pending_proposal([propose, applied], NOW) is None
    assert pending_proposal([propose], NOW + dt.timedelta(days=1, seconds=1)) is None
    text = prom_text(result, [propose, applied])
    assert "slurmgpu_autopilot_pending_proposals 0" in text and "calibrated" not in text


def test_a_pass_writes_the_calibration_of_its_replay(setup):
    run, _, state, plan = setup
    plan["plan"] = SimpleNamespace(
        **{
            **vars(advice()),
            "fidelity": SimpleNamespace(by_partition=(fidelity("infer", 0.8, True),)),
        }
    )
    res = run(mode="propose")
    assert res.status == "proposed"
    got = samples(state.prom.read_text())
    assert got['slurmgpu_autopilot_partition_calibrated{partition="infer"}'] == 1
    assert got[f'slurmgpu_autopilot_pending_proposal_score{{proposal="{res.change_id}"}}'] < 0
    approve(state.root, res.change_id, "alice")
    applied = run(mode="propose", now=NOW + dt.timedelta(minutes=10))
    assert applied.status == "applied" and [r.action for r in read_changes(state)][-1] == "apply"
    assert "slurmgpu_autopilot_pending_proposals 0" in state.prom.read_text()
