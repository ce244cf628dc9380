"""The QOS plan: minimal sacctmgr commands, idempotence, pruning, associations, settings."""

from __future__ import annotations

from slurmgpu.model.accounts import Association, QosRecord
from slurmgpu.render.qos import (
    build_plan,
    config_warnings,
    desired_qos,
    format_command,
    plan_associations,
    plan_qos,
    required_settings,
)
from slurmgpu.sources.policy_file import load_policy
from slurmgpu.sources.sacctmgr import parse_assoc_lines, parse_duration_s, parse_qos_lines
from tests.unit.tiers.lua_env import EXAMPLE

POLICY = load_policy(EXAMPLE)
NORMAL = QosRecord("normal", priority=0)

GOOD_CONFIG = {
    "PreemptType": "preempt/qos",
    "PreemptMode": "REQUEUE",
    "PriorityType": "priority/multifactor",
    "PriorityWeightQOS": "10000",
    "JobSubmitPlugins": "lua",
    "AccountingStorageEnforce": "associations,limits,qos",
    "JobRequeue": "1",
    "KillWait": "120 sec",
}


def test_desired_qos_puts_grace_and_mode_on_the_preempted_qos():
    by_name = {q.name: q for q in desired_qos(POLICY)}
    assert [q.name for q in desired_qos(POLICY)] == ["p2", "p0", "p1"]  # p2 before p0
    assert by_name["p0"] == QosRecord(
        "p0", 1000, ("p2",), "cluster", 0, "gres/gpu=8", "", "slurmgpu tier p0"
    )
    # requeued: GraceTime 0, the grace is KillWait (see slurmgpu.render.qos)
    assert by_name["p2"].grace_time_s == 0 and by_name["p2"].preempt_mode == "requeue"
    assert by_name["p1"].preempt == () and by_name["p1"].grace_time_s == 0


def test_fresh_cluster_adds_each_qos_in_order():
    cmds, notes = plan_qos(POLICY, [NORMAL])
    assert notes == []
    assert [format_command(c) for c in cmds] == [
        "sacctmgr -i add qos p2 Priority=100 PreemptMode=requeue 'Description=slurmgpu tier p2'",
        "sacctmgr -i add qos p0 Priority=1000 Preempt=p2 MaxTRESPerUser=gres/gpu=8 "
        "'Description=slurmgpu tier p0'",
        "sacctmgr -i add qos p1 Priority=500 'Description=slurmgpu tier p1'",
    ]


def test_matching_state_is_nothing_to_do():
    from dataclasses import replace

    # slurmdbd may hand the description back in another case: still ours, still equal
    live = [NORMAL, *(replace(q, description=q.description.upper()) for q in desired_qos(POLICY))]
    assocs = [Association("c", a, None, ("p1", "p2")) for a in ("prod", "rnd")]
    assocs[0] = Association("c", "prod", None, ("p0", "p1", "p2"))
    plan = build_plan(POLICY, live, assocs, GOOD_CONFIG)
    assert plan.nothing_to_do and plan.warnings == () and plan.notes == ()


def test_accounts_and_users_slurmdbd_does_not_know_are_warned_about():
    """#33: a policy account (or user) with no association passed silently: a typo there
    leaves a tier unreachable. The plan warns, naming the tier and the cluster."""
    from dataclasses import replace

    policy = replace(POLICY, tiers=(replace(POLICY.tiers[0], users=("zed",)), *POLICY.tiers[1:]))
    assocs = [Association("c", "prod", None), Association("c", "prod", "amy")]
    plan = build_plan(policy, desired_qos(policy), assocs, GOOD_CONFIG)
    assert plan.warnings == (
        "tier P0 names user zed, who has no association in slurmdbd on cluster c: the user "
        "cannot run jobs in any tier yet (a typo, or `sacctmgr add user zed account=...` first)",
        "tier P1 names account rnd, which slurmdbd does not know on cluster c: no job "
        "reaches the tier through it (a typo, or `sacctmgr add account rnd` first)",
    )


def test_modify_only_what_differs():
    live = {q.name: q for q in desired_qos(POLICY)}
    from dataclasses import replace

    live["p0"] = replace(live["p0"], priority=7, preempt=("p1", "p2"), max_tres_per_user="")
    live["p2"] = replace(live["p2"], grace_time_s=5, max_tres_per_account="gres/gpu=4")
    cmds, _ = plan_qos(POLICY, live.values())
    assert [format_command(c) for c in cmds] == [
        "sacctmgr -i modify qos where name=p2 set GraceTime=0 MaxTRESPerAccount=gres/gpu=-1",
        "sacctmgr -i modify qos where name=p0 set Priority=1000 Preempt=p2 "
        "MaxTRESPerUser=gres/gpu=8",
    ]


