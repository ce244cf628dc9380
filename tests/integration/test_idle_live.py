"""`slurmgpu idle --live` on the real test cluster, mailing through a real exim, acting via Slurm.

Six jobs run on the harness node (fake H100s): an idle P2 batch job of an ordinary user, a
busy P2 job, an idle job in the exempt tier P0, an idle interactive allocation (`salloc
--no-shell`: no batch script) and an idle job its user marked `idle-exempt=data-loading`.
Their GPU series are generated from each job's real StartTime and backfilled into a real
Prometheus in the DCGM exporter's naming. Time is compressed by the policy (a 3-minute
window, warnings at 1 and 2 minutes) and by `--now`: four timer runs at S+65, S+125, S+150
(dry run too) and S+190 seconds. The idle P2 job must get warning 1, warning 2 and then be
cancelled, with three mails to its owner; the P1 job likewise, requeued; with one action
per run (the rate limit) the second action waits for the next run; the others are never
touched and get no mail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from slurmgpu.idle.live import read_journal
from slurmgpu.sources.slurm_jobs import job_records, scontrol_time
from tests.harness.mail import MailServer
from tests.harness.prometheus import PrometheusServer

ROOT = Path(__file__).resolve().parents[2]
OWNER = "sgi-idle"
P0_QOS, P1_QOS = "idlep0", "idlep1"
STEP = 10
POLICY = f"""
default_tier = "P2"
[tiers.P0]
qos = "{P0_QOS}"
priority = 1000
[tiers.P1]
qos = "{P1_QOS}"
priority = 500
[tiers.P2]
qos = "normal"
priority = 100
[idle]
window_min = 3
util_pct = 1
warn_after_min = [1, 2]
action = "cancel"
exempt_tiers = ["P0"]
exempt_interactive = true
exempt_reasons = ["data-loading"]
max_gap_s = 60
min_notice_min = 0.5
mail_from = "slurmgpu@example.org"
mail_domain = "example.org"
max_actions_per_run = 1
[idle.tiers.P1]
action = "requeue"
"""


def slurmgpu(cluster, *args: str) -> subprocess.CompletedProcess[str]:
    # the run lock and the node locks: this test's own directory, not /var/lib/slurmgpu/locks
    locks = Path(cluster.root) / "slurmgpu-locks"
    env = {**os.environ, **cluster.env, "SLURMGPU_LOCK_DIR": str(locks)}
    return subprocess.run(
        [sys.executable, "-m", "slurmgpu", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )


def openmetrics(series: dict[str, tuple[int, float, int]]) -> str:
    """job id -> (start epoch, utilization, gpu index): 40 samples from the start on."""
    lines = ["# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
    for job, (start, util, gpu) in series.items():
        labels = f'gpu="{gpu}",UUID="GPU-{gpu}",Hostname="gpu01",hpc_job="{job}"'
        lines += [
            f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {util:g} {start + 2 + STEP * i}" for i in range(40)
        ]
    return "\n".join(lines) + "\n# EOF\n"


class Webhook:
    """A real HTTP endpoint on loopback that keeps every JSON body POSTed to it."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        bodies = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                bodies.append(json.loads(self.rfile.read(length)))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def down(self) -> None:
        self.server.shutdown()


def state(cluster, job: int) -> str:
    return cluster.job_state(job) or ""


@pytest.fixture(scope="module")
def world(slurm_cluster, tmp_path_factory):
    cluster = slurm_cluster
    root = tmp_path_factory.mktemp("idle-live")
    for qos in (P0_QOS, P1_QOS):
        cluster.sacctmgr("add", "qos", qos, check=False)
    cluster.allow_qos(P0_QOS, P1_QOS)
    cluster.add_user(OWNER)
    script = "#!/bin/sh\nsleep 900\n"
    gres = ("--gres=gpu:1", "-t", "20")
    jobs = {
        "idle": cluster.sbatch(*gres, "-J", "idle", script=script, user=OWNER),
        "busy": cluster.sbatch(*gres, "-J", "busy", script=script),
        "p0": cluster.sbatch(*gres, "-J", "p0", f"--qos={P0_QOS}", script=script),
        "requeue": cluster.sbatch(*gres, "-J", "rq", f"--qos={P1_QOS}", "--requeue", script=script),
        "exempt": cluster.sbatch(
            *gres, "-J", "ex", "--comment=idle-exempt=data-loading", script=script
        ),
    }
    salloc = cluster.run(["salloc", "--no-shell", *gres, "-J", "inter"], timeout=120)
    jobs["interactive"] = int(salloc.stderr.split("allocation")[1].split()[0])
    for job in jobs.values():
        cluster.wait_job_state(job, "RUNNING", timeout=180)
    records = {r["JobId"]: r for r in job_records(env=cluster.env)}
    starts = {k: scontrol_time(records[str(j)]["StartTime"]) for k, j in jobs.items()}
    epochs = {k: int(t.replace(tzinfo=UTC).timestamp()) for k, t in starts.items()}
    series = {
        str(j): (epochs[k], 80.0 if k == "busy" else 0.0, i)
        for i, (k, j) in enumerate(jobs.items())
    }
    prom = PrometheusServer(root / "prom", openmetrics(series))
    mail = MailServer()
    hook = Webhook()
    (root / "policy.toml").write_text(POLICY)
    try:
        prom.up(timeout=180)  # a loaded machine: promtool and start-up take a while
        mail.up(timeout=120)
        yield cluster, root, jobs, max(epochs.values()), prom, mail, hook
    finally:
        cluster.run(["scancel", *map(str, jobs.values())], check=False)
        prom.down()
        mail.down()
        hook.down()


