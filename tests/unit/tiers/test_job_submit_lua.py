"""The rendered job_submit.lua, run in real Lua 5.1 and 5.4 (lupa) against 22.05-shaped input."""

from __future__ import annotations

import random
import re

import pytest

from slurmgpu.model.policy import TAG_PATTERN
from slurmgpu.render.job_submit import render_job_submit, tres_per_node
from slurmgpu.sources.policy_file import load_policy, parse_policy
from tests.unit.tiers.lua_env import (
    ACCESS_DENIED,
    DATA,
    ERROR,
    EXAMPLE,
    INFINITE,
    NO_VAL,
    RUNTIMES,
    SUCCESS,
    LuaScript,
)

UIDS = {"alice": 1001, "bob": 1002, "root": 0}


@pytest.fixture
def example(lua_runtime):
    policy = load_policy(EXAMPLE)
    return policy, LuaScript(render_job_submit(policy), lua_runtime)


@pytest.fixture
def users_policy(lua_runtime):
    policy = load_policy(DATA / "policy-users.toml")
    return policy, LuaScript(render_job_submit(policy, UIDS), lua_runtime)


def test_both_runtimes_present():
    assert RUNTIMES == ["lua51", "lua54"]


def test_runtime_versions(example, lua_runtime):
    _, script = example
    assert script.lua.eval("_VERSION") == {"lua51": "Lua 5.1", "lua54": "Lua 5.4"}[lua_runtime]


# --- every tier x kind -------------------------------------------------------------


@pytest.mark.parametrize("tier", ["P0", "P1", "P2"])
@pytest.mark.parametrize("kind", ["inference", "finetune", "training", None])
def test_every_tier_and_kind_by_tag(example, tier, kind):
    policy, script = example
    comment = f"my run tier={tier}" + (f" kind={kind}" if kind else "")
    out = script.submit({"comment": comment, "account": "prod", "user_name": "carol"})
    assert out.rc == SUCCESS, out.user
    assert out.writes["qos"] == policy.tier(tier).qos
    note = f"slurmgpu tier={tier}" + (f" kind={kind}" if kind else "")
    assert out.writes["admin_comment"] == note
    if kind:
        k = policy.kind(kind)
        assert out.writes["tres_per_node"] == tres_per_node(k.slice.gres)
        assert out.writes["partition"] == k.partition
        assert out.writes["time_limit"] == k.time_limit_min
    else:
        assert not {"tres_per_node", "partition", "time_limit"} & set(out.writes)
    assert out.error == []


@pytest.mark.parametrize("qos", ["p0", "P0", "p1", "p2"])
def test_tier_from_qos(example, qos):
    _, script = example
    out = script.submit({"qos": qos, "account": "prod"})
    assert out.rc == SUCCESS
    assert out.writes["qos"] == qos.lower()
    assert out.writes["admin_comment"] == f"slurmgpu tier={qos.upper()}"


def test_default_tier_when_nothing_named(example):
    _, script = example
    out = script.submit({"user_name": "carol"})
    assert out.rc == SUCCESS
    # P2 is requeued when P0 preempts it: the job is made requeueable
    assert out.writes == {"qos": "p2", "admin_comment": "slurmgpu tier=P2", "requeue": 1}


def test_non_tier_qos_falls_back_to_tag_then_default(example):
    _, script = example
    out = script.submit({"qos": "normal", "comment": "tier=P1", "account": "rnd"})
    assert out.writes["qos"] == "p1"
    out = script.submit({"qos": "normal"})
    assert out.writes["qos"] == "p2"


def test_default_kind_applies(users_policy):
    _, script = users_policy
    out = script.submit({"user_name": "carol"})
    assert out.rc == SUCCESS
    assert out.writes["tres_per_node"] == "gres:gpu:2"
    assert out.writes["time_limit"] == 600
    assert "partition" not in out.writes  # the training kind names no partition
    assert out.writes["admin_comment"] == "slurmgpu tier=P2 kind=training"


# --- what the user set is kept ---------------------------------------------------------


