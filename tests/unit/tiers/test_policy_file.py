"""Loading and validating the site policy: every message names file, line and key."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from slurmgpu.errors import PolicyError
from slurmgpu.model.policy import slice_gpu_fraction, slice_memory_mib
from slurmgpu.sources.policy_file import key_lines, load_policy, parse_policy
from tests.unit.tiers.lua_env import EXAMPLE

BASE = """\
default_tier = "P2"
shards_per_gpu = 4

[tiers.P0]
priority = 1000
preempts = ["P2"]
grace_time_s = 60

[tiers.P2]
priority = 10

[kinds.inference]
slice = "shard:1"
"""


def errors_of(text: str) -> list[str]:
    with pytest.raises(PolicyError) as exc:
        parse_policy(text, "etc/slurmgpu.toml")
    return str(exc.value).splitlines()


def test_example_is_the_case_study():
    policy = load_policy(EXAMPLE)
    assert [t.name for t in policy.tiers] == ["P0", "P1", "P2"]
    p0 = policy.tier("P0")
    assert p0.preempts == ("P2",) and p0.grace_time_s > 0 and p0.preempt_mode == "requeue"
    fractions = {k.name: slice_gpu_fraction(k.slice, policy.shards_per_gpu) for k in policy.kinds}
    assert fractions == {"inference": 0.25, "finetune": 0.5, "training": 8.0}
    assert policy.kind("finetune").slice.gres == "gpu:3g.40gb:1"  # gen-gres's default type
    assert slice_memory_mib(policy.kind("inference").slice) == 20091
    assert policy.default_tier == "P2"


def test_tier_for_qos_and_kind():
    policy = parse_policy(BASE)
    assert policy.tier_for_qos("P0").name == "P0"
    assert policy.tier_for_qos(" p2 ").name == "P2"
    assert policy.tier_for_qos("normal") is None and policy.tier_for_qos(None) is None
    assert policy.kind("inference").slice.gres == "shard:1"
    assert policy.kind("nope") is None and policy.kind(None) is None


def test_unknown_tier_in_preempts_names_the_line():
    text = BASE.replace('preempts = ["P2"]', 'preempts = ["P2", "P3"]')
    assert errors_of(text) == [
        "etc/slurmgpu.toml:6: tiers.P0.preempts: unknown tier 'P3' (tiers: P0, P2)"
    ]


def test_cycle():
    text = BASE + '\n[tiers.P1]\npriority = 5\npreempts = ["P0"]\n'
    text = text.replace('preempts = ["P2"]', 'preempts = ["P1"]')
    errs = errors_of(text)
    assert errs == ["etc/slurmgpu.toml:6: tiers.P0.preempts: preemption cycle: P0 -> P1 -> P0"]


def test_self_preemption():
    errs = errors_of(BASE.replace('preempts = ["P2"]', 'preempts = ["P0"]'))
    assert errs == ["etc/slurmgpu.toml:6: tiers.P0.preempts: a tier cannot preempt itself"]


def test_negative_grace_time():
    errs = errors_of(BASE.replace("grace_time_s = 60", "grace_time_s = -5"))
    assert errs == ["etc/slurmgpu.toml:7: tiers.P0.grace_time_s: -5 is negative (must be >= 0)"]


def test_unknown_key_with_suggestion():
    errs = errors_of(BASE.replace("preempts =", "premepts ="))
    assert errs[0].startswith(
        "etc/slurmgpu.toml:6: tiers.P0.premepts: unknown key (did you mean 'preempts'?)"
    )
    errs = errors_of("defualt_tier = 'P2'\n" + BASE)
    assert any(e.startswith("etc/slurmgpu.toml:1: defualt_tier: unknown key") for e in errs)


@pytest.mark.parametrize(
    "slice_text,message",
    [
        ('"mig:5g.50gb"', "MIG profile '5g.50gb' is not offered by any GPU model"),
        ('"shard:5"', "5 shards is more than one GPU offers (shards_per_gpu = 4)"),
        ('"gpu:0"', "the count after 'gpu:' must be an integer from 1 to 4294967293"),
        ('"gpu:²"', "'gpu:²': the count after 'gpu:' must be an integer from 1 to"),
        ('"shard:٣"', "the count after 'shard:' must be an integer from 1 to"),
        ('"gpu:99999999999"', "must be an integer from 1 to 4294967293"),
        ('"gpu:1\\u0000"', "'gpu:1\\x00': use 'mig:PROFILE', 'shard:N' or 'gpu:N'"),
        ('"tpu:1"', "unknown slice kind 'tpu'"),
        ("3", "use 'mig:PROFILE', 'shard:N' or 'gpu:N'"),
    ],
)
def test_bad_slices(slice_text, message):
    errs = errors_of(BASE.replace('"shard:1"', slice_text))
    assert len(errs) == 1
    assert errs[0].startswith("etc/slurmgpu.toml:13: kinds.inference.slice: ")
    assert message in errs[0]


def test_mig_profile_of_the_named_model():
    text = BASE.replace('"shard:1"', '"mig:1g.5gb"\ngpu_model = "h100"')
    errs = errors_of(text)
    assert "MIG profile '1g.5gb' is not offered by the h100-sxm5-80gb" in errs[0]
    ok = parse_policy(BASE.replace('"shard:1"', '"mig:3g.40gb"\ngpu_model = "a100-sxm4-80gb"'))
    assert ok.kind("inference").slice.gres == "gpu:3g.40gb:1"
    assert slice_memory_mib(ok.kind("inference").slice) == 40192  # A100 80GB's 3g.40gb
    either = parse_policy(BASE.replace('"shard:1"', '"mig:3g.40gb"'))
    assert either.kind("inference").slice.gpu_model is None  # A100 80GB or H100: unknown
    own = parse_policy(BASE.replace('"shard:1"', '"mig:3g.40gb"\ngres_type = "a100_3g"'))
    assert own.kind("inference").slice.gres == "gpu:a100_3g:1"


def test_many_errors_at_once_and_types():
    text = """\
