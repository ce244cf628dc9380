"""`slurmgpu advise` and `slurmgpu replay --calibrate` through click; the [objective] table."""

import json

import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from slurmgpu.errors import PolicyError
from slurmgpu.sources.policy_file import parse_policy

CAP = ["--capacity", "burst=96", "--capacity", "big=64", "--capacity", "idle=64"]
POLICY = """default_tier = "P2"
[tiers.P0]
qos = "p0"
priority = 1000
[tiers.P2]
qos = "normal"
priority = 100
[objective]
max_wait_growth = 0.25
max_wait_growth_s = 120
p0_max_wait_s = 86400
uncertainty_replays = 2
[objective.tiers.P0]
mean_wait = 2.0
[objective.partitions.big]
mean_wait = 3.0
p95_wait = 1.0
[objective.partitions.burst]
max_wait_growth = 0.05
"""


@pytest.fixture
def policy(tmp_path):
    path = tmp_path / "policy.toml"
    path.write_text(POLICY)
    return path


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_advise_json_with_the_policys_objective(month_file, policy):
    res = run("advise", "--sacct-file", str(month_file), *CAP, "--policy", str(policy),
              "--candidate", "move:idle:big:16", "--candidate", "move:burst:big:16",
              "--processes", "1", "--format", "json")  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["plan"]["changes"] == ["move:idle:big:16"]
    assert doc["plan"]["perturbed_replays"] == 2  # uncertainty_replays from the policy
    [rejected] = doc["rejected"]
    assert rejected["change"] == "move:burst:big:16"
    assert "burst's p95 wait grows" in rejected["why"] and "+5 %" in rejected["why"]
    parts = {p["partition"] for p in doc["fidelity"]["by_partition"]}
    assert parts == {"big", "burst", "idle"}


def test_advise_text_and_html(month_file, tmp_path):
    res = run("advise", "--sacct-file", str(month_file), *CAP, "--candidate", "move:idle:big:16",
              "--processes", "1")  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "Plan (changes applied together): move:idle:big:16" in res.output
    assert "Calibration" in res.output and "perturbed replays" in res.output
    out = tmp_path / "a.html"
    res = run("advise", "--sacct-file", str(month_file), *CAP, "--candidate", "move:idle:big:16",
              "--processes", "1", "--format", "html", "--output", str(out))  # fmt: skip
    assert res.exit_code == 0 and "<h2>Plan: move:idle:big:16</h2>" in out.read_text()


def test_replay_calibrate(month_file):
    res = run("replay", "--calibrate", "--sacct-file", str(month_file), *CAP, "--format", "json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)["fidelity"]["by_partition"]
    assert [r["partition"] for r in rows] == ["big", "burst", "idle"]
    assert all(r["calibrated"] for r in rows)
    text = run("replay", "--calibrate", "--sacct-file", str(month_file), *CAP).output
    assert "in order" in text and "burst" in text


def test_mistakes_are_one_line(month_file, tmp_path):
    cases = [
        (["replay", "--calibrate", "--what-if", "move:idle:big:8"], "drop --what-if"),
        (["advise", "--candidate", "move:idle:big:12"], "sum of whole nodes"),
        (["advise", "--candidate", "grow:idle"], "use move:FROM:TO:GPUS"),
    ]
    for args, says in cases:
        res = CliRunner().invoke(main, [*args, "--sacct-file", str(month_file), *CAP])
        assert res.exit_code == 2, (args, res.output)
        assert res.output.startswith("slurmgpu: error: ") and says in res.output, res.output
        assert res.output.count("\n") == 1


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("max_wait_growth = -0.5", "objective.max_wait_growth: -0.5 is out of range"),
        ("max_wait_growth = nan", "objective.max_wait_growth: nan is out of range"),
        ("min_useful_gpu_hours = 2", "objective.min_useful_gpu_hours: 2 is out of range"),
        ('p0_max_wait_s = "1h"', "objective.p0_max_wait_s: must be a number, not a string"),
        ("calibration_wait_factor = 0.5", "objective.calibration_wait_factor: 0.5 is out of range"),
        ("uncertainty_replays = 1000", "objective.uncertainty_replays: 1000 is too large"),
        (
            "max_wait_grow = 1",
            "objective.max_wait_grow: unknown key (did you mean 'max_wait_growth'?)",
        ),
        ("[objective.tiers.P9]\nmean_wait = 1", "objective.tiers.P9: unknown tier 'P9'"),
        ("[objective.tiers.P0]\nmax_wait_growth = 1", "is a partition's limit, not a tier's"),
        (
            "[objective.partitions.big]\nmean_wait = true",
            "mean_wait: must be a number, not a boolean",
        ),
    ],
)
def test_bad_objective_values_are_one_line_with_file_and_line(tmp_path, body, says):
    text = POLICY.split("[objective]")[0] + "[objective]\n" + body + "\n"
    with pytest.raises(PolicyError) as err:
        parse_policy(text, "site.toml")
    message = str(err.value)
    assert message.count("\n") == 0 and message.startswith("site.toml:"), message
    assert says in message, message
    path = tmp_path / "bad.toml"
    path.write_text(text)
    res = CliRunner().invoke(main, ["policy", "check", "--policy", str(path)])
    assert res.exit_code == 1 and res.output.count("\n") == 1
    assert res.output.startswith("slurmgpu: error: ") and says in res.output


def test_the_objective_is_read():
    obj = parse_policy(POLICY, "p.toml").objective
    assert obj.max_wait_growth == 0.25 and obj.max_wait_growth_s == 120
    assert obj.p0_max_wait_s == 86400 and obj.uncertainty_replays == 2
    assert obj.partition("big").mean_wait == 3.0 and obj.partition("big").p95_wait == 1.0
    assert obj.partition("idle").mean_wait == 1.0  # the default weight
    assert obj.growth_limit("burst") == 0.05 and obj.growth_limit("big") == 0.25
    assert [t.name for t in obj.tiers] == ["P0"]
    assert parse_policy(POLICY.split("[objective]")[0], "p.toml").objective.max_wait_growth == 0.1


def test_advise_reads_the_policy_from_the_environment(month_file, policy):
    """#33: $SLURMGPU_POLICY reached `advise` no more than `analyze`: the objective (two
    perturbed replays) is the policy's with the variable alone."""
    res = CliRunner().invoke(
        main,
        ["advise", "--sacct-file", str(month_file), *CAP, "--candidate", "move:idle:big:16",
         "--processes", "1", "--format", "json"],
        env={"SLURMGPU_POLICY": str(policy)},
        catch_exceptions=False,
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["plan"]["perturbed_replays"] == 2
