"""`slurmgpu job` on the real cluster, run by real unprivileged users (runuser).

Two ordinary users each run a one-GPU job; Prometheus (real, backfilled) holds DCGM series
for the first: idle for its first 4 minutes, then 60 %, 8 GiB of an 80 GB H100. Its owner
runs `slurmgpu job` on it (as that Unix user, with the system Python and the repository on
PYTHONPATH: the test's own interpreter may live under /root) and gets the GPU, its
sparklines, the idle stretch and advice in Slurm's terms; the same user is refused on the
other user's job; root sees both.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from slurmgpu.sources.slurm_jobs import job_records, scontrol_time
from tests.harness.mail import host_runuser
from tests.harness.prometheus import PrometheusServer

ROOT = Path(__file__).resolve().parents[2]
OWNER, OTHER = "sgi-joba", "sgi-jobb"
STEP = 10
USED_MIB, FREE_MIB = 8192, 81559 - 8192
ENERGY0_MJ, STEP_MJ = 7_000_000_000, 300 * STEP * 1000  # DCGM's counter: 300 W


def series(job: int, start: int) -> str:
    labels = f'gpu="0",UUID="GPU-0",Hostname="gpu01",hpc_job="{job}"'
    util, used, free, energy = [], [], [], []
    for i in range(60):
        t = start + 2 + STEP * i
        energy.append(
            f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{labels}}} {ENERGY0_MJ + i * STEP_MJ} {t}"
        )
        util.append(f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {0 if i < 24 else 60} {t}")
        used.append(f"DCGM_FI_DEV_FB_USED{{{labels}}} {USED_MIB if i > 2 else 0} {t}")
        free.append(f"DCGM_FI_DEV_FB_FREE{{{labels}}} {FREE_MIB} {t}")
    text = [
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
        *util,
        "# TYPE DCGM_FI_DEV_FB_USED gauge",
        *used,
        "# TYPE DCGM_FI_DEV_FB_FREE gauge",
        *free,
        "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION gauge",
        *energy,
    ]
    return "\n".join(text) + "\n# EOF\n"


@pytest.fixture(scope="module")
def world(slurm_cluster, tmp_path_factory):
    cluster = slurm_cluster
    for user in (OWNER, OTHER):
        cluster.add_user(user)
    script = "#!/bin/sh\nsleep 900\n"
    mine = cluster.sbatch("--gres=gpu:1", "-t", "30", script=script, user=OWNER)
    theirs = cluster.sbatch("--gres=gpu:1", "-t", "30", script=script, user=OTHER)
    for job in (mine, theirs):
        cluster.wait_job_state(job, "RUNNING", timeout=180)
    rec = next(r for r in job_records((str(mine),), env=cluster.env))
    start = int(scontrol_time(rec["StartTime"]).replace(tzinfo=UTC).timestamp())
    shared = Path(tempfile.mkdtemp(prefix="slurmgpu-job-"))  # readable by the users
    shared.chmod(0o755)
    policy = shared / "policy.toml"
    shutil.copy(ROOT / "etc" / "slurmgpu.toml", policy)
    policy.chmod(0o644)
    prom = PrometheusServer(tmp_path_factory.mktemp("job-prom"), series(mine, start))
    try:
        prom.up(timeout=180)  # a loaded machine: promtool and start-up take a while
        yield cluster, mine, theirs, start, prom, policy
    finally:
        cluster.run(["scancel", str(mine), str(theirs)], check=False)
        prom.down()
        shutil.rmtree(shared, ignore_errors=True)


def slurmgpu_as(world, user: str | None, job: int) -> subprocess.CompletedProcess[str]:
    cluster, _mine, _theirs, start, prom, policy = world
    now = datetime.fromtimestamp(start + 600, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    args = [
        "-m",
        "slurmgpu",
        "job",
        str(job),
        "--prometheus",
        prom.url,
        "--policy",
        str(policy),
        "--now",
        now,
        "--idle-min",
        "2",
        "--format",
        "json",
    ]
    env = {**os.environ, **cluster.env}
    if user is None:
        argv = [sys.executable, *args]
    else:  # the system Python, readable by everyone, with the venv's packages
        site = sysconfig.get_paths()["purelib"]
        env.update(PYTHONPATH=f"{ROOT}:{site}", HOME="/tmp", PYTHONDONTWRITEBYTECODE="1")
        argv = [host_runuser(), "-u", user, "--", "/usr/bin/python3", *args]
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd="/tmp", timeout=120)


def epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@pytest.mark.slurm_only(
    "host",
    reason="an ordinary user cannot enter another release's root (its wrappers unshare, "
    "which needs root); root's view is tested on every release",
)
def test_owner_sees_their_job_with_use_and_advice(world):
    _cluster, mine, _theirs, start, _prom, _policy = world
    proc = slurmgpu_as(world, OWNER, mine)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job = json.loads(proc.stdout)["jobs"][0]
    assert job["user"] == OWNER and job["state"] == "RUNNING" and job["devices_held"] == 1
    (device,) = job["devices"]
    assert device["mem_max_mib"] == USED_MIB and device["util_max_pct"] == 60
    assert len(device["util_spark"]) == 48 and device["util_spark"][0] == "▁"
    assert job["mem_max_mib"] == USED_MIB and job["gpu_memory_mib"] == 81559
    # idle from the first sample (start + 2 s) to the last 0 % sample (start + 232 s)
    ((a, b),) = job["idle_stretches"]
    assert (epoch(a), epoch(b)) == (start + 2, start + 2 + STEP * 23)
    assert any("`--gres=gpu:1g.10gb:1` next time" in a for a in job["advice"]), job["advice"]
    assert any("this job used 8 GB of 80 GB" in a for a in job["advice"])
    assert any("`slurmgpu submit --kind inference`" in a for a in job["advice"])
    # the counter's growth over the 600 s so far: at least the samples' own difference (59
    # steps), at most 300 W over the whole window (Prometheus covers the ends)
    joules = job["energy_kwh"] * 3.6e6
    assert 59 * STEP_MJ / 1000 * 0.999 <= joules <= 300 * 600 * 1.001
    assert not job["energy_estimated"]


@pytest.mark.slurm_only(
    "host",
    reason="an ordinary user cannot enter another release's root (its wrappers unshare, "
    "which needs root); root's view is tested on every release",
)
def test_owner_is_refused_on_another_users_job(world):
    _cluster, _mine, theirs, _start, _prom, _policy = world
    proc = slurmgpu_as(world, OWNER, theirs)
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        f"slurmgpu: error: job {theirs} belongs to {OTHER}: you may only see your own jobs"
    )
    assert proc.stdout == ""


def test_root_sees_every_job(world):
    _cluster, _mine, theirs, _start, _prom, _policy = world
    proc = slurmgpu_as(world, None, theirs)
    assert proc.returncode == 0, proc.stderr
    job = json.loads(proc.stdout)["jobs"][0]
    assert job["user"] == OTHER
    assert job["notes"] == ["Prometheus has no series for this job"]


def test_an_ended_job_is_read_from_accounting_with_its_owner(world):
    """After slurmctld forgets a job (MinJobAge), sacct -j gives it back with the owner's uid."""
    import pwd

    from slurmgpu.idle.live import job_from_record
    from slurmgpu.model.policy import Policy
    from slurmgpu.sources.slurm_jobs import sacct_job

    cluster, _mine, theirs, _start, _prom, _policy = world
    cluster.run(["scancel", str(theirs)])
    cluster.wait_job_state(theirs, "CANCELLED", timeout=90)
    found = None
    for _ in range(30):  # slurmdbd gets the end a moment later
        found = sacct_job(str(theirs), env=cluster.env)
        if found and found[0]["EndTime"] not in ("", "Unknown"):
            break
        time.sleep(1)
    assert found is not None
    record, uid = found
    assert uid == pwd.getpwnam(OTHER).pw_uid, record
    job = job_from_record(record, Policy((), (), (), ""), any_state=True)
    assert job is not None and job.user == OTHER and job.devices == 1
    assert job.state == "CANCELLED" and job.end is not None and job.end >= job.start
