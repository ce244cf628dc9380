"""The [idle] table: defaults, overrides, and file:line messages for every mistake."""

from __future__ import annotations

import pytest

from slurmgpu.errors import PolicyError
from slurmgpu.sources.policy_file import load_policy, parse_policy

BASE = """default_tier = "P2"
[partitions.gpu]
[partitions.debug]
[tiers.P0]
priority = 1000
[tiers.P2]
priority = 100
"""


def test_the_example_policy_has_an_idle_table():
    idle = load_policy("etc/slurmgpu.toml").idle
    assert idle is not None
    assert idle.rule.window_min == 120 and idle.rule.warn_after_min == (60, 105)
    assert idle.exempt_tiers == ("P0",)
    p1 = idle.rule_for("P1", "gpu")
    assert p1.window_min == 240 and p1.action == "requeue" and p1.util_pct == 1


def test_overrides_merge_on_the_default_partition_first():
    idle = parse_policy(
        BASE
        + """[idle]
window_min = 90
warn_after_min = [30]
[idle.tiers.P2]
util_pct = 5
[idle.partitions.debug]
window_min = 20
warn_after_min = [10]
action = "notify"
"""
    ).idle
    assert idle.rule_for("P2", "gpu").util_pct == 5
    assert idle.rule_for("P2", "gpu").window_min == 90
    debug = idle.rule_for("P2", "debug")
    assert (debug.window_min, debug.action, debug.util_pct) == (20, "notify", 1.0)
    assert idle.rule_for("P0", None) == idle.rule


def test_no_idle_table_is_none():
    assert parse_policy(BASE).idle is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("window_min = 0", ":9: idle.window_min: 0 must be > 0"),
        ("util_pct = 101", ":9: idle.util_pct: 101 must be <= 100"),
        ('action = "kill"', ":9: idle.action: 'kill': use one of cancel, requeue, notify"),
        ("warn_after_min = [100, 60]", ":9: idle.warn_after_min: [100.0, 60.0]: must rise"),
        ("warn_after_min = [130]", "each below window_min = 120"),
        ('exempt_tiers = ["P9"]', ":9: idle.exempt_tiers: unknown tier 'P9'"),
        ('exempt_interactive = "yes"', "idle.exempt_interactive: must be true or false"),
        ("windw_min = 5", "unknown key (did you mean 'window_min'?)"),
        ("max_gap_s = -1", "idle.max_gap_s: -1 must be > 0"),
        ('exempt_reasons = ["a b"]', "idle.exempt_reasons: 'a b'"),
        ("[idle.tiers.P7]\nwindow_min = 5", ":9: idle.tiers.P7: unknown tier 'P7'"),
        ("[idle.partitions.gpu]\nbogus = 1", ":10: idle.partitions.gpu.bogus: unknown key"),
    ],
)
def test_mistakes_name_file_line_and_key(text, message):
    with pytest.raises(PolicyError) as err:
        parse_policy(BASE + "[idle]\n" + text + "\n", "site.toml")
    assert message in str(err.value)
    assert str(err.value).startswith("site.toml:")


def test_policy_check_prints_the_idle_rules():
    from click.testing import CliRunner

    from slurmgpu.cli import main

    result = CliRunner().invoke(main, ["policy", "check", "--policy", "etc/slurmgpu.toml"])
    assert result.exit_code == 0, result.output
    assert (
        "  idle default: idle when every sample <= 1% for 120 min; warnings at 60, 105 min; "
        "then cancel\n"
    ) in result.output
    assert "  idle tier P1: idle when every sample <= 1% for 240 min" in result.output
    assert "idle exempt: tier P0, interactive jobs; idle-exempt= reasons: checkpoint-restore" in (
        result.output
    )