@pytest.mark.parametrize(
    "field,value",
    [
        ("tres_per_node", "gres:gpu:8"),
        ("tres_per_job", "gres:gpu:2"),
        ("tres_per_task", "gres:gpu:1"),
        ("tres_per_socket", "gres:gpu:1"),
        ("tres_per_node", "gres:shard:3"),
    ],
)
def test_own_gpu_request_kept(example, field, value):
    _, script = example
    out = script.submit({"comment": "kind=finetune", field: value})
    assert out.rc == SUCCESS
    assert "tres_per_node" not in out.writes
    assert out.writes["partition"] == "gpu"


def test_non_gpu_gres_gets_the_slice_added(example):
    _, script = example
    out = script.submit({"comment": "kind=inference", "tres_per_node": "gres:nvme:1"})
    assert out.writes["tres_per_node"] == "gres:nvme:1,gres:gpu:1g.20gb:1"
    out = script.submit({"comment": "kind=inference", "tres_per_node": ""})
    assert out.writes["tres_per_node"] == "gres:gpu:1g.20gb:1"


def test_own_partition_and_time_kept(example):
    _, script = example
    out = script.submit({"comment": "kind=training", "partition": "debug", "time_limit": 10})
    assert out.rc == SUCCESS
    assert "partition" not in out.writes and "time_limit" not in out.writes


@pytest.mark.parametrize("limit", [0, INFINITE])
def test_unlimited_time_is_a_users_choice(example, limit):
    _, script = example
    out = script.submit({"comment": "kind=training", "time_limit": limit})
    assert "time_limit" not in out.writes


def test_no_val_time_gets_the_kind_limit(example):
    _, script = example
    out = script.submit({"comment": "kind=training", "time_limit": NO_VAL})
    assert out.writes["time_limit"] == 4320


# --- authorisation -----------------------------------------------------------------------


def test_unauthorised_tier_rejected_with_allowed_tiers(example):
    _, script = example
    out = script.submit({"comment": "tier=P0", "account": "rnd", "user_name": "carol"})
    assert out.rc == ACCESS_DENIED
    assert out.user == [
        "slurmgpu: tier P0 is not allowed for user carol (account rnd); allowed tiers: P1, P2"
    ]
    assert "qos" not in out.writes
    out = script.submit({"qos": "p1", "account": "guests", "user_name": "dave"})
    assert out.rc == ACCESS_DENIED
    assert out.user[0].endswith("allowed tiers: P2")


def test_default_account_counts(example):
    _, script = example
    out = script.submit({"comment": "tier=P0", "default_account": "prod"})
    assert out.rc == SUCCESS
    out = script.submit({"comment": "tier=P0", "account": "rnd", "default_account": "prod"})
    assert out.rc == ACCESS_DENIED  # the job's own -A wins over the default account


def test_users_by_name_and_by_uid(users_policy):
    _, script = users_policy
    assert script.submit({"qos": "p0", "user_name": "alice"}).rc == SUCCESS
    # no user_name (e.g. a modify): the uid resolved at render time is enough
    assert script.submit({"qos": "p0"}, uid=1001).rc == SUCCESS
    assert script.submit({"qos": "p0"}, uid=0).rc == SUCCESS
    out = script.submit({"qos": "p0", "user_name": "bob"}, uid=1002)
    assert out.rc == ACCESS_DENIED
    assert out.user[0].endswith("allowed tiers: P1, P2")
    out = script.submit({"qos": "p0"}, uid=4242)
    assert out.user[0] == "slurmgpu: tier P0 is not allowed for user uid 4242; allowed tiers: P2"


def test_uid_counts_only_without_a_user_name(users_policy):
    # the submit uid is alice's, but the job's user name is bob's: bob is what is checked
    _, script = users_policy
    out = script.submit({"qos": "p0", "user_name": "bob"}, uid=1001)
    assert out.rc == ACCESS_DENIED
    assert "for user bob" in out.user[0]
    out = script.submit({"qos": "p0", "user_name": "mallory"}, uid=0)
    assert out.rc == ACCESS_DENIED
    assert script.submit({"qos": "p0", "user_name": ""}, uid=1001).rc == SUCCESS


