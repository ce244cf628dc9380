"""`gen-job-submit --module` (the rules as a module a site's own job_submit.lua requires), the
partition PriorityTier rule, and `--check` without lupa (the standalone lua5.1)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from slurmgpu.errors import ConfigCheckError
from slurmgpu.render.job_submit import render_job_submit
from slurmgpu.sources import lua_check
from slurmgpu.sources.policy_file import load_policy
from tests.unit.tiers.lua_env import ACCESS_DENIED, EXAMPLE, SUCCESS, LuaScript

# gpu the default partition at PriorityTier 1; urgent on the same nodes at PriorityTier 10
PARTS = {"gpu": (1, True), "urgent": (10, False)}


@pytest.fixture
def both(lua_runtime):
    """The whole-file script and the module of the example policy, in one runtime each."""
    policy = load_policy(EXAMPLE)
    return (
        LuaScript(render_job_submit(policy), lua_runtime),
        LuaScript(render_job_submit(policy, module=True), lua_runtime, module=True),
    )


def test_module_defines_no_globals_and_returns_its_entry_points(lua_runtime):
    text = render_job_submit(load_policy(EXAMPLE), module=True)
    script = LuaScript(text, lua_runtime, module=True)
    assert script.g.slurm_job_submit is None and script.g.slurm_job_modify is None
    assert text.rstrip().endswith("return M")
    # the header shows how to use it: never a bare require (a missing module would stop
    # slurmctld), fill before the site's rules
    assert 'pcall(require, "slurmgpu_tiers")' in text and "require(" not in text
    assert "slurmgpu.fill(job_desc, part_list, submit_uid)" in text


MODULE_POLICY = EXAMPLE.parents[1] / "tests" / "data" / "tiers" / "policy-module.toml"
# the short partition allows 30 minutes (MaxTime), gpu has no limit
CAPPED = {"gpu": (1, True), "short": (1, False, 30)}


def test_fill_gives_the_site_rules_the_kind_limits_bounded_by_max_time(lua_runtime):
    """#33: the kind's partition and time limit are filled by `fill`, before the site's rules
    (so they check them), and never above the partition's MaxTime, in both modes."""
    policy = load_policy(MODULE_POLICY)
    module = LuaScript(render_job_submit(policy, module=True), lua_runtime, module=True)
    whole = LuaScript(render_job_submit(policy), lua_runtime)
    out = module.fill({"comment": "kind=training"}, partitions=CAPPED)
    assert out.rc == SUCCESS
    assert out.writes == {"partition": "gpu", "time_limit": 4320}  # no tier decided yet
    out = module.fill({"comment": "kind=quick"}, partitions=CAPPED)
    assert out.writes == {"partition": "short", "time_limit": 30}
    for script in (module, whole):
        out = script.submit({"comment": "kind=quick"}, partitions=CAPPED)
        assert out.rc == SUCCESS and out.writes["time_limit"] == 30
        # the user's own limit is the user's: Slurm's partition limits judge it
        out = script.submit({"comment": "kind=quick", "time_limit": 90}, partitions=CAPPED)
        assert "time_limit" not in out.writes
    # a wrong tag is left to job_submit to refuse
    out = module.fill({"comment": "kind=nope"}, partitions=CAPPED)
    assert out.rc == SUCCESS and out.writes == {}
    assert module.submit({"comment": "kind=nope"}, partitions=CAPPED).rc != SUCCESS


JOBS = [
    {"comment": "tier=P0 kind=training", "account": "prod", "user_name": "carol"},
    {"comment": "tier=P1 kind=inference", "account": "rnd", "user_name": "carol"},
    {"user_name": "carol"},
    {"qos": "p0", "account": "rnd", "user_name": "carol"},  # refused: rnd may not use P0
    {"comment": "tier=P9"},
    {"comment": "kind=finetune", "requeue": 0},  # refused: P2 is requeued when preempted
]


@pytest.mark.parametrize("job", JOBS)
def test_module_routes_as_the_whole_file(both, job):
    whole, module = both
    a, b = whole.submit(dict(job)), module.submit(dict(job))
    assert (a.rc, a.writes, a.user) == (b.rc, b.writes, b.user)
    rec = {"qos": "p2", "comment": "x", "user_name": "carol", "account": "prod", "user_id": 1}
    a = whole.modify({"qos": "p1"}, rec, uid=1)
    b = module.modify({"qos": "p1"}, rec, uid=1)
    assert (a.rc, a.writes) == (b.rc, b.writes)


def test_lower_tier_refused_in_a_partition_of_higher_priority_tier(both):
    for script in both:
        out = script.submit({"partition": "urgent", "user_name": "carol"}, partitions=PARTS)
        assert out.rc == ACCESS_DENIED
        assert out.user == [
            "slurmgpu: partition urgent has PriorityTier=10, above partition gpu's 1: Slurm "
            "would start this tier P2 job ahead of waiting jobs of higher tiers; only tier P0 "
            "jobs may use it"
        ]
        # a list naming it is refused too; P1 as well
        out = script.submit(
            {"partition": "gpu,urgent", "comment": "tier=P1", "account": "rnd"}, partitions=PARTS
        )
        assert out.rc == ACCESS_DENIED and "tier P1 job" in out.user[0]
        # the top tier may use it; any tier the lowest PriorityTier
        out = script.submit({"partition": "urgent", "qos": "p0", "account": "prod"}, None, PARTS)
        assert out.rc == SUCCESS
        out = script.submit({"partition": "gpu", "user_name": "carol"}, partitions=PARTS)
        assert out.rc == SUCCESS
        # no partition named: the default one counts
        out = script.submit({"user_name": "carol"}, partitions=PARTS)
        assert out.rc == SUCCESS
        high_default = {"gpu": (1, False), "urgent": (10, True)}
        out = script.submit({"user_name": "carol"}, partitions=high_default)
        assert out.rc == ACCESS_DENIED
        # one PriorityTier everywhere: nothing to refuse
        flat = {"gpu": (1, True), "urgent": (1, False)}
        assert script.submit({"partition": "urgent"}, partitions=flat).rc == SUCCESS


