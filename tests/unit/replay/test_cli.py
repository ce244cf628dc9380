"""`slurmgpu replay` through click: the JSON contract, text and HTML, one-line errors."""

import json
from pathlib import Path

from click.testing import CliRunner

from slurmgpu.cli import main

DATA = Path(__file__).resolve().parents[2] / "data" / "sacct"
BASE = ["replay", "--sacct-file", str(DATA / "synthetic-mix.txt"), "--capacity", "gpu=16",
        "--capacity", "mig=1", "--gpu-type", "gpu=h100", "--gpu-type", "mig=h100",
        "--baseline", "carve:mig:1:1g.10gb=7"]  # fmt: skip
BLOCK_KEYS = {"gpu_hours_allocated", "allocation_ratio", "wait_s", "by_partition"}


def invoke(*args):
    return CliRunner().invoke(main, [*BASE, *args], catch_exceptions=False)


def test_json_shape_baseline_and_one_scenario_per_change():
    res = invoke("--what-if", "move:gpu:spare:8", "--what-if", "tier:p2:priority=1",
                 "--format", "json")  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert set(doc) == {"baseline", "scenarios"}
    assert set(doc["baseline"]) >= BLOCK_KEYS
    assert [s["change"] for s in doc["scenarios"]] == ["move:gpu:spare:8", "tier:p2:priority=1"]
    for block in [doc["baseline"], *doc["scenarios"], doc["baseline"]["recorded"]]:
        assert set(block) >= BLOCK_KEYS
        for part in block["by_partition"]:
            assert {"partition", "allocation_ratio", "wait_s"} <= set(part)
            assert {"p50", "p95", "max"} <= set(part["wait_s"])
    moved = {p["partition"]: p["gpus"] for p in doc["scenarios"][0]["by_partition"]}
    assert moved == {"gpu": 8, "mig": 1, "spare": 8}
    # the 1g.10gb job runs on the carved pool in the baseline
    assert doc["baseline"]["jobs_not_run"] == 1  # the shard job: no shards in the model
    assert doc["baseline"]["not_run_reasons"] == {"more shards than its partition has": 1}


def test_text_and_html(tmp_path):
    res = invoke("--what-if", "shard:gpu:2:4")
    assert res.exit_code == 0
    assert "baseline" in res.output and "shard:gpu:2:4" in res.output
    assert "allocation ratio" in res.output
    out = tmp_path / "r.html"
    res = invoke("--what-if", "shard:gpu:2:4", "--format", "html", "--output", str(out))
    assert res.exit_code == 0
    html = out.read_text()
    assert html.startswith("<!DOCTYPE html>") and "<svg" in html and "shard:gpu:2:4" in html


def test_sweep_file_in_parallel_processes(tmp_path):
    sweep = tmp_path / "sweep.txt"
    sweep.write_text("# candidates\nmove:gpu:spare:8\n\nshard:gpu:2:4  # half the GPUs\n")
    res = invoke("--sweep", str(sweep), "--processes", "2", "--format", "json")
    assert res.exit_code == 0, res.output
    changes = [s["change"] for s in json.loads(res.output)["scenarios"]]
    assert changes == ["move:gpu:spare:8", "shard:gpu:2:4"]


def test_user_mistakes_are_one_line(tmp_path):
    bad = tmp_path / "sweep.txt"
    bad.write_text("move:gpu:spare:8\ncarve:gpu:8\n")
    cases = [
        (["--what-if", "grow:gpu:8"], "use move:FROM:TO:GPUS"),
        (["--what-if", "move:gpu:spare:12"], "sum of whole nodes"),
        (["--what-if", "carve:gpu:8:1g.10gb=8"], "no valid MIG placement"),
        (["--sweep", str(bad)], "sweep.txt:2: change 'carve:gpu:8'"),
        (["--capacity", "gpu=lots"], "--capacity 'gpu=lots'"),
    ]
    for args, says in cases:
        res = CliRunner().invoke(main, [*BASE, *args])
        assert res.exit_code == 2, (args, res.output)
        assert res.output.startswith("slurmgpu: error: ") and says in res.output, res.output
        assert res.output.count("\n") == 1


def test_without_capacity_says_what_is_needed():
    res = CliRunner().invoke(main, ["replay", "--sacct-file", str(DATA / "synthetic-mix.txt")])
    assert res.exit_code == 2
    assert "give --capacity PARTITION=GPUS" in res.output


def test_a_truncated_dump_is_one_line(tmp_path):
    cut = tmp_path / "cut.gz"
    cut.write_bytes(b"\x1f\x8b\x08\x00")
    res = CliRunner().invoke(main, ["replay", "--sacct-file", str(cut), "--capacity", "gpu=8"])
    assert res.exit_code == 1
    assert res.output.startswith("slurmgpu: error: ") and "truncated" in res.output
    assert res.output.count("\n") == 1


def test_an_output_in_a_missing_directory_is_one_line(tmp_path):
    # an I/O failure (exit 1), not a usage error
    dump = str(DATA / "synthetic-mix.txt")
    out = str(tmp_path / "missing" / "dir" / "r.txt")
    res = CliRunner().invoke(
        main, ["replay", "--sacct-file", dump, "--capacity", "gpu=8", "--output", out]
    )
    assert res.exit_code == 1, res.output
    assert res.output.startswith("slurmgpu: error: ") and "does not exist" in res.output
    assert res.output.count("\n") == 1


def test_gpu_memory_takes_a_type_and_a_size_as_analyze_does():
    from slurmgpu.cli.analysis_options import gpu_memory_option as _gpu_memory
    from slurmgpu.errors import UsageError

    assert _gpu_memory(("t4=16G", "gpu=8000"), None) == {"t4": 16384.0, "gpu": 8000.0}
    res = invoke("--gpu-memory", "h100=lots")
    assert res.exit_code == 2 and res.output.count("\n") == 1
    assert "--gpu-memory h100=lots: use a size such as 16G" in res.output
    try:
        _gpu_memory(("=16G",), None)
    except UsageError as exc:
        assert "TYPE" in str(exc) or "PARTITION" in str(exc)
    else:
        raise AssertionError("an empty name was accepted")
