"""`idle --live` acting on the right job, and only when it is sure (issue 33).

A fake `scontrol`/`scancel` on PATH that keeps Slurm's addressing rules (an array's id is the
whole array, another task's raw id is refused yet scancel exits 0, a het leader's id is every
component) and a Prometheus stand-in on loopback (tests/unit/idle/fake_world.py).
"""

from __future__ import annotations

import fcntl
import json
import math
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmgpu.idle import live as live_mod
from slurmgpu.idle.live import MAX_ATTEMPTS, IdleAction, LiveOptions, idle_live, read_journal
from slurmgpu.measure.options import MeasureOptions
from slurmgpu.views.idle import render_live
from tests.unit.idle.fake_world import World, record

START = datetime(2026, 12, 3, 10, 0, 0)
START_S = START.replace(tzinfo=UTC).timestamp()
NOW = datetime(2026, 12, 3, 10, 10, 0, tzinfo=UTC)
STARTED = START.strftime("%Y-%m-%dT%H:%M:%S")
POLICY = """default_tier = "P2"
[tiers.P2]
qos = "normal"
priority = 100
[idle]
window_min = 3
util_pct = 1
warn_after_min = []
action = "{action}"
max_gap_s = 120
min_notice_min = 0
"""


def samples(value) -> list[tuple[float, object]]:
    """A sample every 30 s from the start to now."""
    return [(START_S + 5 + 30 * i, value) for i in range(20)]


@pytest.fixture
def world(tmp_path, monkeypatch):
    monkeypatch.setattr(live_mod, "READ_BACK_S", 0.6)
    monkeypatch.setattr(live_mod, "READ_BACK_STEP_S", 0.2)
    w = World(tmp_path / "world")
    yield w
    w.close()


def run(world: World, tmp_path: Path, action: str = "cancel", *, dry: bool = False, now=NOW,
        state: str = "state"):  # fmt: skip
    policy = tmp_path / f"policy-{action}.toml"
    policy.write_text(POLICY.format(action=action))
    measure = MeasureOptions(prometheus=world.prometheus, prometheus_schema=world.schema)
    options = LiveOptions(str(policy), now, measure, str(tmp_path / state),
                          webhook=world.webhook, dry_run=dry, env=world.env)  # fmt: skip
    return idle_live(options)


def arrays() -> list[dict[str, str]]:
    """Array 32: tasks 1 and 2 busy, task 3 (raw id 32, the array's own) idle. Array 40: task
    1 (raw id 41) idle, task 2 (raw id 40) busy."""
    return [
        record("33", STARTED, ArrayJobId="32", ArrayTaskId="1"),
        record("34", STARTED, ArrayJobId="32", ArrayTaskId="2"),
        record("32", STARTED, ArrayJobId="32", ArrayTaskId="3"),
        record("41", STARTED, ArrayJobId="40", ArrayTaskId="1"),
        record("40", STARTED, ArrayJobId="40", ArrayTaskId="2"),
    ]


def busy_idle(world: World, idle: tuple[str, ...], busy: tuple[str, ...]) -> None:
    for job in idle:
        world.samples[job] = samples(0)
    for job in busy:
        world.samples[job] = samples(85)


@pytest.mark.parametrize("action", ["cancel", "requeue"])
def test_only_the_idle_array_task_is_acted_on_by_its_exact_id(world, tmp_path, action):
    world.set_jobs(arrays())
    busy_idle(world, ("32", "41"), ("33", "34", "40"))
    report = run(world, tmp_path, action)
    verb = "scancel" if action == "cancel" else "scontrol requeue"
    assert sorted(world.calls()) == [f"{verb} 32_3", f"{verb} 40_1"]
    after = "CANCELLED" if action == "cancel" else "PENDING"
    states = {j: r["JobState"] for j, r in world.jobs().items()}
    assert states == {"33": "RUNNING", "34": "RUNNING", "32": after, "41": after,
                      "40": "RUNNING"}  # fmt: skip
    acted = {e.job: e.done for e in report.events if e.kind == "action"}
    assert acted == {"32_3": True, "40_1": True}
    assert f"job 32_3 (id 32) (bob): action: {action} after 3 min idle" in render_live(
        report, "text"
    )
    journal = [(e.job_id, e.job, e.phase) for e in read_journal(tmp_path / "state")]
    assert sorted(journal) == sorted(
        [("32", "32_3", "begin"), ("32", "32_3", "done"), ("41", "40_1", "begin"),
         ("41", "40_1", "done")]
    )  # fmt: skip


