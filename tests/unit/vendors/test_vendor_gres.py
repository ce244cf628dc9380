"""gen-gres for AMD, Ascend and mixed nodes, cluster-wide files across vendors, and the
generated TaskProlog (run here against a stand-in `scontrol` printing a job's detail)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from slurmgpu.errors import UsageError
from slurmgpu.render import cluster_gres, gres
from slurmgpu.sources import snapshot
from tests.doubles.machines import EXAMPLES


def load(name: str):
    return snapshot.load(EXAMPLES / f"{name}.json")


def lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln and not ln.startswith("#")]


def conf(name: str, **options) -> str:
    inv = load(name)
    return gres.render_gres_conf(inv, gres.GresOptions(**options), inventory_sha256="0" * 64)


def test_atlas_800t_a2_lines():
    got = lines(conf("atlas-800t-a2"))
    assert got[0] == "AutoDetect=off"
    assert got[1] == "Name=npu Type=910b File=/dev/davinci0 Cores=144-167 Links=-1,1,1,1,1,1,1,1"
    assert got[8] == "Name=npu Type=910b File=/dev/davinci7 Cores=0-23 Links=1,1,1,1,1,1,1,-1"
    inv, opts = load("atlas-800t-a2"), gres.GresOptions()
    assert gres.gres_types(opts, inv) == "npu"
    assert gres.node_line(inv, opts).endswith("RealMemory=1548000 Gres=npu:910b:8")
    assert "ASCEND_RT_VISIBLE_DEVICES" in conf("atlas-800t-a2")  # the header says who sets it


def test_mi300x_lines_and_partition_types():
    got = lines(conf("mi300x-8gpu"))
    assert got[1] == (
        "Name=gpu Type=mi300x File=/dev/dri/renderD128 Cores=0-95 Links=-1,1,1,1,1,1,1,1"
    )
    cpx = lines(conf("mi300x-cpx-nps4"))[1:]
    assert len(cpx) == 64 and all(" Type=mi300x_cpx " in ln for ln in cpx)
    for i, line in enumerate(cpx):
        row = line.split("Links=")[1].split(",")
        assert len(row) == 64 and row[i] == "-1"
        package = i // 8
        # no XGMI count to the package's own partitions, one to each other package's
        assert {row[j] for j in range(64) if j // 8 == package and j != i} == {"0"}
        assert {row[j] for j in range(64) if j // 8 != package} == {"1"}
    inv = load("mi300x-cpx-nps4")
    assert gres.node_line(inv, gres.GresOptions()).endswith("Gres=gpu:mi300x_cpx:64")


def test_mixed_node_gpu_and_npu():
    inv, opts = load("mixed-gpu-npu"), gres.GresOptions()
    assert lines(conf("mixed-gpu-npu"))[1:] == [
        "Name=gpu Type=rtx4090 File=/dev/nvidia[0-1] Cores=0-55",
        "Name=gpu Type=rtx4090 File=/dev/nvidia[2-3] Cores=56-111",
        "Name=npu Type=910b4 File=/dev/davinci[0-1] Cores=0-55",
        "Name=npu Type=910b4 File=/dev/davinci[2-3] Cores=56-111",
    ]
    assert gres.gres_types(opts, inv) == "gpu,npu"
    assert "Gres=gpu:rtx4090:4,npu:910b4:4" in gres.node_line(inv, opts)
    records = gres.expected_records(inv, opts)
    assert [(r.name, r.count) for r in records] == [("gpu", 2), ("gpu", 2), ("npu", 2), ("npu", 2)]
    # shards are for GPUs only
    shard = gres.GresOptions(shards_per_gpu=2)
    assert gres.gres_types(shard, inv) == "gpu,npu,shard"
    assert "shard:8" in gres.node_line(inv, shard)


def test_cluster_wide_file_across_vendors():
    invs = [load(n) for n in ("mi300x-8gpu", "atlas-800t-a2", "mixed-gpu-npu", "dgx-h100")]
    sha = {inv.node_name: "0" * 64 for inv in invs}
    result = cluster_gres.render_cluster_gres(invs, gres.GresOptions(), inventory_sha256=sha)
    assert result.gres_types == "gpu,npu"
    body = lines(result.gres_conf)
    assert all(ln.startswith("NodeName=") for ln in body if ln != "AutoDetect=off")
    assert any(ln.startswith("NodeName=atlas800t Name=npu Type=910b") for ln in body)
    assert any(ln.startswith("NodeName=mi300x Name=gpu Type=mi300x") for ln in body)
    assert "GresTypes=gpu,npu" in result.node_conf


def _fake_scontrol(tmp_path: Path, detail: str) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "scontrol"
    script.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = show ] && [ "$2" = hostnames ]; then echo "$3"; exit 0; fi\n'
        f"cat <<'EOF'\n{detail}\nEOF\n"
    )
    script.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


@pytest.mark.parametrize(
    ("name", "node", "gres_field", "expected"),
    [
        ("atlas-800t-a2", "atlas800t", "npu:910b:2(IDX:2-3)", "2,3"),
        ("atlas-800t-a2", "atlas800t", "npu:910b:3(IDX:0,5,7)", "0,5,7"),
        ("mixed-gpu-npu", "mixed01", "gpu:rtx4090:1(IDX:0),npu:910b4:2(IDX:1-2)", "1,2"),
    ],
)
def test_task_prolog_exports_the_jobs_npus(tmp_path, name, node, gres_field, expected):
    prolog = tmp_path / "prolog.sh"
    prolog.write_text(gres.render_task_prolog([load(name)], gres.GresOptions()))
    detail = (
        "JobId=7 JobName=x\n   JobState=RUNNING Reason=None\n"
        f"     Nodes={node} CPU_IDs=0-1 Mem=2000 GRES={gres_field}\n   MinCPUsNode=1"
    )
    env = {**os.environ, **_fake_scontrol(tmp_path, detail)}
    env.update(SLURM_JOB_ID="7", SLURMD_NODENAME=node)
    out = subprocess.run(["sh", str(prolog)], env=env, capture_output=True, text=True, check=True)
    assert out.stdout == f"export ASCEND_RT_VISIBLE_DEVICES={expected}\n"
    # another node, or a job without NPUs: nothing exported
    env["SLURMD_NODENAME"] = "elsewhere"
    out = subprocess.run(["sh", str(prolog)], env=env, capture_output=True, text=True, check=True)
    assert out.stdout == ""


def test_task_prolog_needs_npus():
    with pytest.raises(UsageError, match="no Ascend NPU"):
        gres.render_task_prolog([load("mi300x-8gpu")], gres.GresOptions())


def test_cli_writes_an_executable_task_prolog(tmp_path):
    target, prolog = tmp_path / "gres.conf", tmp_path / "prolog.sh"
    result = CliRunner().invoke(
        main,
        [
            "gen-gres",
            "--snapshot",
            str(EXAMPLES / "atlas-800t-a2.json"),
            "--slurm-version",
            "22.05",
            "--output",
            str(target),
            "--task-prolog",
            str(prolog),
        ],
    )
    assert result.exit_code == 3, result.output  # 3: written (docs/acting.md)
    assert os.access(prolog, os.X_OK) and "ASCEND_RT_VISIBLE_DEVICES" in prolog.read_text()
    assert "Name=npu Type=910b File=/dev/davinci0" in target.read_text()
    result = CliRunner().invoke(
        main,
        [
            "gen-gres",
            "--snapshot",
            str(EXAMPLES / "mi300x-8gpu.json"),
            "--task-prolog",
            str(prolog),
        ],
    )
    assert result.exit_code == 2 and "no Ascend NPU" in result.output


def test_task_prolog_for_several_node_types():
    invs = [load("atlas-800t-a2"), load("mixed-gpu-npu"), load("mi300x-8gpu")]
    text = gres.render_task_prolog(invs, gres.GresOptions())
    assert '  atlas800t) ids="0 1 2 3 4 5 6 7" ;;' in text
    assert '  mixed01) ids="0 1 2 3" ;;' in text
    assert "mi300x)" not in text  # no NPUs there: the script exits 0
    named = gres.render_task_prolog(invs[:1], gres.GresOptions(node_name="atlas[01-03]"))
    assert '  atlas01|atlas02|atlas03) ids="0 1 2 3 4 5 6 7" ;;' in named
