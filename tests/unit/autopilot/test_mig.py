"""Autopilot's MIG changes: decided from the forecast by slice (demand_from_forecast and
mig plan run for real on a recorded DGX H100 inventory), judged by the replay (advise's plan
given, as in test_autopilot.py), guarded, proposed or applied through the world's `mig apply`
(a recording fake), verified and rolled back; --dry-run and propose never apply.

And the forecast's slices by measured need (`forecast.demand.need_slices`) on a real
analysis of a small sacct dump.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from slurmgpu.accounting.options import AnalysisOptions
from slurmgpu.autopilot import AutopilotOptions, approve, autopilot
from slurmgpu.autopilot import carve as carve_mod
from slurmgpu.autopilot import run as run_mod
from slurmgpu.autopilot.carve import MigSite, parted_yaml
from slurmgpu.autopilot.measured import measure_sources
from slurmgpu.autopilot.records import StateDir, read_changes
from slurmgpu.errors import SlurmgpuError
from slurmgpu.forecast.pipeline import Forecast, PartitionForecast, Point
from slurmgpu.mig.apply import ApplyOptions, target_layouts
from slurmgpu.model.rebalance import NodeState, Partition
from slurmgpu.sources import snapshot
from slurmgpu.sources.slurm_node_control import NodeJob

from .test_autopilot import NOW, FakeAdvise, advice, policy, trace

H = 3600


def inventory(name: str):
    inv = snapshot.load_many(["tests/data/snapshots-v1/dgx-h100.json"], None)[0]
    return dataclasses.replace(inv, host=dataclasses.replace(inv.host, hostname=name))


def slice_forecast(one_g: float = 2 / 7, three_g: float = 0.0) -> Forecast:
    """A forecast by slice for `infer`: the point GPUs of each slice series."""
    t0 = NOW

    def series(size, gpus):
        pts = tuple(Point(t0 + dt.timedelta(hours=k), gpus, gpus, gpus) for k in range(2))
        return PartitionForecast("infer", "seasonal-naive", pts, size)

    parts = [series("gpu", 1.0), series("1g", one_g)]
    if three_g:
        parts.append(series("3g", three_g))
    return Forecast(3600, 2, t0, t0, t0, 10, 2, (), tuple(parts), by="slice")


class KilledPass(BaseException):
    """A SIGKILL of the pass: nothing after it runs."""


class MigWorld:
    """Partitions, nodes, jobs and inventories; `mig_apply` records the node and the config
    and changes the inventory the way `mig apply` would (from the config file)."""

    def __init__(self, jobs=None, fail: str | None = None) -> None:
        self.parts = {"train": ["gpu01"], "infer": ["gpu03"]}
        self.invs = {n: inventory(n) for n in ("gpu01", "gpu03")}
        self.jobs = jobs or {}
        self.calls: list[str] = []
        self.fail = fail
        self.before_lock = lambda world: None  # what happens between the decision and the lock
        self.kill = False

    def partitions(self):
        return [Partition(k, tuple(v)) for k, v in self.parts.items()]

    def nodes(self):
        return [NodeState(n, ("x",), True, 8, "h100", 600) for n in self.invs]

    def jobs_on(self, node):
        return self.jobs.get(node, [])

    def inventories(self, site):
        return list(self.invs.values())

    def mig_apply(self, opts, recheck=None):
        self.before_lock(self)
        why = [w for w in (recheck() if recheck is not None else ()) if w]
        if why:  # as `mig.apply.apply_config` refuses, under the node's lock
            raise SlurmgpuError(f"{opts.node}: not changed: {'; '.join(why)}")
        self.calls.append(f"mig apply {opts.node} {opts.config_name}")
        if self.kill:  # a SIGKILL of the pass inside mig apply: its journal left running
            from slurmgpu.mig.apply import Journal

            Journal(opts.node, opts.config_name, done=["drain", "wait_jobs"]).save(opts.journal)
            raise KilledPass
        if self.fail == opts.config_name:
            raise SlurmgpuError("injected failure")
        inv = self.invs[opts.node]
        targets = target_layouts(opts.config_file, opts.config_name, inv)
        gpus = []
        for g in inv.gpus:
            layout = targets[g.index]
            devs = ()
            if layout is not None:
                devs = tuple(SimpleNamespace(profile=pl.profile.name) for pl in layout.placements)
            gpus.append(dataclasses.replace(g, mig_mode_current=layout is not None,
                                            mig_mode_pending=layout is not None,
                                            mig_devices=devs))  # fmt: skip
        self.invs[opts.node] = dataclasses.replace(inv, gpus=tuple(gpus))

    def mig_emit(self, site, opts, directory):
        directory.mkdir(parents=True)
        (directory / "gres.conf").write_text(f"# new gres.conf of {opts.node}\n")
        return [directory / "gres.conf"]

    def apply(self, plan, log, **kw):
        raise AssertionError("no node move in these tests")

    def mig_recover(self, opts):
        """`mig apply --recover` as the real one ends for a run killed before start_slurmd:
        rolled back (its journal says so; the layouts were never changed here)."""
        from slurmgpu.mig.apply import Journal

        self.calls.append(f"mig recover {opts.node} {opts.config_name} {opts.journal_dir}")
        journal = Journal.load(opts.journal, opts.node)
        journal.state, journal.error = "rolled-back", "apply_layout: killed"
        journal.save(opts.journal)
        return journal

    def recover(self, log):
        from slurmgpu.fleet.rebalance import recover_pending

        return recover_pending(log, live=lambda env: self.partitions())


def mig_holds(state: StateDir) -> list[tuple[str, ...]]:
    """The reasons of each hold of a MIG change (a pass then also tries node moves)."""
    return [
        r.reasons
        for r in read_changes(state)
        if r.action == "hold" and (r.mig or any("MIG" in x for x in r.reasons) or
                                   any(c.startswith("carve:") for c in r.changes))
    ]  # fmt: skip


@pytest.fixture
def mig_setup(tmp_path, monkeypatch):
    state = {
        "history": [("infer", "P2", NOW.timestamp() - 7200, 900)] * 3,
        "forecast": slice_forecast(),
        "plan": None,  # None: advise echoes the carve it was given (a proven gain)
        "candidates": [],
    }
    monkeypatch.setattr(
        run_mod, "_history", lambda p: (p.opts.advise.replay, trace(state["history"]))
    )
    monkeypatch.setattr(carve_mod, "forecast_by_slice", lambda p, models: state["forecast"])
    monkeypatch.setattr(run_mod, "_move_candidates", lambda trace, ropts: ())
    import slurmgpu.advice.optimize as optimize

    def advise_trace(trace, opts):
        state["candidates"].append(opts.candidates)
        return state["plan"] or advice(changes=opts.candidates)

    monkeypatch.setattr(optimize, "advise_trace", advise_trace)
    world = MigWorld()
    site = MigSite(
        partitions=("infer",),
        apply=ApplyOptions(node="", config_name="", config_file=tmp_path,
                           gres_conf=tmp_path / "gres.conf"),
    )  # fmt: skip

    def run(now=NOW, pol=None, **kw):
        opts = AutopilotOptions(
            advise=FakeAdvise(), policy=pol or policy(tmp_path, cooldown_h=0),
            state_dir=tmp_path / "state", sacct_files=("given",), forecast=False,
            mig=site, **kw,
        )  # fmt: skip
        return autopilot(opts, world=world, now=now)

    return run, world, StateDir(tmp_path / "state"), state


def test_apply_carves_from_the_forecast_what_the_replay_judged(mig_setup) -> None:
    run, world, state, st = mig_setup
    res = run(mode="apply")
    assert res.status == "applied", res
    # forecast peak 2/7 GPU of 1g on an H100 (7 compute slices) -> 2 x 1g instances; mig plan
    # carves one GPU of gpu03 (a maximal layout of 1g slices), the replay judged exactly it
    assert st["candidates"] == [res.changes]
    (text,) = res.changes
    assert text == "carve:infer:1:1g.10gb=6,1g.20gb=1"
    (change,) = res.mig
    assert change.node == "gpu03" and change.partition == "infer"
    assert change.before == ("whole",) * 8
    assert change.after.count("1g.10gb=6,1g.20gb=1") == 1 and change.after.count("whole") == 7
    assert world.calls == [f"mig apply gpu03 {change.config}"]
    (rec,) = read_changes(state)
    assert rec.action == "apply" and rec.mig == res.mig and rec.changes == res.changes
    assert rec.before  # what sacct recorded before, for the verification
    configs = state.mig_dir(res.change_id)
    assert sorted(p.name for p in configs.iterdir()) == ["mig-parted.yaml", "old.yaml"]
    prom = state.prom.read_text()
    assert 'slurmgpu_autopilot_last_pass_status{status="applied"} 1' in prom
    assert "slurmgpu_autopilot_nodes_changed_24h 1" in prom
    # the next pass sees the layout serving the forecast: no second change
    later = run(mode="apply", now=NOW + dt.timedelta(hours=1))
    assert world.calls == [f"mig apply gpu03 {change.config}"], later


def test_a_worse_mig_change_is_rolled_back_with_the_old_layouts(mig_setup) -> None:
    run, world, state, st = mig_setup
    st["history"] = [("infer", "P2", NOW.timestamp() - 7200, 10)] * 3
    first = run(mode="apply")
    assert first.status == "applied"
    # after the change the small jobs of infer wait far longer than before
    st["history"] = [
        ("infer", "P2", NOW.timestamp() - 7200, 10),
        ("infer", "P2", NOW.timestamp() + 600, 900),
    ]
    second = run(mode="apply", now=NOW + dt.timedelta(hours=1))
    assert second.status == "rolled-back", second
    assert any("partition:infer" in r and "WORSE" in r for r in second.verification)
    (change,) = first.mig
    assert world.calls == [
        f"mig apply gpu03 {change.config}",
        "mig apply gpu03 " + change.old_config,
    ]
    assert all(not g.mig_enabled for g in world.invs["gpu03"].gpus)  # whole again
    assert [r.action for r in read_changes(state)] == ["apply", "rollback"]


def test_a_node_running_p0_is_not_re_laid_out(mig_setup) -> None:
    run, world, state, _ = mig_setup
    world.jobs = {"gpu03": [NodeJob("7", "p0")]}
    res = run(mode="apply")
    assert world.calls == [] and res.status == "held"
    assert any("gpu03 runs job 7 (QOS p0)" in r for r in mig_holds(state)[0])


def test_the_gain_guardrail_and_a_plan_that_is_not_the_carve_hold_it(mig_setup) -> None:
    run, world, state, st = mig_setup
    st["plan"] = advice(changes=("carve:infer:1:1g.10gb=7",), score=-0.01)
    run(mode="apply")
    st["plan"] = advice(changes=("move:train:infer:8",))
    run(mode="apply")
    assert world.calls == []
    holds = mig_holds(state)
    assert any("below the threshold" in r for r in holds[0])
    assert any("is not the carve" in r for r in holds[1])


def test_budget_and_cooldown(mig_setup, tmp_path) -> None:
    run, world, state, _ = mig_setup
    res = run(mode="apply", pol=policy(tmp_path, cooldown_h=0, max_nodes_per_day=0))
    assert res.status == "held" and world.calls == []
    assert any("max_nodes_per_day" in r for r in mig_holds(state)[-1])
    # more demand than the one carved GPU serves, within the cooldown: gpu03 is pinned
    assert run(mode="apply").status == "applied"
    _, _, _, st = mig_setup
    st["forecast"] = slice_forecast(one_g=2.0, three_g=3 / 7)
    st["history"] = st["history"] + [("infer", "P2", NOW.timestamp() + 600, 900)]  # kept
    later = run(mode="apply", now=NOW + dt.timedelta(hours=1), pol=policy(tmp_path))
    assert later.status != "applied" and len(world.calls) == 1
    assert any("cooldown" in r for r in mig_holds(state)[-1]), mig_holds(state)


def test_a_relayout_of_a_gpu_already_in_mig_mode_is_held(mig_setup, tmp_path) -> None:
    run, world, state, st = mig_setup
    config = tmp_path / "all.yaml"
    config.write_text(parted_yaml({"all": [(i, ("1g.10gb",) * 7) for i in range(8)]}))
    world.mig_apply(dataclasses.replace(run_site(), node="gpu03", config_name="all",
                                        config_file=config))  # fmt: skip
    world.calls.clear()
    st["forecast"] = slice_forecast(one_g=0.0, three_g=6 / 7)  # 2 x 3g: no GPU has one
    assert run(mode="apply").status == "held" and world.calls == []
    assert any("is in MIG mode" in r and "carves whole GPUs only" in r
               for r in mig_holds(state)[-1])  # fmt: skip


def run_site() -> ApplyOptions:
    return ApplyOptions(node="", config_name="", config_file=None, gres_conf=None)


def test_a_failed_mig_apply_is_recorded_and_the_pass_says_failed(mig_setup) -> None:
    run, world, state, _ = mig_setup
    world.fail = "slurmgpu-ap-gpu03"
    res = run(mode="apply")
    assert res.status == "failed"
    assert any("mig apply gpu03: injected failure" in r for r in res.refusals)
    rec = read_changes(state)
    assert [r.action for r in rec[-2:]] == ["apply", "abort"] and rec[-1].of == rec[-2].id


def test_dry_run_and_propose_never_apply_then_approve_applies(mig_setup) -> None:
    run, world, state, _ = mig_setup
    assert run(mode="apply", dry_run=True).status == "would-apply"
    assert run(mode="propose", dry_run=True).status == "would-propose"
    assert world.calls == [] and not state.root.exists()
    prop = run(mode="propose")
    assert prop.status == "proposed" and world.calls == []
    where = state.proposal(prop.change_id)
    assert sorted(p.name for p in where.iterdir()) == [
        "gpu03", "mig-parted.yaml", "old.yaml", "proposal.json"
    ]  # fmt: skip
    assert (where / "gpu03" / "gres.conf").exists()
    assert json.loads((where / "proposal.json").read_text())["mig"][0]["node"] == "gpu03"
    again = run(mode="propose", now=NOW + dt.timedelta(minutes=5))
    assert again.change_id == prop.change_id  # one proposal per change
    approve(state.root, prop.change_id, "admin")
    done = run(mode="propose", now=NOW + dt.timedelta(minutes=10))
    assert done.status == "applied" and world.calls == [f"mig apply gpu03 {prop.mig[0].config}"]
    assert [r.action for r in read_changes(state)] == ["propose", "approve", "apply"]


def test_parted_yaml_is_what_mig_apply_reads(tmp_path) -> None:
    inv = inventory("gpu03")
    path = tmp_path / "c.yaml"
    gpus = [(0, ("1g.10gb",) * 7), (1, ("3g.40gb", "4g.40gb"))] + [(i, ()) for i in range(2, 8)]
    path.write_text(parted_yaml({"x": gpus}))
    got = target_layouts(path, "x", inv)
    assert sorted(p.profile.name for p in got[0].placements) == ["1g.10gb"] * 7
    assert sorted(p.profile.name for p in got[1].placements) == ["3g.40gb", "4g.40gb"]
    assert all(got[i] is None for i in range(2, 8))


# -- the forecast's slices by measured need ------------------------------------------------


def test_whole_gpu_runs_count_as_the_slice_their_measured_memory_needs(tmp_path) -> None:
    from slurmgpu.accounting import AnalysisOptions, analyze
    from slurmgpu.accounting.window import to64
    from slurmgpu.forecast.demand import demand_series
    from slurmgpu.model.catalog import resolve

    from ..accounting.sacct_text import job, text

    rows = [
        # 5 GB measured on a whole H100: a 1g.10gb needs 5 x 1.1 GB -> 1g
        job(1, "infer", 0, 0, H, "gres/gpu:h100=1,gres/gpu=1", usage="gres/gpumem=5000M"),
        # 30 GB -> 3g.40gb (2g.20gb is too small with the headroom)
        job(2, "infer", 0, 0, H, "gres/gpu:h100=1,gres/gpu=1", usage="gres/gpumem=30000M"),
        # 70 GB: needs the whole GPU; no measure: stays whole
        job(3, "infer", 0, 0, H, "gres/gpu:h100=1,gres/gpu=1", usage="gres/gpumem=70000M"),
        job(4, "infer", 0, 0, H, "gres/gpu:h100=1,gres/gpu=1"),
    ]
    path = tmp_path / "d.txt"
    path.write_text(text(rows))
    result = analyze(AnalysisOptions(files=[path]))
    w = result.document.window
    args = (result.frame, to64(w.since), to64(w.until), H)
    plain = demand_series(*args, True)
    assert plain.partitions == [("infer", "gpu")]
    need = demand_series(*args, True, {"infer": resolve("h100-sxm5-80gb")})
    assert need.partitions == [("infer", "gpu"), ("infer", "1g"), ("infer", "3g")]
    np.testing.assert_allclose(need.demand(("infer", "1g"))[:1], [1 / 7])
    np.testing.assert_allclose(need.demand(("infer", "3g"))[:1], [3 / 7])
    np.testing.assert_allclose(need.demand(("infer", "gpu"))[:1], [2.0])


def test_dry_run_and_propose_call_no_scontrol_update_nor_mig_apply(mig_setup, tmp_path) -> None:
    """LiveWorld (the real `mig apply` library behind it) with scontrol/squeue scripts that
    log every call: --dry-run and propose read (scontrol show, squeue) and write no journal,
    lock or gres.conf; the same world in apply mode does drain the node (logged)."""
    from slurmgpu.autopilot.world import LiveWorld

    from .test_autopilot import live_world

    _, _, state, _ = mig_setup
    world, log = live_world(tmp_path)
    snaps = tmp_path / "snaps"
    snaps.mkdir()
    snapshot.save(inventory("gpu03"), snaps / "gpu03.json")
    gres = tmp_path / "gres.conf"
    gres.write_text("NodeName=gpu03 Name=gpu Type=h100 File=/dev/nvidia[0-7]\n")
    site = MigSite(
        partitions=("infer",), snapshot_dir=snaps,
        apply=ApplyOptions(node="", config_name="", config_file=tmp_path, gres_conf=gres,
                           env=world.env, stop_slurmd=("true",), start_slurmd=("true",),
                           host_root=str(tmp_path / "no-host"), drain_timeout_s=1, poll_s=0),
    )  # fmt: skip

    def live(**kw):
        opts = AutopilotOptions(
            advise=FakeAdvise(), policy=policy(tmp_path, cooldown_h=0), state_dir=state.root,
            sacct_files=("given",), forecast=False, mig=site, **kw,
        )  # fmt: skip
        return autopilot(opts, world=world, now=NOW)

    assert isinstance(world, LiveWorld)
    assert live(mode="apply", dry_run=True).status == "would-apply"
    assert live(mode="propose", dry_run=True).status == "would-propose"
    assert not state.root.exists()
    prop = live(mode="propose")
    assert prop.status == "proposed", prop
    calls = log.read_text().splitlines()
    assert calls and all(c.startswith(("scontrol show", "squeue ")) for c in calls), calls
    from slurmgpu.util.lock import lock_dir

    assert not list(lock_dir().glob("*.lock")) and not list(state.root.glob("mig-apply-*"))
    assert gres.read_text() == "NodeName=gpu03 Name=gpu Type=h100 File=/dev/nvidia[0-7]\n"
    emitted = state.proposal(prop.change_id) / "gpu03"
    assert "1g.10gb" in (emitted / "gres.conf").read_text()
    assert (emitted / "changes.diff").read_text().startswith(f"--- {gres}")
    # the same world in apply mode runs mig apply: it takes the node's lock and reads the node
    # live (no NVML here: it fails before draining, and the pass says so)
    done = live(mode="apply")
    assert done.status == "failed" and (lock_dir() / "gpu03.lock").exists()
    assert any(r.startswith("mig apply gpu03: ") for r in done.refusals), done.refusals


def test_the_real_chain_forecast_plan_replay_carves_for_queued_small_jobs(tmp_path) -> None:
    """No fake in the decision: 3 days of hourly bursts of 12 one-GPU jobs (5 GB measured
    on an H100, 20 min) on one 8-GPU node, 4 of each burst queueing; the real forecast by
    slice (measured need -> 1g), demand_from_forecast, mig plan and the calibrated replay
    (advise with the carve as its candidate) decide one GPU of 1g slices, applied through
    the world's `mig apply` (recorded here)."""
    from slurmgpu.cli import HELP_OPTION_NAMES
    from slurmgpu.cli.advise import SHARED, advise_options
    from slurmgpu.cli.autopilot import autopilot as command

    from ..accounting.sacct_text import job, text

    rows, jid = [], 1
    for h in range(72):
        for k in range(12):
            start = h * H + k * 60 if k < 8 else h * H + (k - 8) * 60 + 1200
            rows.append(job(jid, "infer", h * H + k * 60, start, start + 1200,
                            "gres/gpu:h100=1,gres/gpu=1", tl=3600,
                            usage="gres/gpumem=5000M,gres/gpuutil=10"))  # fmt: skip
            jid += 1
    history = tmp_path / "h.sacct"
    history.write_text(text(rows))
    pol = tmp_path / "p.toml"
    pol.write_text(
        'default_tier = "P2"\n[tiers.P0]\nqos = "p0"\npriority = 1000\npreempts = ["P2"]\n'
        '[tiers.P2]\nqos = "normal"\npriority = 100\n[autopilot]\nmode = "apply"\n'
        f'min_gain = 0.02\ncooldown_h = 0\nkill_switch = "{tmp_path / "off"}"\n'
    )
    ctx = command.make_context("autopilot", [
        "--policy", str(pol), "--sacct-file", str(history), "--capacity", "infer=8",
        "--gpu-type", "infer=h100", "--gpus-per-node", "8"],
        help_option_names=HELP_OPTION_NAMES)  # fmt: skip
    shared = {
        "store": None,
        "clusters": (),
        **{k: ctx.params[k] for k in SHARED if k in ctx.params},
    }
    _, adv = advise_options({**shared, "max_changes": 3, "candidates": (), "seed": 0})
    world = MigWorld()
    world.parts = {"infer": ["gpu03"]}
    site = MigSite(("infer",), run_site())
    opts = AutopilotOptions(
        advise=adv, policy=adv.replay.tiers, state_dir=tmp_path / "state",
        sacct_files=(str(history),), mode="apply", mig=site, forecast=False,
    )  # fmt: skip
    res = autopilot(opts, world=world, now=dt.datetime(2025, 12, 4, 1, tzinfo=dt.UTC))
    assert res.status == "applied", res
    assert any("MIG infer: forecast demand 1g=5" in n for n in res.notes), res.notes
    assert res.changes == ("carve:infer:1:1g.10gb=6,1g.20gb=1",)
    (pred,) = res.predicted
    assert pred.mean_wait_before_s > 200 and pred.mean_wait_after_s < 10 and res.score < -0.5
    assert pred.change_high_s < 0  # a gain at the worst end of the perturbed replays
    assert world.calls == ["mig apply gpu03 slurmgpu-ap-gpu03"]


