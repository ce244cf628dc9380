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


class Killed(BaseException):
    """A SIGKILL of the pass at that point: nothing after it runs."""


class FakeWorld:
    def __init__(self, jobs: dict[str, list[NodeJob]] | None = None) -> None:
        self.parts = {"train": ["gpu01", "gpu02"], "infer": ["gpu03"]}
        self.jobs = jobs or {}
        self.calls: list[str] = []
        self.drained: set[str] = set()
        self.before_locks = lambda: None  # what happens between the plan and the locks
        self.kill_at: str | None = None  # "recheck" | "scontrol" | "after": a SIGKILL there

    def partitions(self):
        return [Partition(k, tuple(v)) for k, v in self.parts.items()]

    def nodes(self):
        names = sorted(n for v in self.parts.values() for n in v)
        return [
            NodeState(
                n,
                tuple(p for p, v in self.parts.items() if n in v),
                not self.jobs.get(n) and n not in self.drained,
                8,
                "h100",
                900 if n == "gpu02" else 600,
                usable=n not in self.drained,
            )
            for n in names
        ]

    def jobs_on(self, node):
        return self.jobs.get(node, [])

    def sacct_text(self, since, until):
        raise AssertionError("the tests give the history")

    def live(self, env=None):
        return self.partitions()

    def _scontrol(self):
        """`fleet.rebalance`'s own apply, undo and recovery (journal, locks, the checks under
        them) with this world's partitions in place of slurmctld's."""
        from unittest import mock

        def change_live(lists, conf, env):
            self.calls.append(f"set {sorted(lists)}")
            for n, (k, v) in enumerate(sorted(lists.items())):
                if self.kill_at == "scontrol" and n == 1:
                    raise Killed  # between the two scontrol updates
                self.parts[k] = list(v)
            if self.kill_at == "after":
                raise Killed  # both updates made, the apply not logged

        return mock.patch("slurmgpu.fleet.rebalance._change_live", change_live)

    def apply(self, plan, log, **kw):
        from slurmgpu.fleet.rebalance import apply_plan

        self.before_locks()
        if self.kill_at == "recheck":
            recheck = kw["recheck"]

            def killed():
                recheck()
                raise Killed

            kw = {**kw, "recheck": killed}
        with self._scontrol():
            stamp = apply_plan(plan, log, live=self.live, **kw)
        self.calls[-1] = f"apply {[m.node for m in plan.moves]}"
        return stamp

    def undo(self, log, stamp=""):
        from slurmgpu.fleet.rebalance import undo_last

        with self._scontrol():
            done = undo_last(log, live=self.live, time=stamp or None)
        self.calls = [c for c in self.calls if not c.startswith("set ")] + ["undo"]
        return done

    def recover(self, log):
        from slurmgpu.fleet.rebalance import recover_pending

        with self._scontrol():
            return recover_pending(log, live=self.live)

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
            **{"transient": True, **kw},  # the fake world has no include file
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
    from slurmgpu.util.lock import lock_dir

    assert not state.rebalance_log.exists() and not list(lock_dir().glob("*.lock"))
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
            sacct_files=("given",), forecast=False, transient=True, **kw,
        )  # fmt: skip
        return autopilot(opts, world=world, now=NOW)

    assert live(mode="apply", dry_run=True).status == "would-apply"
    assert live(mode="propose", dry_run=True).status == "would-propose"
    assert not state.root.exists()
    assert live(mode="propose").status == "proposed"
    calls = log.read_text().splitlines()
    assert calls and all(c.startswith(("scontrol show", "squeue ")) for c in calls), calls
    from slurmgpu.util.lock import lock_dir

    assert not state.rebalance_log.exists() and not list(lock_dir().glob("*.lock"))
    # the same world does write when applying: the check above would catch a write
    assert live(mode="apply").status == "applied"
    updates = [c for c in log.read_text().splitlines() if c.startswith("scontrol update")]
    assert updates == [
        "scontrol update PartitionName=infer Nodes=gpu[01,03]",
        "scontrol update PartitionName=train Nodes=gpu02",
    ]
    from slurmgpu.util.lock import lock_dir

    assert state.rebalance_log.exists() and (lock_dir() / "gpu01.lock").exists()


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


# -- issue 33: killed passes, checks under the locks, hand reverts, floors, kill switch --------


def _moved(world) -> dict[str, list[str]]:
    return {k: sorted(v) for k, v in world.parts.items()}


def test_a_dangling_symlink_kill_switch_stops_the_pass(setup, tmp_path) -> None:
    run, world, state, _ = setup
    (tmp_path / "disable").symlink_to(tmp_path / "nowhere")
    res = run()
    assert res.status == "killed" and "kill switch" in res.refusals[0]
    assert world.calls == [] and not state.changes.exists()