def test_a_het_component_is_cancelled_alone_and_never_requeued(world, tmp_path):
    world.set_jobs([
        record("50", STARTED, HetJobId="50", HetJobOffset="0"),
        record("51", STARTED, HetJobId="50", HetJobOffset="1"),
    ])  # fmt: skip
    busy_idle(world, ("51",), ("50",))
    run(world, tmp_path, "cancel")
    assert world.calls() == ["scancel 50+1"]
    assert {j: r["JobState"] for j, r in world.jobs().items()} == {
        "50": "RUNNING", "51": "CANCELLED"
    }  # fmt: skip
    world.set_jobs([  # a fresh het job, under a requeue policy
        record("60", STARTED, HetJobId="60", HetJobOffset="0"),
        record("61", STARTED, HetJobId="60", HetJobOffset="1"),
    ])  # fmt: skip
    busy_idle(world, ("61",), ("60",))
    report = run(world, tmp_path, "requeue", state="state2")
    assert world.calls("scontrol requeue") == []  # Slurm requeues only whole het jobs
    (given,) = [e for e in report.events if e.kind == "given-up"]
    assert given.job == "60+1" and "heterogeneous" in given.detail
    assert [h["kind"] for h in world.hooks if h["job"] == "60+1"] == ["gave-up"]


def test_a_scancel_that_exits_0_without_acting_is_a_failure_and_given_up(world, tmp_path):
    world.set_jobs([record("70", STARTED)])
    busy_idle(world, ("70",), ())
    world.refuse()
    for attempt in range(1, MAX_ATTEMPTS + 1):
        report = run(world, tmp_path)
        (event,) = [e for e in report.events if e.kind == "action"]
        assert not event.done
        assert f"failed (attempt {attempt} of {MAX_ATTEMPTS})" in event.detail
        assert "still running in the same allocation" in event.detail
        assert any(f"({attempt} of {MAX_ATTEMPTS})" in w for w in report.warnings)
        text = render_live(report, "text")
        assert f"job 70 (bob): action: cancel after 3 min idle: failed (attempt {attempt}" in text
    assert any(e.kind == "given-up" for e in report.events)
    assert len(world.calls("scancel")) == MAX_ATTEMPTS
    later = run(world, tmp_path)  # no more tries, said in the output
    assert "given-up: cancel: not retried after 3 failed attempts" in render_live(later, "text")
    assert len(world.calls("scancel")) == MAX_ATTEMPTS
    assert [e.kind for e in later.events] == ["given-up"]
    # the owner was never told "cancelled"; the admin (webhook) was told once
    assert [h["kind"] for h in world.hooks] == ["gave-up"]
    phases = [e.phase for e in read_journal(tmp_path / "state")]
    assert phases == ["begin", "failed"] * MAX_ATTEMPTS + ["gave-up"]
    assert world.jobs()["70"]["JobState"] == "RUNNING"


def test_a_pending_record_of_a_killed_run_is_resolved_at_start(world, tmp_path):
    from slurmgpu.util.journal import append_record

    world.set_jobs([record("80", STARTED), record("81", STARTED, JobState="CANCELLED")])
    busy_idle(world, (), ("80", "81"))
    begun = "2026-12-03T10:05:00Z"
    for job in ("80", "81", "82"):  # 82: slurmctld no longer knows it
        append_record(tmp_path / "state" / "journal.jsonl",
                      IdleAction(begun, job, "bob", "2026-12-03T10:00:00Z", "cancel", 1.0,
                                 "begin", job=job))  # fmt: skip
    report = run(world, tmp_path)
    outcomes = {e.job_id: (e.phase, e.error) for e in read_journal(tmp_path / "state")[3:]}
    assert outcomes["81"] == ("done", "resolved at start")
    assert outcomes["82"] == ("done", "resolved at start")
    assert outcomes["80"][0] == "failed" and "killed run" in outcomes["80"][1]
    assert any("job 80: cancel not done" in w for w in report.warnings)
    state = json.loads((tmp_path / "state" / "state.json").read_text())
    assert state["jobs"][f"80@{int(START_S)}"]["attempts"] == 1
    assert world.calls() == []  # 80 is busy now: nothing else is done