def _collector_token(raw: int, start: int, end: int, mem_mib: float) -> str:
    """The collector's AdminComment summary (`SG1:`) of a 1-GPU run on an H100."""
    from slurmgpu.measure.summary import GpuSummary, JobSummary, encode

    from ..accounting.sacct_text import B

    gpu = GpuSummary(0, None, None, "GPU-0", 81559.0, mem_mib, 10.0, 5, 5)
    return encode(JobSummary(str(raw), "", "gpu03", B + start + 5, B + end - 5, 5, (gpu,)))


def test_collector_summaries_stand_in_for_gpumem_in_the_forecast_and_the_replay(tmp_path):
    """A Slurm that records no gres/gpumem (22.05 without NVML in slurmd): the collector's
    summaries in AdminComment are the measured memory that the pass's forecast by slice and
    its replay read (autopilot.run.measure_sources), so the 5 GB jobs count as 1g demand and
    replay as fitting a slice; without them neither happens."""
    from slurmgpu.forecast import ForecastOptions, forecast
    from slurmgpu.model.catalog import resolve
    from slurmgpu.replay import ReplayOptions, load_for_replay

    from ..accounting.sacct_text import job, text

    rows = []
    for k in range(3 * 48):  # 3 days, a 20-minute job every half hour
        start = k * 1800
        end = start + 1200
        admin = _collector_token(k + 1, start, end, 5000.0)
        rows.append(job(k + 1, "infer", start, start, end, "gres/gpu:h100=1,gres/gpu=1",
                        tl=3600, admin=admin))  # fmt: skip
    history = tmp_path / "h.sacct"
    history.write_text(text(rows))
    analysis = AnalysisOptions(files=(str(history),), replay_effects="never",
                               measure_sources=measure_sources())  # fmt: skip
    models = {"infer": resolve("h100")}
    fc = forecast(ForecastOptions(analysis, "1h", "1d", by="slice", need_models=models))
    slices = {p.slice for p in fc.slices("infer")}
    assert "1g" in slices, slices
    bare = replace(analysis, measure_sources=())
    fc0 = forecast(ForecastOptions(bare, "1h", "1d", by="slice", need_models=models))
    assert "1g" not in {p.slice for p in fc0.slices("infer")}, fc0.by_partition

    ropts = ReplayOptions(capacity={"infer": 8}, gpu_types={"infer": "h100"})
    _, measured = load_for_replay([str(history)], replace(ropts, measure_sources=measure_sources()))
    _, bare_trace = load_for_replay([str(history)], ropts)
    assert np.allclose(measured.need_mib, 5000.0), measured.need_mib
    assert np.isnan(bare_trace.need_mib).all()
    assert measured.measure_notes == ()


