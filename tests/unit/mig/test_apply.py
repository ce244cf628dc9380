"""`mig apply` through the pynvml double: the happy path, a failure injected at every step,
requeue of preemptible jobs, and recovery from a crash midway.

The GPU side is the pynvml double (NVML's MIG calls with real return codes); the node's
Slurm side is `SlurmStub` below, which records scontrol/squeue calls and can be told to fail
(the same calls run against real daemons in the integration tests of the harness). Site
commands (stop/start slurmd) are real programs: `true` and `false`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from slurmgpu.errors import ConfigCheckError, SlurmCommandError, SlurmgpuError, UsageError
from slurmgpu.mig import apply as apply_mod
from slurmgpu.mig.apply import STEPS, ApplyOptions, Journal, MigApply, MigApplyFailed
from slurmgpu.mig.demand import parse_demand
from slurmgpu.mig.plan import plan
from slurmgpu.sources import nvml
from slurmgpu.sources.slurm_node_control import NodeJob
from slurmgpu.views.mig import render_mig_parted
from tests.doubles.machines import install_double, setup_machine

NODE = "dgxa100"
OLD_LINE = f"NodeName={NODE} CPUs=256 Gres=gpu:1g.5gb:7,gpu:3g.20gb:2,gpu:4g.20gb:1,gpu:a100:5"


class SlurmStub:
    """scontrol/squeue for one node, in memory; Gres comes from the slurm.conf file."""

    def __init__(self, slurm_conf: Path, *, fail: tuple[str, ...] = (), jobs=()):
        self.slurm_conf = slurm_conf
        self.fail = set(fail)
        self.jobs = list(jobs)
        self.calls: list[tuple] = []
        self.state = "IDLE"
        self.reason = ""
        self.stuck = "stuck_jobs" in self.fail
        self.types = "gpu"
        self.config = {"AcctGatherEnergyType": "(null)"}

    def _maybe_fail(self, name: str) -> None:
        if name in self.fail:
            self.fail.discard(name)  # fail once, as a transient error would
            raise SlurmCommandError(f"scontrol {name}: injected failure")

    def drain(self, node, reason):
        self.calls.append(("drain", node, reason))
        self._maybe_fail("drain")
        self.state, self.reason = "DRAIN", reason

    def resume(self, node):
        self.calls.append(("resume", node))
        self._maybe_fail("resume")
        self.state, self.reason = "IDLE", ""

    def jobs_on(self, node):
        self.calls.append(("jobs_on", node))
        return list(self.jobs)

    def requeue(self, job_id):
        self.calls.append(("requeue", job_id))
        self.jobs = [j for j in self.jobs if j.job_id != job_id]

    def reconfigure(self):
        self.calls.append(("reconfigure",))
        self._maybe_fail("reconfigure")

    def gres_types(self):
        return self.types

    def config_value(self, key):
        self.calls.append(("config", key))
        self._maybe_fail("config")
        return self.config.get(key, "")

    def node_record(self, node):
        self.calls.append(("show", node))
        if "verify" in self.fail:
            return {"Gres": OLD_LINE.split("Gres=")[1], "State": self.state}
        line = next(x for x in self.slurm_conf.read_text().splitlines() if x.startswith("NodeName"))
        gres = line.split("Gres=")[1].split()[0]
        return {"NodeName": node, "Gres": gres, "State": self.state}

    def run_command(self, argv, timeout=120.0):
        from slurmgpu.util.proc import run

        self.calls.append(("run", *argv))
        run(argv, timeout=timeout)


@pytest.fixture
def node(tmp_path, monkeypatch):
    """The DGX A100 double, its host tree, a slurm.conf and gres.conf, a planned config."""
    double = install_double(monkeypatch)
    # a copy of the recorded machine in tmp_path: tests may inject errors into it
    root = setup_machine(double, tmp_path, "dgx-a100-mig", change=lambda machine: None)
    inv = nvml.read_inventory(root)
    result = plan([inv], parse_demand(["1g.5gb=14", "2g=2"]), keep_whole=5)
    config = tmp_path / "mig-parted.yaml"
    config.write_text(render_mig_parted(result))
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "gres.conf").write_text("# old gres.conf\nName=gpu Type=a100 File=/dev/nvidia[0-7]\n")
    (etc / "slurm.conf").write_text(f"ClusterName=t\n{OLD_LINE}\nPartitionName=p Nodes=ALL\n")
    opts = ApplyOptions(
        node=NODE,
        config_name=f"slurmgpu-{NODE}",
        config_file=config,
        gres_conf=etc / "gres.conf",
        slurm_conf=etc / "slurm.conf",
        journal_dir=tmp_path / "journal",
        host_root=str(root),
        drain_timeout_s=5,
        poll_s=1,
        stop_slurmd=("true",),
        start_slurmd=("true",),
        mig_parted="",  # the NVML path (mig-parted is not installed in CI either)
    )
    return double, root, opts, result


def layout_now(root) -> dict[int, list[str]]:
    inv = nvml.read_inventory(root)
    return {g.index: sorted(m.profile for m in g.mig_devices) for g in inv.gpus if g.mig_enabled}


def runner(opts, stub, **kw):
    clock = iter(range(10_000))
    return MigApply(opts, slurm=stub, sleep=lambda s: None, clock=lambda: next(clock), **kw)


def test_happy_path_carves_rewrites_and_resumes(node) -> None:
    _double, root, opts, result = node
    stub = SlurmStub(opts.slurm_conf)
    journal = runner(opts, stub).run()
    assert journal.state == "done" and journal.done == list(STEPS)
    planned = {
        g.gpu.index: sorted(p.profile.name for p in g.layout.placements)
        for g in result.nodes[0].gpus
        if g.layout
    }
    assert layout_now(root) == planned
    gres_text = opts.gres_conf.read_text()
    assert "Type=1g.5gb MultipleFiles=/dev/nvidia" in gres_text
    assert gres_text.count("Name=gpu Type=1g.5gb") >= 14
    line = next(x for x in opts.slurm_conf.read_text().splitlines() if x.startswith("NodeName"))
    assert "gpu:1g.5gb:" in line and "CPUs=256" in line  # only Gres= changed
    names = [c[0] for c in stub.calls]
    assert names.index("drain") < names.index("reconfigure") < names.index("resume")
    assert stub.state == "IDLE"
    assert Journal.load(opts.journal).state == "done"


def _old_files(opts):
    return opts.gres_conf.read_text(), opts.slurm_conf.read_text()


def fail_inventory_after_apply(opts):
    """A read_inventory that works before the layout change and fails after it."""
    calls = {"n": 0}

    def read():
        calls["n"] += 1
        if calls["n"] > 2:
            raise nvml.InventoryError("GPU 3: NVML GPU_IS_LOST (injected)")
        return nvml.read_inventory(opts.host_root)

    return read


def failing_check():
    """A slurmd -G that rejects the first file it sees (the new one); the rollback's check of
    the old file then passes, as with the integration test's fail-once shim."""
    seen = []

    def check(text, line):
        seen.append(text)
        if len(seen) == 1:
            raise ConfigCheckError("slurmd -G rejected the new gres.conf: injected")

    return check