@pytest.mark.parametrize("schema", ["dcgm", "jobstats", "slurmgpu"])
@pytest.mark.parametrize("bad", [-5, -1, 250, 1e308, math.nan, math.inf, -math.inf])
def test_implausible_samples_are_no_evidence_in_every_schema(world, tmp_path, schema, bad):
    world.schema = schema
    world.set_jobs([record("90", STARTED), record("91", STARTED)])
    world.samples["90"] = samples(bad)  # nothing but garbage
    mixed = samples(0)
    mixed[10] = (mixed[10][0], bad)  # one garbage sample among zeros
    world.samples["91"] = mixed
    report = run(world, tmp_path)
    events = {e.job_id: e for e in report.events}
    assert events["90"].kind == "undecided" and "implausible samples dropped" in events["90"].detail
    assert world.calls() == ["scancel 91"]  # the zeros decide, the garbage is left out
    assert not [h for h in world.hooks if h["job_id"] == "90"]
    assert any("implausible samples" in w for w in report.warnings)


def test_a_rounding_excess_over_100_is_kept_as_100_more_is_dropped():
    from slurmgpu.measure.series import plausible_util

    assert plausible_util(100.5) == 100.0 and plausible_util(101.5) is None
    assert plausible_util(-0.0) == 0.0 and plausible_util(-1e-9) is None


@pytest.mark.parametrize("result", [7, "x", {"a": 1}, [{"metric": {}, "values": 3}],
                                    [{"metric": {}, "values": [[1, 2, 3]]}], [[1, 2]]])  # fmt: skip
def test_a_wrong_shaped_matrix_is_a_warning_not_a_crash(world, tmp_path, result):
    world.set_jobs([record("95", STARTED)])
    world.result_override = result
    report = run(world, tmp_path)
    assert [e.kind for e in report.events] == ["undecided"]
    assert report.warnings and world.calls() == []


def test_job_with_a_number_as_result_is_a_warning(world, tmp_path, monkeypatch):
    from slurmgpu.cli import main

    world.set_jobs([record("96", STARTED)])
    world.result_override = 3
    monkeypatch.setenv("PATH", world.env["PATH"])
    args = ["job", "96", "--prometheus", world.prometheus, "--now", "2026-12-03T10:10:00Z",
            "--policy", str(tmp_path / "none.toml")]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "warning: prometheus" in result.output and "Traceback" not in result.output


def test_job_shows_no_implausible_use_and_advises_nothing_from_it(world, tmp_path, monkeypatch):
    from slurmgpu.cli import main

    world.set_jobs([record("97", STARTED)])
    world.samples["97"] = [(t, v) for (t, _), v in zip(samples(0), [-5, 250, 1e308] * 7,
                                                          strict=False)]  # fmt: skip
    monkeypatch.setenv("PATH", world.env["PATH"])
    args = ["job", "97", "--prometheus", world.prometheus, "--now", "2026-12-03T10:10:00Z",
            "--policy", str(tmp_path / "none.toml"), "--format", "json"]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    (job,) = json.loads(result.output)["jobs"]
    assert job["devices"] == [] and job["util_mean_pct"] is None and job["advice"] == []
    assert any("20 implausible samples" in n and "dropped" in n for n in job["notes"])
    text = CliRunner().invoke(main, args[:-2]).output
    for shown in ("-5", "250", "1e+308", "1e308"):
        assert f"{shown}%" not in text
    assert "implausible samples" in text