def test_a_carve_killed_inside_mig_apply_is_recovered_before_the_layouts_are_read(
    mig_setup,
) -> None:
    """Issue 33: a pass killed inside its `mig apply` leaves the node's journal running; the
    next pass recovers it (mig apply --recover, with its --mig-* options) before it reads
    any layout, and only then decides."""
    from slurmgpu.mig.apply import Journal

    run, world, state, _ = mig_setup
    state.root.mkdir(parents=True)
    Journal("gpu03", "slurmgpu-ap-gpu03", done=["drain", "wait_jobs"]).save(
        state.root / "mig-apply-gpu03.json"
    )
    res = run(mode="apply")
    assert world.calls[0] == f"mig recover gpu03 slurmgpu-ap-gpu03 {state.root}", world.calls
    assert "recovered: the killed mig apply of gpu03: rolled-back" in res.notes, res.notes
    assert res.status == "applied"  # then the pass read the (whole) layouts and carved
    # a journal that cannot be trusted stops the pass with one line, nothing read or done
    (state.root / "mig-apply-gpu03.json").write_text("{}")
    world.calls.clear()
    held = run(mode="apply", now=NOW + dt.timedelta(days=2))
    assert held.status == "held" and world.calls == [] and len(held.refusals) == 1
    assert "mig-apply-gpu03.json" in held.refusals[0]