CASES = {
    "drain": dict(fail=("drain",)),
    "wait_jobs": dict(jobs=[NodeJob("42", "normal")]),
    "stop_slurmd": dict(stop=("false",)),
    "apply_layout": dict(
        nvml_error=("nvmlDeviceCreateGpuInstanceWithPlacement", "once:INSUFFICIENT_RESOURCES")
    ),
    "inventory": dict(inventory=True),
    "write_gres": dict(check=failing_check),
    "reconfigure": dict(fail=("reconfigure",)),
    "start_slurmd": dict(start=("false",)),
    "verify": dict(fail=("verify",)),
    "resume": dict(fail=("resume",)),
}


@pytest.mark.parametrize("step", list(CASES))
def test_a_failure_at_each_step_leaves_old_config_and_a_drained_node(node, step) -> None:
    double, root, opts, _ = node
    case = CASES[step]
    before = layout_now(root)
    old_gres, old_slurm = _old_files(opts)
    if "stop" in case:
        opts = dataclasses.replace(opts, stop_slurmd=case["stop"])
    if "start" in case:
        opts = dataclasses.replace(opts, start_slurmd=case["start"])
    stub = SlurmStub(opts.slurm_conf, fail=case.get("fail", ()), jobs=case.get("jobs", ()))
    kwargs = {}
    if case.get("inventory"):
        kwargs["read_inventory"] = fail_inventory_after_apply(opts)
    if "check" in case:
        kwargs["validate_gres"] = case["check"]()
    if "nvml_error" in case:
        call, code = case["nvml_error"]
        path = Path(double._state["path"])
        assert path.is_relative_to(opts.journal_dir.parent)  # the tmp copy, never tests/data
        machine = json.loads(path.read_text())
        machine["gpus"][0].setdefault("errors", {})[call] = code  # GPU 0 is re-carved
        path.write_text(json.dumps(machine))
        double.use_machine(path)
    with pytest.raises(MigApplyFailed, match=f"failed at {step}") as info:
        runner(opts, stub, **kwargs).run()
    assert "node left drained" in str(info.value)
    journal = Journal.load(opts.journal)
    assert journal.error.startswith(step)
    if step == "drain":  # nothing else happened; the second drain (with the reason) worked
        assert [c[0] for c in stub.calls] == ["drain", "drain"]
    assert stub.state == "DRAIN" and f"failed at {step}" in stub.reason
    if step == "start_slurmd":
        assert journal.state == "failed"  # slurmd would not start again either: said so
        assert "start slurmd" in str(info.value)
    else:
        assert journal.state == "rolled-back"
    assert layout_now(root) == before
    assert _old_files(opts) == (old_gres, old_slurm)


