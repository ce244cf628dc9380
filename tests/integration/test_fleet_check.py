"""`slurmgpu check` on the multi-node cluster: a GPU removed from one node, XID/ECC injected
through the pynvml double, and the HealthCheckProgram mode draining and resuming a node."""

from __future__ import annotations

import json
import sys

import pytest

from tests.harness.multinode import MultiNodeCluster, load_machine
from tests.unit.fleet.test_cluster_gres import write_snapshots

pytestmark = pytest.mark.integration
SLURMGPU = [sys.executable, "-m", "slurmgpu"]


def local_check(cluster: MultiNodeCluster, node: str, *args: str):
    host = str(cluster.fake_dir / "host")
    return cluster.node_run(node, [*SLURMGPU, "check", "--host-root", host, *args])


def test_a_gpu_that_fell_off_one_node(fleet_cluster: MultiNodeCluster, tmp_path) -> None:
    data = load_machine("pcie-8gpu")
    data["gpus"] = [g for g in data["gpus"] if g["minor_number"] != 7]  # gone from the bus
    fleet_cluster.set_machine_data("gpu04", data)
    gres_path = fleet_cluster.conf_dir / "gres.conf"
    gres_conf = gres_path.read_text()
    try:
        fleet_cluster.restart_node("gpu04")
        # with a static gres.conf Slurm does not notice: still 8 GPUs, IDLE
        record = fleet_cluster.node_record("gpu04")
        assert record["Gres"].startswith("gpu:rtx4090:8") and record["State"] == "IDLE", record
        # on the node (what its HealthCheckProgram sees), slurmgpu does
        proc = local_check(fleet_cluster, "gpu04", "--local", "--format", "json")
        assert proc.returncode == 1, proc.stdout + proc.stderr
        doc = json.loads(proc.stdout)
        missing = [p for p in doc["problems"] if p["kind"] == "missing-gpu"]
        assert missing and missing[0]["message"] == (
            "1 x gpu:rtx4090 missing: Slurm has 8, NVML reports 7"
        )
        # a gres.conf regenerated on the node (or AutoDetect) lists 7: Slurm drains it
        gres_path.write_text(gres_conf.replace("File=/dev/nvidia[0-7]", "File=/dev/nvidia[0-6]"))
        assert gres_path.read_text() != gres_conf
        fleet_cluster.restart_node("gpu04", wait_idle=False)
        record = fleet_cluster.wait_node("gpu04", lambda r: "DRAIN" in r.get("State", ""))
        assert "gres/gpu count reported lower than configured (7 < 8)" in record["Reason"]
        # from the controller: one line per problem, exit 1, and a Prometheus textfile
        prom = tmp_path / "slurmgpu.prom"
        proc = fleet_cluster.run(
            [*SLURMGPU, "check", "--nodes", "gpu[01-04]", "--prom-file", str(prom)], check=False
        )
        assert proc.returncode == 1
        lines = proc.stdout.splitlines()
        assert any(ln.startswith("gpu04: error: Slurm drained it: gres/gpu count") for ln in lines)
        assert not any(ln.startswith(("gpu01: error", "gpu02: error")) for ln in lines)
        text = prom.read_text()
        assert 'slurmgpu_check_node_ok{node="gpu04"} 0' in text
        assert 'slurmgpu_check_node_ok{node="gpu01"} 1' in text
        assert (
            'slurmgpu_check_problems{node="gpu04",kind="drained-gres-count",severity="error"} 1'
            in text
        )
    finally:
        gres_path.write_text(gres_conf)
        fleet_cluster.set_machine_data("gpu04", load_machine("pcie-8gpu"))
        fleet_cluster.restart_node("gpu04", wait_idle=False)
        fleet_cluster.resume_node("gpu04")  # the DRAIN and its reason stay until resumed


