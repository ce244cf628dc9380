"""The replay's cluster model from inventory snapshots (`--inventory PARTITION=SNAPSHOT`)."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from slurmgpu.errors import UsageError
from slurmgpu.replay.inventory import partitions_from_inventory

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "etc" / "examples"
DATA = ROOT / "tests" / "data" / "sacct"


def _renamed(tmp_path: Path, source: str, host: str) -> Path:
    doc = json.loads((EXAMPLES / source).read_text())
    doc["host"]["hostname"] = host
    out = tmp_path / f"{host}.json"
    out.write_text(json.dumps(doc))
    return out


def test_whole_gpus_make_nodes_and_mig_gpus_make_pools_by_layout(tmp_path):
    nodes = tmp_path / "gpu"
    nodes.mkdir()
    _renamed(nodes, "dgx-h100.json", "gpu01")
    _renamed(nodes, "dgx-h100.json", "gpu02")
    parts = partitions_from_inventory(
        [("gpu", str(nodes)), ("mig", str(EXAMPLES / "dgx-a100-mig.json"))]
    )
    gpu, mig = parts
    assert (gpu.name, gpu.nodes, gpu.gpu_type, gpu.slices) == ("gpu", (8, 8), "h100", ())
    assert gpu.gpu_memory_mib == 81559.0
    # the DGX A100 example: 5 GPUs not in MIG mode, 3 carved three different ways
    assert mig.nodes == (5,) and mig.gpu_type == "a100" and mig.total_gpus == 8
    layouts = {pool.layout: pool.gpus for pool in mig.slices}
    assert layouts == {
        (("1g.5gb", 7),): 1,
        (("3g.20gb", 2),): 1,
        (("1g.10gb", 1), ("2g.10gb", 1), ("4g.20gb", 1)): 1,
    }
    assert dict(next(p for p in mig.slices if p.layout == (("1g.5gb", 7),)).memory_mib) == {
        "1g.5gb": 4864
    }


def test_the_same_node_twice_or_two_gpu_types_in_a_partition_is_refused(tmp_path):
    h100 = str(EXAMPLES / "dgx-h100.json")
    with pytest.raises(UsageError, match="given twice"):
        partitions_from_inventory([("gpu", h100), ("gpu", h100)])
    with pytest.raises(UsageError, match="different GPU types"):
        partitions_from_inventory([("gpu", h100), ("gpu", str(EXAMPLES / "pcie-8gpu.json"))])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UsageError, match=r"no \*\.json snapshot"):
        partitions_from_inventory([("gpu", str(empty))])


def _replay(*args):
    base = ["replay", "--sacct-file", str(DATA / "synthetic-mix.txt"), "--format", "json"]
    return CliRunner().invoke(main, [*base, *args])


def test_replay_on_snapshots_runs_the_mig_job_on_the_recorded_slices(tmp_path):
    res = _replay(
        "--inventory", f"gpu={_renamed(tmp_path, 'dgx-h100.json', 'gpu01')}",
        "--inventory", f"gpu={_renamed(tmp_path, 'dgx-h100.json', 'gpu02')}",
        "--inventory", f"mig={EXAMPLES / 'dgx-a100-mig.json'}",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    base = json.loads(res.output)["baseline"]
    gpus = {p["partition"]: p["gpus"] for p in base["by_partition"]}
    assert gpus == {"gpu": 16, "mig": 8}
    # the 1g.10gb job finds the snapshot's 1g.10gb instance; only the shard job cannot run
    assert base["not_run_reasons"] == {"more shards than its partition has": 1}


def test_a_partition_given_twice_or_a_bad_value_is_one_line():
    h100 = str(EXAMPLES / "dgx-h100.json")
    for args, says in [
        (["--inventory", f"gpu={h100}", "--capacity", "gpu=8"], "both --capacity and --inventory"),
        (["--inventory", h100], "use PARTITION=SNAPSHOT"),
    ]:
        res = _replay(*args)
        assert res.exit_code == 2, res.output
        assert res.output.startswith("slurmgpu: error: ") and says in res.output, res.output
        assert res.output.count("\n") == 1