def test_preemptible_jobs_are_requeued_others_waited_for(node) -> None:
    _double, _root, opts, _ = node
    opts = dataclasses.replace(opts, requeue_qos=("p2",))
    stub = SlurmStub(opts.slurm_conf, jobs=[NodeJob("7", "p2"), NodeJob("8", "p2")])
    journal = runner(opts, stub).run()
    assert ("requeue", "7") in stub.calls and ("requeue", "8") in stub.calls
    assert journal.requeued == ["7", "8"] and journal.state == "done"


def test_a_bad_config_name_changes_nothing(node) -> None:
    _double, _root, opts, _ = node
    stub = SlurmStub(opts.slurm_conf)
    with pytest.raises(UsageError, match="--config nope: not in"):
        runner(dataclasses.replace(opts, config_name="nope"), stub).run()
    assert stub.calls == []


def test_recover_rolls_back_a_run_that_crashed_midway(node) -> None:
    _double, root, opts, _ = node
    before = layout_now(root)
    old = _old_files(opts)
    stub = SlurmStub(opts.slurm_conf)
    runner(opts, stub).run(steps=STEPS[:5])  # "crash" after apply_layout
    assert layout_now(root) != before
    with pytest.raises(UsageError, match="--recover"):
        apply_mod.apply_config(opts, slurm=stub)
    journal = apply_mod.recover(opts, slurm=stub, sleep=lambda s: None)
    assert journal.state == "rolled-back"
    assert layout_now(root) == before and _old_files(opts) == old
    assert stub.state == "DRAIN" and "stopped midway" in stub.reason


def test_recover_finishes_a_run_that_started_slurmd(node) -> None:
    _double, _root, opts, _ = node
    stub = SlurmStub(opts.slurm_conf)
    runner(opts, stub).run(steps=STEPS[:9])  # crash after start_slurmd
    journal = apply_mod.recover(opts, slurm=stub, sleep=lambda s: None)
    assert journal.state == "done" and stub.state == "IDLE"


def test_replace_node_gres_changes_only_that_nodes_gres() -> None:
    conf = "NodeName=a CPUs=8 Gres=gpu:2\nNodeName=b Gres=gpu:a100:8 CPUs=8\n"
    new, changed = apply_mod.replace_node_gres(conf, "b", "gpu:1g.5gb:7,gpu:a100:7")
    assert changed and new.splitlines()[0] == "NodeName=a CPUs=8 Gres=gpu:2"
    assert new.splitlines()[1] == "NodeName=b CPUs=8 Gres=gpu:1g.5gb:7,gpu:a100:7"
    same, changed = apply_mod.replace_node_gres(conf, "a", "gpu:2")
    assert not changed and same.split() == conf.split()
    with pytest.raises(MigApplyFailed, match="no NodeName=c line"):
        apply_mod.replace_node_gres(conf, "c", "gpu:1")


