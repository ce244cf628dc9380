"""AMD and Ascend gen-gres against the real Slurm (issue #26): `slurmd -G` parses the
MI300X (SPX and CPX/NPS4), Atlas 800T A2 and mixed examples record by record, and a job on
the test cluster asking for `--gres=npu:2` gets ASCEND_RT_VISIBLE_DEVICES from the generated
TaskProlog, naming the two NPUs Slurm gave it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from slurmgpu.render import gres
from slurmgpu.sources import slurmd, snapshot
from slurmgpu.util.hostlist import parse_id_list
from tests.harness import SlurmCluster

pytestmark = pytest.mark.integration
EXAMPLES = Path(__file__).resolve().parents[2] / "etc" / "examples"

# (example, records slurmd -G prints per GRES name)
CASES = [
    ("mi300x-8gpu", {"gpu": 8}),
    ("mi300x-cpx-nps4", {"gpu": 64}),
    ("atlas-800t-a2", {"npu": 8}),
    ("mixed-gpu-npu", {"gpu": 4, "npu": 4}),
]


def _count(records: list[str], name: str) -> int:
    return sum(
        int(re.search(r"\bCount=(\d+)", r).group(1))
        for r in records
        if r.startswith(f"Name={name} ")
    )


def _generate(name: str, **options):
    inv = snapshot.load(EXAMPLES / f"{name}.json")
    opts = gres.GresOptions(**options)
    text = gres.render_gres_conf(inv, opts, inventory_sha256=snapshot.inventory_sha256(inv))
    return inv, opts, text


@pytest.mark.parametrize(("name", "counts"), CASES)
def test_slurmd_parses_vendor_gres_record_by_record(slurm_series, name, counts):
    # generated for the Slurm under test (24.11 wants Cores= on whole sockets)
    inv, opts, text = _generate(name, slurm_version=(*slurm_series, 0))
    result = slurmd.check_gres_conf(
        text,
        gres.node_line(inv, opts),
        gres_types=gres.gres_types(opts, inv),
        expected=gres.expected_records(inv, opts),
    )
    assert result.ok, (result.errors, result.differences)
    for gres_name, n in counts.items():
        assert _count(result.records, gres_name) == n, result.records
    assert result.differences == []  # count, type, files, cores, links: each as generated


def test_check_fails_when_slurmd_reads_an_npu_line_differently():
    inv, opts, text = _generate("atlas-800t-a2")
    # an NPU line's Links with the self mark moved: slurmd parses it, the comparison fails
    bad = text.replace("Links=-1,1,1,1,1,1,1,1", "Links=1,-1,1,1,1,1,1,1", 1)
    result = slurmd.check_gres_conf(
        bad, gres.node_line(inv, opts), gres_types="npu", expected=gres.expected_records(inv, opts)
    )
    assert not result.ok


@pytest.fixture(scope="module")
def cluster(slurm_cluster):
    try:
        yield slurm_cluster
    finally:
        slurm_cluster.reset()


def _node_up(cluster: SlurmCluster, name: str, slurm_series, tmp_path: Path) -> Path:
    inv, opts, text = _generate(
        name, node_name="gpu01", node_hostname="localhost", slurm_version=(*slurm_series, 0)
    )
    prolog = tmp_path / "task-prolog.sh"
    prolog.write_text(gres.render_task_prolog([inv], opts))
    prolog.chmod(0o755)
    tmp_path.chmod(0o755)
    cluster.reconfigure(
        node_line=gres.node_line(inv, opts),
        gres_conf=text,
        extra_conf=f"GresTypes={gres.gres_types(opts, inv)}\nTaskProlog={prolog}",
    )
    return prolog


def _output(cluster: SlurmCluster, jobid: int) -> str:
    assert cluster.wait_job_state(jobid, "COMPLETED", timeout=90) == "COMPLETED"
    return (cluster.work_dir / f"slurm-{jobid}.out").read_text()


SCRIPT = (
    "#!/bin/sh\necho ASCEND=$ASCEND_RT_VISIBLE_DEVICES\n"
    "echo CUDA=$CUDA_VISIBLE_DEVICES\nsleep {sleep}\n"
)


def _npu_idx(cluster: SlurmCluster, jobid: int) -> str:
    """The job's npu indices on its node while it runs (`scontrol show job -d`)."""
    assert cluster.wait_job_state(jobid, "RUNNING", timeout=60) == "RUNNING"
    detail = cluster.scontrol("show", "job", "-d", str(jobid))
    m = re.search(r"GRES=npu[^(\s]*\(IDX:([^)]*)\)", detail)
    assert m, detail
    return ",".join(map(str, parse_id_list(m.group(1))))