default_tier = "P7"
[tiers.P0]
priority = "high"
preempt_mode = "explode"
accounts = ["a b"]
[tiers."bad name"]
priority = 1
[kinds.x]
partition = "nope"
"""
    errs = errors_of(text)
    assert "etc/slurmgpu.toml:3: tiers.P0.priority: must be an integer, not a string" in errs
    assert any(e.startswith("etc/slurmgpu.toml:4: tiers.P0.preempt_mode: 'explode'") for e in errs)
    assert any(e.startswith("etc/slurmgpu.toml:5: tiers.P0.accounts: 'a b'") for e in errs)
    assert any(e.startswith("etc/slurmgpu.toml:6: tiers.\"bad name\": 'bad name'") for e in errs)
    assert any(e.startswith("etc/slurmgpu.toml:8: kinds.x.slice: missing") for e in errs)
    assert "etc/slurmgpu.toml:1: default_tier: unknown tier 'P7'" in errs


def test_disagreeing_preempt_modes():
    text = BASE + '\n[tiers.P1]\npriority = 5\npreempts = ["P2"]\npreempt_mode = "cancel"\n'
    errs = errors_of(text)
    assert errs == [
        "etc/slurmgpu.toml:18: tiers.P1.preempt_mode: tiers preempting P2 disagree on "
        "preempt_mode (P0=requeue, P1=cancel): Slurm applies one mode per preempted QOS"
    ]


def test_missing_pieces_and_bad_toml():
    assert errors_of("[tiers.P0]\npriority = 1\n") == [
        "etc/slurmgpu.toml:1: default_tier: missing: name the tier for jobs that ask for none"
    ]
    errs = errors_of('default_tier = "P0"\n')
    assert (
        errs[0] == "etc/slurmgpu.toml:1: tiers: missing: define at least one tier ([tiers.P0] ...)"
    )
    assert errors_of("x = = 1") == [
        "etc/slurmgpu.toml:1: (syntax): Invalid value (column 5): not valid TOML"
    ]
    assert errors_of('default_tier = "P2"\n[tiers.P2]\npriority = 1\nx = [1,\n') == [
        "etc/slurmgpu.toml:4: (syntax): Invalid value (at the end): not valid TOML"
    ]


# --- hostile files: every problem one line, FILE:LINE: key: problem, no traceback ----------


def one_line_errors(text: str) -> list[str]:
    errs = errors_of(text)
    for line in errs:
        assert re.match(r"^etc/slurmgpu\.toml:\d+: \S.*: \S", line), line
        assert "\x00" not in line and "\r" not in line
    return errs


def test_not_utf8_names_line_and_byte(tmp_path):
    bad = tmp_path / "p.toml"
    bad.write_bytes(b'default_tier = "P2"\n[tiers.P2]\npriority = 1\ndescription = "caf\xe9"\n')
    with pytest.raises(PolicyError) as exc:
        load_policy(bad)
    assert str(exc.value) == (
        f"{bad}:4: (file): not UTF-8 text: byte 0xe9 at column 19 (TOML files are UTF-8)"
    )
    result = CliRunner().invoke(main, ["policy", "check", "--policy", str(bad)])
    assert result.exit_code == 1
    assert result.output == f"slurmgpu: error: {exc.value}\n"


@pytest.mark.parametrize("opener,closer", [("[", "]"), ("{a = ", "}")])
def test_deep_nesting_is_one_line(opener, closer):
    text = 'default_tier = "P2"\n[tiers.P2]\npriority = 1\nx = ' + opener * 100000 + closer * 100000
    errs = one_line_errors(text)
    assert errs == ["etc/slurmgpu.toml:4: (syntax): arrays or tables nested more than 64 deep"]


def test_nesting_within_the_limit_is_an_ordinary_error():
    text = BASE + "bogus = " + "[" * 30 + "]" * 30 + "\n"
    errs = one_line_errors(text)
    assert errs[0].startswith("etc/slurmgpu.toml:14: kinds.inference.bogus: unknown key")


@pytest.mark.parametrize(
    "old,new,message",
    [
        (
            "grace_time_s = 60",
            "grace_time_s = 65534",
            "7: tiers.P0.grace_time_s: 65534 is too large",
        ),
        ("priority = 10\n", "priority = 4294967294\n", "10: tiers.P2.priority: 4294967294 is too"),
        ("shards_per_gpu = 4", "shards_per_gpu = " + "9" * 400, "2: shards_per_gpu: a 400-digit"),
        ("priority = 10\n", "priority = -" + "9" * 50 + "\n", "a 50-digit number is negative"),
        (
            "priority = 10\n",
            "priority = inf\n",
            "10: tiers.P2.priority: must be an integer, not float",
        ),
        (
            'slice = "shard:1"',
            'slice = "shard:1"\ntime_limit_min = 4294967296',
            "time_limit_min: 4294967296 is too large (must be <= 4294967293)",
        ),
        (
            'slice = "shard:1"',
            'slice = "shard:1"\ntime_limit_min = 4294967294',
            "4294967294 is too large",
        ),
    ],
)
def test_huge_numbers(old, new, message):
    errs = one_line_errors(BASE.replace(old, new))
    assert message in errs[0], errs


def test_largest_valid_time_limit_renders():
    from slurmgpu.render.job_submit import render_job_submit

    policy = parse_policy(
        BASE.replace('slice = "shard:1"', 'slice = "shard:1"\ntime_limit_min = 4294967293')
    )
    assert "time_limit = 4294967293," in render_job_submit(policy)


@pytest.mark.parametrize(
    "old,new,message",
    [
        (
            "priority = 10\n",
            'priority = 10\nusers = ["al\\u0000ice"]\n',
            "11: tiers.P2.users: 'al\\x00ice': contains the control character U+0000",
        ),
        ("priority = 10\n", 'priority = 10\naccounts = ["a\\u001bb"]\n', "U+001B"),
        (
            "priority = 10\n",
            'priority = 10\ndescription = "a\\u0000b"\n',
            "11: tiers.P2.description: 'a\\x00b': contains the control character U+0000",
        ),
        (
            'slice = "shard:1"',
            'slice = "shard:1"\ngpu_model = "h100\\nx"',
            "gpu_model: 'h100\\nx': contains the control character U+000A",
        ),
        (
            "[tiers.P2]",
            '[tiers."P\\n2"]',
            "9: tiers.\"P\\n2\": 'P\\n2': contains the control character U+000A",
        ),
        (
            "[tiers.P2]",
            '[partitions."g\\u0000"]\n[tiers.P2]',
            "9: partitions.\"g\\u0000\": 'g\\x00': contains the control character",
        ),
    ],
)
def test_control_characters(old, new, message):
    errs = one_line_errors(BASE.replace(old, new))
    assert any(message in e for e in errs), errs


def test_nul_user_name_never_reaches_gen_job_submit(tmp_path):
    bad = tmp_path / "p.toml"
    bad.write_text(BASE.replace("priority = 10\n", 'priority = 10\nusers = ["a\\u0000"]\n'))
    result = CliRunner().invoke(main, ["gen-job-submit", "--policy", str(bad)])
    assert result.exit_code == 1
    assert result.output.startswith(f"slurmgpu: error: {bad}:11: tiers.P2.users: ")
    assert "Traceback" not in result.output


def test_policy_check_on_superscript_slice(tmp_path):
    bad = tmp_path / "p.toml"
    bad.write_text(BASE.replace('"shard:1"', '"gpu:²"'), encoding="utf-8")
    result = CliRunner().invoke(main, ["policy", "check", "--policy", str(bad)])
    assert result.exit_code == 1
    assert result.output == (
        f"slurmgpu: error: {bad}:13: kinds.inference.slice: 'gpu:²': the count after 'gpu:' "
        "must be an integer from 1 to 4294967293\n"
    )


def test_key_lines_follow_tables_dotted_keys_and_multiline_strings():
    text = '''\
a = 1
# comment
[t."q x"]
b.c = """
not = a key
"""
d = 2
[[arr]]
e = 3
'''
    lines = key_lines(text)
    assert lines[("a",)] == 1
    assert lines[("t", "q x")] == 3
    assert lines[("t", "q x", "b", "c")] == 4
    assert ("not",) not in lines and ("t", "q x", "not") not in lines
    assert lines[("t", "q x", "d")] == 7
    assert lines[("arr", "e")] == 9


def test_policy_check_cli(tmp_path):
    runner = CliRunner()
    result = runner.invoke(main, ["policy", "check", "--policy", str(EXAMPLE)])
    assert result.exit_code == 0, result.output
    assert "tier P0: QOS p0, priority 1000, preempts P2; account prod\n" in result.output
    assert (
        "tier P2 (default): QOS p2, priority 100; everyone; requeued when preempted, "
        "120 s grace (KillWait)\n"
    ) in result.output
    assert "kind finetune: MIG 3g.40gb = 0.5 GPU" in result.output
    bad = tmp_path / "p.toml"
    bad.write_text(BASE.replace("grace_time_s = 60", "grace_time_s = -1"))
    result = runner.invoke(main, ["policy", "check", "--policy", str(bad)])
    assert result.exit_code == 1
    assert result.output == (
        f"slurmgpu: error: {bad}:7: tiers.P0.grace_time_s: -1 is negative (must be >= 0)\n"
    )
    result = runner.invoke(main, ["policy", "check", "--policy", str(tmp_path / "none.toml")])
    assert result.exit_code == 1 and "cannot read the policy file" in result.output


def test_gen_job_submit_refuses_invalid_policy_and_writes_nothing(tmp_path):
    bad = tmp_path / "p.toml"
    bad.write_text(BASE.replace('["P2"]', '["P9"]'))
    out = tmp_path / "job_submit.lua"
    result = CliRunner().invoke(
        main, ["gen-job-submit", "--policy", str(bad), "--output", str(out), "--check"]
    )
    assert result.exit_code == 1 and "unknown tier 'P9'" in result.output
    assert not out.exists()


def test_gen_job_submit_check_and_atomic_install(tmp_path):
    out = tmp_path / "job_submit.lua"
    out.write_text("-- old\n")
    runner = CliRunner()
    result = runner.invoke(
        main, ["gen-job-submit", "--policy", str(EXAMPLE), "-o", str(out), "--check"]
    )
    assert result.exit_code == 3, result.output  # 3: written (docs/acting.md, exit codes)
    assert out.read_text().startswith("--[==[\njob_submit.lua generated by slurmgpu")
    assert (tmp_path / "job_submit.lua.bak").read_text() == "-- old\n"
    again = runner.invoke(main, ["gen-job-submit", "--policy", str(EXAMPLE)])
    assert again.output == out.read_text()  # deterministic, stdout by default


def test_gen_job_submit_diff_dry_run_and_emit_like_every_generated_file(tmp_path):
    out = tmp_path / "job_submit.lua"
    out.write_text("-- old\n")
    args = ["gen-job-submit", "--policy", str(EXAMPLE), "-o", str(out)]
    runner = CliRunner()
    differ = runner.invoke(main, [*args, "--diff"])
    assert differ.exit_code == 3 and "\n--- old\n" in differ.stdout  # the old line, removed
    dry = runner.invoke(main, [*args, "--dry-run"])
    assert dry.exit_code == 3 and "would write" in dry.stderr
    emitted = runner.invoke(main, [*args, "--emit", str(tmp_path / "emit")])
    assert emitted.exit_code == 3, emitted.output  # 3: the live file would change
    assert out.read_text() == "-- old\n"  # nothing live touched by any of the three
    assert (tmp_path / "emit" / "job_submit.lua").read_text().startswith("--[==[")
    assert runner.invoke(main, args).exit_code == 3
    same = runner.invoke(main, [*args, "--diff"])
    assert same.exit_code == 0 and same.stdout == "" and "unchanged" in same.stderr