@pytest.mark.parametrize("account", ["PROD", "Prod", "prod"])
def test_accounts_match_case_insensitively(example, account):
    _, script = example
    out = script.submit({"comment": "tier=P0", "account": account, "user_name": "carol"})
    assert out.rc == SUCCESS, out.user
    out = script.submit({"comment": "tier=P0", "default_account": account})
    assert out.rc == SUCCESS


def test_policy_accounts_in_capitals_match(lua_runtime):
    src = (
        (DATA / "policy-users.toml")
        .read_text()
        .replace('accounts = ["prod"]', 'accounts = ["PrOd"]')
    )
    script = LuaScript(render_job_submit(parse_policy(src, "caps.toml"), UIDS), lua_runtime)
    assert script.submit({"qos": "p0", "account": "prod", "user_name": "x"}).rc == SUCCESS
    assert script.submit({"qos": "p0", "account": "rnd", "user_name": "x"}).rc == ACCESS_DENIED


# --- preemptible tiers are requeueable -----------------------------------------------------


def test_preemptible_tier_is_made_requeueable(example):
    _, script = example
    out = script.submit({"comment": "tier=P2"})
    assert out.writes["requeue"] == 1
    out = script.submit({"comment": "tier=P2", "requeue": 1})
    assert out.rc == SUCCESS and out.writes["requeue"] == 1
    # P0 and P1 are never preempted: the job's own choice stands
    out = script.submit({"comment": "tier=P1", "account": "rnd", "requeue": 0})
    assert out.rc == SUCCESS and "requeue" not in out.writes


def test_no_requeue_in_a_preemptible_tier_is_refused(example):
    _, script = example
    out = script.submit({"comment": "tier=P2", "requeue": 0})
    assert out.rc == ERROR
    assert out.user == [
        "slurmgpu: tier P2 jobs are requeued when preempted: --no-requeue (Requeue=0) "
        "cannot be used in it"
    ]
    assert "qos" not in out.writes


def test_qos_names_are_case_insensitive(users_policy):
    _, script = users_policy
    out = script.submit({"qos": "p1-RND", "user_name": "bob"})
    assert out.rc == SUCCESS
    assert out.writes["qos"] == "P1-rnd"


# --- unknown and conflicting -------------------------------------------------------------


def test_unknown_tier_and_kind(example):
    _, script = example
    out = script.submit({"comment": "tier=P9"})
    assert out.rc == ERROR
    assert out.user == ["slurmgpu: unknown tier 'P9': use P0, P1, P2"]
    out = script.submit({"comment": "kind=render"})
    assert out.rc == ERROR
    assert out.user == ["slurmgpu: unknown job kind 'render': use inference, finetune, training"]


def test_conflicts(example):
    _, script = example
    out = script.submit({"qos": "p2", "comment": "tier=P1", "account": "rnd"})
    assert out.rc == ERROR
    assert "--qos=p2 is tier P2 but the comment says tier=P1" in out.user[0]
    out = script.submit({"comment": "tier=P1;tier=P2"})
    assert out.rc == ERROR
    assert "conflicting tier tags" in out.user[0]
    # the same tag twice is no conflict
    assert script.submit({"comment": "tier=P2, tier=P2"}).rc == SUCCESS


@pytest.mark.parametrize(
    "comment,tier",
    [
        ("tier=P1", "P1"),
        ("x tier=P1", "P1"),
        ("a=b;tier=P1", "P1"),
        ("a,tier=P1", "P1"),
        ("\ttier=P1", "P1"),
        ("xtier=P1", "P2"),
        ("a.tier=P1", "P2"),
        ("tier = P1", "P2"),
        ("TIER=P1", "P2"),
    ],
)
def test_tag_syntax(example, comment, tier):
    _, script = example
    out = script.submit({"comment": comment, "account": "rnd"})
    assert out.rc == SUCCESS
    assert out.writes["admin_comment"] == f"slurmgpu tier={tier}"


# --- never breaks, never accepts unrouted -----------------------------------------------


def test_runtime_error_rejects_and_logs(example):
    _, script = example
    out = script.submit_exploding()
    assert out.rc == ERROR
    assert len(out.error) == 1 and "internal error, job refused" in out.error[0]
    assert "boom reading" in out.error[0]
    assert out.user and "it was not submitted" in out.user[0]