def test_updates_cannot_reach_a_higher_priority_tier_partition(both):
    for script in both:
        p2 = {"qos": "p2", "partition": "gpu", "user_name": "carol", "user_id": 1}
        out = script.modify({"partition": "urgent"}, p2, uid=1, partitions=PARTS)
        assert out.rc == ACCESS_DENIED
        assert "partition urgent has PriorityTier=10" in out.info[0]
        # a P0 job in urgent moved down to P2 stays out of urgent
        p0 = {"qos": "p0", "partition": "urgent", "account": "prod", "user_id": 1}
        assert script.modify({"qos": "p2"}, p0, uid=1, partitions=PARTS).rc == ACCESS_DENIED
        assert script.modify({"qos": "p1"}, p0, uid=1, partitions=PARTS).rc == ACCESS_DENIED
        ok = script.modify({"partition": "gpu"}, p2, uid=1, partitions=PARTS)
        assert ok.rc == SUCCESS


@pytest.mark.parametrize("module", [False, True])
def test_lua51_dry_run_matches_lupa(tmp_path, module):
    text = render_job_submit(load_policy(EXAMPLE), module=module)
    path = tmp_path / "s.lua"
    path.write_text(text)
    tags = ["", "tier=P9", "kind=training"]
    assert lua_check.dry_run_lua(path, tags, module=module) == lua_check.dry_run(
        text, tags, module=module
    )
    assert "slurmgpu: unknown tier 'P9': use P0, P1, P2" in lua_check.dry_run_lua(
        path, tags, module=module
    )


BAD_MODULE = "local M = {}\nfunction M.job_submit() end\nfunction M.job_modify() return 0 end\n"
LOGS_ERROR = (
    "function slurm_job_submit() slurm.log_error('bad %s', 'x') return 0 end\n"
    "function slurm_job_modify() return 0 end"
)


@pytest.mark.parametrize(
    ("text", "module", "message"),
    [
        ("function slurm_job_submit() return 0 end", False, "defines no slurm_job_modify"),
        ("error('at load time')", False, "does not load in lua5.1: .*at load time"),
        ("return 7", True, "the module returns no table"),
        ("return { job_submit = function() return 0 end }", True, "defines no job_modify"),
        (BAD_MODULE + "return M", True, "returned nil, not a Slurm code"),
        (LOGS_ERROR, False, "dry run in lua5.1: bad x"),
    ],
)
def test_lua51_dry_run_failures(tmp_path, text, module, message):
    path = tmp_path / "s.lua"
    path.write_text(text)
    with pytest.raises(ConfigCheckError, match=message):
        lua_check.dry_run_lua(path, [""], module=module)


def _gen(args, monkeypatch, lupa: bool, lua51: bool):
    if not lupa:
        monkeypatch.setattr(lua_check, "lupa_available", lambda runtime="lua51": False)
    if not lua51:
        monkeypatch.setattr(lua_check, "lua_interpreter", lambda: None)
    return CliRunner().invoke(main, ["gen-job-submit", "--policy", str(EXAMPLE), *args])


def test_check_says_exactly_what_ran(tmp_path, monkeypatch):
    out = tmp_path / "job_submit.lua"
    res = _gen(["--check", "-o", str(out)], monkeypatch, lupa=True, lua51=True)
    assert res.exit_code == 3, res.output  # written
    assert f"wrote {out}\n" in res.stderr
    assert (
        f"slurmgpu: {out}: checked: luac5.1 -p, dry run in lua51 (lupa), dry run in lua54 (lupa)"
        in res.stderr
    )
    res = _gen(["--module", "--check", "-o", str(out)], monkeypatch, lupa=False, lua51=True)
    assert res.exit_code == 3, res.output
    assert f"slurmgpu: {out}: checked: luac5.1 -p, dry run in lua5.1\n" in res.stderr
    assert "touch the site's job_submit.lua" in res.output
    assert out.read_text().rstrip().endswith("return M")


def test_check_never_says_checked_when_nothing_ran(tmp_path, monkeypatch):
    monkeypatch.setattr(lua_check, "luac_available", lambda: None)
    out = tmp_path / "job_submit.lua"
    res = _gen(["--check", "-o", str(out)], monkeypatch, lupa=False, lua51=False)
    assert res.exit_code == 3, res.output
    assert (
        f"slurmgpu: {out}: NOT checked: no luac5.1 for the compile check; neither lupa nor "
        "lua5.1 for the dry run"
    ) in res.stderr
    assert ": checked" not in res.stderr
    out.write_text("-- changed\n")
    res = _gen(["-o", str(out)], monkeypatch, lupa=True, lua51=True)
    assert f"slurmgpu: {out}: not checked (no --check)" in res.stderr


def test_check_to_stdout_reports_on_stderr(monkeypatch):
    res = _gen(["--module", "--check"], monkeypatch, lupa=False, lua51=True)
    assert res.exit_code == 0
    assert "slurmgpu: the module: checked: luac5.1 -p, dry run in lua5.1" in res.stderr
    assert res.stdout.rstrip().endswith("return M")
