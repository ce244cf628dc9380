"""#33 settings that don't arrive: `analyze`, `report`, `replay` and `advise` read the policy
from $SLURMGPU_POLICY when no --policy is given, as every other command with a policy does."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from slurmgpu.cli import main

ROOT = Path(__file__).resolve().parents[3]
MIX = str(ROOT / "tests" / "data" / "sacct" / "synthetic-mix.txt")
POLICY = str(ROOT / "etc" / "slurmgpu.toml")  # p0/p1/p2 are tiers P0/P1/P2
REPLAY = ["replay", "--sacct-file", MIX, "--capacity", "gpu=16", "--capacity", "mig=1",
          "--gpu-type", "gpu=h100", "--gpu-type", "mig=h100", "--format", "json"]  # fmt: skip


def run(args, policy_env: str | None = None):
    env = {"SLURMGPU_POLICY": policy_env} if policy_env else {"SLURMGPU_POLICY": ""}
    res = CliRunner().invoke(main, args, env=env, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.stdout


def test_analyze_reads_the_policy_from_the_environment():
    args = ["analyze", "--sacct-file", MIX, "--format", "json"]
    tiers = {e["qos"]: e["tier"] for e in json.loads(run(args, POLICY))["by_qos"]}
    assert tiers == {"p0": "P0", "p1": "P1", "p2": "P2"}
    assert run(args, POLICY) == run([*args, "--policy", POLICY])
    bare = {e["qos"]: e["tier"] for e in json.loads(run(args))["by_qos"]}
    assert set(bare.values()) != {"P0", "P1", "P2"}  # without a policy: no tiers


def test_report_reads_the_policy_from_the_environment():
    args = ["report", "--sacct-file", MIX, "--format", "json"]
    doc = json.loads(run(args, POLICY))
    assert {e["tier"] for e in doc["by_qos"]} == {"P0", "P1", "P2"}


def test_replay_reads_the_policy_from_the_environment():
    with_env = json.loads(run(REPLAY, POLICY))
    given = json.loads(run([*REPLAY, "--policy", POLICY]))
    bare = json.loads(run(REPLAY))
    assert with_env == given and with_env != bare


def test_a_missing_policy_in_the_environment_is_one_line(tmp_path):
    res = CliRunner().invoke(
        main, ["analyze", "--sacct-file", MIX], env={"SLURMGPU_POLICY": str(tmp_path / "no")}
    )
    assert res.exit_code == 1 and res.stderr.startswith("slurmgpu: error:")
    assert str(tmp_path / "no") in res.stderr and res.stderr.count("\n") == 1