def test_npu_jobs_see_their_npus(cluster, slurm_series, tmp_path):
    _node_up(cluster, "atlas-800t-a2", slurm_series, tmp_path)
    out = cluster.scontrol("show", "node", "gpu01")
    assert "npu:910b:8" in out and re.search(r"\bState=IDLE\b", out), out
    jobs = [cluster.sbatch("--gres=npu:2", script=SCRIPT.format(sleep=8)) for _ in range(2)]
    # on this board npu index i (Slurm's IDX) is logical id i
    given = {jobid: _npu_idx(cluster, jobid) for jobid in jobs}
    seen = {jobid: re.search(r"ASCEND=(\S*)", _output(cluster, jobid)).group(1) for jobid in jobs}
    # each job names exactly the two NPUs Slurm gave it, and the two jobs' NPUs differ
    assert seen == given, (seen, given)
    assert all(len(v.split(",")) == 2 for v in seen.values()), seen
    assert set(seen[jobs[0]].split(",")).isdisjoint(seen[jobs[1]].split(",")), seen


def test_mixed_node_job_gets_both_variables(cluster, slurm_series, tmp_path):
    _node_up(cluster, "mixed-gpu-npu", slurm_series, tmp_path)
    out = cluster.scontrol("show", "node", "gpu01")
    assert "gpu:rtx4090:4" in out and "npu:910b4:4" in out, out
    jobid = cluster.sbatch("--gres=gpu:rtx4090:1,npu:910b4:2", script=SCRIPT.format(sleep=1))
    text = _output(cluster, jobid)
    assert re.search(r"ASCEND=\d,\d\b", text), text
    assert re.search(r"CUDA=\d\b", text), text


def _submit(cluster: SlurmCluster, tmp_path: Path, *args: str) -> int:
    """`slurmgpu submit ARGS` against the test cluster (its sinfo, its sbatch); the job id."""
    import sys

    from tests.unit.tiers.lua_env import EXAMPLE

    script = tmp_path / "job.sh"
    script.write_text(SCRIPT.format(sleep=1))
    cache = f"XDG_CACHE_HOME={tmp_path / 'cache'}"
    proc = cluster.run(
        [
            "env",
            cache,
            sys.executable,
            "-m",
            "slurmgpu",
            "submit",
            *args,
            "--policy",
            str(EXAMPLE),
            "-p",
            "gpu",
            "--",
            str(script),
        ]
    )
    return int(re.search(r"Submitted batch job (\d+)", proc.stdout).group(1))


def test_submit_accel_routes_inference_to_an_npu_and_training_to_gpus(
    cluster, slurm_series, tmp_path
):
    _node_up(cluster, "mixed-gpu-npu", slurm_series, tmp_path)
    # inference: the kind's classes (npu, gpu-slice); 30 GB fits a 910B4 (32 GB), not a 4090
    jobid = _submit(cluster, tmp_path, "--kind", "inference", "--accel", "mem>=30G")
    text = _output(cluster, jobid)
    assert re.search(r"ASCEND=\d\n", text) and "CUDA=\n" in text, text
    detail = cluster.scontrol("show", "job", str(jobid))
    assert "gres/npu:910b4=1" in detail or "npu:910b4:1" in detail, detail
    # training: whole GPUs (this node's 4090s are PCIe, so class gpu, not linked-gpu)
    jobid = _submit(cluster, tmp_path, "--kind", "training", "--accel", "mem>=40G,class=gpu")
    text = _output(cluster, jobid)
    assert re.search(r"CUDA=\d,\d\n", text) and "ASCEND=\n" in text, text
