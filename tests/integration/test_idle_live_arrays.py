"""`idle --live` on array tasks on the real test cluster (issue 33).

Slurm 22.05 reads the raw id of the array task that carries the array's id as the whole
array (`scancel 32` cancelled busy 32_1 and 32_2 with idle 32_3; `scontrol requeue 33`
requeued busy 33_1) and refuses another task's raw id while scancel exits 0. Here: array A
(3 tasks) whose task carrying the array id is idle and the others busy, under the cancel rule;
array B (2 tasks, a requeue tier) whose other task is idle. One run of the timer must cancel /
requeue exactly the idle ones, by `A_T`, read back as done; every busy task keeps running,
unrequeued. (Het components: the single-node cluster cannot run one - 22.05 puts a het job's
components on distinct nodes - so tests/unit/idle/test_live_acting.py covers them against
Slurm's addressing rules.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from slurmgpu.idle.live import read_journal
from slurmgpu.sources.slurm_jobs import job_records, scontrol_time
from tests.harness.prometheus import PrometheusServer
from tests.integration.test_idle_live import Webhook

ROOT = Path(__file__).resolve().parents[2]
P1_QOS = "idlearrp1"
STEP = 10
POLICY = f"""
default_tier = "P2"
[tiers.P1]
qos = "{P1_QOS}"
priority = 500
[tiers.P2]
qos = "normal"
priority = 100
[idle]
window_min = 1
util_pct = 1
warn_after_min = []
action = "cancel"
max_gap_s = 60
min_notice_min = 0
[idle.tiers.P1]
action = "requeue"
"""


def openmetrics(series: dict[str, tuple[int, float]]) -> str:
    """raw job id -> (start epoch, utilization): 40 samples from the start on."""
    lines = ["# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
    for n, (job, (start, util)) in enumerate(sorted(series.items())):
        labels = f'gpu="{n}",UUID="GPU-{n}",Hostname="gpu01",hpc_job="{job}"'
        lines += [
            f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {util:g} {start + 2 + STEP * i}" for i in range(40)
        ]
    return "\n".join(lines) + "\n# EOF\n"


def tasks(records: dict[str, dict], key: str, value: str) -> dict[str, dict]:
    return {r["JobId"]: r for r in records.values() if r.get(key) == value}


def ended(cluster, job_id: str, timeout: float = 90) -> str | None:
    """The job's own state once it is no longer RUNNING (None: slurmctld forgot it)."""
    deadline = time.monotonic() + timeout
    while True:
        rec = next((r for r in job_records(env=cluster.env) if r["JobId"] == job_id), None)
        if rec is None or rec["JobState"] != "RUNNING" or time.monotonic() > deadline:
            return None if rec is None else rec["JobState"]
        time.sleep(1)


def test_only_the_idle_task_and_component_are_acted_on(slurm_cluster, tmp_path):
    cluster = slurm_cluster
    cluster.sacctmgr("add", "qos", P1_QOS, check=False)
    cluster.allow_qos(P1_QOS)
    script = "#!/bin/sh\nsleep 900\n"
    gres = ("--gres=gpu:1", "-t", "20")
    a = cluster.sbatch(*gres, "--array=1-3", "-J", "arr-a", script=script)
    b = cluster.sbatch(*gres, "--array=1-2", "-J", "arr-b", f"--qos={P1_QOS}", "--requeue",
                       script=script)  # fmt: skip
    hooks = Webhook()
    prom = None
    try:
        records: dict[str, dict] = {}
        for _ in range(180):
            records = {r["JobId"]: r for r in job_records(env=cluster.env)}
            mine = [r for r in records.values() if r.get("JobName") in ("arr-a", "arr-b")]
            if len(mine) == 5 and all(r["JobState"] == "RUNNING" for r in mine):
                break
            time.sleep(1)
        else:
            pytest.fail(f"the arrays did not all start: {records}")
        array_a = tasks(records, "ArrayJobId", str(a))
        array_b = tasks(records, "ArrayJobId", str(b))
        assert len(array_a) == 3 and len(array_b) == 2
        idle_a = str(a)  # the task carrying the array's id: `scancel A` would hit all three
        assert idle_a in array_a
        idle_b = next(j for j in array_b if j != str(b))  # `scontrol requeue RAW` is refused
        idle = {idle_a, idle_b}
        everything = {**array_a, **array_b}
        starts = {
            j: int(scontrol_time(r["StartTime"]).replace(tzinfo=UTC).timestamp())
            for j, r in everything.items()
        }
        series = {j: (s, 0.0 if j in idle else 80.0) for j, s in starts.items()}
        prom = PrometheusServer(tmp_path / "prom", openmetrics(series))
        prom.up(timeout=180)
        (tmp_path / "policy.toml").write_text(POLICY)
        now = datetime.fromtimestamp(max(starts.values()) + 75, UTC)
        env = {**os.environ, **cluster.env, "SLURMGPU_LOCK_DIR": str(tmp_path / "locks")}
        proc = subprocess.run(
            [sys.executable, "-m", "slurmgpu", "idle", "--live", "--policy",
             str(tmp_path / "policy.toml"), "--prometheus", prom.url, "--webhook", hooks.url,
             "--state-dir", str(tmp_path / "state"), "--now", now.strftime("%Y-%m-%dT%H:%M:%SZ"),
             "--format", "json"],
            capture_output=True, text=True, env=env, cwd=ROOT, timeout=300,
        )  # fmt: skip
        assert proc.returncode == 3, proc.stdout + proc.stderr  # 3: it cancelled/requeued
        doc = json.loads(proc.stdout)
        after = {r["JobId"]: r for r in job_records(env=cluster.env)}
        for j in everything:
            if j in idle:
                continue
            assert after[j]["JobState"] == "RUNNING", (j, after[j]["JobState"])
            assert after[j].get("Restarts", "0") == "0", j
            assert scontrol_time(after[j]["StartTime"]) == scontrol_time(
                everything[j]["StartTime"]
            ), j
        acted = {e["job_id"]: (e["job"], e["done"]) for e in doc["events"] if e["kind"] == "action"}
        task = lambda j: f"{everything[j]['ArrayJobId']}_{everything[j]['ArrayTaskId']}"  # noqa: E731
        assert acted == {
            idle_a: (task(idle_a), True),
            idle_b: (task(idle_b), True),
        }, doc
        # squeue -j A would list every task: read the task's own record
        assert ended(cluster, idle_a) in ("CANCELLED", "COMPLETING", None)
        requeued = after.get(idle_b)
        assert requeued is not None and requeued["Restarts"] == "1", requeued
        journal = read_journal(tmp_path / "state")
        assert sorted((e.job, e.phase) for e in journal) == sorted(
            (name, phase) for name in (task(idle_a), task(idle_b)) for phase in ("begin", "done")
        )
    finally:
        cluster.run(["scancel", str(a), str(b)], check=False)
        hooks.down()
        if prom is not None:
            prom.down()