def test_modify_only_rechecks_tier_fields(example):
    _, script = example
    rec = {"comment": "tier=P2", "account": "rnd", "user_id": 1000}
    out = script.modify({"time_limit": 5}, rec)  # e.g. scontrol update StartTime=now / hold
    assert out.rc == SUCCESS and out.writes == {}
    out = script.modify({"qos": "p0"}, rec)
    assert out.rc == ACCESS_DENIED
    assert out.user == []  # 22.05 discards log_user in job_modify: the reason is logged
    assert any("tier P0 is not allowed" in m for m in out.info)
    out = script.modify({"qos": "p1"}, rec)
    assert out.rc == SUCCESS
    assert out.writes == {"qos": "p1", "admin_comment": "slurmgpu tier=P1", "comment": "tier=P1"}
    out = script.modify({"account": "prod"}, {**rec, "comment": "tier=P0"})
    # the account changes, the job stays in its current tier (P2); the old tag is not re-read
    assert out.rc == SUCCESS and out.writes["qos"] == "p2"


# --- modify: no tier escape, updates an ordinary user may make ------------------------------

OWNER = 1000
P2_JOB = {"comment": "exp tier=P2", "account": "rnd", "user_id": OWNER, "qos": "p2"}
P1_JOB = {"comment": "tier=P1 kind=finetune", "account": "rnd", "user_id": OWNER, "qos": "p1"}


@pytest.mark.parametrize("qos", ["", "normal", "NoSuchQos"])
def test_empty_or_unknown_qos_stays_in_the_tiers(example, qos):
    _, script = example
    out = script.modify({"qos": qos}, P2_JOB, uid=OWNER)
    assert out.rc == SUCCESS
    assert out.writes["qos"] == "p2"  # the default tier's QOS, never `normal`
    # a P1 job reset by QOS= lands in the default tier, recorded in its comment
    out = script.modify({"qos": qos}, P1_JOB, uid=OWNER)
    assert out.rc == SUCCESS
    assert out.writes["qos"] == "p2"
    assert out.writes["comment"] == "tier=P2 kind=finetune"


def test_update_by_an_ordinary_user_never_writes_admin_comment(example):
    _, script = example
    for fields in ({"qos": "p2"}, {"qos": "p1"}, {"comment": "new text"}, {"account": "prod"}):
        out = script.modify(fields, P1_JOB, uid=OWNER)
        assert out.rc == SUCCESS, fields
        assert "admin_comment" not in out.writes, fields
    # root's updates still refresh the record
    out = script.modify({"qos": "p2"}, P1_JOB, uid=0)
    assert out.writes["admin_comment"] == "slurmgpu tier=P2 kind=finetune"
    assert out.writes["comment"] == "tier=P2 kind=finetune"


def test_owner_moves_own_job_to_a_lower_tier(example):
    _, script = example
    out = script.modify({"qos": "p2"}, P1_JOB, uid=OWNER)
    assert out.rc == SUCCESS
    assert out.writes == {"qos": "p2", "requeue": 1, "comment": "tier=P2 kind=finetune"}
    # by a tier= tag in a new comment, too
    out = script.modify({"comment": "moved tier=P2"}, P1_JOB, uid=OWNER)
    assert out.rc == SUCCESS
    assert out.writes["qos"] == "p2" and out.writes["comment"] == "moved tier=P2"


def test_owner_cannot_raise_to_a_tier_they_may_not_use(example):
    _, script = example
    for fields in ({"qos": "p0"}, {"comment": "tier=P0"}, {"qos": "P0"}):
        out = script.modify(fields, P2_JOB, uid=OWNER)
        assert out.rc == ACCESS_DENIED, fields
        assert out.writes == {}


def test_comment_update_without_tag_keeps_the_tier(example):
    _, script = example
    out = script.modify({"comment": "just words"}, P1_JOB, uid=OWNER)
    assert out.rc == SUCCESS
    assert out.writes == {"qos": "p1"}
    out = script.modify({"comment": ""}, P1_JOB, uid=OWNER)
    assert out.rc == SUCCESS and out.writes == {"qos": "p1"}


