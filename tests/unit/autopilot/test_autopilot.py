"""`slurmgpu autopilot`: each guardrail refusing, the propose/approve/apply cycle, the
verification and rollback decision, and that --dry-run and propose change nothing live.

The pass runs for real (`autopilot.run.autopilot`, the change log, the proposal files, the
Prometheus textfile); the world it reads and changes is `FakeWorld` (partitions, nodes, jobs
per node; `apply`/`undo` record the call and change the fake partitions), the history is a
small trace built here, and advise's plan is given (the replay itself has its own tests,
and the integration test runs the whole pass with the real advise on a real cluster).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from slurmgpu.autopilot import AutopilotOptions, approve, autopilot, guardrails
from slurmgpu.autopilot import run as run_mod
from slurmgpu.autopilot.records import ChangeRecord, Observed, StateDir, read_changes
from slurmgpu.autopilot.verify import judge, observe
from slurmgpu.errors import PolicyError, UsageError
from slurmgpu.model.policy import AutopilotPolicy
from slurmgpu.model.rebalance import Move, NodeState, Partition
from slurmgpu.sources.policy_file import parse_policy
from slurmgpu.sources.slurm_node_control import NodeJob

NOW = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.UTC)
POLICY = """
default_tier = "P2"
[tiers.P0]
qos = "p0"
priority = 1000
preempts = ["P2"]
[tiers.P1]
qos = "p1"
priority = 500
preempts = ["P2"]
[tiers.P2]
qos = "p2"
priority = 100
[autopilot]
mode = "apply"
max_nodes_per_pass = 1
max_nodes_per_day = 2
cooldown_h = 6
kill_switch = "{switch}"
min_gain = 0.05
verify_after_min = 30
rollback_tolerance = 0.25
rollback_slack_s = 60
"""


@dataclasses.dataclass(frozen=True)
class FakeAdvise:
    replay: object = dataclasses.field(default_factory=lambda: SimpleNamespace(env=None))
    candidates: tuple[str, ...] | None = None


def policy(tmp_path: Path, **over: object):
    pol = parse_policy(POLICY.format(switch=tmp_path / "disable"))
    return dataclasses.replace(pol, autopilot=dataclasses.replace(pol.autopilot, **over))


class FakeWorld:
    def __init__(self, jobs: dict[str, list[NodeJob]] | None = None) -> None:
        self.parts = {"train": ["gpu01", "gpu02"], "infer": ["gpu03"]}
        self.jobs = jobs or {}
        self.calls: list[str] = []

    def partitions(self):
        return [Partition(k, tuple(v)) for k, v in self.parts.items()]

    def nodes(self):
        names = sorted(n for v in self.parts.values() for n in v)
        return [
            NodeState(
                n,
                tuple(p for p, v in self.parts.items() if n in v),
                not self.jobs.get(n),
                8,
                "h100",
                900 if n == "gpu02" else 600,
            )
            for n in names
        ]

    def jobs_on(self, node):
        return self.jobs.get(node, [])

    def sacct_text(self, since, until):
        raise AssertionError("the tests give the history")

    def apply(self, plan, log):
        self.calls.append(f"apply {[m.node for m in plan.moves]}")
        for k, v in plan.after.items():
            self.parts[k] = list(v)
        self.undo_to = dict(plan.before)
        return "2026-03-02T12:00:00"

    def undo(self, log):
        self.calls.append("undo")
        for k, v in self.undo_to.items():
            self.parts[k] = list(v)
        return SimpleNamespace(restored={k: ",".join(v) for k, v in self.undo_to.items()})

    def emit(self, plan, directory):
        raise AssertionError("no --partitions-conf in these tests")


def trace(jobs: list[tuple[str, str, float, float]]):
    """(partition, tier, submit, wait) per job, absolute epoch seconds."""
    parts = sorted({j[0] for j in jobs})
    tiers = sorted({j[1] for j in jobs})
    submit = np.array([j[2] for j in jobs])
    epoch = int(submit.min())
    return SimpleNamespace(
        epoch_s=epoch,
        submit_s=submit - epoch,
        recorded_start_s=submit - epoch + np.array([j[3] for j in jobs]),
        recorded_end_s=submit - epoch + np.array([j[3] for j in jobs]) + 600,
        gpu_equiv=np.ones(len(jobs)),
        recorded_preemptions=np.zeros(len(jobs), int),
        partition=np.array([parts.index(j[0]) for j in jobs]),
        partitions=parts,
        tier=np.array([tiers.index(j[1]) for j in jobs]),
        tier_names=tiers,
    )


def effect(part: str, before: float, after: float, low: float, high: float):
    return SimpleNamespace(
        partition=part,
        before=SimpleNamespace(mean=before),
        after=SimpleNamespace(mean=after),
        mean_wait_change_s=SimpleNamespace(low=low, high=high),
    )


def advice(changes=("move:train:infer:8",), score=-0.4, high=-600.0, violations=()):
    plan = SimpleNamespace(
        changes=changes,
        score=score,
        perturbed_violations=violations,
        by_partition=(
            effect("infer", 900, 300, -700, high),
            effect("train", 10, 40, 10, 20),
            effect("spare", None, None, None, None),
        ),
    )
    return SimpleNamespace(plan=plan, notes=(), fidelity=None)


@pytest.fixture
def setup(tmp_path, monkeypatch):
    """(run a pass, the world, the state dir); `history` and `plan` can be replaced."""
    state = {"history": [("infer", "P2", NOW.timestamp() - 7200, 900)] * 3, "plan": advice()}
    monkeypatch.setattr(
        run_mod, "_history", lambda p: (p.opts.advise.replay, trace(state["history"]))
    )
    monkeypatch.setattr(run_mod, "_move_candidates", lambda trace, ropts: ("move:train:infer:8",))
    import slurmgpu.advice.optimize as optimize

    monkeypatch.setattr(optimize, "advise_trace", lambda trace, opts: state["plan"])
    world = FakeWorld()

    def run(now=NOW, pol=None, **kw):
        opts = AutopilotOptions(
            advise=FakeAdvise(),
            policy=pol or policy(tmp_path),
            state_dir=tmp_path / "state",
            sacct_files=("given",),
            forecast=False,
            **kw,
        )
        return autopilot(opts, world=world, now=now)

    return run, world, StateDir(tmp_path / "state"), state


# -- the policy table ----------------------------------------------------------------------


def test_the_autopilot_table_is_typed_with_file_line_errors() -> None:
    pol = parse_policy(POLICY.format(switch="/run/x"))
    assert pol.autopilot.max_nodes_per_day == 2 and pol.autopilot.mode == "apply"
    bad = POLICY.format(switch="relative") + 'allowed_hours = [8]\nprotect_tiers = ["P9"]\n'
    bad = bad.replace('mode = "apply"', 'mode = "sometimes"').replace(
        "min_gain = 0.05", "min_gain = -1"
    )
    with pytest.raises(PolicyError) as err:
        parse_policy(bad, "site.toml")
    text = str(err.value)
    for needle in (
        "site.toml:15: autopilot.mode",
        "autopilot.kill_switch",
        "absolute path",
        "autopilot.allowed_hours",
        "unknown tier 'P9'",
        "autopilot.min_gain",
    ):
        assert needle in text, text
    with pytest.raises(PolicyError, match="did you mean 'cooldown_h'"):
        parse_policy(POLICY.format(switch="/x").replace("cooldown_h", "cooldown"))


# -- each guardrail refusing ---------------------------------------------------------------


def test_the_kill_switch_stops_the_pass_before_anything(setup, tmp_path) -> None:
    run, world, state, _ = setup
    (tmp_path / "disable").write_text("")
    res = run()
    assert res.status == "killed" and "kill switch" in res.refusals[0]
    assert world.calls == [] and not state.changes.exists()


def test_outside_the_allowed_hours_nothing_moves(setup, tmp_path) -> None:
    run, world, state, _ = setup
    hour = NOW.astimezone().hour
    res = run(pol=policy(tmp_path, allowed_hours=((hour + 1) % 24, (hour + 2) % 24)))
    assert res.status == "held" and "outside the allowed hours" in res.refusals[0]
    assert world.calls == [] and read_changes(state)[-1].action == "hold"


@pytest.mark.parametrize(
    ("plan", "needle"),
    [
        (advice(score=-0.01), "below the threshold 0.050"),
        (advice(high=+50.0), "within its uncertainty"),
        (advice(violations=("P0 p95 wait",)), "a perturbed replay breaks a limit"),
        (advice(changes=()), "proves no change"),
        (advice(changes=("move:train:infer:8", "carve:infer:4:1g.10gb=7")), "node moves only"),
    ],
)
def test_a_gain_that_does_not_beat_threshold_and_uncertainty_is_refused(setup, plan, needle):
    run, world, _, state = setup
    state["plan"] = plan
    res = run()
    assert res.status == "held" and needle in " ".join(res.refusals), res.refusals
    assert world.calls == []


def test_a_node_running_p0_or_non_preemptible_work_is_never_touched(setup, tmp_path) -> None:
    run, world, _, _ = setup
    world.jobs = {"gpu02": [NodeJob("11", "p0")], "gpu01": [NodeJob("12", "mystery")]}
    res = run()
    assert res.status == "held" and world.calls == []
    text = " ".join(res.refusals)
    assert "gpu02 runs job 11 (QOS p0)" in text and "gpu01 runs job 12 (QOS mystery)" in text
    # a P2 (preemptible) job does not pin its node: the move goes ahead
    world.jobs = {"gpu02": [NodeJob("13", "p2")]}
    assert run().status == "applied"
    # the top tier and a tier no one preempts are protected; protect_tiers adds more
    pol = policy(tmp_path, protect_tiers=("P2",))
    assert guardrails.protected_jobs("n", [NodeJob("1", "p2")], pol, pol.autopilot)


def test_cooldown_and_the_daily_and_per_pass_limits(setup, tmp_path) -> None:
    run, world, state, plan = setup
    assert run().status == "applied" and world.calls == ["apply ['gpu02']"]
    later = NOW + dt.timedelta(hours=1)
    # verified (kept) first: infer's later jobs wait less
    plan["history"] = [
        ("infer", "P2", NOW.timestamp() - 7200, 900),
        ("infer", "P2", NOW.timestamp() + 600, 30),
    ]
    plan["plan"] = advice(changes=("move:infer:train:16",))
    world.parts["infer"].append("gpu05")
    res = run(now=later)
    assert res.status == "held" and "cooldown 6 h" in " ".join(res.refusals), res.refusals
    assert "only 16 of 16" not in " ".join(res.refusals)
    assert [r.action for r in read_changes(state)] == ["apply", "verify", "hold"]
    # two nodes in one pass: more than max_nodes_per_pass 1
    plan["plan"] = advice(changes=("move:train:infer:16",))
    world.parts = {"train": ["gpu01", "gpu02", "gpu04"], "infer": ["gpu03"]}
    res = run(now=later + dt.timedelta(hours=7))
    assert "max_nodes_per_pass 1" in " ".join(res.refusals), res.refusals
    records = [ChangeRecord(NOW.isoformat(), "apply", id="a", moves=(Move("x", "a", "b", ""),) * 2)]
    assert "max_nodes_per_day 2" in guardrails.budget(
        AutopilotPolicy(max_nodes_per_day=2), 1, guardrails.nodes_today(records, NOW)
    )


# -- propose, approve, apply ---------------------------------------------------------------


def test_propose_writes_the_plan_and_changes_nothing_live_then_approve_applies(setup) -> None:
    run, world, state, _ = setup
    res = run(mode="propose")
    assert res.status == "proposed" and world.calls == []
    where = state.proposal(res.change_id)
    assert (where / "steps.txt").read_text().splitlines() == [
        "scontrol update PartitionName=infer Nodes=gpu[02-03]",
        "scontrol update PartitionName=train Nodes=gpu01",
    ]
    assert json.loads((where / "proposal.json").read_text())["moves"][0]["node"] == "gpu02"
    assert not state.rebalance_log.exists() and not (state.root / "locks").exists()
    # not approved: the next pass applies nothing and points at the same proposal
    again = run(mode="propose", now=NOW + dt.timedelta(minutes=5))
    assert again.status == "proposed" and again.change_id == res.change_id
    assert "waiting for its approval" in again.notes[-1] and world.calls == []
    approve(state.root, res.change_id, "alice")
    with pytest.raises(UsageError, match="already approved"):
        approve(state.root, res.change_id, "alice")
    with pytest.raises(UsageError, match="no proposal"):
        approve(state.root, "../etc", "alice")
    applied = run(mode="propose", now=NOW + dt.timedelta(minutes=10))
    assert applied.status == "applied" and applied.change_id == res.change_id
    assert world.calls == ["apply ['gpu02']"] and world.parts["infer"] == ["gpu02", "gpu03"]
    actions = [r.action for r in read_changes(state)]
    assert actions == ["propose", "approve", "apply"]
    prom = state.prom.read_text()
    assert 'slurmgpu_autopilot_last_pass_status{status="applied"} 1' in prom
    assert 'slurmgpu_autopilot_records_total{action="apply"} 1' in prom


def test_an_approved_proposal_is_refused_when_the_cluster_changed(setup) -> None:
    run, world, state, _ = setup
    res = run(mode="propose")
    approve(state.root, res.change_id, "bob")
    world.parts["train"].append("gpu09")
    again = run(mode="propose", now=NOW + dt.timedelta(minutes=1))
    assert again.status == "held" and "changed since proposal" in " ".join(again.refusals)
    assert world.calls == []


def test_dry_run_writes_and_changes_nothing(setup, tmp_path) -> None:
    run, world, state, _ = setup
    for mode in ("apply", "propose"):
        res = run(mode=mode, dry_run=True)
        assert res.status == f"would-{mode}" and res.moves[0].node == "gpu02"
        assert res.written == ()
    assert world.calls == [] and not state.root.exists()


# -- verification and rollback -------------------------------------------------------------


def test_verification_keeps_a_change_that_helped_and_rolls_back_one_that_hurt(setup) -> None:
    run, world, state, plan = setup
    t = NOW.timestamp()
    plan["history"] = [("train", "P1", t - 3600, 100), ("infer", "P2", t - 3600, 900)]
    assert run().status == "applied"
    soon = run(now=NOW + dt.timedelta(minutes=10))
    assert soon.status == "waiting" and "no new change until then" in soon.notes[0]
    # train (the donor) waits far longer after the move: worse beyond the tolerance
    plan["history"] += [("train", "P1", t + 600, 2000), ("infer", "P2", t + 600, 100)]
    res = run(now=NOW + dt.timedelta(hours=1))
    assert res.status == "rolled-back" and world.calls == ["apply ['gpu02']", "undo"]
    assert any("partition:train" in r and "WORSE" in r for r in res.verification)
    assert world.parts == {"train": ["gpu01", "gpu02"], "infer": ["gpu03"]}
    last = read_changes(state)[-1]
    assert last.action == "rollback" and last.of == res.change_id


def test_judge_compares_each_touched_group_with_tolerance_and_slack() -> None:
    guard = AutopilotPolicy(rollback_tolerance=0.25, rollback_slack_s=60)
    before = [Observed("partition:a", 10, 400.0, 800.0, 0, 1.0)]
    ok = judge(before, [Observed("partition:a", 5, 560.0, 900.0, 1, 1.0)], ["partition:a"], guard)
    assert not ok.worse and ok.compared == 1  # limit 400 * 1.25 + 60 = 560
    bad = judge(before, [Observed("partition:a", 5, 561.0, 900.0, 1, 1.0)], ["partition:a"], guard)
    assert bad.worse and "WORSE" in bad.reasons[0]
    none = judge(before, [], ["partition:a", "tier:P0"], guard)
    assert not none.worse and none.compared == 0


def test_observe_counts_waits_per_partition_and_tier_in_the_window() -> None:
    t = NOW.timestamp()
    tr = trace([("a", "P0", t, 10), ("a", "P2", t + 10, 30), ("b", "P2", t + 5000, 0)])
    got = {o.group: o for o in observe(tr, t, t + 100)}
    assert set(got) == {"partition:a", "tier:P0", "tier:P2"}
    assert got["partition:a"].jobs == 2 and got["partition:a"].mean_wait_s == 20.0


# -- the live world: scontrol/squeue on PATH record every call -----------------------------

FAKE_BIN = """#!/bin/sh
echo "$(basename "$0") $*" >> "{log}"
BUSY=2026-03-02T11:00:00
case "$*" in
  "show -o partition")
    echo "PartitionName=train Nodes=gpu[01-02] State=UP"
    echo "PartitionName=infer Nodes=gpu03 State=UP" ;;
  "show -o node")
    for n in 01 02 03; do p=train; [ $n = 03 ] && p=infer
      echo "NodeName=gpu$n Partitions=$p State=IDLE Gres=gpu:h100:8 LastBusyTime=$BUSY"
    done ;;