def test_target_layouts_reads_mig_parted_configs(node, tmp_path) -> None:
    _double, root, _opts, _ = node
    inv = nvml.read_inventory(root)
    config = tmp_path / "cfg.yaml"
    config.write_text(
        "version: v1\nmig-configs:\n"
        "  mixed:\n"
        "    - devices: all\n      mig-enabled: false\n"
        "  filtered:\n"
        '    - device-filter: ["0x233010DE"]\n      devices: all\n      mig-enabled: true\n'
        '      mig-devices: {"1g.10gb": 7}\n'
        '    - device-filter: "0x20B010DE"\n      devices: [0, 1]\n      mig-enabled: true\n'
        '      mig-devices: {"3g.20gb": 2}\n'
        "    - devices: [2, 3, 4, 5, 6, 7]\n      mig-enabled: false\n"
        "  toobig:\n"
        '    - devices: all\n      mig-enabled: true\n      mig-devices: {"4g.20gb": 2}\n'
    )
    assert set(apply_mod.target_layouts(config, "mixed", inv).values()) == {None}
    layouts = apply_mod.target_layouts(config, "filtered", inv)
    assert layouts[0].label == "3g.20gb x2" and layouts[1].label == "3g.20gb x2"
    assert all(layouts[i] is None for i in range(2, 8))
    with pytest.raises(UsageError, match="does not fit one a100-sxm4-40gb"):
        apply_mod.target_layouts(config, "toobig", inv)


def test_cli_apply_wiring(node, tmp_path) -> None:
    from click.testing import CliRunner

    from slurmgpu.cli import main

    _double, root, opts, _ = node
    runner = CliRunner()
    common = [
        *("mig", "apply", "--node", NODE, "--config-file", str(opts.config_file)),
        *("--gres-conf", str(opts.gres_conf), "--slurm-conf", str(opts.slurm_conf)),
        *("--journal-dir", str(tmp_path / "j"), "--host-root", str(root)),
        *("--slurm-version", "22.05.8", "--restart-slurmctld", "true"),
    ]
    bad = runner.invoke(main, [*common, "--config", "nope"])
    assert bad.exit_code == 2, bad.output
    assert "slurmgpu: error: --config nope: not in" in bad.output
    none = runner.invoke(main, [*common, "--recover"])
    assert none.exit_code == 2 and "nothing to recover" in none.output
    missing = runner.invoke(main, common)
    assert missing.exit_code == 2 and "give --config NAME" in missing.output


def test_merge_node_gres_keeps_the_other_nodes_lines() -> None:
    old = (
        "# cluster file\nAutoDetect=off\n"
        "NodeName=gpu01 Name=gpu Type=h100 File=/dev/nvidia[0-7]\n"
        "NodeName=gpu03 Name=gpu Type=a100 File=/dev/nvidia[0-7]\n"
        "NodeName=gpu04 Name=gpu Type=rtx4090 File=/dev/nvidia[0-7]\n"
    )
    new = (
        "# header\nAutoDetect=off\n# GPU 0\n"
        "NodeName=gpu03 Name=gpu Type=1g.5gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/x\n"
        "NodeName=gpu03 Name=gpu Type=a100 File=/dev/nvidia[1-7]\n"
    )
    merged = apply_mod.merge_node_gres(old, "gpu03", new)
    lines = merged.splitlines()
    assert lines[:3] == old.splitlines()[:3] and lines[3] == old.splitlines()[4]
    assert [x for x in lines if x.startswith("NodeName=gpu03")] == new.splitlines()[3:]
    assert merged.count("AutoDetect=off") == 1
    # applied again (e.g. back to the old layout): the same shape, no growing header
    again = apply_mod.merge_node_gres(merged, "gpu03", new)
    assert again == merged
    # a node's own file is replaced whole, as before
    own = "AutoDetect=off\nNodeName=gpu03 Name=gpu Type=a100 File=/dev/nvidia[0-7]\n"
    assert apply_mod.merge_node_gres(own, "gpu03", new) == new
    assert apply_mod.merge_node_gres(None, "gpu03", new) == new
    shared = "NodeName=gpu[01-03] Name=gpu Type=a100 File=/dev/nvidia[0-7]\nNodeName=x Name=gpu\n"
    with pytest.raises(UsageError, match="shared by gpu03 and other nodes"):
        apply_mod.merge_node_gres(shared, "gpu03", new)


