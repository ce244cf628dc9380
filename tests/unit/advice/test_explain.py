"""Why a partition misses (`advice.explain`): synthetic records built to have each cause."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from slurmgpu.advice.calibrate import calibrate_trace
from slurmgpu.advice.explain import JobOwners
from slurmgpu.replay import ReplayOptions
from slurmgpu.replay.jobs import ReplayJob, ReplayTrace

H = 3600.0
EPOCH = 1_780_000_000 // 3600 * 3600  # a whole UTC hour


def _trace(rows: list[dict]) -> tuple[ReplayTrace, JobOwners]:
    """Jobs (dicts: partition, submit, start, duration, gpus, user, account), in submit
    order, and their owners in the trace's order."""
    rows = sorted(rows, key=lambda r: r["submit"])
    jobs = [
        ReplayJob(
            job_id=str(100 + i),
            partition=r.get("partition", "gpu"),
            qos="normal",
            tier="normal",
            submit_s=r["submit"],
            duration_s=r["duration"],
            timelimit_s=r["duration"],
            gpus=r.get("gpus", 1),
            recorded_start_s=r["start"],
            recorded_end_s=r["start"] + r["duration"],
        )
        for i, r in enumerate(rows)
    ]
    owners = JobOwners(
        user=np.array([r.get("user", "u") for r in rows], dtype=object),
        account=np.array([r.get("account", "a") for r in rows], dtype=object),
    )
    return ReplayTrace.from_jobs(jobs, epoch_s=EPOCH), owners


def _explained(rows, capacity, owners=True):
    trace, own = _trace(rows)
    cal = calibrate_trace(trace, ReplayOptions(capacity=capacity), owners=own if owners else None)
    return cal


def _steady_others(hours: int, accounts=("b", "c")) -> list[dict]:
    """Other accounts' 1-GPU 1-hour jobs, one each per hour, started at once."""
    return [
        {"submit": h * H, "start": h * H, "duration": H, "user": f"{a}1", "account": a}
        for h in range(hours)
        for a in accounts
    ]


