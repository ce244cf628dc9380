"""The pure comparisons of `slurmgpu check`, on recorded snapshots and scontrol records."""

from __future__ import annotations

import dataclasses

from slurmgpu.fleet.check import (
    CheckReport,
    drift_problems,
    gres_conf_problems,
    health_check_action,
    health_problems,
    state_problems,
)
from slurmgpu.model.fleet import GpuHealth, Problem
from slurmgpu.model.inventory import SkippedGpu
from slurmgpu.render import gres
from slurmgpu.sources import snapshot
from slurmgpu.views.fleet_check import render_json, render_prometheus, render_text
from tests.doubles.machines import EXAMPLES

OPTS = gres.GresOptions()
H100_RECORD = {
    "NodeName": "n1",
    "State": "IDLE",
    "Gres": "gpu:h100:8(S:0-1)",
    "CPUTot": "224",
    "Sockets": "2",
    "CoresPerSocket": "56",
    "ThreadsPerCore": "2",
}


def inv(name="dgx-h100"):
    return snapshot.load(EXAMPLES / f"{name}.json")


def kinds(problems):
    return [p.kind for p in problems]


def test_a_matching_node_has_no_problem():
    assert drift_problems("n1", H100_RECORD, inv(), OPTS) == []


def test_a_missing_gpu_and_a_lost_one():
    lost = dataclasses.replace(
        inv(),
        gpus=inv().gpus[:7],
        skipped_gpus=(SkippedGpu(7, "00000000:DB:00.0", "GPU is lost"),),
    )
    problems = drift_problems("n1", H100_RECORD, lost, OPTS)
    assert kinds(problems) == ["gpu-lost", "missing-gpu"]
    assert problems[1].message == "1 x gpu:h100 missing: Slurm has 8, NVML reports 7"


def test_an_extra_gpu_is_a_warning():
    problems = drift_problems("n1", {**H100_RECORD, "Gres": "gpu:h100:4"}, inv(), OPTS)
    assert [(p.kind, p.severity) for p in problems] == [("extra-gpu", "warning")]


def test_type_mismatch_and_mig_layout_change():
    wrong = drift_problems("n1", {**H100_RECORD, "Gres": "gpu:a100:8"}, inv(), OPTS)
    assert kinds(wrong) == ["type-mismatch"]
    mig_record = {**H100_RECORD, "Gres": "gpu:1g.5gb:14,gpu:a100:6", "CPUTot": "256"}
    mig = drift_problems("n1", mig_record, inv("dgx-a100-mig"), OPTS)
    assert "mig-layout-changed" in kinds(mig)
    assert "gpu:1g.5gb:7" in next(p for p in mig if p.kind == "mig-layout-changed").message


def test_a_cpu_layout_that_differs_is_named():
    problems = drift_problems("n1", {**H100_RECORD, "CoresPerSocket": "48"}, inv(), OPTS)
    assert kinds(problems) == ["wrong-cpu-layout"]
    assert "CoresPerSocket=48 (host: 56)" in problems[0].message


def test_wrong_cores_in_gres_conf():
    good = gres.render_gres_conf(
        inv(), dataclasses.replace(OPTS, node_name="n1"), inventory_sha256="-"
    )
    assert gres_conf_problems("n1", good, inv(), OPTS) == []
    bad = good.replace("File=/dev/nvidia4 Cores=56-111", "File=/dev/nvidia4 Cores=0-55")
    problems = gres_conf_problems("n1", bad, inv(), OPTS)
    assert kinds(problems) == ["wrong-cores"]
    assert "/dev/nvidia4 Cores=0-55, the GPU's CPU affinity gives 56-111" in problems[0].message
    # a line for another node does not count for n1
    assert (
        kinds(gres_conf_problems("n1", good.replace("n1", "n2"), inv(), OPTS))
        == ["gres-conf-missing-gpu"] * 8
    )


def test_drained_for_a_gres_count():
    record = {
        **H100_RECORD,
        "State": "IDLE+DRAIN",
        "Reason": "gres/gpu count reported lower than configured (7 < 8) [slurm@2026]",
    }
    assert kinds(state_problems("n1", record)) == ["drained-gres-count"]
    assert state_problems("n1", {**record, "Reason": "maintenance"}) == []


def test_health_counters():
    health = [
        GpuHealth(0, "b0", persistence_mode=False),
        GpuHealth(1, "b1", xids=(13, 48, 48)),
        GpuHealth(2, "b2", lost=True, xids=(79,)),
        GpuHealth(3, "b3", ecc_uncorrected_volatile=3, remapped_rows_pending=True),
        GpuHealth(4, "b4", retired_pages_pending=True, remapping_failed=True),
    ]
    problems = health_problems("n1", health)
    assert [(p.kind, p.severity) for p in problems] == [
        ("persistence-off", "warning"),
        ("xid", "warning"),
        ("xid", "error"),
        ("gpu-lost", "error"),
        ("ecc-uncorrected", "error"),
        ("row-remap-pending", "error"),
        ("retired-pages-pending", "error"),
        ("row-remap-failed", "error"),
    ]