def test_requeue_off_refused_in_a_preemptible_tier(example):
    _, script = example
    out = script.modify({"requeue": 0}, P2_JOB, uid=OWNER)
    assert out.rc == ERROR
    assert any("--no-requeue (Requeue=0)" in m for m in out.info)
    assert script.modify({"requeue": 0}, P1_JOB, uid=OWNER).rc == SUCCESS
    # moving a P1 job that opted out of requeueing into P2 makes it requeueable
    out = script.modify({"qos": "p2"}, P1_JOB, uid=OWNER)
    assert out.writes["requeue"] == 1


def test_modify_checks_the_owner_not_the_modifier(users_policy):
    _, script = users_policy
    rec = {"comment": "", "account": "guests", "user_id": 1002, "qos": "p2"}
    # root (uid 0, a P0 user) cannot put bob's job into P0
    out = script.modify({"qos": "p0"}, rec, uid=0)
    assert out.rc == ACCESS_DENIED
    rec = {**rec, "user_id": 1001}
    assert script.modify({"qos": "p0"}, rec, uid=0).rc == SUCCESS
    # the owner's name from job_rec counts first
    rec = {**rec, "user_id": 4242, "user_name": "alice"}
    assert script.modify({"qos": "p0"}, rec, uid=4242).rc == SUCCESS


@pytest.mark.parametrize(
    "comment,expected",
    [
        (None, "tier=P2"),
        ("", "tier=P2"),
        ("run 7", "run 7 tier=P2"),
        ("tier=P1", "tier=P2"),
        ("a tier=P1;kind=finetune,tier=P1", "a tier=P2;kind=finetune,tier=P2"),
        ("xtier=P1", "xtier=P1 tier=P2"),
    ],
)
def test_retag(example, comment, expected):
    _, script = example
    rec = {**P1_JOB, "comment": comment}
    if comment is None:
        del rec["comment"]
    out = script.modify({"qos": "p2"}, rec, uid=OWNER)
    assert out.rc == SUCCESS
    assert out.writes["comment"] == expected


# --- hostile site strings -----------------------------------------------------------------

HOSTILE = [
    '")os.exit()--',
    "]]os.exit()--[[",
    "a\nb",
    "back\\slash",
    "quote'single",
    "\\",
    "tab\there".replace("\t", "\\t"),
    "ünïcödé",
    "%s%d%%",
]


def hostile_policy(value: str) -> str:
    def q(s: str) -> str:
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'

    return f"""
default_tier = "P2"
[partitions.{q(value)}]
description = {q(value)}
[tiers.P0]
priority = 10
description = {q(value)}
accounts = [{q(value)}]
users = [{q(value)}]
preempts = ["P2"]
[tiers.P2]
priority = 1
description = {q(value)}
[kinds.inference]
slice = "shard:1"
partition = {q(value)}
description = {q(value)}
shards_per_gpu = 4
""".replace("shards_per_gpu = 4\n", "").replace(
        'default_tier = "P2"', 'default_tier = "P2"\nshards_per_gpu = 4'
    )


@pytest.mark.parametrize("value", [v for v in HOSTILE if not re.search(r"[\s,=]", v)])
def test_hostile_strings_round_trip(lua_runtime, value):
    policy = parse_policy(hostile_policy(value), "hostile.toml")
    text = render_job_submit(policy, {value: 4321})
    script = LuaScript(text, lua_runtime)  # it loads: nothing closed the string early
    out = script.submit({"comment": "tier=P0 kind=inference", "account": value})
    assert out.rc == SUCCESS, out.user
    assert out.writes["partition"] == value  # the exact bytes came through
    assert script.submit({"comment": "tier=P0", "user_name": value}).rc == SUCCESS
    assert script.submit({"comment": "tier=P0"}, uid=4321).rc == SUCCESS
    assert script.submit({"comment": "tier=P0", "user_name": "x"}, uid=1).rc == ACCESS_DENIED


@pytest.mark.parametrize("value", [v for v in HOSTILE if re.search(r"[\s,=]", v)])
def test_hostile_names_with_separators_are_refused_by_the_loader(value):
    from slurmgpu.errors import PolicyError

    with pytest.raises(PolicyError, match=r"must not contain spaces|control character U\+000A"):
        parse_policy(hostile_policy(value), "hostile.toml")