def test_the_donor_floor_counts_usable_nodes_only(setup) -> None:
    run, world, _, _ = setup
    world.drained = {"gpu01"}  # train's other node is drained: gpu02 is all it runs on
    res = run()
    assert res.status == "held" and world.calls == []
    assert "train would keep no usable node" in " ".join(res.refusals), res.refusals


@pytest.mark.parametrize(
    ("late", "needle"),
    [
        (lambda w, sw: w.drained.add("gpu02"), "gpu02 is drained or down now"),
        (lambda w, sw: w.jobs.update({"gpu02": [NodeJob("21", "p0")]}), "runs job 21 (QOS p0)"),
        (lambda w, sw: sw.write_text(""), "kill switch"),
        (
            lambda w, sw: w.parts["infer"].append("gpu09"),  # an admin's edit of infer
            "partition infer has Nodes=gpu[03,09] now, not gpu03 as the plan read",
        ),
    ],
)
def test_what_changed_after_the_decision_is_seen_under_the_locks(
    setup, tmp_path, late, needle
) -> None:
    run, world, state, _ = setup
    parts = None

    def snapshot():
        nonlocal parts
        late(world, tmp_path / "disable")
        parts = _moved(world)

    world.before_locks = snapshot
    res = run()
    assert res.status == "held" and needle in res.refusals[-1], res.refusals
    assert world.calls == [] and _moved(world) == parts  # nothing moved, nothing reverted
    rec = read_changes(state)
    assert [r.action for r in rec] == ["apply", "abort"] and rec[1].of == rec[0].id
    assert guardrails.nodes_today(rec, NOW) == 0 and guardrails.last_changed(rec) == {}
    assert not [e for e in _rebalance_log(state) if e.action != "intent"]


def _rebalance_log(state):
    from slurmgpu.fleet.rebalance import entries

    return entries(state.rebalance_log)


@pytest.mark.parametrize(
    ("at", "recovered", "after"),
    [
        ("recheck", "the pass was killed before it moved anything", "abort"),
        ("scontrol", "a killed pass's half-made move, undone", "abort"),
        ("after", None, None),  # the move was made: finished, verified later
    ],
)
def test_a_pass_killed_inside_its_move_is_settled_by_the_next_pass(
    setup, at, recovered, after
) -> None:
    run, world, state, _ = setup
    world.kill_at = at
    with pytest.raises(Killed):
        run()
    if at == "scontrol":  # gpu02 in two partitions now
        assert "gpu02" in world.parts["infer"] and "gpu02" in world.parts["train"]
    world.kill_at = None
    res = run(now=NOW + dt.timedelta(minutes=5))
    rec = read_changes(state)
    if recovered is None:
        assert res.status == "waiting" and [r.action for r in rec] == ["apply"]
        assert _moved(world) == {"infer": ["gpu02", "gpu03"], "train": ["gpu01"]}
        assert any("finished the move" in n for n in res.notes), res.notes
        assert guardrails.nodes_today(rec, NOW) == 1  # counted for the daily budget
        assert [e.action for e in _rebalance_log(state)] == ["intent", "apply"]
        return
    assert [r.action for r in rec[:2]] == ["apply", after] and rec[1].reasons == (recovered,)
    assert f"change {rec[0].id}: {recovered}" in res.notes, res.notes
    log = [e.action for e in _rebalance_log(state)]
    if at == "scontrol":  # undone first: infer (which had gpu02 already) set back
        assert log[:2] == ["intent", "undo"] and world.calls[1] == "set ['infer']", world.calls
        assert any(n.startswith("recovered: undid the move") for n in res.notes), res.notes
    # the records agree with the cluster again (the aborted move counts for no cooldown or
    # budget), so the pass went on and made the move anew, whole: one partition each
    assert res.status == "applied" and [r.action for r in rec[2:]] == ["apply"]
    assert _moved(world) == {"infer": ["gpu02", "gpu03"], "train": ["gpu01"]}
    assert log[-2:] == ["intent", "apply"] and guardrails.nodes_today(rec, NOW) == 1


def test_a_move_undone_by_hand_is_recorded_reverted_not_verified(setup) -> None:
    run, world, state, plan = setup
    t = NOW.timestamp()
    plan["history"] = [("train", "P1", t - 3600, 100), ("infer", "P2", t - 3600, 900)]
    assert run().status == "applied"
    world.parts = {"train": ["gpu01", "gpu02"], "infer": ["gpu03"]}  # an admin put it back
    plan["history"] += [("train", "P1", t + 600, 100), ("infer", "P2", t + 600, 100)]
    plan["plan"] = advice(score=-0.01)  # no new move this time
    res = run(now=NOW + dt.timedelta(hours=1))
    rec = read_changes(state)
    assert [r.action for r in rec][:2] == ["apply", "reverted"], rec
    assert "gpu02 is no longer moved from train to infer" in rec[1].reasons[0]
    assert not [r for r in rec if r.action in ("verify", "rollback")]
    assert "undo" not in world.calls and res.status == "held"