def test_health_check_drains_resumes_and_leaves_others_alone():
    err = [Problem("n1", "xid", "GPU 1 reported Xid 48", "reset")]
    warn = [Problem("n1", "persistence-off", "pm off", "pm on", "warning")]
    idle = {"State": "IDLE"}
    assert health_check_action(idle, err).kind == "drain"
    assert health_check_action(idle, err).reason == "slurmgpu: GPU 1 reported Xid 48"
    drained = {"State": "IDLE+DRAIN", "Reason": "slurmgpu: GPU 1 reported Xid 48 [root@x]"}
    assert health_check_action(drained, err).kind == "none"  # already drained for it
    assert health_check_action(drained, warn).kind == "resume"
    others = {"State": "IDLE+DRAIN", "Reason": "maintenance"}
    assert health_check_action(others, []).kind == "none"
    assert health_check_action(idle, warn).kind == "none"


def test_outputs():
    report = CheckReport(
        ("n1", "n2"),
        (
            Problem("n1", "missing-gpu", "1 x gpu:h100 missing", "find it"),
            Problem("n2", "persistence-off", 'pm "off"', "pm on", "warning"),
        ),
    )
    text = render_text(report)
    assert text.splitlines() == [
        "n1: error: 1 x gpu:h100 missing; find it",
        'n2: warning: pm "off"; pm on',
        "slurmgpu check: 1 error(s), 1 warning(s) on 2 node(s)",
    ]
    assert '"kind": "missing-gpu"' in render_json(report)
    prom = render_prometheus(report)
    assert 'slurmgpu_check_node_ok{node="n1"} 0' in prom
    assert 'slurmgpu_check_node_ok{node="n2"} 1' in prom
    assert 'slurmgpu_check_problems{node="n2",kind="persistence-off",severity="warning"} 1' in prom
    assert render_text(CheckReport(("n1",), ())).strip() == "slurmgpu check: 1 node(s) OK"


def test_the_health_check_skips_its_action_while_another_command_holds_the_node(tmp_path):
    from slurmgpu.fleet.check import CheckReport, apply_health_action
    from slurmgpu.util.lock import node_locks

    report = CheckReport(("gpu03",), ())
    with node_locks(tmp_path, ["gpu03"], "mig apply relayout"):
        # no scontrol on this PATH: an action taken would fail
        done = apply_health_action("gpu03", report, {"PATH": "/nonexistent"}, lock_dir=tmp_path)
    assert done.action.kind == "skipped"
    assert "gpu03: another slurmgpu command is changing it" in done.action.reason
    assert "mig apply relayout" in done.action.reason
    import pytest

    from slurmgpu.errors import SlurmCommandError

    with pytest.raises(SlurmCommandError):  # free again: it acts (and needs scontrol)
        apply_health_action("gpu03", report, {"PATH": "/nonexistent"}, lock_dir=tmp_path)


def test_the_health_check_acts_where_no_lock_directory_can_be_made(tmp_path):
    import pytest

    from slurmgpu.errors import SlurmCommandError
    from slurmgpu.fleet.check import CheckReport, apply_health_action

    (tmp_path / "file").write_text("")
    report = CheckReport(("gpu03",), ())
    with pytest.raises(SlurmCommandError):  # it went on to scontrol (none on this PATH)
        apply_health_action(
            "gpu03", report, {"PATH": "/nonexistent"}, lock_dir=tmp_path / "file" / "locks"
        )


def test_the_health_check_locks_in_the_one_lock_directory_every_acting_command_shares(
    tmp_path, monkeypatch
):
    """A `mig apply` holds the node in `util.lock.lock_dir()` ($SLURMGPU_LOCK_DIR): the
    health check, given no directory, sees that lock and skips at once."""
    from slurmgpu.fleet.check import CheckReport, apply_health_action
    from slurmgpu.util.lock import lock_dir, node_locks

    monkeypatch.setenv("SLURMGPU_LOCK_DIR", str(tmp_path / "shared"))
    with node_locks(lock_dir(), ["gpu03"], "mig apply relayout"):
        done = apply_health_action("gpu03", CheckReport(("gpu03",), ()), {"PATH": "/nonexistent"})
    assert done.action.kind == "skipped" and "mig apply relayout" in done.action.reason