def test_hostile_description_only(lua_runtime):
    """Free text (descriptions, the policy path) may hold anything, newlines included."""
    for value in HOSTILE:
        lit = "'" * 3  # a TOML literal string: no escapes to get wrong
        src = f'default_tier = "P2"\n[tiers.P2]\npriority = 1\ndescription = {lit}{value}{lit}\n'
        policy = parse_policy(src, f"evil\n{value}.toml")
        script = LuaScript(render_job_submit(policy), lua_runtime)
        assert script.lua.eval("1") == 1
        assert script.submit({}).rc == SUCCESS


# --- fuzz: thousands of random job descriptions, no Lua error escapes ---------------------

_TAG = re.compile(TAG_PATTERN, re.ASCII)


def oracle(policy, fields: dict, uid, uid_names: dict[int, str]):
    """The documented rules in Python: (rc, writes)."""
    comment = fields.get("comment") or ""
    tags: dict[str, str] = {}
    for m in _TAG.finditer(comment):
        if m.group(1) in tags and tags[m.group(1)] != m.group(2):
            return ERROR, {}
        tags[m.group(1)] = m.group(2)
    if "tier" in tags and policy.tier(tags["tier"]) is None:
        return ERROR, {}
    qos_tier = policy.tier_for_qos(fields.get("qos") or None)
    if qos_tier and "tier" in tags and tags["tier"] != qos_tier.name:
        return ERROR, {}
    tier = qos_tier or policy.tier(tags.get("tier", "")) or policy.tier(policy.default_tier)
    user = fields.get("user_name") or uid_names.get(uid)
    account = fields.get("account") or fields.get("default_account") or None
    uids = {UIDS[u] for u in tier.users if u in UIDS}
    by_uid = user is None and uid in uids  # the uid only when there is no user name
    if not (tier.allows(user, account) or by_uid):
        return ACCESS_DENIED, {}
    kind_name = tags.get("kind") or policy.default_kind
    kind = policy.kind(kind_name) if kind_name else None
    if kind_name and kind is None:
        return ERROR, {}
    writes: dict = {}
    if policy.requeued_when_preempted(tier):
        if fields.get("requeue") == 0:
            return ERROR, {}
        writes["requeue"] = 1
    writes["qos"] = tier.qos
    if kind:
        tres = [
            fields.get(f) or ""
            for f in ("tres_per_node", "tres_per_job", "tres_per_socket", "tres_per_task")
        ]
        if not any("gpu" in t or "shard" in t for t in tres if isinstance(t, str)):
            own = fields.get("tres_per_node")
            slice_tres = tres_per_node(kind.slice.gres)
            writes["tres_per_node"] = f"{own},{slice_tres}" if own else slice_tres
        if not fields.get("partition") and kind.partition:
            writes["partition"] = kind.partition
        tl = fields.get("time_limit", NO_VAL)
        if tl == NO_VAL and kind.time_limit_min:
            writes["time_limit"] = kind.time_limit_min
    writes["admin_comment"] = f"slurmgpu tier={tier.name}" + (f" kind={kind.name}" if kind else "")
    return SUCCESS, writes