def test_a_killed_mig_apply_is_never_read_as_the_current_layout(setup, tmp_path) -> None:
    from slurmgpu.mig.apply import Journal

    run, world, state, _ = setup
    state.root.mkdir(parents=True)
    Journal("gpu03", "slurmgpu-ap-gpu03", done=["drain", "wait_jobs"]).save(
        state.root / "mig-apply-gpu03.json"
    )
    res = run()
    assert res.status == "held" and world.calls == []
    assert len(res.refusals) == 1 and "a killed mig apply of gpu03 is pending" in res.refusals[0]
    assert "slurmgpu mig apply --recover --node gpu03" in res.refusals[0]
    assert read_changes(state)[-1].action == "hold"


def _rebalance_move(world, log, node: str, source: str, target: str, when: dt.datetime) -> None:
    """`rebalance apply` moving `node`, logged in the journal it shares with the autopilot."""
    from slurmgpu.fleet.rebalance import apply_plan
    from slurmgpu.model.rebalance import RebalancePlan

    before = {k: tuple(sorted(v)) for k, v in world.parts.items() if k in (source, target)}
    after = {
        source: tuple(n for n in before[source] if n != node),
        target: tuple(sorted((*before[target], node))),
    }
    plan = RebalancePlan((Move(node, source, target, "job 9 waited"),), before, after)
    stamp = when.astimezone().replace(tzinfo=None).isoformat(timespec="seconds")
    with world._scontrol():
        apply_plan(plan, log, live=world.live, stamp=stamp)
    world.calls.clear()


def test_rebalance_and_autopilot_share_one_journal_budget_and_undo(setup, tmp_path) -> None:
    run, world, state, plan = setup
    shared = tmp_path / "rebalance.jsonl"  # `rebalance apply --log`'s
    world.parts["spare"] = ["gpu06", "gpu07", "gpu08"]
    _rebalance_move(world, shared, "gpu07", "spare", "infer", NOW - dt.timedelta(hours=2))
    _rebalance_move(world, shared, "gpu08", "spare", "train", NOW - dt.timedelta(hours=1))
    # 2 nodes moved today by rebalance: the autopilot's daily budget (2) is used up
    res = run(rebalance_log=shared)
    assert res.status == "held" and world.calls == [], res
    assert "2 node(s) changed in the last 24 h + 1" in " ".join(res.refusals), res.refusals
    # a day later it moves; rebalance moves another node after it; the rollback undoes the
    # autopilot's own move, not rebalance's later one
    t = (NOW + dt.timedelta(days=1)).timestamp()
    plan["history"] = [("train", "P1", t - 3600, 100), ("infer", "P2", t - 3600, 900)]
    assert run(now=NOW + dt.timedelta(days=1), rebalance_log=shared).status == "applied"
    assert "gpu02" in world.parts["infer"]
    world.parts["debug"] = ["gpu09", "gpu10"]
    _rebalance_move(world, shared, "gpu09", "debug", "spare", NOW + dt.timedelta(days=1, minutes=9))
    plan["history"] += [("train", "P1", t + 600, 5000), ("infer", "P2", t + 600, 100)]
    res = run(now=NOW + dt.timedelta(days=1, hours=1), rebalance_log=shared)
    assert res.status == "rolled-back", res
    assert "gpu02" in world.parts["train"] and "gpu09" in world.parts["spare"]
    from slurmgpu.fleet.rebalance import entries

    log = entries(shared)
    assert [(e.action, e.by) for e in log if e.action != "intent"][-2:] == [
        ("apply", "rebalance apply"),
        ("undo", ""),
    ]
    assert log[-1].undoes == read_changes(state)[-2].rebalance_time  # the autopilot's own
    assert not state.rebalance_log.exists()


def test_a_move_that_empties_a_partition_is_refused_before_it_is_logged(tmp_path) -> None:
    from slurmgpu.fleet.rebalance import apply_plan, entries
    from slurmgpu.model.rebalance import RebalancePlan

    plan = RebalancePlan(
        (Move("gpu07", "spare", "infer", "x"),),
        {"spare": ("gpu07",), "infer": ("gpu03",)},
        {"spare": (), "infer": ("gpu03", "gpu07")},
    )
    log = tmp_path / "rebalance.jsonl"
    with pytest.raises(UsageError, match="refusing to leave partition spare without nodes"):
        apply_plan(plan, log, live=lambda env: [])
    assert entries(log) == []  # the log stays readable