def live(world, at: int, *extra: str, code: int = 0) -> dict:
    """One run; `code`: its exit status (3: it cancelled or requeued a job, or dry would)."""
    cluster, root, _jobs, _s, prom, mail, hook = world
    now = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    proc = slurmgpu(
        cluster,
        "idle",
        "--live",
        "--policy",
        str(root / "policy.toml"),
        "--prometheus",
        prom.url,
        "--smtp",
        mail.smtp,
        "--webhook",
        hook.url,
        "--state-dir",
        str(root / "state"),
        "--now",
        now,
        "--format",
        "json",
        *extra,
    )
    assert proc.returncode == code, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def by_job(doc: dict, jobs: dict) -> dict:
    names = {str(v): k for k, v in jobs.items()}
    out: dict[str, list[tuple[str, str]]] = {}
    for e in doc["events"]:
        out.setdefault(names.get(e["job_id"], e["job_id"]), []).append((e["kind"], e["detail"]))
    return out


def test_idle_job_is_warned_twice_by_mail_then_cancelled(world):
    cluster, root, jobs, s, _prom, mail, hook = world
    first = by_job(live(world, s + 65), jobs)
    assert first["idle"] == [("warning", "warning 1: idle 1 min")]
    assert first["requeue"] == [("warning", "warning 1: idle 1 min")]
    assert first["p0"] == [("exempt", "tier P0")]
    assert first["interactive"] == [("exempt", "interactive")]
    assert first["exempt"] == [("exempt", "idle-exempt=data-loading")]
    assert "busy" not in first
    second = by_job(live(world, s + 125), jobs)
    assert second["idle"] == [("warning", "warning 2: idle 2 min")]
    assert second["requeue"] == [("warning", "warning 2: idle 2 min")]
    third = by_job(live(world, s + 150), jobs)  # 150 s < the 3-minute window
    assert "idle" not in third and "requeue" not in third
    dry = live(world, s + 190, "--dry-run", code=3)  # 3: it would cancel
    assert sorted(
        e["kind"] for e in dry["events"] if e["job_id"] in _ids(jobs, "idle", "requeue")
    ) == ["action", "deferred"]  # one action per run
    assert state(cluster, jobs["idle"]) == "RUNNING"  # a dry run does nothing
    emit = root / "emit"
    emit.mkdir()
    live(world, s + 190, "--emit", str(emit), code=3)  # the same, written down for a person to run
    script = (emit / "idle-actions.sh").read_text().splitlines()
    frame = ("set -e", "changed=0", 'if [ "$changed" = 1 ]; then exit 3; fi', "exit 0")
    assert [ln for ln in script if ln in frame] == list(frame)  # 3 when it acted (acting.md)
    commands = [ln for ln in script if not ln.startswith("#") and ln not in frame]
    guard = 'if [ "$(squeue -h -j {0} -o %T 2>/dev/null)" = RUNNING ]; then {1} {0}; changed=1; fi'
    assert commands in (
        [guard.format(jobs["idle"], "scancel")], [guard.format(jobs["requeue"], "scontrol requeue")]
    )  # fmt: skip
    assert (
        state(cluster, jobs["idle"]) == "RUNNING" and state(cluster, jobs["requeue"]) == "RUNNING"
    )
    assert len(mail.messages()) == 4
    acted = live(world, s + 190, code=3)  # 3: one job acted on
    done = [e for e in acted["events"] if e["kind"] == "action"]
    deferred = [e for e in acted["events"] if e["kind"] == "deferred"]
    assert len(done) == 1 and done[0]["done"] and len(deferred) == 1
    later = live(world, s + 200, code=3)  # the next timer run takes the deferred one
    done += [e for e in later["events"] if e["kind"] == "action"]
    assert {e["job_id"] for e in done} == set(_ids(jobs, "idle", "requeue"))
    details = {e["job_id"]: e["detail"] for e in done}
    assert details[str(jobs["idle"])] == "cancel after 3 min idle"
    assert details[str(jobs["requeue"])] == "requeue after 3 min idle"
    cluster.wait_job_state(jobs["idle"], "CANCELLED", timeout=90)
    (rec,) = job_records((str(jobs["requeue"]),), env=cluster.env)
    assert rec["Restarts"] == "1"  # requeued (by scontrol requeue), not cancelled
    for name in ("busy", "p0", "interactive", "exempt"):
        assert state(cluster, jobs[name]) == "RUNNING", name
    messages = mail.messages()
    owners = {"idle": f"{OWNER}@example.org", "requeue": "root@example.org"}
    for name, address in owners.items():
        mine = [m for m in messages if f"job {jobs[name]}" in m["Subject"]]
        assert [m["To"] for m in mine] == [address] * 3, name
        subjects = [m["Subject"] for m in mine]
        assert "idle for 1 minutes" in subjects[0] and "idle for 2 minutes" in subjects[1]
        verb = "cancelled" if name == "idle" else "requeued"
        assert f"job {jobs[name]} {verb}" in subjects[2]
        assert f"scancel {jobs[name]}" in mine[0].get_payload()
    assert len(messages) == 6
    # the webhook got the same six, each naming its job and kind
    assert sorted((b["job_id"], b["kind"]) for b in hook.bodies) == sorted(
        [(str(jobs[n]), k) for n in ("idle", "requeue") for k in ("warning",) * 2 + ("action",)]
    )
    journal = read_journal(root / "state")  # sealed records, each line checked
    assert sorted((e.job_id, e.action, e.phase) for e in journal) == sorted(
        [(str(jobs["idle"]), "cancel", p) for p in ("begin", "done")]
        + [(str(jobs["requeue"]), "requeue", p) for p in ("begin", "done")]
    )
    again = by_job(live(world, s + 260), jobs)  # nothing more to do
    assert "idle" not in again and len(mail.messages()) == 6
    # the emitted script, run now (its job already acted on) and again: nothing, exit 0 each
    for _ in range(2):
        ran = subprocess.run(["sh", str(emit / "idle-actions.sh")], env=cluster.env,
                             capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        assert ran.returncode == 0, ran.stderr
    for name in ("busy", "p0", "interactive", "exempt"):
        assert state(cluster, jobs[name]) == "RUNNING", name


def _ids(jobs: dict, *names: str) -> list[str]:
    return [str(jobs[n]) for n in names]


def test_retrospective_over_the_live_accounting(world):
    """`idle --since` reads the real slurmdbd (sacct): batch steps tell interactive jobs,
    Comment carries idle-exempt= (AccountingStoreFlags=job_comment)."""
    cluster, root, jobs, s, prom, _mail, _hook = world
    iso = lambda t: datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: E731
    proc = slurmgpu(cluster, "idle", "--policy", str(root / "policy.toml"), "--since",
                    iso(s - 600), "--until", iso(s + 390), "--prometheus", prom.url,
                    "--format", "json")  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    exempt = {e["job_id"]: e["exempt"] for e in doc["exempt"]}
    assert exempt[str(jobs["p0"])] == "tier P0"
    assert exempt[str(jobs["interactive"])] == "interactive"
    assert exempt[str(jobs["exempt"])] == "idle-exempt=data-loading"
    flagged = {j["job_id"] for j in doc["jobs"]}
    assert str(jobs["busy"]) not in flagged | set(exempt)
    # the cancelled job ended in real time: flagged exactly when it ran past its first sample
    # at or after start + the 3-minute window (samples at start + 2 + 10 k s), and then
    # reclaimable from the flag to its real end
    (rec,) = job_records((str(jobs["idle"]),), env=cluster.env)
    begun = scontrol_time(rec["StartTime"]).replace(tzinfo=UTC).timestamp()
    ended = scontrol_time(rec["EndTime"]).replace(tzinfo=UTC).timestamp()
    first_flag = begun + 2 + STEP * 18  # the first sample >= start + 180 s
    if ended >= first_flag:
        entry = next(j for j in doc["jobs"] if j["job_id"] == str(jobs["idle"]))
        assert entry["flagged_at"] == datetime.fromtimestamp(first_flag, UTC).strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        )
    else:
        assert str(jobs["idle"]) not in flagged
    running = {str(jobs[n]) for n in ("p0", "interactive", "exempt")}
    for entry in doc["exempt"]:
        if entry["job_id"] in running:
            assert entry["end"] is None and entry["action"] == "none"