def test_health_check_mode_drains_on_xid_and_ecc_and_resumes(fleet_cluster: MultiNodeCluster):
    healthy = load_machine("dgx-h100")
    sick = json.loads(json.dumps(healthy))
    sick["gpus"][2]["health"] = {"xid_events": [48], "ecc_uncorrected_volatile": 2}
    sick["gpus"][5]["lost"] = True
    machine = fleet_cluster.root / "nodes" / "gpu01" / "fake" / "machine.json"
    try:
        machine.write_text(json.dumps(sick))  # the double reads it at nvmlInit
        proc = local_check(fleet_cluster, "gpu01", "--health-check")
        assert proc.returncode == 1, proc.stdout + proc.stderr
        out = proc.stdout
        assert "gpu01: error: GPU 2 (00000000:" in out and "reported Xid 48" in out, proc.stderr
        assert "2 uncorrected ECC error(s)" in out
        assert "GPU 5" in out and "GPU is lost" in out
        record = fleet_cluster.node_record("gpu01")
        assert "DRAIN" in record["State"] and record["Reason"].startswith("slurmgpu: GPU 5")
        # healthy again: the next run resumes the node it drained
        machine.write_text(
            json.dumps({**healthy, "host": {**healthy["host"], "hostname": "gpu01"}})
        )
        proc = local_check(fleet_cluster, "gpu01", "--health-check")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "gpu01: resume" in proc.stdout
        fleet_cluster.wait_node("gpu01", lambda r: r.get("State") == "IDLE", timeout=20)
    finally:
        fleet_cluster.set_machine_data("gpu01", healthy)
        fleet_cluster.resume_node("gpu01")


def test_a_node_drained_by_someone_else_is_left_alone(fleet_cluster: MultiNodeCluster):
    fleet_cluster.scontrol("update", "NodeName=gpu02", "State=DRAIN", "Reason=maintenance")
    try:
        proc = local_check(fleet_cluster, "gpu02", "--health-check")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert fleet_cluster.node_record("gpu02")["Reason"].startswith("maintenance")
    finally:
        fleet_cluster.resume_node("gpu02")


def test_slurmd_runs_it_as_health_check_program(fleet_cluster: MultiNodeCluster, tmp_path):
    """The real thing: slurmd itself runs `check --health-check` and the node drains/resumes."""
    root = fleet_cluster.root
    env = {**fleet_cluster.env, **fleet_cluster.double_env(), "PATH": "/usr/bin:/bin:/usr/sbin"}
    exports = "".join(f"export {k}='{v}'\n" for k, v in env.items())
    wrapper = root / "slurmgpu-health"
    wrapper.write_text(
        "#!/bin/sh\n# what a site installs as HealthCheckProgram (paths of its install)\n"
        + exports
        + f"exec {sys.executable} -m slurmgpu check --health-check "
        + f"--host-root {fleet_cluster.fake_dir / 'host'} "
        + f">>{root}/log/health-$(hostname).log 2>&1\n"
    )
    wrapper.chmod(0o755)
    extra = f"HealthCheckProgram={wrapper}\nHealthCheckInterval=5\nHealthCheckNodeState=ANY\n"
    machine = root / "nodes" / "gpu02" / "fake" / "machine.json"
    # the generated config, so that every node agrees with its GPUs (with the harness's
    # whole-GPU default, the check rightly drains the MIG node: "MIG layout changed")
    snaps = write_snapshots(tmp_path / "snaps")
    gen = fleet_cluster.run(
        [*SLURMGPU, "gen-gres", "--snapshot-dir", str(snaps), "--node-line", "-o", "gres.conf"],
        cwd=tmp_path,
        check=False,
    )
    assert gen.returncode == 3, gen.stderr  # 3: written (docs/acting.md, exit codes)
    try:
        fleet_cluster.reconfigure(
            extra_conf=extra, node_conf=gen.stdout, gres_conf=(tmp_path / "gres.conf").read_text()
        )
        sick = json.loads(machine.read_text())
        sick["gpus"][0]["health"] = {"remapped_rows": [0, 1, 0, 1]}
        machine.write_text(json.dumps(sick))
        record = fleet_cluster.wait_node(
            "gpu02", lambda r: _reason(r).startswith("slurmgpu: "), timeout=60
        )
        assert "DRAIN" in record["State"]
        assert "row remapping failed" in record["Reason"], record["Reason"]
        others = {n: fleet_cluster.node_record(n)["State"] for n in ("gpu01", "gpu03", "gpu04")}
        assert all("DRAIN" not in s for s in others.values()), others
        sick["gpus"][0]["health"] = {}
        machine.write_text(json.dumps(sick))
        fleet_cluster.wait_node("gpu02", lambda r: r.get("State") == "IDLE", timeout=60)
    finally:
        fleet_cluster.reset()


def _reason(record: dict) -> str:
    return record.get("Reason", "")
