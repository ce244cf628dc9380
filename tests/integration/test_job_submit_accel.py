"""Routing across vendors in job_submit.lua on the real slurmctld (issue #26): on a node with
`gpu:rtx4090:4,npu:910b4:4`, `gen-job-submit --accel-gres sinfo` reads the cluster's GRES;
a job tagged `accel=mem>=30G` of the inference kind lands on one NPU (and sees its
ASCEND_RT_VISIBLE_DEVICES), a training job on two whole GPUs, the same devices
`slurmgpu submit --accel` picks for the same requests, and a request nothing holds is
refused with the largest device named."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from slurmgpu.render import gres
from tests.harness import SlurmCluster
from tests.integration.test_tiers import job_record
from tests.integration.test_vendor_gres import SCRIPT, _generate, _output

pytestmark = pytest.mark.integration

POLICY = """\
default_tier = "P2"

[tiers.P2]
qos = "normal"
priority = 10

[kinds.inference]
slice = "gpu:1"
accel = ["npu", "gpu-slice"]

[kinds.training]
slice = "gpu:1"
accel = ["gpu"]
"""


def _slurmgpu(cluster: SlurmCluster, tmp_path: Path, *args: str):
    cache = f"XDG_CACHE_HOME={tmp_path / 'cache'}"
    return cluster.run(["env", cache, sys.executable, "-m", "slurmgpu", *args], check=False)


@pytest.fixture(scope="module")
def routed(slurm_cluster, slurm_series, tmp_path_factory):
    """The mixed node up, then again with the job_submit.lua rendered from its sinfo."""
    cluster = slurm_cluster
    tmp = tmp_path_factory.mktemp("accel")
    tmp.chmod(0o755)
    policy = tmp / "policy.toml"
    policy.write_text(POLICY)
    inv, opts, text = _generate(
        "mixed-gpu-npu",
        node_name="gpu01",
        node_hostname="localhost",
        slurm_version=(*slurm_series, 0),
    )
    prolog = tmp / "task-prolog.sh"
    prolog.write_text(gres.render_task_prolog([inv], opts))
    prolog.chmod(0o755)
    conf = {
        "node_line": gres.node_line(inv, opts),
        "gres_conf": text,
        "extra_conf": f"GresTypes={gres.gres_types(opts, inv)}\nTaskProlog={prolog}",
    }
    try:
        cluster.reconfigure(**conf)
        lua = tmp / "job_submit.lua"
        made = _slurmgpu(
            cluster, tmp, "gen-job-submit", "--policy", str(policy), "--accel-gres", "sinfo",
            "--check", "-o", str(lua),
        )  # fmt: skip
        assert made.returncode == 3, made.stderr  # 3: written (docs/acting.md)
        assert 'gtype = "910b4"' in lua.read_text()
        cluster.reconfigure(**conf, job_submit_lua=lua.read_text())
        yield cluster, tmp, policy
    finally:
        cluster.reset()


def _tres(cluster: SlurmCluster, jobid: int) -> str:
    return job_record(cluster, jobid)["TresPerNode"]


def test_job_submit_routes_accel_tags_as_the_wrapper_does(routed):
    cluster, tmp, policy = routed
    cases = [
        ("inference", "mem>=30G", "npu:910b4:1", r"ASCEND=\d\n", "CUDA=\n"),
        ("training", "mem>=40G", "gpu:rtx4090:2", r"CUDA=\d,\d\n", "ASCEND=\n"),
    ]
    script = tmp / "job.sh"
    script.write_text(SCRIPT.format(sleep=1))
    for kind, spec, gres_req, seen, unset in cases:
        comment = f"--comment=kind={kind} accel={spec}"
        jobid = cluster.sbatch(comment, script=SCRIPT.format(sleep=1))
        assert _tres(cluster, jobid).endswith(gres_req), job_record(cluster, jobid)
        assert job_record(cluster, jobid)["AdminComment"].endswith(f"accel={gres_req}")
        text = _output(cluster, jobid)
        assert re.search(seen, text) and unset in text, text
        # the wrapper, asked the same, adds the same --gres (job_submit.lua then leaves it)
        dry = _slurmgpu(
            cluster, tmp, "submit", "--kind", kind, "--accel", spec, "--policy", str(policy),
            "--dry-run", "--", str(script),
        )  # fmt: skip
        assert dry.returncode == 0, dry.stderr
        assert f"--gres={gres_req}" in dry.stdout, dry.stdout


def test_a_request_nothing_holds_is_refused_by_slurmctld(routed):
    cluster, _, _ = routed
    proc = cluster.run(
        ["sbatch", "--comment=kind=training accel=mem>=200G", "--wrap", "true"], check=False
    )
    assert proc.returncode != 0
    assert "no device (class gpu) holds 200 GiB" in proc.stderr, proc.stderr
    # the wrapper's wording: the largest single device on offer in the allowed classes
    assert "the largest single device is whole GPU (gpu:rtx4090:1, 24 GiB" in proc.stderr