class RegisteringStub(SlurmStub):
    """scontrol shows the new Gres (from slurm.conf) before the restarted slurmd registers."""

    def __init__(self, slurm_conf, states):
        super().__init__(slurm_conf)
        self.states = list(states)

    def node_record(self, node):
        record = super().node_record(node)
        if self.states:
            record["State"] = self.states.pop(0)
            record["Reason"] = "gres/gpu count reported lower than configured (0 < 23)"
        return record


def test_verify_waits_for_slurmd_to_register(node) -> None:
    _double, _root, opts, _ = node
    stub = RegisteringStub(opts.slurm_conf, ["UNKNOWN+DRAIN", "IDLE+DRAIN+NOT_RESPONDING"])
    journal = runner(opts, stub).run()
    assert journal.state == "done" and stub.state == "IDLE"
    shows = [c for c in stub.calls if c[0] == "show"]
    assert len(shows) >= 4  # two while unregistered, the registered one, resume's look


def test_verify_fails_at_once_on_a_refused_registration(node) -> None:
    _double, _root, opts, _ = node
    stub = RegisteringStub(opts.slurm_conf, ["IDLE+DRAIN+INVALID_REG"] * 3)
    with pytest.raises(MigApplyFailed, match="failed at verify: slurmctld refused the node's"):
        runner(opts, stub).run()
    assert stub.state == "DRAIN" and "failed at verify" in stub.reason


def test_a_controller_with_shard_gres_is_refused_before_anything_changes(node) -> None:
    _double, root, opts, _ = node
    before = layout_now(root)
    stub = SlurmStub(opts.slurm_conf)
    stub.types = "gpu,shard"
    with pytest.raises(UsageError, match="GresTypes=gpu,shard: with shard, Slurm splits MIG"):
        runner(opts, stub).run()
    assert stub.calls == [] and stub.state == "IDLE" and layout_now(root) == before


def _order(stub) -> list[str]:
    """The slurmd commands and reconfigure in the order the run made them."""
    names = {("run", "stop"): "stop", ("run", "start"): "start"}
    out = []
    for call in stub.calls:
        if call[0] == "run" and call[1] == "echo":
            out.append(names[("run", call[2])])
        elif call[0] == "reconfigure":
            out.append("reconfigure")
    return out


@pytest.mark.parametrize(
    ("version", "energy", "kept"),
    [
        ((24, 11, 5), "(null)", False),  # slurmd holds NVML: stopped before the change
        ((25, 11, 2), "(null)", True),  # 25.11: no NVML handle, slurmd runs through it
        ((25, 11, 2), "acct_gather_energy/gpu", False),  # GPU energy polling keeps NVML open
        ((25, 11, 2), None, False),  # the controller cannot say: stop it, to be safe
    ],
)
def test_slurmd_is_stopped_only_where_it_holds_nvml(node, version, energy, kept) -> None:
    from slurmgpu.render.gres import GresOptions

    _double, _root, opts, _result = node
    opts = dataclasses.replace(
        opts,
        stop_slurmd=("echo", "stop"),
        start_slurmd=("echo", "start"),
        gres_options=GresOptions(slurm_version=version),
    )
    stub = SlurmStub(opts.slurm_conf, fail=("config",) if energy is None else ())
    stub.config["AcctGatherEnergyType"] = energy or ""
    journal = runner(opts, stub).run()
    assert journal.state == "done" and journal.slurmd_kept_running is kept
    # kept running: restarted after the new gres.conf/slurm.conf (it reads devices at start)
    expected = ["reconfigure", "stop", "start"] if kept else ["stop", "reconfigure", "start"]
    assert _order(stub) == expected
    assert apply_mod.slurmd_holds_nvml((25, 11), "") is False
    assert apply_mod.slurmd_holds_nvml(None, "") and apply_mod.slurmd_holds_nvml((25, 5), "")


def test_a_failure_after_the_change_restarts_a_slurmd_that_kept_running(node) -> None:
    from slurmgpu.render.gres import GresOptions

    _double, root, opts, _result = node
    before = layout_now(root)
    opts = dataclasses.replace(
        opts,
        stop_slurmd=("echo", "stop"),
        start_slurmd=("echo", "start"),
        gres_options=GresOptions(slurm_version=(25, 11, 2)),
    )
    stub = SlurmStub(opts.slurm_conf, fail=("verify",))
    with pytest.raises(MigApplyFailed, match="verify"):
        runner(dataclasses.replace(opts, verify_timeout_s=3), stub).run()
    assert layout_now(root) == before  # old layout back
    # forward: restart after the new config; rollback: slurmd (on the new config) stopped
    # before the old one is back, then restarted on it
    assert _order(stub) == ["reconfigure", "stop", "start", "stop", "reconfigure", "stop", "start"]