def test_a_move_logged_in_the_state_dirs_own_journal_is_still_judged_with_a_shared_one(
    setup, tmp_path
) -> None:
    """Upgrading to the shared journal: a change logged in STATE/rebalance.jsonl before is
    neither taken for a killed pass's nor lost to its rollback."""
    run, world, state, plan = setup
    t = NOW.timestamp()
    plan["history"] = [("train", "P1", t - 3600, 100), ("infer", "P2", t - 3600, 900)]
    assert run().status == "applied" and state.rebalance_log.exists()
    plan["history"] += [("train", "P1", t + 600, 2000), ("infer", "P2", t + 600, 100)]
    shared = tmp_path / "rebalance.jsonl"
    res = run(now=NOW + dt.timedelta(hours=1), rebalance_log=shared)
    assert res.status == "rolled-back", res
    assert [r.action for r in read_changes(state)] == ["apply", "rollback"]
    assert world.parts == {"train": ["gpu01", "gpu02"], "infer": ["gpu03"]}


def test_a_live_move_is_durable_or_asked_transient_by_name(setup) -> None:
    run, world, state, _ = setup
    res = run(transient=False)
    assert res.status == "held" and world.calls == []
    assert "a live move needs --partitions-conf FILE" in res.refusals[-1], res.refusals
    rec = read_changes(state)
    assert [r.action for r in rec] == ["hold"] and guardrails.nodes_today(rec, NOW) == 0


# -- exit codes (issue 33, docs/acting.md): 3 the pass changed the cluster (or would), 0 not ----


def test_a_pass_is_changed_only_when_it_moved_rolled_back_or_settled_a_killed_move(
    setup, tmp_path
) -> None:
    run, world, state, plan = setup
    t = NOW.timestamp()
    plan["history"] = [("train", "P1", t - 3600, 100), ("infer", "P2", t - 3600, 900)]
    (tmp_path / "disable").write_text("")
    assert not run().changed  # the kill switch: nothing
    (tmp_path / "disable").unlink()
    dry = {mode: run(mode=mode, dry_run=True) for mode in ("apply", "propose")}
    assert dry["apply"].changed and not dry["propose"].changed  # a proposal changes nothing
    proposed = run(mode="propose")
    assert proposed.status == "proposed" and not proposed.changed
    assert world.calls == []
    approve(state.root, proposed.change_id, "alice")
    applied = run(mode="propose", now=NOW + dt.timedelta(minutes=1))
    assert applied.status == "applied" and applied.changed
    waiting = run(now=NOW + dt.timedelta(minutes=2))
    assert waiting.status == "waiting" and not waiting.changed
    # the donor waits far longer after the move: rolled back
    plan["history"] += [("train", "P1", t + 600, 2000), ("infer", "P2", t + 600, 100)]
    later = NOW + dt.timedelta(hours=1)
    assert run(now=later, dry_run=True).changed  # it would roll back
    rolled = run(now=later)
    assert rolled.status == "rolled-back" and rolled.changed


def test_a_pass_that_finished_a_killed_passs_move_changed_the_cluster(setup) -> None:
    run, world, _state, _ = setup
    world.kill_at = "after"  # killed after its scontrol updates, before the apply line
    with pytest.raises(Killed):
        run()
    world.kill_at = None
    res = run(now=NOW + dt.timedelta(minutes=5))
    assert res.status == "waiting" and any("finished the move" in n for n in res.notes)
    assert res.changed


@pytest.mark.parametrize(
    ("status", "code"),
    [("applied", 3), ("rolled-back", 3), ("would-apply", 3), ("failed", 3), ("held", 0),
     ("waiting", 0), ("proposed", 0), ("would-propose", 0), ("killed", 0)],
)  # fmt: skip
def test_the_command_exits_with_the_passs_status(monkeypatch, status, code) -> None:
    from click.testing import CliRunner

    import slurmgpu.autopilot as autopilot_pkg
    import slurmgpu.cli.autopilot as cli_mod
    from slurmgpu.cli import main

    result = run_mod.PassResult(time="t", mode="apply", dry_run=False, status=status)
    monkeypatch.setattr(cli_mod, "autopilot_options", lambda params: None)
    monkeypatch.setattr(autopilot_pkg, "autopilot", lambda opts: result)
    out = CliRunner().invoke(main, ["autopilot", "--format", "json"])
    assert out.exit_code == code, out.output
    assert json.loads(out.output)["status"] == status