def test_stale_qos_deleted_only_when_ours_and_unused_or_pruned():
    live = [NORMAL, *desired_qos(POLICY), QosRecord("p3", description="slurmgpu tier P3")]
    live.append(QosRecord("high", description="site QOS"))
    cmds, notes = plan_qos(POLICY, live, in_use=["p3"])
    assert cmds == [] and notes[0].startswith("QOS p3 (slurmgpu tier P3) is no longer")
    cmds, _ = plan_qos(POLICY, live, in_use=["p3"], prune=True)
    assert cmds == [("delete", "qos", "where", "name=p3")]
    cmds, _ = plan_qos(POLICY, live, in_use=[])
    assert cmds == [("delete", "qos", "where", "name=p3")]  # "high" is never touched


def test_associations_get_exactly_their_tiers():
    assocs = [
        Association("c", "root", None, ("normal",)),
        Association("c", "root", "root", ("normal",)),
        Association("c", "prod", "alice", ("normal", "p2")),
        Association("c", "rnd", "bob", ("normal", "p0", "p1", "p2")),
    ]
    cmds = [format_command(c) for c in plan_associations(POLICY, assocs)]
    assert cmds == [
        "sacctmgr -i modify account where name=root cluster=c set qos+=p2",
        "sacctmgr -i modify user where name=alice account=prod cluster=c set qos+=p0,p1",
        "sacctmgr -i modify user where name=bob account=rnd cluster=c set qos-=p0",
        "sacctmgr -i modify user where name=root account=root cluster=c set qos+=p2",
    ]
    done = [
        Association("c", "root", None, ("normal", "p2")),
        Association("c", "prod", "alice", ("normal", "p0", "p1", "p2")),
    ]
    assert plan_associations(POLICY, done) == []


def test_settings_and_warnings():
    keys = [f"{s.key}={s.value}" for s in required_settings(POLICY)]
    assert keys == [
        "PreemptType=preempt/qos",
        "PreemptMode=REQUEUE",
        "PriorityType=priority/multifactor",
        "PriorityWeightQOS=10000",
        "JobSubmitPlugins=lua",
        "AccountingStorageEnforce=associations,limits,qos",
        "JobRequeue=1",
        "KillWait=120",
    ]
    live = {**GOOD_CONFIG, "PriorityWeightQOS": "0", "JobSubmitPlugins": "(null)"}
    del live["JobRequeue"]
    warnings = config_warnings(required_settings(POLICY), live)
    assert len(warnings) == 3
    assert warnings[0].startswith(
        "slurm.conf has PriorityWeightQOS=0, the policy needs PriorityWeightQOS=10000"
    )
    assert "JobRequeue=(unset)" in warnings[2]
    assert config_warnings(required_settings(POLICY), GOOD_CONFIG) == []


def test_parse_sacctmgr_lines():
    text = (
        "normal|0|||00:00:00|||Normal QOS default\n"
        "p0|1000|p2|cluster|00:00:00|gres/gpu=8||slurmgpu tier P0\n"
        "p2|100||requeue|00:02:00|||slurmgpu tier P2|with a bar\n"
    )
    records = parse_qos_lines(text)
    assert records[0] == QosRecord("normal", 0, (), "cluster", 0, "", "", "Normal QOS default")
    assert records[1].preempt == ("p2",) and records[1].max_tres_per_user == "gres/gpu=8"
    assert (
        records[2].grace_time_s == 120 and records[2].description == "slurmgpu tier P2|with a bar"
    )
    assert parse_duration_s("1-00:00:10") == 86410 and parse_duration_s("05:00") == 300
    assocs = parse_assoc_lines("c|root|||\nc|root|root|normal,p2\n".replace("|||\n", "||normal\n"))
    assert assocs == [
        Association("c", "root", None, ("normal",)),
        Association("c", "root", "root", ("normal", "p2")),
    ]


def test_requeue_grace_is_killwait_and_cancel_grace_is_gracetime():
    from slurmgpu.sources.policy_file import parse_policy

    src = EXAMPLE.read_text()
    settings = {s.key: s for s in required_settings(POLICY)}
    assert settings["KillWait"].value == "120"
    assert settings["KillWait"].agrees("120 sec") and settings["KillWait"].agrees("300 sec")
    assert not settings["KillWait"].agrees("30 sec") and not settings["KillWait"].agrees(None)
    warnings = config_warnings(required_settings(POLICY), {**GOOD_CONFIG, "KillWait": "30 sec"})
    assert warnings == [
        "slurm.conf has KillWait=30 sec, the policy needs KillWait=120 (at least: the grace a "
        "preempted, requeued job gets between SIGTERM and SIGKILL (its QOS has GraceTime=0); "
        "also what a job gets at its time limit)"
    ]
    cancel = parse_policy(src.replace('preempt_mode = "requeue"', 'preempt_mode = "cancel"'))
    by_name = {q.name: q for q in desired_qos(cancel)}
    assert by_name["p2"].grace_time_s == 120 and by_name["p2"].preempt_mode == "cancel"
    assert "KillWait" not in {s.key for s in required_settings(cancel)}


def test_policy_accounts_in_capitals_match_slurms_lowercase_associations():
    from slurmgpu.sources.policy_file import parse_policy

    caps = parse_policy(EXAMPLE.read_text().replace('accounts = ["prod"]', 'accounts = ["PROD"]'))
    done = [Association("c", "prod", None, ("normal", "p0", "p1", "p2"))]
    assert plan_associations(caps, done) == []
