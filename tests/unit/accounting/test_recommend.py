"""Recommendations fire on the evidence they name, and say "none" honestly otherwise."""

from datetime import UTC, datetime

import pytest

from slurmgpu.accounting import AnalysisOptions, analyze
from slurmgpu.accounting.document import Layout
from slurmgpu.accounting.recommend import instances_per_gpu, valid_layout
from slurmgpu.model.catalog import model_for_type

from .sacct_text import job, text


def run(tmp_path, rows, **kw):
    path = tmp_path / "dump.txt"
    path.write_text(text(rows))
    return analyze(AnalysisOptions(files=[path], **kw)).to_json()


def small_h100_jobs(n, mem="5000M"):
    # n single-H100 jobs, 4 at a time, each 1 h, measured far below 1/7 of the GPU's memory
    return [
        job(i, "gpu", 0, ((i - 1) // 4) * 3600, ((i - 1) // 4) * 3600 + 3600,
            "gres/gpu:h100=1,gres/gpu=1", usage=f"gres/gpumem={mem},gres/gpuutil=30")
        for i in range(1, n + 1)
    ]  # fmt: skip


def test_mig_carve_for_measured_small_jobs(tmp_path):
    doc = run(tmp_path, small_h100_jobs(40), capacity={"gpu": 8})
    recs = [r for r in doc["recommendations"] if r["kind"] == "mig_carve"]
    assert len(recs) == 1
    rec = recs[0]
    ev = rec["evidence"]
    assert ev["gpu_runs"] == 40 and ev["runs_fitting_one_slice"] == 40
    assert ev["one_slice"] == "1/7"  # an H100 has 7 compute slices
    assert ev["basis"] == "measured GPU memory"
    # p95 concurrency 4 x headroom 1.25 = 5 slices -> one GPU as 7x 1g.10gb
    assert ev["layouts"] == [{"profile": "1g.10gb", "per_gpu": 7, "gpus": 1}]
    assert rec["estimated_effect"]["gpus_carved"] == 1
    assert rec["change"] == "carve:gpu:1:1g.10gb=7" and rec["changes"] == [rec["change"]]
    # hour by hour: 4 whole GPUs held, 1 carved GPU (7 slices) holds the 4 small jobs
    eff = rec["estimated_effect"]
    assert eff["whole_gpus_freed_p50"] == pytest.approx(4 - 1)
    assert eff["hours_slices_short"] == 0
    model = model_for_type("h100")
    assert valid_layout(model.profile("1g.10gb"), 7)


def test_half_gpu_jobs_get_a_3g_layout(tmp_path):
    doc = run(tmp_path, small_h100_jobs(40, mem="30000M"), capacity={"gpu": 8})
    rec = next(r for r in doc["recommendations"] if r["kind"] == "mig_carve")
    assert rec["evidence"]["layouts"] == [{"profile": "3g.40gb", "per_gpu": 2, "gpus": 3}]
    assert rec["change"] == "carve:gpu:3:3g.40gb=2"


def test_no_mig_model_gets_shards(tmp_path):
    rows = [
        job(i, "gpu", 0, 0, 3600, "gres/gpu:rtx4090=1,gres/gpu=1", usage="gres/gpumem=2000M")
        for i in range(1, 25)
    ]
    doc = run(tmp_path, rows)
    rec = doc["recommendations"][0]
    assert rec["kind"] == "shard"
    effect = rec["estimated_effect"]
    assert rec["change"] == f"shard:gpu:{effect['gpus_shared']}:{effect['shards_per_gpu']}"


def mixed_jobs(n, gres_type, small_mem, large_mem):
    """n single-GPU jobs of `gres_type`, 4 at a time, each 1 h, half measured at each memory."""
    return [
        job(i, "gpu", 0, ((i - 1) // 4) * 3600, ((i - 1) // 4) * 3600 + 3600,
            f"gres/gpu:{gres_type}=1,gres/gpu=1",
            usage=f"gres/gpumem={small_mem if i % 2 else large_mem},gres/gpuutil=30")
        for i in range(1, n + 1)
    ]  # fmt: skip


def test_a30_carve_uses_its_4_slice_grid(tmp_path):
    # 2000M and 5000M of a 24 GiB A30 both fit one of its 4 compute slices (1g.6gb holds the
    # p95 5000M + 10%): one class, one layout of 4x 1g.6gb (a 7-slice grid would split them
    # into a 1/7 and a 1/2 class and carve a GPU for each)
    path = tmp_path / "dump.txt"
    path.write_text(text(mixed_jobs(40, "a30", "2000M", "5000M")))
    document = analyze(AnalysisOptions(files=[path], capacity={"gpu": 8})).document
    rec = next(r for r in document.recommendations if r.kind == "mig_carve")
    assert rec.evidence.one_slice == "1/4" and rec.evidence.gpu_model == "a30"
    assert rec.evidence.runs_fitting_one_slice == 40
    assert set(rec.evidence.p95_concurrent_small_runs) == {"1/4", "1/2"}
    # 4 at once x headroom 1.25 = 5 slices -> 2 GPUs of 4x 1g.6gb
    assert rec.evidence.layouts == (Layout("1g.6gb", per_gpu=4, gpus=2),)
    assert rec.changes == ("carve:gpu:2:1g.6gb=4",)
    assert rec.estimated_effect.whole_gpus_freed_p50 == pytest.approx(4 - 2)


def test_a100_carve_uses_its_7_slice_grid(tmp_path):
    # on a 40 GB A100, 2000M fits 1/7 (1g.5gb, 7 per GPU); 15000M only 1/2 (3g.20gb, 2 per GPU)
    path = tmp_path / "dump.txt"
    path.write_text(text(mixed_jobs(40, "a100", "2000M", "15000M")))
    document = analyze(AnalysisOptions(files=[path], capacity={"gpu": 8})).document
    rec = next(r for r in document.recommendations if r.kind == "mig_carve")
    assert rec.evidence.one_slice == "1/7" and rec.evidence.runs_fitting_one_slice == 20
    # 2 of each at once x 1.25 = 2.5 -> 1 GPU of 7x 1g.5gb and 2 GPUs of 2x 3g.20gb
    assert rec.evidence.layouts == (
        Layout("1g.5gb", per_gpu=7, gpus=1),
        Layout("3g.20gb", per_gpu=2, gpus=2),
    )
    assert rec.estimated_effect.gpus_carved == 3
    assert rec.changes == ("carve:gpu:1:1g.5gb=7", "carve:gpu:2:3g.20gb=2")


def test_instances_per_gpu_follow_the_models_grid():
    a30, a100 = model_for_type("a30"), model_for_type("a100")
    assert [instances_per_gpu(a30.profile(p)) for p in ("1g.6gb", "2g.12gb", "4g.24gb")] == [
        4, 2, 1,
    ]  # fmt: skip
    assert valid_layout(a30.profile("1g.6gb"), 4) and not valid_layout(a30.profile("1g.6gb"), 5)
    assert [instances_per_gpu(a100.profile(p)) for p in ("1g.5gb", "3g.20gb", "7g.40gb")] == [
        7, 2, 1,
    ]  # fmt: skip


def test_layout_validity_from_catalogue():
    m = model_for_type("h100")
    assert valid_layout(m.profile("3g.40gb"), 2) and not valid_layout(m.profile("3g.40gb"), 3)
    assert not valid_layout(m.profile("1g.20gb"), 5)


def test_none_when_data_does_not_support_a_change(tmp_path):
    rows = [job(i, "gpu", 0, 0, 3600, "gres/gpu=1") for i in range(1, 6)]
    doc = run(tmp_path, rows)
    assert len(doc["recommendations"]) == 1
    rec = doc["recommendations"][0]
    assert rec["kind"] == "none" and rec["title"] == "No change recommended"
    assert rec["change"] is None and rec["changes"] == []
    assert any("fewer than 20" in c for c in rec["evidence"]["checks"])
    assert rec["estimated_effect"] == {}


def test_whole_gpu_jobs_without_measurement_never_trigger_a_carve(tmp_path):
    rows = [job(i, "gpu", 0, 0, 3600, "gres/gpu=1") for i in range(1, 41)]
    doc = run(tmp_path, rows)
    assert [r["kind"] for r in doc["recommendations"]] == ["none"]


def test_move_nodes_from_idle_to_starved(tmp_path):
    # partition a: 8 GPUs, busy all day, jobs wait 2 h; partition b: 32 GPUs, one small job
    rows = [
        job(i, "a", (i - 1) * 3600 - 7200, (i - 1) * 3600, i * 3600, "gres/gpu=8")
        for i in range(3, 25)
    ]
    rows.append(job(100, "b", 7200, 7200, 10800, "gres/gpu=1"))
    doc = run(
        tmp_path, rows, capacity={"a": 8, "b": 32},
        since=datetime(2025, 12, 1, 2, tzinfo=UTC), until=datetime(2025, 12, 2, tzinfo=UTC),
    )  # fmt: skip
    rec = next(r for r in doc["recommendations"] if r["kind"] == "move_nodes")
    assert rec["evidence"]["from"]["partition"] == "b"
    assert rec["evidence"]["to"]["partition"] == "a"
    # a's jobs wait 2 h on 8 GPUs, so ~16 GPUs of demand wait on average: 2 nodes of 8
    # (b could give 3 and stay under 70% allocated; it gives what the demand needs)
    eff = rec["estimated_effect"]
    assert eff["gpus_moved"] == 16
    assert eff["donor_allocation_ratio_after"] < 0.70
    assert eff["demand_gpu_hours_served"] > 0


def test_preemption_losses_flagged(tmp_path):
    rows = [
        job(1, "gpu", 0, 0, 7200, "gres/gpu=8", state="PREEMPTED", qos="p2", tl=120),
        job(2, "gpu", 7200, 7200, 7300, "gres/gpu=8", qos="p0"),
    ]
    doc = run(tmp_path, rows, tiers={"p0": "P0", "p2": "P2"})
    rec = next(r for r in doc["recommendations"] if r["kind"] == "tier_adjust")
    ev = rec["evidence"]
    assert ev["gpu_hours_lost_to_preemption"] == pytest.approx(16)
    assert ev["gpu_hours_wait_saved_estimate"] == pytest.approx(0)  # limit reached: saved none
    assert ev["preempted_tiers"] == ["P2"]
    assert rec["title"] == (
        "Preemption throws away more than it buys: give the preempted tiers a 5 min grace to "
        "checkpoint before they are requeued, or stop preempting P2"
    )
    # in the project's own terms: GraceTime=0 + KillWait (docs/policy.md), never "GraceTime"
    assert 'preempt_mode = "requeue" and grace_time_s = 300' in rec["detail"]
    assert "GraceTime=0 and KillWait=300" in rec["detail"]
    assert "add GraceTime" not in rec["title"] + rec["detail"]
    assert rec["changes"] == ["tier:p2:grace_s=300"]


def test_top_tier_waiting_too_long(tmp_path):
    rows = [job(i, "gpu", 0, 3600, 3700, "gres/gpu=1", qos="p0") for i in range(1, 7)]
    doc = run(tmp_path, rows, tiers={"p0": "P0"})
    rec = next(r for r in doc["recommendations"] if r["kind"] == "tier_adjust")
    assert rec["evidence"]["tier"] == "P0" and rec["evidence"]["wait_s"]["p95"] == 3600
    assert "add the lower tiers to tiers.P0.preempts" in rec["detail"]
    assert "`slurmgpu qos apply`" in rec["detail"]


def _starved_a_idle_donors(a_alloc, donors):
    """Partition a: 8 GPUs busy all day, its jobs waiting 2 h; donors: {partition: alloc}."""
    rows = [
        job(i, "a", (i - 1) * 3600 - 7200, (i - 1) * 3600, i * 3600, a_alloc) for i in range(3, 25)
    ]
    rows += [job(100 + k, p, 7200, 7200, 10800, alloc) for k, (p, alloc) in enumerate(donors)]
    return rows


DAY = {"since": datetime(2025, 12, 1, 2, tzinfo=UTC), "until": datetime(2025, 12, 2, tzinfo=UTC)}


def test_move_prefers_a_donor_of_the_same_gpu_type(tmp_path):
    v100 = "gres/gpu:v100m32=1,gres/gpu=1"
    rows = _starved_a_idle_donors(
        "gres/gpu:v100m32=8,gres/gpu=8",
        [("b", "gres/gpu:nvidia_a10=1,gres/gpu=1"), ("c", v100)],
    )
    # b (A10) is the more idle, but c has a's GPU model
    doc = run(tmp_path, rows, capacity={"a": 8, "b": 48, "c": 32}, **DAY)
    moves = [r for r in doc["recommendations"] if r["kind"] == "move_nodes"]
    assert [m["change"] for m in moves] == ["move:c:a:16"]
    assert "A10" not in moves[0]["title"]


def test_no_other_gpu_type_into_a_partition_of_typed_jobs(tmp_path):
    rows = _starved_a_idle_donors(
        "gres/gpu:v100m32=8,gres/gpu=8", [("b", "gres/gpu:nvidia_a10=1,gres/gpu=1")]
    )
    doc = run(tmp_path, rows, capacity={"a": 8, "b": 32}, **DAY)
    assert not [r for r in doc["recommendations"] if r["kind"] == "move_nodes"]
    assert "ask a typed GPU (b -> a)" in doc["recommendations"][0]["detail"]


def test_other_gpu_type_into_an_untyped_partition_says_so(tmp_path):
    rows = _starved_a_idle_donors("gres/gpu=8", [("b", "gres/gpu:nvidia_a10=1,gres/gpu=1")])
    rows.append(job(99, "a", 7200, 7200, 9000, "gres/gpu:v100m32=1,gres/gpu=1"))  # 1 typed of 23
    doc = run(tmp_path, rows, capacity={"a": 8, "b": 32}, gpu_types={"a": "v100m32"}, **DAY)
    move = next(r for r in doc["recommendations"] if r["kind"] == "move_nodes")
    assert move["change"] == "move:b:a:16"
    caveat = "A10 nodes into a V100-32GB partition: jobs asking gres/gpu:v100m32 will not use them"
    assert caveat in move["title"] and move["detail"].startswith(caveat)


def test_move_counts_whole_nodes_of_the_donors_own_size(tmp_path):
    rows = _starved_a_idle_donors("gres/gpu=8", [("b", "gres/gpu=1")])
    doc = run(tmp_path, rows, capacity={"a": 8, "b": 32}, gpus_per_node={"b": 4}, **DAY)
    move = next(r for r in doc["recommendations"] if r["kind"] == "move_nodes")
    # ~16 GPUs of demand: 4 nodes of 4 (not 2 of the default 8)
    assert move["change"] == "move:b:a:16" and move["title"].startswith("Move 4 node(s)")
    assert move["evidence"]["gpus_per_node"] == 4
    doc = run(tmp_path, rows, capacity={"a": 8, "b": 32}, gpus_per_node={"*": 2}, **DAY)
    move = next(r for r in doc["recommendations"] if r["kind"] == "move_nodes")
    assert move["title"].startswith("Move 8 node(s)") and move["evidence"]["gpus_per_node"] == 2