def random_job(rng: random.Random) -> tuple[dict, int | None]:
    words = [
        "tier",
        "kind",
        "P0",
        "P1",
        "P2",
        "P9",
        "p0",
        "inference",
        "finetune",
        "training",
        "bogus",
        "=",
        ";",
        ",",
        " ",
        "\t",
        "\n",
        "x",
        "ü",
        '"',
        "]]",
        "%",
        "..",
        "-",
        "_",
    ]
    fields: dict = {}
    if rng.random() < 0.8:
        parts = []
        for _ in range(rng.randint(0, 6)):
            r = rng.random()
            if r < 0.4:
                parts.append(
                    f"{rng.choice(['tier', 'kind', 'Tier', 'xtier'])}={rng.choice(words[2:10])}"
                )
            else:
                parts.append("".join(rng.choice(words) for _ in range(rng.randint(1, 4))))
        fields["comment"] = rng.choice([" ", ";", ",", "", "\t"]).join(parts)
    for name, choices in {
        "qos": ["p0", "P1-rnd", "p1-rnd", "p2", "normal", "", "P0", "high"],
        "account": ["prod", "rnd", "guests", "", "PROD", "Rnd"],
        "default_account": ["prod", "rnd", "guests"],
        "user_name": ["alice", "bob", "root", "carol", ""],
        "partition": ["gpu", "short", "debug", ""],
        "tres_per_node": ["gres:gpu:8", "gres:shard:2", "gres:gpu:h100:1", "gres:nvme:1", ""],
        "tres_per_job": ["gres:gpu:2", ""],
        "tres_per_task": ["gres:gpu:1", "cpu:2"],
    }.items():
        if rng.random() < 0.4:
            fields[name] = rng.choice(choices)
    if rng.random() < 0.5:
        fields["time_limit"] = rng.choice([NO_VAL, INFINITE, 0, 1, 60, 100000])
    if rng.random() < 0.2:
        fields["requeue"] = rng.choice([0, 1])
    uid = rng.choice([0, 1000, 1001, 1002, 4242, None])
    return fields, uid


def test_fuzz_random_jobs_match_the_rules(lua_runtime):
    policy = load_policy(DATA / "policy-users.toml")
    script = LuaScript(render_job_submit(policy, UIDS), lua_runtime)
    uid_names = {v: k for k, v in UIDS.items()}
    rng = random.Random(20261202)
    seen = {SUCCESS: 0, ERROR: 0, ACCESS_DENIED: 0}
    for _ in range(3000):
        fields, uid = random_job(rng)
        out = script.submit(fields, uid)
        assert out.error == [], (fields, out.error)  # no Lua error, caught or not
        expected_rc, expected_writes = oracle(policy, fields, uid, uid_names)
        assert (out.rc, out.writes) == (expected_rc, expected_writes), fields
        if out.rc != SUCCESS:
            assert len(out.user) == 1 and out.user[0].startswith("slurmgpu: ")
        seen[out.rc] += 1
    assert all(n > 100 for n in seen.values()), seen  # every path was exercised


def test_fuzz_modify(lua_runtime):
    policy = load_policy(DATA / "policy-users.toml")
    script = LuaScript(render_job_submit(policy, UIDS), lua_runtime)
    rng = random.Random(7)
    for _ in range(1000):
        fields, uid = random_job(rng)
        rec, _ = random_job(rng)
        rec["user_id"] = rng.choice([0, 1000, 1001, 1002])
        rec["qos"] = rng.choice(["p0", "P1-rnd", "p2", "normal", ""])
        if rng.random() < 0.3:
            fields["qos"] = rng.choice(["", "normal", "p0", "p2"])
        out = script.modify(fields, rec, uid)
        assert out.error == [], (fields, rec, out.error)
        assert out.rc in (SUCCESS, ERROR, ACCESS_DENIED)
        if out.rc != SUCCESS:
            assert out.writes == {}
            continue
        # properties of every update: a QOS change always lands on a tier's QOS; only root's
        # updates write AdminComment; a tier change by anyone else is tagged in the comment
        if "qos" in fields or "qos" in out.writes:
            assert policy.tier_for_qos(out.writes.get("qos")) is not None, (fields, out.writes)
        assert ("admin_comment" in out.writes) == (uid == 0 and "qos" in out.writes)
        if "comment" in out.writes:
            tier = policy.tier_for_qos(out.writes["qos"])
            tiers = [v for k, v in _TAG.findall(out.writes["comment"]) if k == "tier"]
            assert tiers and set(tiers) == {tier.name}, (fields, rec, out.writes)


def test_account_change_cannot_carry_a_job_out_of_its_tier_rules(example):
    _, script = example
    p0_job = {"comment": "tier=P0", "account": "prod", "user_id": OWNER, "qos": "p0"}
    # P0 admits only the prod account: moving the job to rnd is refused, whoever asks
    for uid in (OWNER, 0):
        out = script.modify({"account": "rnd"}, p0_job, uid=uid)
        assert out.rc == ACCESS_DENIED and out.writes == {}
    assert script.modify({"account": "PROD"}, p0_job, uid=OWNER).rc == SUCCESS