# -- the journal read back and the node lock (issue #20) ----------------------------------------


def _crashed_journal(node) -> tuple[ApplyOptions, dict]:
    """A run "crashed" after apply_layout: its journal on disk, as JSON."""
    _double, _root, opts, _ = node
    runner(opts, SlurmStub(opts.slurm_conf)).run(steps=STEPS[:5])
    return opts, json.loads(opts.journal.read_text())


def _reseal(obj: dict) -> dict:
    from slurmgpu.util.journal import SEAL, _digest

    obj = dict(obj)
    obj[SEAL] = _digest(obj)
    return obj


@pytest.mark.parametrize(
    "corrupt, message",
    [
        (lambda o, t: t[: len(t) // 2], "not JSON"),
        (lambda o, t: "[1, 2]", "not a JSON object but list"),
        (lambda o, t: json.dumps({**o, "state": "done"}), "checksum does not match"),
        (lambda o, t: json.dumps(_reseal({**o, "state": "banana"})), "state 'banana' is none"),
        (lambda o, t: json.dumps(_reseal({**o, "done": ["drain", "resume"]})), "not the workflow"),
        (lambda o, t: json.dumps(_reseal({**o, "done": "drain"})), "is not a list"),
        (lambda o, t: json.dumps(_reseal({**o, "node": "other"})), "is of node 'other'"),
        (lambda o, t: json.dumps(_reseal({**o, "old_layout": {"x": None}})), "not a GPU index"),
    ],
)
def test_recover_refuses_a_journal_it_cannot_trust_and_touches_nothing(
    node, corrupt, message
) -> None:
    opts, obj = _crashed_journal(node)
    text = opts.journal.read_text()
    opts.journal.write_text(corrupt(obj, text))
    files = _old_files(opts)
    stub = SlurmStub(opts.slurm_conf)
    with pytest.raises(SlurmgpuError, match=message) as info:
        apply_mod.recover(opts, slurm=stub, sleep=lambda s: None)
    assert "\n" not in str(info.value)
    assert stub.calls == [] and _old_files(opts) == files


def test_the_journals_old_gres_conf_is_checked_before_a_rollback_writes_it(node) -> None:
    opts, obj = _crashed_journal(node)
    for garbage in ("", "rm -rf /\n", "NodeName=gpu99 Name=gpu File=/dev/nvidia0\n"):
        opts.journal.write_text(
            json.dumps(
                _reseal(
                    {
                        **obj,
                        "done": list(STEPS[:6]),
                        "error": "write_gres: killed",
                        "old_gres_conf": garbage,
                    }
                )
            )
        )
        written = opts.gres_conf.read_text()
        with pytest.raises(MigApplyFailed, match=r"restore gres.conf: the journal's old gres.conf"):
            apply_mod.recover(opts, slurm=SlurmStub(opts.slurm_conf), sleep=lambda s: None)
        assert opts.gres_conf.read_text() == written  # never the journal's text
        assert Journal.load(opts.journal).state == "failed"


def test_recover_of_a_finished_run_reports_its_state(node) -> None:
    _double, _root, opts, _ = node
    runner(opts, SlurmStub(opts.slurm_conf)).run()
    assert apply_mod.recover(opts, slurm=SlurmStub(opts.slurm_conf)).state == "done"


def test_a_second_apply_of_a_locked_node_refuses_after_a_bounded_wait(node, monkeypatch) -> None:
    """The lock is the node's in the one shared lock directory (`lock_dir()`, not one
    under the journal directory): a rebalance or autopilot holding it stops mig apply."""
    from slurmgpu.util import lock
    from slurmgpu.util.lock import NodeLocked, lock_dir, node_locks

    monkeypatch.setattr(lock, "DEFAULT_WAIT_S", 0.2)
    _double, root, opts, _ = node
    before, files = layout_now(root), _old_files(opts)
    stub = SlurmStub(opts.slurm_conf)
    assert not lock_dir().is_relative_to(opts.journal_dir)
    with node_locks(lock_dir(), [NODE], "mig apply other"):
        for call in (apply_mod.apply_config, apply_mod.recover):
            with pytest.raises(NodeLocked, match=f"{NODE}: another slurmgpu command") as info:
                call(opts, slurm=stub)
            assert "mig apply other" in str(info.value) and f"pid {os.getpid()}" in str(info.value)
    assert stub.calls == [] and layout_now(root) == before and _old_files(opts) == files
    # the lock is gone with its holder: the next apply runs
    assert apply_mod.apply_config(opts, slurm=stub, sleep=lambda s: None).state == "done"


# -- --dry-run and --emit DIR (issue #24) --------------------------------------------------------


def _statements(text: str) -> list[str]:
    """What Slurm reads of a config file (comments, like the inventory digest, left out)."""
    return [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def test_emit_writes_the_files_a_run_writes_and_changes_nothing(node, tmp_path) -> None:
    _double, root, opts, _ = node
    before, files = layout_now(root), _old_files(opts)
    stub = SlurmStub(opts.slurm_conf)
    out = tmp_path / "emitted"
    apply_mod.emit(opts, out, slurm=stub)
    assert stub.calls == [] and layout_now(root) == before and _old_files(opts) == files
    assert not opts.journal.exists() and stub.state == "IDLE"
    assert sorted(p.name for p in out.iterdir()) == [
        "changes.diff", "gres.conf", "slurm.conf", "steps.txt"
    ]  # fmt: skip
    steps = (out / "steps.txt").read_text().splitlines()
    assert [s.split(":")[0] for s in steps] == list(STEPS)
    assert "GPU 0: 7 x 1g.5gb" in steps[4]
    # the patch, applied by hand to copies of the live files, gives the emitted files
    import shutil
    import subprocess

    hand = tmp_path / "by-hand"
    shutil.copytree(opts.gres_conf.parent, hand)
    diff = (out / "changes.diff").read_text().replace(str(opts.gres_conf.parent), str(hand))
    subprocess.run(["patch", "-s", "-p0"], input=diff, text=True, check=True, cwd="/")
    for name in ("gres.conf", "slurm.conf"):
        assert (hand / name).read_text() == (out / name).read_text()
    # ... and what the live run writes
    assert runner(opts, stub).run().state == "done"
    assert _statements(opts.gres_conf.read_text()) == _statements((out / "gres.conf").read_text())
    assert opts.slurm_conf.read_text() == (out / "slurm.conf").read_text()


def test_dry_run_prints_the_steps_and_diffs_and_changes_nothing(node) -> None:
    _double, root, opts, _ = node
    before, files = layout_now(root), _old_files(opts)
    stub = SlurmStub(opts.slurm_conf)
    text = apply_mod.preview(opts, slurm=stub).text()
    assert stub.calls == [] and layout_now(root) == before and _old_files(opts) == files
    lines = text.splitlines()
    assert lines[0] == f"# mig apply {opts.config_name} on {NODE}: dry run, nothing changed"
    assert lines[1].startswith(f"1. drain: scontrol update NodeName={NODE} State=DRAIN")
    gres = "gpu:1g.5gb:16,gpu:2g.10gb:2,gpu:1g.10gb:1,gpu:a100:5"
    assert lines[8] == (
        f"8. reconfigure: NodeName={NODE} Gres={gres} in {opts.slurm_conf}, `scontrol reconfigure`"
    )
    assert lines[5].startswith("5. apply_layout: through NVML: GPU 0: 7 x 1g.5gb; GPU 1: ")
    assert f"--- {opts.gres_conf}" in text and f"+++ {opts.slurm_conf}" in text


def test_dry_run_and_recover_exclude_each_other(tmp_path) -> None:
    from click.testing import CliRunner

    from slurmgpu.cli import main

    argv = ["mig", "apply", "--node", NODE, "--recover", "--dry-run"]
    argv += ["--journal-dir", str(tmp_path)]
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 2
    assert result.output == (
        "slurmgpu: error: mig apply: --recover acts on a journal; no --dry-run or --emit with it\n"
    )


def test_the_callers_recheck_runs_under_the_lock_and_refuses_before_the_drain(node) -> None:
    """Issue 33: the autopilot's guardrails (kill switch, a P0 job started since) are read
    again with the node's lock held; a reason refuses the run before anything is touched."""
    from slurmgpu.util.lock import NodeLocked, lock_dir, node_locks

    _double, root, opts, _ = node
    before, files = layout_now(root), _old_files(opts)
    stub = SlurmStub(opts.slurm_conf)

    def recheck():
        with pytest.raises(NodeLocked), node_locks(lock_dir(), [NODE], "other", wait_s=0):
            pass  # held by the apply now
        return [None, f"{NODE} runs job 9 (QOS p0): P0 or not preemptible"]

    with pytest.raises(MigApplyFailed, match=r"not changed: .*runs job 9"):
        apply_mod.apply_config(opts, slurm=stub, recheck=recheck)
    assert stub.calls == [] and layout_now(root) == before and _old_files(opts) == files
    assert not opts.journal.exists()


# -- exit codes (issue 33, docs/acting.md): 3 changed or would, 0 nothing ----------------------


def test_cli_apply_exits_3_when_it_changes_or_would_and_0_when_the_node_is_as_planned(
    node, tmp_path, monkeypatch
) -> None:
    from click.testing import CliRunner

    from slurmgpu.cli import main
    from slurmgpu.render.gres import DEFAULT_SLURM_VERSION
    from slurmgpu.sources import slurm_node_control

    _double, root, opts, _ = node
    stub = SlurmStub(opts.slurm_conf)
    monkeypatch.setattr(slurm_node_control, "SlurmNodeControl", lambda env=None: stub)
    common = [
        *("mig", "apply", "--node", NODE, "--config-file", str(opts.config_file)),
        *("--gres-conf", str(opts.gres_conf), "--slurm-conf", str(opts.slurm_conf)),
        *("--journal-dir", str(tmp_path / "j"), "--host-root", str(root), "--no-check"),
        *("--slurm-version", ".".join(map(str, DEFAULT_SLURM_VERSION))),
        *("--stop-slurmd", "true", "--start-slurmd", "true", "--poll", "0.01"),
    ]
    run = [*common, "--config", opts.config_name]
    invoke = CliRunner().invoke
    before, files = layout_now(root), _old_files(opts)
    dry = invoke(main, [*run, "--dry-run"])
    assert dry.exit_code == 3, dry.output  # GPUs 1 and 2 would be carved
    emitted = invoke(main, [*run, "--emit", str(tmp_path / "out")])
    assert emitted.exit_code == 3, emitted.output
    assert layout_now(root) == before and _old_files(opts) == files
    applied = invoke(main, run)
    assert applied.exit_code == 3, applied.output
    assert layout_now(root) != before and any(c[0] == "drain" for c in stub.calls)
    # the node is as planned now: nothing would change, in either mode
    dry_again = invoke(main, [*run, "--dry-run"])
    assert dry_again.exit_code == 0, dry_again.output
    assert f"# {opts.gres_conf}: unchanged" in dry_again.output
    emitted_again = invoke(main, [*run, "--emit", str(tmp_path / "out2")])
    assert emitted_again.exit_code == 0, emitted_again.output
    # --recover of a finished run does nothing: 0 (of a crashed one: 3, below)
    finished = invoke(main, [*common, "--recover"])
    assert finished.exit_code == 0, finished.output


def test_cli_recover_of_a_crashed_run_exits_3(node, monkeypatch) -> None:
    from click.testing import CliRunner

    from slurmgpu.cli import main
    from slurmgpu.sources import slurm_node_control

    _double, root, opts, _ = node
    stub = SlurmStub(opts.slurm_conf)
    monkeypatch.setattr(slurm_node_control, "SlurmNodeControl", lambda env=None: stub)
    crashed = runner(opts, stub)
    crashed.run(steps=STEPS[:5])  # killed after apply_layout: the journal stays running
    assert Journal.load(opts.journal).state == "running"
    argv = [
        *("mig", "apply", "--node", NODE, "--recover", "--no-check"),
        *("--gres-conf", str(opts.gres_conf), "--slurm-conf", str(opts.slurm_conf)),
        *("--journal-dir", str(opts.journal_dir), "--host-root", str(root)),
        *("--stop-slurmd", "true", "--start-slurmd", "true"),
    ]
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 3, result.output
    assert Journal.load(opts.journal).state == "rolled-back"
