"""`slurmgpu analyze` through click's CliRunner (files only; the live path is integration)."""

import json
from pathlib import Path

from click.testing import CliRunner

from slurmgpu.cli import main

DATA = Path(__file__).resolve().parents[2] / "data" / "sacct"
MIX = str(DATA / "synthetic-mix.txt")


def invoke(*args):
    return CliRunner().invoke(main, ["analyze", *args])


def test_json_output_reconciles():
    r = invoke("--sacct-file", MIX, "--format", "json", "--capacity", "gpu=16")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    t = doc["totals"]
    # line 21 has `a|b` in JobName while AdminComment is also free text: ambiguous, rejected
    assert (t["rows_read"], t["rows_analyzed"], t["rows_rejected"]) == (26, 20, 6)
    assert len(doc["rejected"]) == 6 and doc["rejected"][0]["line"] == 21
    assert "ambiguous" in doc["rejected"][0]["reason"]
    part = {e["partition"]: e for e in doc["by_partition"]}
    assert part["gpu"]["capacity_gpu_hours"] is not None
    assert part["mig"]["capacity_gpu_hours"] is None


def test_text_output_has_tables():
    r = invoke("--sacct-file", MIX, "--shards-per-gpu", "8")
    assert r.exit_code == 0, r.output
    assert "By partition" in r.output and "26 read = 20 analyzed + 6 rejected" in r.output
    assert "Recommendations" in r.output


def test_output_file_written(tmp_path):
    out = tmp_path / "a.json"
    r = invoke("--sacct-file", MIX, "--format", "json", "--output", str(out))
    assert r.exit_code == 0 and r.output == ""
    assert json.loads(out.read_text())["schema_version"] == 2


def test_tier_mapping_option():
    r = invoke("--sacct-file", MIX, "--format", "json", "--tier", "p1=P1", "--tier", "p2=P2")
    tiers = {e["qos"]: e["tier"] for e in json.loads(r.output)["by_qos"]}
    assert tiers == {"p1": "P1", "p2": "P2", "p0": "p0"}


def test_missing_column_is_one_line_error(tmp_path):
    p = tmp_path / "bad.txt"
    p.write_text("JobIDRaw|State|Partition|User|Submit|Start|End|AllocTRES|ElapsedRaw\n")
    r = invoke("--sacct-file", str(p))
    assert r.exit_code == 1
    assert r.output.strip().count("\n") == 0
    assert "slurmgpu: error:" in r.output and "required column QOS missing" in r.output


def test_bad_option_values_exit_2():
    for args in (["--since", "last tuesday"], ["--capacity", "gpu"], ["--tier", "x"],
                 ["--timezone", "Mars/Olympus"],
                 ["--since", "2025-12-02", "--until", "2025-12-01"]):  # fmt: skip
        r = invoke("--sacct-file", MIX, *args)
        assert r.exit_code == 2, (args, r.output)
        assert r.output.startswith("slurmgpu: error:") or "Error" in r.output


def test_relative_since():
    r = invoke("--sacct-file", MIX, "--format", "json", "--since", "3650d")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["totals"]["jobs"] == 14


def test_inventory_option_bad_file_is_one_line(tmp_path):
    bad = tmp_path / "inv.json"
    bad.write_text("{}")
    r = invoke("--sacct-file", MIX, "--inventory", str(bad))
    assert r.exit_code == 1 and r.output.startswith("slurmgpu: error:")
    assert r.output.strip().count("\n") == 0


def test_policy_maps_qos_to_tiers_and_tier_option_overrides():
    policy = str(Path(__file__).resolve().parents[3] / "etc" / "slurmgpu.toml")
    r = invoke("--sacct-file", MIX, "--format", "json", "--policy", policy, "--tier", "p0=urgent")
    assert r.exit_code == 0, r.output
    tiers = {e["qos"]: e["tier"] for e in json.loads(r.output)["by_qos"]}
    assert tiers == {"p0": "urgent", "p1": "P1", "p2": "P2"}


def test_invalid_policy_is_one_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('default_tier = "P9"\n')
    r = invoke("--sacct-file", MIX, "--policy", str(bad))
    assert r.exit_code != 0
    assert r.output.startswith("slurmgpu: error:") and "bad.toml" in r.output


def test_gpus_per_node_option():
    r = invoke("--sacct-file", MIX, "--format", "json", "--gpus-per-node", "gpu=x")
    assert r.exit_code != 0 and "--gpus-per-node 'gpu=x': use N or PARTITION=N" in r.output
    r = invoke("--sacct-file", MIX, "--format", "json", "--gpus-per-node", "0")
    assert r.exit_code != 0 and "not a whole number" in r.output
    r = invoke("--sacct-file", MIX, "--format", "json", "--gpus-per-node", "gpu=4")
    assert r.exit_code == 0, r.output