@pytest.mark.parametrize(
    ("late", "needle"),
    [
        (lambda w, sw: w.jobs.update({"gpu03": [NodeJob("31", "p0")]}), "runs job 31 (QOS p0)"),
        (lambda w, sw: sw.symlink_to(sw.parent / "nowhere"), "kill switch"),
    ],
)
def test_a_carve_rechecks_its_guardrails_under_the_nodes_lock(
    mig_setup, tmp_path, late, needle
) -> None:
    run, world, state, _ = mig_setup
    world.before_lock = lambda w: late(w, tmp_path / "disable")
    res = run(mode="apply")
    assert res.status == "failed" and world.calls == [], world.calls
    assert needle in " ".join(res.refusals), res.refusals
    rec = read_changes(state)
    assert [r.action for r in rec] == ["apply", "abort"]
    from slurmgpu.autopilot import guardrails

    assert guardrails.nodes_today(rec, NOW) == 0


def test_a_pass_killed_inside_its_carve_is_settled_by_the_next(mig_setup) -> None:
    run, world, state, _ = mig_setup
    world.kill = True
    with pytest.raises(KilledPass):
        run(mode="apply")
    first = read_changes(state)
    assert [r.action for r in first] == ["apply"]  # the intent, written before acting
    world.kill = False
    world.calls.clear()
    res = run(mode="apply", now=NOW + dt.timedelta(minutes=5))
    assert world.calls[0].startswith("mig recover gpu03 "), world.calls
    rec = read_changes(state)
    assert [r.action for r in rec[:2]] == ["apply", "abort"] and rec[1].of == first[0].id
    assert "mig apply --recover left gpu03 rolled-back" in rec[1].reasons[0]
    # settled: the pass read the layouts (whole again) and carved anew
    assert res.status == "applied" and [r.action for r in rec[2:]] == ["apply"]