def hold(path: Path, text: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.write(fd, text.encode())
    return fd


def test_a_second_timer_with_another_state_dir_is_refused(world, tmp_path, monkeypatch):
    from slurmgpu.cli import main

    world.set_jobs([record("100", STARTED)])
    busy_idle(world, ("100",), ())
    fd = hold(
        Path(world.env["SLURMGPU_LOCK_DIR"]) / ".idle-live.lock",
        "pid 4242: idle --live --state-dir /var/lib/a, since 2026-12-03T10:09:00Z",
    )
    try:
        (tmp_path / "p.toml").write_text(POLICY.format(action="cancel"))
        for key, value in world.env.items():
            monkeypatch.setenv(key, value)
        args = ["idle", "--live", "--policy", str(tmp_path / "p.toml"), "--prometheus",
                world.prometheus, "--webhook", world.webhook, "--state-dir",
                str(tmp_path / "b"), "--now", "2026-12-03T10:10:00Z"]  # fmt: skip
        result = CliRunner().invoke(main, args)
    finally:
        os.close(fd)
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert line.startswith("slurmgpu: error: another `idle --live` is running (pid 4242")
    assert world.calls() == [] and world.hooks == []
    result = CliRunner().invoke(main, args)  # the lock is free again: this one acts
    assert result.exit_code == 3, result.output  # 3: it cancelled a job
    assert world.calls() == ["scancel 100"]


def test_a_job_on_a_node_another_command_holds_waits(world, tmp_path):
    from slurmgpu.util.lock import node_locks

    world.set_jobs([record("110", STARTED, NodeList="gpu[01-02]")])
    busy_idle(world, ("110",), ())
    with node_locks(Path(world.env["SLURMGPU_LOCK_DIR"]), ["gpu02"], "mig apply relayout"):
        report = run(world, tmp_path)
    (event,) = report.events
    assert event.kind == "deferred" and "gpu02" in event.detail and "mig apply" in event.detail
    assert world.calls() == []
    state = json.loads((tmp_path / "state" / "state.json").read_text())
    assert "attempts" not in state["jobs"][f"110@{int(START_S)}"]  # not a failed attempt
    report = run(world, tmp_path)  # the node is free: acted on
    assert world.calls() == ["scancel 110"]


def cli_process(world: World, tmp_path: Path, state: str):
    """A real `python -m slurmgpu idle --live` process (what a timer starts)."""
    import subprocess
    import sys

    (tmp_path / "p.toml").write_text(POLICY.format(action="cancel"))
    argv = [sys.executable, "-m", "slurmgpu", "idle", "--live", "--policy",
            str(tmp_path / "p.toml"), "--prometheus", world.prometheus, "--webhook",
            world.webhook, "--state-dir", str(tmp_path / state), "--now",
            "2026-12-03T10:10:00Z", "--format", "json"]  # fmt: skip
    env = {**os.environ, **world.env, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip


def test_two_timer_processes_with_their_own_state_dirs_act_once(world, tmp_path):
    import time

    world.set_jobs([record("120", STARTED)])
    busy_idle(world, ("120",), ())
    world.delay_s = 2.0  # the first run is still reading its series when the second starts
    first = cli_process(world, tmp_path, "a")
    lock = Path(world.env["SLURMGPU_LOCK_DIR"]) / ".idle-live.lock"
    deadline = time.monotonic() + 30
    while not (lock.exists() and lock.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    second = cli_process(world, tmp_path, "b")
    out2, err2 = second.communicate(timeout=60)
    _out1, err1 = first.communicate(timeout=60)
    assert first.returncode == 3, err1  # 3: it cancelled job 120
    assert second.returncode == 1 and out2 == ""
    (line,) = err2.strip().splitlines()
    assert line.startswith(f"slurmgpu: error: another `idle --live` is running (pid {first.pid}:")
    assert f"--state-dir {tmp_path / 'a'}" in line
    assert world.calls() == ["scancel 120"]
    assert [h["kind"] for h in world.hooks] == ["action"]  # one mail, not two
    assert not (tmp_path / "b" / "journal.jsonl").exists()


def test_a_run_killed_inside_scancel_is_resolved_by_the_next(world, tmp_path):
    import signal
    import time

    world.set_jobs([record("130", STARTED)])
    busy_idle(world, ("130",), ())
    (world.root / "hang").write_text("")
    killed = cli_process(world, tmp_path, "state")
    deadline = time.monotonic() + 60
    while not (world.root / "hanging").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(killed.pid, signal.SIGKILL)  # the run dies between its intent and its outcome
    killed.communicate(timeout=30)
    os.kill(int((world.root / "hanging").read_text()), signal.SIGKILL)
    (world.root / "hang").unlink()
    assert [e.phase for e in read_journal(tmp_path / "state")] == ["begin"]
    report = run(world, tmp_path)
    journal = read_journal(tmp_path / "state")
    assert [(e.phase, e.error) for e in journal] == [("begin", ""), ("done", "resolved at start")]
    assert any("the cancel a killed run began was done" in w for w in report.warnings)
    assert world.calls() == ["scancel 130"]  # not cancelled twice


@pytest.mark.parametrize("asked", ["32", "32_3"])
def test_job_shows_the_task_asked_not_the_arrays_first(world, tmp_path, monkeypatch, asked):
    """`scontrol show job 32` lists every task of array 32: the report is task 32_3's."""
    from slurmgpu.cli import main

    world.set_jobs(arrays())
    busy_idle(world, ("32",), ("33", "34"))
    monkeypatch.setenv("PATH", world.env["PATH"])
    args = ["job", asked, "--prometheus", world.prometheus, "--now", "2026-12-03T10:10:00Z",
            "--policy", str(tmp_path / "none.toml"), "--format", "json"]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    (job,) = json.loads(result.output)["jobs"]
    assert job["job_id"] == "32" and job["util_mean_pct"] == 0.0


def live_cli(world: World, tmp_path: Path, monkeypatch, action: str = "cancel", *extra: str):
    """`slurmgpu idle --live` through the CLI: its exit status and output."""
    from slurmgpu.cli import main

    policy = tmp_path / f"cli-{action}.toml"
    policy.write_text(POLICY.format(action=action))
    for key, value in world.env.items():
        monkeypatch.setenv(key, value)
    args = ["idle", "--live", "--policy", str(policy), "--prometheus", world.prometheus,
            "--webhook", world.webhook, "--state-dir", str(tmp_path / "cli-state"),
            "--now", "2026-12-03T10:10:00Z", *extra]  # fmt: skip
    return CliRunner().invoke(main, args)


def test_live_exits_3_when_it_cancelled_a_job_and_0_when_it_acted_on_none(
    world, tmp_path, monkeypatch
):
    """docs/acting.md, exit codes: 3 the cluster changed (a job cancelled or requeued), 0 not;
    a systemd timer takes both as success (SuccessExitStatus=3)."""
    world.set_jobs([record("140", STARTED), record("141", STARTED)])
    busy_idle(world, (), ("140", "141"))
    busy = live_cli(world, tmp_path, monkeypatch)
    assert busy.exit_code == 0, busy.output  # all busy: nothing acted on
    assert world.calls("scancel") == []
    busy_idle(world, ("141",), ("140",))
    dry = live_cli(world, tmp_path, monkeypatch, "cancel", "--dry-run")
    assert dry.exit_code == 3, dry.output  # it would cancel 141
    assert world.calls("scancel") == []
    acted = live_cli(world, tmp_path, monkeypatch)
    assert acted.exit_code == 3, acted.output
    assert world.calls("scancel") == ["scancel 141"]
    again = live_cli(world, tmp_path, monkeypatch)  # 141 is gone, 140 busy
    assert again.exit_code == 0, again.output
    assert world.calls("scancel") == ["scancel 141"]


def test_live_exits_0_for_a_notify_rule_and_for_a_refused_action(world, tmp_path, monkeypatch):
    """A mail changes no job (0, also dry); a cancel slurmctld refused changed nothing (0)."""
    world.set_jobs([record("150", STARTED)])
    busy_idle(world, ("150",), ())
    for extra in (("--dry-run",), ()):
        notified = live_cli(world, tmp_path, monkeypatch, "notify", *extra)
        assert notified.exit_code == 0, notified.output
    assert [h["kind"] for h in world.hooks] == ["action"]  # the owner was told: no change
    world.refuse()
    (tmp_path / "other").mkdir()  # a fresh state directory: the notify run's says "acted"
    refused = live_cli(world, tmp_path / "other", monkeypatch, "cancel")
    assert refused.exit_code == 0, refused.output
    assert "failed (attempt 1" in refused.output
    assert world.jobs()["150"]["JobState"] == "RUNNING"


SQUEUE = r"""#!{python}
import json, sys
from pathlib import Path
job = sys.argv[sys.argv.index("-j") + 1]
for rec in json.loads(Path({jobs!r}).read_text()):
    if rec["JobId"] == job and rec["JobState"] not in ("CANCELLED", "COMPLETED"):
        print(rec["JobState"])
"""


def test_the_emitted_script_exits_3_when_it_acted_then_0(world, tmp_path, monkeypatch):
    """`--emit DIR`'s idle-actions.sh follows the one convention, like qos-apply.sh: 3 when it
    cancelled a job still running, 0 when a second run finds nothing to do."""
    import subprocess
    import sys

    world.set_jobs([record("160", STARTED)])
    busy_idle(world, ("160",), ())
    emit = tmp_path / "emit"
    emit.mkdir()
    emitted = live_cli(world, tmp_path, monkeypatch, "cancel", "--emit", str(emit))
    assert emitted.exit_code == 3, emitted.output
    assert world.calls() == []  # --emit acts on nothing
    squeue = world.bin / "squeue"
    squeue.write_text(SQUEUE.format(python=sys.executable, jobs=str(world.root / "jobs.json")))
    squeue.chmod(0o755)
    codes = []
    for _ in range(2):
        ran = subprocess.run(["sh", str(emit / "idle-actions.sh")], env=world.env,
                             capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        codes.append(ran.returncode)
        assert not ran.stderr, ran.stderr
    assert codes == [3, 0]
    assert world.calls() == ["scancel 160"] and world.jobs()["160"]["JobState"] == "CANCELLED"