def _capped(users: tuple[str, ...], account: str) -> list[dict]:
    """20 one-GPU one-hour jobs submitted at 0, run two at a time (a limit of 2 jobs)."""
    return [
        {"submit": 0.0, "start": (i // 2) * H, "duration": H, "user": users[i % len(users)],
         "account": account}
        for i in range(20)
    ]  # fmt: skip


def test_an_account_held_at_two_running_jobs_is_named_as_a_per_account_limit():
    cal = _explained(_capped(("a1", "a2"), "capped") + _steady_others(12), {"gpu": 32})
    p = cal.partition("gpu")
    assert not p.calibrated
    e = p.explanation
    assert e is not None and e.cause == "account-limit", e
    assert e.suspect == "capped"
    # hour h: 18 - 2h of the capped jobs wait, the record leaves 28 GPUs free; the first
    # hour counts from a minute after the submit: 17.7 + 16 + 14 + ... + 2
    assert e.unseen_gpu_hours == pytest.approx(17.7 + sum(range(2, 17, 2)), abs=0.01)
    assert "never ran more than 2 jobs (2 GPUs)" in e.evidence
    assert "100%" in e.evidence
    first = e.by_hour[0]
    assert first.hour == dt.datetime.fromtimestamp(EPOCH, dt.UTC).strftime("%Y-%m-%dT%H:00Z")
    assert first.unseen_gpu_hours == pytest.approx(17.7, abs=0.01)
    assert first.waiting_jobs == 18 and first.starts == 4
    assert len(e.by_hour) == 9
    # in the JSON, under the partition's fidelity
    doc = cal.to_dict()["by_partition"][0]["explanation"]
    assert doc["cause"] == "account-limit" and doc["suspect"] == "capped"
    assert doc["by_hour"][1]["unseen_gpu_hours"] == 16.0


def test_one_user_held_at_two_running_jobs_is_a_per_user_limit():
    cal = _explained(_capped(("solo",), "capped") + _steady_others(12), {"gpu": 32})
    e = cal.partition("gpu").explanation
    assert e.cause == "user-limit" and e.suspect == "solo", e


def test_without_owners_the_same_waits_are_unseen_work_not_a_limit():
    cal = _explained(_capped(("a1", "a2"), "capped") + _steady_others(12), {"gpu": 32}, False)
    e = cal.partition("gpu").explanation
    assert e.cause == "unseen-work", e


def test_a_six_hour_gap_with_nothing_started_is_a_reservation_or_outage():
    rows = []
    for j in range(24 * 6):  # a 1-GPU half-hour job every 10 minutes, a day long
        t = j * 600.0
        gap = 6 * H <= t < 12 * H
        rows.append({"submit": t, "start": 12 * H if gap else t, "duration": 1800.0,
                     "user": f"u{j % 5}", "account": f"a{j % 3}"})  # fmt: skip
    cal = _explained(rows, {"gpu": 64})
    e = cal.partition("gpu").explanation
    assert e.cause == "reservation-or-outage", e
    # the 36 jobs of the gap each waited from a minute after its submit to 12:00
    assert e.unseen_gpu_hours == pytest.approx(sum(359 - 10 * j for j in range(36)) / 60)
    assert "(6 h) nothing started on gpu while up to 36 jobs waited" in e.evidence
    hour = lambda t: dt.datetime.fromtimestamp(EPOCH + t, dt.UTC).strftime("%Y-%m-%dT%H:00Z")  # noqa: E731
    assert e.suspect == f"{hour(6 * H)} to {hour(12 * H)}"


def test_waits_spread_over_everybody_while_half_empty_are_unseen_work():
    rows = []
    for h in range(12):  # three 4-GPU 20-minute jobs each hour; the record runs two at once
        for i in range(3):
            who = (h + 2 * i) % 6  # the waiting third job: every account in turn
            rows.append({"submit": h * H, "start": h * H + (1200.0 if i == 2 else 0.0),
                         "duration": 1200.0, "gpus": 4, "user": f"u{who}",
                         "account": f"a{who}"})  # fmt: skip
    cal = _explained(rows, {"gpu": 16})
    e = cal.partition("gpu").explanation
    assert e.cause == "unseen-work", e
    # each hour the third job waits 19 minutes (after the first) with 8 of 16 GPUs free
    assert e.unseen_gpu_hours == pytest.approx(12 * 4 * 19 / 60)
    assert "in 12 of 12 hours with waiting jobs" in e.evidence
    assert "spread over 6 accounts and 6 users (the largest, a0, 17%)" in e.evidence


def test_a_full_partition_started_out_of_submit_order_is_priority_order():
    # six whole-partition jobs submitted within seconds: three short, three long; the record
    # ran the later, long ones first (the replay, by age, the short ones)
    rows = [{"submit": float(i), "duration": 600.0 if i < 3 else 4 * H, "gpus": 8,
             "start": 0.0} for i in range(6)]  # fmt: skip
    t = 0.0
    for r in rows[3:] + rows[:3]:
        r["start"] = max(t, r["submit"])
        t = r["start"] + r["duration"]
    cal = _explained(rows, {"gpu": 8})
    p = cal.partition("gpu")
    assert not p.calibrated
    e = p.explanation
    assert e.cause == "priority-order", e
    assert e.unseen_gpu_hours == 0
    assert "50% of its jobs were overtaken" in e.evidence


def test_a_record_that_ran_more_gpus_than_the_model_is_more_capacity():
    rows = [{"submit": h * H, "start": h * H, "duration": H, "gpus": 8} for h in range(6)]
    rows += [{"submit": h * H + 1, "start": h * H + 1, "duration": H, "gpus": 8}
             for h in range(6)]  # fmt: skip
    cal = _explained(rows, {"gpu": 8})
    e = cal.partition("gpu").explanation
    assert e.cause == "more-capacity", e
    assert "ran up to 16 GPUs at once on gpu" in e.evidence and "model holds 8" in e.evidence
    assert e.delayed_gpu_hours > 0 and e.unseen_gpu_hours == 0


def test_waits_that_follow_another_partitions_busy_hours_are_shared_nodes():
    # partition b holds 8 GPUs every other hour; a's 12-GPU job of those hours waits for the
    # hour to end (b sits on 8 of a's 16 GPUs: nodes the two share), the next one for it
    rows = [{"partition": "b", "submit": h * H, "start": h * H, "duration": H, "gpus": 8,
             "user": "ub", "account": "b"} for h in range(0, 12, 2)]  # fmt: skip
    for h in range(12):
        start = (h + 1) * H if h % 2 == 0 else h * H + 1800.0
        rows.append({"partition": "a", "submit": h * H, "start": start, "duration": 1800.0,
                     "gpus": 12, "user": f"u{h}", "account": f"acc{h}"})  # fmt: skip
    cal = _explained(rows, {"a": 16, "b": 8})
    assert cal.partition("b").calibrated
    e = cal.partition("a").explanation
    assert e.cause == "shared-nodes" and e.suspect == "b", e
    assert e.unseen_gpu_hours == pytest.approx(6 * 12 * 59 / 60)
    assert "correlation 1.00 over 12 hours" in e.evidence


def test_a_calibrated_partition_has_no_explanation():
    rows = [{"submit": h * H, "start": h * H, "duration": H} for h in range(6)]
    cal = _explained(rows, {"gpu": 8})
    assert cal.partition("gpu").calibrated and cal.partition("gpu").explanation is None
    assert cal.to_dict()["by_partition"][0]["explanation"] is None


def _dump(rows: list[dict], epoch: int = EPOCH) -> str:
    """The rows as `sacct -P` text (Unix-second times), the generated month's header."""
    from tests.unit.advice.helios_month import HEADER

    lines = [HEADER]
    for i, r in enumerate(sorted(rows, key=lambda r: r["submit"])):
        g = r.get("gpus", 1)
        req = f"billing={g},cpu={g},gres/gpu={g},mem=16G,node=1"
        sub, st = int(epoch + r["submit"]), int(epoch + r["start"])
        en = int(st + r["duration"])
        lines.append(
            f"{1000 + i}|{1000 + i}|c1|{r.get('partition', 'gpu')}|normal|{r['account']}|"
            f"{r['user']}|{sub}|{st}|{en}|{int(r['duration'])}|{int(r['duration'] // 60) + 1}|"
            f"COMPLETED|1|{req}|{req}|n1"
        )
    return "\n".join(lines) + "\n"


def test_calibrate_and_advise_print_the_explanation_in_text_json_and_html(tmp_path):
    import json

    from click.testing import CliRunner

    from slurmgpu.cli import main

    path = tmp_path / "capped.sacct"
    path.write_text(_dump(_capped(("a1", "a2"), "capped") + _steady_others(12)))
    common = ["--sacct-file", str(path), "--capacity", "gpu=32"]

    def run(*args):
        res = CliRunner().invoke(main, [*args, *common], catch_exceptions=False)
        assert res.exit_code == 0, res.output
        return res.output

    doc = json.loads(run("replay", "--calibrate", "--format", "json"))
    [row] = doc["fidelity"]["by_partition"]
    e = row["explanation"]
    # the owners come from the dump itself (read again only because gpu is not calibrated)
    assert e["cause"] == "account-limit" and e["suspect"] == "capped"
    assert e["unseen_gpu_hours"] == pytest.approx(17.7 + sum(range(2, 17, 2)), abs=0.01)
    text = run("replay", "--calibrate")
    assert "why it misses: a per-account limit (account-limit): account capped held" in text
    assert "its 8 most held hours of 9:" in text
    html = run("replay", "--calibrate", "--format", "html")
    assert "class='explanation'>why it misses: a per-account limit" in html
    advice = json.loads(run("advise", "--processes", "1", "--format", "json"))
    assert advice["fidelity"]["by_partition"][0]["explanation"]["cause"] == "account-limit"
    assert any(n.startswith("why gpu misses: a per-account limit") for n in advice["notes"])
    text = run("advise", "--processes", "1")
    assert "why it misses: a per-account limit (account-limit)" in text
    assert "why it misses: a per-account limit" in run("advise", "--processes", "1",
                                                       "--format", "html")  # fmt: skip


def test_an_account_name_cannot_break_or_reorder_the_printed_explanation():
    from slurmgpu.views.advise import render_calibration

    evil = "ev\nil\u202e"
    cal = _explained(_capped(("a1", "a2"), evil) + _steady_others(12), {"gpu": 32})
    e = cal.partition("gpu").explanation
    assert e.cause == "account-limit" and e.suspect == evil
    doc = {"fidelity": cal.to_dict()}
    text = render_calibration(doc, "text")
    [line] = [ln for ln in text.splitlines() if "why it misses" in ln]
    assert "account ev\\nil<U+202E> held 100%" in line
    assert "\u202e" not in text
    html = render_calibration(doc, "html")
    assert "\u202e" not in html and "ev\\nil&lt;U+202E&gt; held" in html
    # the JSON keeps the name as it is
    assert render_calibration(doc, "json").count("\\u202e") >= 1
