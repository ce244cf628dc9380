"""The harness itself against real daemons: bring-up, GPUs, accounting, gres.conf checks."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.harness import ClusterError, SlurmCluster
from tests.harness.cluster import (
    Daemon,
    munge_answers,
    munged_argv,
    pid_alive,
    write_munge_key,
)
from tests.integration.conftest import require_slurm

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]

DGX_NODE = (
    "NodeName=dgx01 CPUs=224 Sockets=2 CoresPerSocket=56 ThreadsPerCore=2 "
    "RealMemory=2000000 Gres=gpu:h100:8"
)


def test_cluster_is_up(slurm_cluster: SlurmCluster) -> None:
    assert slurm_cluster.node_name == "gpu01"
    assert all(slurm_cluster.status().values()), slurm_cluster.status()
    ping = slurm_cluster.scontrol("ping")
    assert "is UP" in ping
    clusters = slurm_cluster.sacctmgr("-n", "-P", "show", "cluster", "format=Cluster")
    assert slurm_cluster.cluster_name in clusters.split()


def test_node_has_eight_gpus(slurm_cluster: SlurmCluster) -> None:
    out = slurm_cluster.scontrol("show", "node", "gpu01")
    assert re.search(r"\bGres=gpu:h100:8\b", out), out
    assert "gres/gpu=8" in out  # CfgTRES
    assert re.search(r"\bState=IDLE\b", out), out


def test_gpu_job_runs_and_is_accounted(slurm_cluster: SlurmCluster) -> None:
    script = "#!/bin/sh\necho CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES\nsleep 2\n"
    jobid = slurm_cluster.sbatch("--gres=gpu:2", "--job-name=gpu2", script=script)
    assert slurm_cluster.wait_job_state(jobid, "RUNNING", timeout=60) == "RUNNING"
    assert slurm_cluster.wait_job_state(jobid, "COMPLETED", timeout=60) == "COMPLETED"
    rows = slurm_cluster.wait_sacct(
        jobid, lambda rows: any(r["JobID"] == str(jobid) and r["End"] != "Unknown" for r in rows)
    )
    job = next(r for r in rows if r["JobID"] == str(jobid))
    assert job["State"] == "COMPLETED"
    assert job["Account"] == slurm_cluster.account
    assert "gres/gpu=2" in job["AllocTRES"].split(","), job["AllocTRES"]
    output = (slurm_cluster.work_dir / f"slurm-{jobid}.out").read_text()
    assert "CUDA_VISIBLE_DEVICES=0,1" in output


def test_wait_job_state_reports_a_job_that_ended_otherwise(slurm_cluster: SlurmCluster) -> None:
    jobid = slurm_cluster.sbatch(script="#!/bin/sh\nexit 3\n")
    with pytest.raises(ClusterError, match=rf"job {jobid} ended FAILED"):
        slurm_cluster.wait_job_state(jobid, "RUNNING_NEVER", timeout=60)


def test_validate_gres_accepts_a_good_file(slurm_cluster: SlurmCluster) -> None:
    gres = (
        "Name=gpu Type=h100 File=/dev/nvidia[0-3] Cores=0-55\n"
        "Name=gpu Type=h100 File=/dev/nvidia[4-7] Cores=56-111\n"
    )
    check = slurm_cluster.validate_gres(gres, DGX_NODE)
    assert check.ok, check.output
    assert check.errors == []
    assert len(check.records) == 8, check.records
    assert all(r.startswith("Gres Name=gpu Type=h100 Count=1") for r in check.records)
    assert str(slurm_cluster.dev_dir / "nvidia7") in check.records[-1]


def test_validate_gres_reports_a_bad_key(slurm_cluster: SlurmCluster) -> None:
    check = slurm_cluster.validate_gres(
        "Name=gpu Type=h100 File=/dev/nvidia[0-7] Bogus=1\n", DGX_NODE
    )
    assert not check.ok
    assert any("Bogus" in e for e in check.errors), check.output


def test_validate_gres_reports_cores_out_of_range(slurm_cluster: SlurmCluster) -> None:
    # dgx01 has 112 cores (2 x 56); config_overrides makes slurmd check against that layout
    check = slurm_cluster.validate_gres(
        "Name=gpu Type=h100 File=/dev/nvidia[0-7] Cores=130-140\n", DGX_NODE
    )
    assert not check.ok
    assert any("Invalid GRES data" in e for e in check.errors), check.output


def test_validate_gres_creates_mig_caps_devices(slurm_cluster: SlurmCluster) -> None:
    gres = (
        "Name=gpu Type=1g.10gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap21,"
        "/dev/nvidia-caps/nvidia-cap22\n"
    )
    check = slurm_cluster.validate_gres(gres, "NodeName=gpu01 CPUs=16 Gres=gpu:1g.10gb:1")
    assert check.ok, check.output
    assert (slurm_cluster.dev_dir / "nvidia-caps" / "nvidia-cap22").is_char_device()


def test_failed_bring_up_names_the_daemon_and_its_log(tmp_path) -> None:
    require_slurm()
    # slurmctld refuses to start with a job_submit.lua that does not compile
    broken = SlurmCluster(tmp_path / "broken", job_submit_lua="function slurm_job_submit(\n")
    with pytest.raises(ClusterError) as info:
        broken.up(timeout=90)
    message = str(info.value)
    assert message.startswith("slurmctld "), message
    assert "last lines of" in message and "slurmctld.log" in message
    assert re.search(r"(error|fatal):", message), message
    assert not any(broken.status().values()), broken.status()


def test_reconfigure_and_reset_round_trip(slurm_cluster: SlurmCluster) -> None:
    try:
        slurm_cluster.reconfigure(
            node_line=(
                "NodeName=gpu01 NodeHostname=localhost CPUs=16 Sockets=2 CoresPerSocket=8 "
                "ThreadsPerCore=1 RealMemory=64000 Gres=gpu:a100:4"
            ),
            gres_conf="Name=gpu Type=a100 File=/dev/nvidia[0-3]\n",
            partitions=["PartitionName=small Nodes=ALL Default=YES State=UP"],
            job_submit_lua=(
                "function slurm_job_submit(job_desc, part_list, submit_uid)\n"
                "  if job_desc.comment == 'reject-me' then\n"
                "    slurm.log_user('rejected by the test script')\n"
                "    return slurm.ERROR\n"
                "  end\n"
                "  return slurm.SUCCESS\n"
                "end\n"
                "function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)\n"
                "  return slurm.SUCCESS\n"
                "end\n"
            ),
        )
        node = slurm_cluster.scontrol("show", "node", "gpu01")
        assert re.search(r"\bGres=gpu:a100:4\b", node), node
        assert slurm_cluster.run(["sinfo", "-h", "-o", "%P"]).stdout.split() == ["small*"]
        config = slurm_cluster.scontrol("show", "config")
        assert re.search(r"JobSubmitPlugins\s*=\s*lua", config)
        refused = slurm_cluster.run(["sbatch", "--comment=reject-me", "--wrap=true"], check=False)
        assert refused.returncode != 0
        assert "rejected by the test script" in refused.stderr
        assert slurm_cluster.sbatch("--comment=fine", "--gres=gpu:4", check=False) is not None
    finally:
        slurm_cluster.reset()
    node = slurm_cluster.scontrol("show", "node", "gpu01")
    assert re.search(r"\bGres=gpu:h100:8\b", node), node
    assert slurm_cluster.run(["sinfo", "-h", "-o", "%P"]).stdout.split() == ["gpu*"]
    assert not (slurm_cluster.conf_dir / "job_submit.lua").exists()
    assert "JobSubmitPlugins" not in slurm_cluster.slurm_conf.read_text()


def test_other_qos_after_allow_qos(slurm_cluster: SlurmCluster) -> None:
    slurm_cluster.sacctmgr("add", "qos", "harnesstest", "Priority=10")
    try:
        refused = slurm_cluster.run(["sbatch", "--qos=harnesstest", "--wrap=true"], check=False)
        assert refused.returncode != 0 and "qos" in refused.stderr.lower(), refused.stderr
        slurm_cluster.allow_qos("harnesstest")
        jobid = slurm_cluster.sbatch("--qos=harnesstest")
        assert slurm_cluster.wait_job_state(jobid, "COMPLETED") == "COMPLETED"
        # slurmdbd prints a QOS added moments ago as "Unknown" for a few seconds
        rows = slurm_cluster.wait_sacct(jobid, lambda r: bool(r) and r[0]["QOS"] != "Unknown")
        assert rows[0]["QOS"] == "harnesstest"
        assert rows[0]["Account"] == slurm_cluster.account
    finally:
        slurm_cluster.scancel_all()
        slurm_cluster.sacctmgr("delete", "qos", "harnesstest", check=False)


def test_reconfigure_reports_a_drained_node_at_once(slurm_cluster: SlurmCluster) -> None:
    # the node says 8 GPUs, the gres.conf only 4 files: slurmctld drains it at registration
    try:
        with pytest.raises(ClusterError) as info:
            slurm_cluster.reconfigure(
                gres_conf="Name=gpu Type=h100 File=/dev/nvidia[0-3]\n", timeout=50
            )
        message = str(info.value)
        assert message.startswith("slurmd registered node gpu01"), message
        assert "gres/gpu count reported lower than configured (4 < 8)" in message
        assert "slurmctld.log" in message
    finally:
        slurm_cluster.reset()
    assert slurm_cluster.node_state()["State"] == "IDLE"


def test_harness_munged_answers_on_a_private_socket(tmp_path) -> None:
    require_slurm()
    # the code path a machine without a running munged takes, on a socket of its own
    sock = str(tmp_path / "munge.sock")
    key = write_munge_key(tmp_path / "munge" / "munge.key")
    daemon = Daemon("munged", tmp_path, tmp_path / "munged.log", "munged")
    (tmp_path / "pids").mkdir()
    daemon.start(munged_argv(key, sock, tmp_path, tmp_path), os.environ, tmp_path)
    try:
        deadline = time.monotonic() + 20
        while not munge_answers(sock) and time.monotonic() < deadline:
            assert daemon.alive(), daemon.tail()
            time.sleep(0.2)
        assert munge_answers(sock), daemon.tail()
    finally:
        daemon.stop()
    assert not daemon.alive()
    assert not munge_answers(sock)


def test_slurm_test_cluster_script_up_status_down(tmp_path) -> None:
    require_slurm()
    script = [sys.executable, str(REPO / "scripts" / "slurm-test-cluster")]
    root = tmp_path / "by-hand"
    up = subprocess.run([*script, "up", str(root)], capture_output=True, text=True, timeout=150)
    try:
        assert up.returncode == 0, up.stderr
        # (a release from a Debian root prints its `export PATH=...` line first)
        assert up.stdout.strip().splitlines()[-1] == f"export SLURM_CONF={root}/etc/slurm.conf"
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = f"{root}/etc/slurm.conf"
        sinfo = subprocess.run(
            ["sinfo", "-h", "-o", "%P %t %G"], capture_output=True, text=True, env=env, timeout=30
        )
        assert sinfo.stdout.split() == ["gpu*", "idle", "gpu:h100:8"], sinfo.stdout
        status = subprocess.run([*script, "status", str(root)], capture_output=True, text=True)
        assert status.returncode == 0, status.stdout + status.stderr
        assert "slurmctld  running" in status.stdout
        pids = [int(p.read_text()) for p in (root / "pids").glob("*.pid")]
        assert len(pids) >= 4
    finally:
        down = subprocess.run([*script, "down", str(root)], capture_output=True, text=True)
    assert down.returncode == 0, down.stderr
    assert down.stdout.startswith("stopped: slurmd, slurmctld, slurmdbd, mariadb")
    # gone, or a zombie waiting for init to reap it (the script that started it has exited)
    assert [pid for pid in pids if pid_alive(pid)] == []
    status = subprocess.run([*script, "status", str(root)], capture_output=True, text=True)
    assert status.returncode == 1


def test_jobs_of_another_user_and_association_enforcement(slurm_cluster: SlurmCluster) -> None:
    slurm_cluster.add_user("sgtest1")
    jobid = slurm_cluster.sbatch(script="#!/bin/sh\nid -un\n", user="sgtest1")
    assert slurm_cluster.wait_job_state(jobid, "COMPLETED") == "COMPLETED"
    rows = slurm_cluster.wait_sacct(jobid, lambda r: bool(r) and r[0]["User"] != "")
    assert rows[0]["User"] == "sgtest1"
    assert rows[0]["Account"] == slurm_cluster.account
    assert (slurm_cluster.work_dir / f"slurm-{jobid}.out").read_text() == "sgtest1\n"
    # a user with no association is refused by slurmctld
    subprocess.run(["useradd", "--system", "--no-create-home", "sgtest2"], capture_output=True)
    refused = slurm_cluster.run(["sbatch", "--wrap=true"], check=False, user="sgtest2")
    assert refused.returncode != 0
    assert "Invalid account" in refused.stderr, refused.stderr