esac
"""


def live_world(tmp_path: Path):
    import os

    from slurmgpu.autopilot.world import LiveWorld

    bindir, log = tmp_path / "bin", tmp_path / "calls.log"
    bindir.mkdir()
    for name in ("scontrol", "squeue"):
        (bindir / name).write_text(FAKE_BIN.format(log=log))
        (bindir / name).chmod(0o755)
    return LiveWorld({"PATH": f"{bindir}:{os.environ['PATH']}"}), log


def test_dry_run_and_propose_call_no_scontrol_update_and_take_no_lock(setup, tmp_path) -> None:
    _, _, state, _ = setup
    world, log = live_world(tmp_path)

    def live(**kw):
        opts = AutopilotOptions(
            advise=FakeAdvise(), policy=policy(tmp_path), state_dir=state.root,
            sacct_files=("given",), forecast=False, **kw,
        )  # fmt: skip
        return autopilot(opts, world=world, now=NOW)

    assert live(mode="apply", dry_run=True).status == "would-apply"
    assert live(mode="propose", dry_run=True).status == "would-propose"
    assert not state.root.exists()
    assert live(mode="propose").status == "proposed"
    calls = log.read_text().splitlines()
    assert calls and all(c.startswith(("scontrol show", "squeue ")) for c in calls), calls
    assert not state.rebalance_log.exists() and not (state.root / "locks").exists()
    # the same world does write when applying: the check above would catch a write
    assert live(mode="apply").status == "applied"
    updates = [c for c in log.read_text().splitlines() if c.startswith("scontrol update")]
    assert updates == [
        "scontrol update PartitionName=infer Nodes=gpu[01,03]",
        "scontrol update PartitionName=train Nodes=gpu02",
    ]
    assert state.rebalance_log.exists() and (state.root / "locks" / "gpu01.lock").exists()


def test_the_command_line_errors_are_one_line(tmp_path) -> None:
    """The real entry point (a subprocess): one `slurmgpu: error:` line, exit 1 or 2."""
    import subprocess
    import sys

    policy_file = tmp_path / "p.toml"
    policy_file.write_text(POLICY.format(switch=tmp_path / "x"))
    cases = [
        (["--since", "1d"], "autopilot needs --policy FILE"),
        (["--policy", str(tmp_path / "none.toml"), "--since", "1d"], "cannot read the policy"),
        (["--policy", str(policy_file)], "--sacct-file FILE... or --since WHEN"),
        (["approve", "ap-1", "--state-dir", str(tmp_path)], "no proposal 'ap-1'"),
    ]
    for argv, needle in cases:
        proc = subprocess.run(
            [sys.executable, "-m", "slurmgpu", "autopilot", *argv],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert proc.returncode in (1, 2) and not proc.stdout, proc
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("slurmgpu: error: "), proc.stderr
        assert needle in lines[0], proc.stderr


def test_the_forecast_of_a_pass_is_the_mean_and_high_per_partition(tmp_path) -> None:
    """`_forecast` on a 3-day sacct dump: numbers per partition; a too-short one is a note."""
    header = "JobIDRaw|JobID|Cluster|Partition|QOS|Account|User|State|Submit|Start|End|ElapsedRaw"
    header += "|AllocTRES|ReqTRES"
    t0, h = 1764547200, 3600
    rows = [
        f"{i}|{i}|c1|infer|normal|ml|alice|COMPLETED|{t}|{t}|{t + h}|{h}|gres/gpu=2|gres/gpu=2"
        for i, t in enumerate(range(t0, t0 + 3 * 24 * h, h), 1)
    ]
    dump = tmp_path / "history.txt"
    dump.write_text("\n".join([header, *rows]) + "\n")
    pas = SimpleNamespace(
        opts=SimpleNamespace(policy=None, forecast_freq="1h", forecast_horizon="1d"),
        files=[str(dump)], notes=[],
    )  # fmt: skip
    ((part, mean, high),) = run_mod._forecast(pas)
    assert part == "infer" and mean == pytest.approx(2.0, abs=0.3) and high >= mean
    dump.write_text("\n".join([header, *rows[:3]]) + "\n")
    assert run_mod._forecast(pas) == () and "forecast: " in pas.notes[-1]
