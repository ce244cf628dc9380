"""Tiers on the real cluster: QOS in slurmdbd, job_submit.lua in slurmctld, preemption, wrapper.

The node is reconfigured with shards (gpu:h100:8 + shard:32, i.e. 4 per GPU) so the policy's
1/4 and 1/2 GPU slices exist; the module restores the harness default afterwards.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmgpu.sources.slurm import parse_scontrol_record

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "tests" / "data" / "tiers" / "policy-integration.toml"
NODE_LINE = (
    "NodeName=gpu01 CPUs=16 Sockets=2 CoresPerSocket=8 ThreadsPerCore=1 RealMemory=64000 "
    "Gres=gpu:h100:8,shard:32"
)
GRES_CONF = "Name=gpu Type=h100 File=/dev/nvidia[0-7]\nName=shard Count=32\n"
# What the policy needs and the harness does not set by default.
EXTRA_CONF = "PriorityWeightQOS=10000\nAccountingStoreFlags=job_comment\n"
GRACE_S = 10


def slurmgpu(cluster, *args: str, check: bool = True):
    """Run the CLI against the test cluster (its SLURM_CONF)."""
    env = {**os.environ, **cluster.env, "XDG_CACHE_HOME": str(cluster.root / "cache")}
    proc = subprocess.run(
        [sys.executable, "-m", "slurmgpu", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"slurmgpu {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


def stored_gres(series: tuple[int, int], request: str) -> str:
    """A --gres request as TresPerNode shows it: `gres:shard:2` on 22.05, `gres/shard:2` on
    24.11 (seen on both test clusters; job_submit.lua must write the same form)."""
    return ("gres/" if series >= (23, 2) else "gres:") + request


def job_record(cluster, jobid: int) -> dict[str, str]:
    """`scontrol show job` as a dict. Comment/AdminComment hold `key=value` text that the
    one-line parser would split, so they come from their own lines of the long format."""
    record = parse_scontrol_record(cluster.scontrol("show", "-o", "job", str(jobid)).strip())
    for line in cluster.scontrol("show", "job", str(jobid)).splitlines():
        m = re.match(r"^\s*(Comment|AdminComment)=(.*?)\s*$", line)
        if m:
            record[m.group(1)] = m.group(2)
    return record


@pytest.fixture(scope="module")
def tiers_cluster(slurm_cluster):
    cluster = slurm_cluster
    cluster.sacctmgr("add", "account", "prod,rnd", "Description=tier tests", check=False)
    cluster.sacctmgr("add", "user", "root", "account=prod,rnd", check=False)
    try:
        yield cluster
    finally:
        cluster.scancel_all()
        cluster.reset()


def test_qos_apply_creates_the_tiers_and_is_idempotent(tiers_cluster):
    cluster = tiers_cluster
    plan = slurmgpu(cluster, "qos", "plan", "--policy", str(POLICY))
    assert (
        "sacctmgr -i add qos tier_p2 Priority=100 PreemptMode=requeue GraceTime=10" in plan.stdout
    )
    assert "PreemptType=preempt/qos" in plan.stdout
    # the harness default has PriorityWeightQOS=0: the plan says so
    assert (
        "slurm.conf has PriorityWeightQOS=0, the policy needs PriorityWeightQOS=10000"
        in plan.stderr
    )
    applied = slurmgpu(cluster, "qos", "apply", "--policy", str(POLICY))
    assert "slurmdbd matches the policy" in applied.stdout
    out = cluster.sacctmgr(
        "show",
        "qos",
        "--parsable2",
        "--noheader",
        "format=Name,Priority,Preempt,PreemptMode,GraceTime",
    )
    rows = {line.split("|")[0]: line for line in out.splitlines()}
    assert rows["tier_p0"] == "tier_p0|1000|tier_p2|cluster|00:00:00"
    assert rows["tier_p2"] == "tier_p2|100||requeue|00:00:10"
    assert rows["tier_p1"] == "tier_p1|500||cluster|00:00:00"
    assoc = cluster.sacctmgr(
        "show",
        "assoc",
        "--parsable2",
        "--noheader",
        "where",
        f"cluster={cluster.cluster_name}",
        "user=root",
        "format=Account,QOS",
    )
    qos_of = {line.split("|")[0]: set(line.split("|")[1].split(",")) for line in assoc.split()}
    assert {"tier_p0", "tier_p1", "tier_p2"} <= qos_of["prod"]
    assert {"tier_p1", "tier_p2"} <= qos_of["rnd"] and "tier_p0" not in qos_of["rnd"]
    assert "tier_p2" in qos_of[cluster.account] and "tier_p0" not in qos_of[cluster.account]
    again = slurmgpu(cluster, "qos", "plan", "--policy", str(POLICY))
    assert "# sacctmgr: nothing to do" in again.stdout
    assert "sacctmgr -i" not in again.stdout


@pytest.fixture(scope="module")
def routed_cluster(tiers_cluster):
    """The cluster with the rendered job_submit.lua loaded, shards, and the QOS applied."""
    cluster = tiers_cluster
    slurmgpu(cluster, "qos", "apply", "--policy", str(POLICY))
    target = cluster.root / "job_submit.lua"
    slurmgpu(cluster, "gen-job-submit", "--policy", str(POLICY), "--check", "-o", str(target))
    cluster.reconfigure(
        node_line=NODE_LINE,
        gres_conf=GRES_CONF,
        extra_conf=EXTRA_CONF,
        job_submit_lua=target.read_text(),
    )
    return cluster


def test_job_submit_lua_is_loaded_and_routes(routed_cluster, slurm_series):
    cluster = routed_cluster
    config = cluster.scontrol("show", "config")
    assert re.search(r"^JobSubmitPlugins\s*=\s*lua$", config, re.M), config
    jobid = cluster.sbatch("--hold", "-A", "rnd", "--comment=exp 7 tier=P1 kind=finetune")
    job = job_record(cluster, jobid)
    assert job["QOS"] == "tier_p1"
    assert job["TresPerNode"] == stored_gres(slurm_series, "shard:2")
    assert job["Partition"] == "gpu"
    assert job["TimeLimit"] == "12:00:00"
    assert job["AdminComment"] == "slurmgpu tier=P1 kind=finetune"
    assert job["Comment"] == "exp 7 tier=P1 kind=finetune"
    # nothing named: the default tier, the user's own GPU request and time untouched
    jobid = cluster.sbatch("--hold", "--gres=gpu:3", "-t", "5")
    job = job_record(cluster, jobid)
    assert (job["QOS"], job["TresPerNode"], job["TimeLimit"]) == (
        "tier_p2",
        stored_gres(slurm_series, "gpu:3"),
        "00:05:00",
    )
    assert job["AdminComment"] == "slurmgpu tier=P2"
    # with the settings in place the plan no longer warns about slurm.conf
    plan = slurmgpu(cluster, "qos", "plan", "--policy", str(POLICY))
    assert plan.stderr == "" and "nothing to do" in plan.stdout
    cluster.scancel_all()


def test_unauthorised_p0_is_refused_with_the_allowed_tiers(routed_cluster):
    cluster = routed_cluster
    proc = cluster.run(["sbatch", "-A", "rnd", "--qos=tier_p0", "--wrap", "true"], check=False)
    assert proc.returncode != 0
    assert (
        "sbatch: error: slurmgpu: tier P0 is not allowed for user root (account rnd); "
        "allowed tiers: P1, P2"
    ) in proc.stderr
    proc = cluster.run(["sbatch", "--comment=tier=P9", "--wrap", "true"], check=False)
    assert proc.returncode != 0
    assert "slurmgpu: unknown tier 'P9': use P0, P1, P2" in proc.stderr
    # scontrol update applies the same rules
    jobid = cluster.sbatch("--hold", "-A", "rnd", "--comment=tier=P1")
    proc = cluster.run(["scontrol", "update", f"JobId={jobid}", "QOS=tier_p0"], check=False)
    assert proc.returncode != 0
    assert job_record(cluster, jobid)["QOS"] == "tier_p1"
    cluster.scancel_all()


VICTIM = """#!/bin/sh
trap 'echo "TERM $(date +%s)"; exit 0' TERM
echo "START $(date +%s)"
sleep 600 &
wait
"""


def test_p0_preempts_p2_after_grace_time_and_p2_runs_again(routed_cluster, slurm_series):
    cluster = routed_cluster
    out = cluster.work_dir / "victim-%j.out"
    victim = cluster.sbatch(
        "--gres=gpu:8", "-o", str(out), "--open-mode=append", "--comment=tier=P2", script=VICTIM
    )
    cluster.wait_job_state(victim, "RUNNING", timeout=60)
    submitted = time.time()
    p0 = cluster.sbatch(
        "-A", "prod", "--comment=tier=P0 kind=training", script="#!/bin/sh\nsleep 5\n"
    )
    assert job_record(cluster, p0)["TresPerNode"] == stored_gres(slurm_series, "gpu:h100:8")
    cluster.wait_job_state(p0, "RUNNING", timeout=90)
    waited = time.time() - submitted
    # the victim's QOS grace time passes before its GPUs are taken
    assert waited >= GRACE_S, f"P0 started {waited:.1f} s after submission"
    record = job_record(cluster, victim)
    assert record["JobState"] == "PENDING" and record["Restarts"] == "1"
    cluster.wait_job_state(p0, "COMPLETED", timeout=60)
    # a requeued job gets a BeginTime ~2 minutes ahead (seen with 22.05): move it to now
    cluster.scontrol("update", f"JobId={victim}", "StartTime=now")
    cluster.wait_job_state(victim, "RUNNING", timeout=90)

    def preempted_then_running(rows):
        states = [r["State"] for r in rows if "." not in r["JobID"]]
        return "PREEMPTED" in states and "RUNNING" in states

    rows = cluster.wait_sacct(victim, preempted_then_running, timeout=60)
    runs = [r for r in rows if "." not in r["JobID"]]
    assert [r["State"] for r in runs] == ["PREEMPTED", "RUNNING"]
    assert all(r["QOS"] == "tier_p2" for r in runs)
    # what the accounting analysis reads back: the tags in Comment, the decision in AdminComment
    p0_rows = cluster.wait_sacct(
        p0,
        lambda rows: any(r["AdminComment"] for r in rows),
        timeout=60,
        fields="JobID,State,QOS,Comment,AdminComment",
    )
    assert p0_rows[0]["AdminComment"] == "slurmgpu tier=P0 kind=training"
    assert p0_rows[0]["Comment"] == "tier=P0 kind=training"
    assert p0_rows[0]["QOS"] == "tier_p0"
    text = Path(str(out).replace("%j", str(victim))).read_text()
    assert text.count("START") == 2 and "TERM" in text
    cluster.scancel_all()


def test_wrapper_finetune_lands_with_slice_qos_and_partition(
    routed_cluster, tmp_path, slurm_series
):
    cluster = routed_cluster
    script = tmp_path / "finetune.sh"
    script.write_text("#!/bin/sh\n#SBATCH -J lora-7b\n#SBATCH --time=7\nsleep 30\n")
    proc = slurmgpu(
        cluster,
        "submit",
        "--tier",
        "P1",
        "--kind",
        "finetune",
        "--policy",
        str(POLICY),
        "-A",
        "rnd",
        "--hold",
        "--",
        str(script),
    )
    jobid = int(re.search(r"Submitted batch job (\d+)", proc.stdout).group(1))
    job = job_record(cluster, jobid)
    assert job["QOS"] == "tier_p1"
    assert job["TresPerNode"] == stored_gres(slurm_series, "shard:2")
    assert job["Partition"] == "gpu"
    assert job["JobName"] == "lora-7b"  # the script's #SBATCH lines still count
    assert job["TimeLimit"] == "00:07:00"  # ... and win over the kind's 12 h
    assert job["AdminComment"] == "slurmgpu tier=P1 kind=finetune"
    # --gpu-mem picks the smallest live slice: a quarter H100 (one of 4 shards) holds 10G
    proc = slurmgpu(cluster, "submit", "--gpu-mem", "10G", "--dry-run", "--", str(script))
    assert "--gres=shard:1" in proc.stdout.split()
    proc = slurmgpu(cluster, "submit", "--gpu-mem", "30G", "--dry-run", "--", str(script))
    assert "--gres=shard:2" in proc.stdout.split()
    cluster.scancel_all()
