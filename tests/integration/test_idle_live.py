"""`slurmgpu idle --live` on the real test cluster, mailing through a real exim, acting via Slurm.

Five jobs run on the harness node (fake H100s): an idle P2 batch job of an ordinary user, a
busy P2 job, an idle job in the exempt tier P0, an idle interactive allocation (`salloc
--no-shell`: no batch script) and an idle job its user marked `idle-exempt=data-loading`.
Their GPU series are generated from each job's real StartTime and backfilled into a real
Prometheus in the DCGM exporter's naming. Time is compressed by the policy (a 3-minute
window, warnings at 1 and 2 minutes) and by `--now`: four timer runs at S+65, S+125, S+150
(dry run too) and S+190 seconds. The idle P2 job must get warning 1, warning 2 and then be
cancelled, with three mails to its owner; the others are never touched and get no mail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from slurmgpu.sources.slurm_jobs import job_records, scontrol_time
from tests.harness.mail import MailServer
from tests.harness.prometheus import PrometheusServer

ROOT = Path(__file__).resolve().parents[2]
OWNER = "sgi-idle"
P0_QOS = "idlep0"
STEP = 10
POLICY = f"""
default_tier = "P2"
[tiers.P0]
qos = "{P0_QOS}"
priority = 1000
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
"""


def slurmgpu(cluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **cluster.env}
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


def state(cluster, job: int) -> str:
    return cluster.job_state(job) or ""


@pytest.fixture(scope="module")
def world(slurm_cluster, tmp_path_factory):
    cluster = slurm_cluster
    root = tmp_path_factory.mktemp("idle-live")
    cluster.sacctmgr("add", "qos", P0_QOS, check=False)
    cluster.allow_qos(P0_QOS)
    cluster.add_user(OWNER)
    script = "#!/bin/sh\nsleep 900\n"
    gres = ("--gres=gpu:1", "-t", "20")
    jobs = {
        "idle": cluster.sbatch(*gres, "-J", "idle", script=script, user=OWNER),
        "busy": cluster.sbatch(*gres, "-J", "busy", script=script),
        "p0": cluster.sbatch(*gres, "-J", "p0", f"--qos={P0_QOS}", script=script),
        "exempt": cluster.sbatch(
            *gres, "-J", "ex", "--comment=idle-exempt=data-loading", script=script
        ),
    }
    salloc = cluster.run(["salloc", "--no-shell", *gres, "-J", "inter"], timeout=60)
    jobs["interactive"] = int(salloc.stderr.split("allocation")[1].split()[0])
    for job in jobs.values():
        cluster.wait_job_state(job, "RUNNING", timeout=60)
    records = {r["JobId"]: r for r in job_records(env=cluster.env)}
    starts = {k: scontrol_time(records[str(j)]["StartTime"]) for k, j in jobs.items()}
    epochs = {k: int(t.replace(tzinfo=UTC).timestamp()) for k, t in starts.items()}
    series = {
        str(j): (epochs[k], 80.0 if k == "busy" else 0.0, i)
        for i, (k, j) in enumerate(jobs.items())
    }
    prom = PrometheusServer(root / "prom", openmetrics(series))
    mail = MailServer()
    (root / "policy.toml").write_text(POLICY)
    try:
        prom.up()
        mail.up()
        yield cluster, root, jobs, max(epochs.values()), prom, mail
    finally:
        cluster.run(["scancel", *map(str, jobs.values())], check=False)
        prom.down()
        mail.down()


def live(world, at: int, *extra: str) -> dict:
    cluster, root, _jobs, _s, prom, mail = world
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
        "--state-dir",
        str(root / "state"),
        "--now",
        now,
        "--format",
        "json",
        *extra,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def by_job(doc: dict, jobs: dict) -> dict:
    names = {str(v): k for k, v in jobs.items()}
    out: dict[str, list[tuple[str, str]]] = {}
    for e in doc["events"]:
        out.setdefault(names.get(e["job_id"], e["job_id"]), []).append((e["kind"], e["detail"]))
    return out


def test_idle_job_is_warned_twice_by_mail_then_cancelled(world):
    cluster, root, jobs, s, _prom, mail = world
    first = by_job(live(world, s + 65), jobs)
    assert first["idle"] == [("warning", "warning 1: idle 1 min")]
    assert first["p0"] == [("exempt", "tier P0")]
    assert first["interactive"] == [("exempt", "interactive")]
    assert first["exempt"] == [("exempt", "idle-exempt=data-loading")]
    assert "busy" not in first
    second = by_job(live(world, s + 125), jobs)
    assert second["idle"] == [("warning", "warning 2: idle 2 min")]
    assert "idle" not in by_job(live(world, s + 150), jobs)  # 150 s < the 3-minute window
    dry = by_job(live(world, s + 190, "--dry-run"), jobs)
    assert dry["idle"] == [("action", "cancel after 3 min idle")]
    assert state(cluster, jobs["idle"]) == "RUNNING"  # a dry run does nothing
    assert len(mail.messages()) == 2
    acted = live(world, s + 190)
    assert by_job(acted, jobs)["idle"] == [("action", "cancel after 3 min idle")]
    assert [e["done"] for e in acted["events"] if e["kind"] == "action"] == [True]
    cluster.wait_job_state(jobs["idle"], "CANCELLED", timeout=30)
    for name in ("busy", "p0", "interactive", "exempt"):
        assert state(cluster, jobs[name]) == "RUNNING", name
    messages = mail.messages()
    assert [m["To"] for m in messages] == [f"{OWNER}@example.org"] * 3
    subjects = [m["Subject"] for m in messages]
    assert "idle for 1 minutes" in subjects[0] and "idle for 2 minutes" in subjects[1]
    assert f"job {jobs['idle']} cancelled" in subjects[2]
    assert f"scancel {jobs['idle']}" in messages[0].get_payload()
    journal = [json.loads(x) for x in (root / "state" / "journal.jsonl").read_text().splitlines()]
    assert [(e["job_id"], e["phase"]) for e in journal] == [
        (str(jobs["idle"]), "begin"),
        (str(jobs["idle"]), "done"),
    ]
    later = by_job(live(world, s + 250), jobs)  # the next timer run: nothing more to do
    assert "idle" not in later and len(mail.messages()) == 3
