"""Metric definitions on small constructed accounting data."""

from datetime import UTC, datetime

import pytest

from slurmgpu.accounting import AnalysisOptions, analyze

from .sacct_text import job, text


def run(tmp_path, rows, **kw):
    path = tmp_path / "dump.txt"
    path.write_text(text(rows))
    return analyze(AnalysisOptions(files=[path], **kw)).to_json()


def at(h, m=0):
    return datetime(2025, 12, 1, h, m, tzinfo=UTC)


def test_gpu_hours_split_across_hourly_buckets(tmp_path):
    rows = [job(1, "gpu", 0, 1800, 1800 + 7200, "gres/gpu=2")]  # 00:30 -> 02:30 on 2 GPUs
    doc = run(tmp_path, rows, since=at(0), until=at(3), capacity={"gpu": 8})
    pts = doc["timeseries"]["points"]
    assert doc["timeseries"]["freq"] == "1h"
    assert [p["t"] for p in pts] == [f"2025-12-01T0{h}:00:00Z" for h in range(3)]
    assert [p["gpu_hours_allocated"] for p in pts] == pytest.approx([1.0, 2.0, 1.0])
    assert [p["capacity_gpu_hours"] for p in pts] == [8.0, 8.0, 8.0]
    assert pts[1]["allocation_ratio"] == pytest.approx(0.25)
    assert pts[1]["by_partition"] == {"gpu": pytest.approx(2.0)}
    t = doc["totals"]
    assert t["gpu_hours_allocated"] == pytest.approx(4.0)
    assert t["capacity_gpu_hours"] == 24.0 and t["allocation_ratio"] == pytest.approx(4 / 24)


def test_window_clips_gpu_hours_and_drops_runs_outside(tmp_path):
    rows = [
        job(1, "gpu", 0, 1800, 1800 + 7200, "gres/gpu=2"),
        job(2, "gpu", 0, 0, 600, "gres/gpu=1"),  # ends before the window
    ]
    doc = run(tmp_path, rows, since=at(1), until=at(2))
    assert doc["totals"]["gpu_hours_allocated"] == pytest.approx(2.0)
    assert doc["totals"]["jobs"] == 1 and doc["totals"]["rows_outside_window"] == 1
    assert doc["totals"]["rows_read"] == doc["totals"]["rows_analyzed"] == 2
    assert doc["window"] == {"since": "2025-12-01T01:00:00Z", "until": "2025-12-01T02:00:00Z"}


def test_daily_buckets_for_long_windows(tmp_path):
    rows = [job(1, "gpu", 0, 0, 86400 * 2, "gres/gpu=1")]
    doc = run(tmp_path, rows, since=at(0), until=datetime(2025, 12, 8, tzinfo=UTC))
    pts = doc["timeseries"]["points"]
    assert doc["timeseries"]["freq"] == "1D" and len(pts) == 7
    assert [p["gpu_hours_allocated"] for p in pts[:3]] == pytest.approx([24, 24, 0])


def test_utilization_known_unknown_and_waste(tmp_path):
    rows = [
        job(1, "gpu", 0, 0, 3600, "gres/gpu=1", usage="gres/gpumem=8000M,gres/gpuutil=25"),
        job(2, "gpu", 0, 0, 3600, "gres/gpu=1"),  # no usage: unknown
    ]
    p = run(tmp_path, rows)["by_partition"][0]
    assert p["gpu_hours_allocated"] == pytest.approx(2.0)
    assert p["gpu_hours_used"] == pytest.approx(0.25)  # only the measured hour counts
    assert p["waste_gpu_hours"] == pytest.approx(0.75)
    assert p["gpu_util_mean"] == pytest.approx(25)
    assert p["util_known_gpu_hours"] == pytest.approx(1.0)


def test_utilization_null_not_zero_when_never_measured(tmp_path):
    doc = run(tmp_path, [job(1, "gpu", 0, 0, 3600, "gres/gpu=1")])
    t = doc["totals"]
    assert t["gpu_hours_used"] is None and t["gpu_util_mean"] is None
    assert t["waste_gpu_hours"] is None
    assert doc["by_partition"][0]["capacity_gpu_hours"] is None


def test_slurm_2405_usage_sums_are_divided_by_the_steps_gpus(tmp_path):
    # Slurm >= 24.05 sums gpuutil/gpumem over a step's GPUs: 8 GPUs at 50% read 400, and
    # 8 x 10000 MiB read 80000M. The step's own AllocTRES (gres/gpu=8) gives the count.
    rows = [job(1, "gpu", 0, 0, 3600, "gres/gpu:h100=8,gres/gpu=8",
                usage="gres/gpumem=80000M,gres/gpuutil=400")]  # fmt: skip
    doc = run(tmp_path, rows, slurm_version="24.05")
    assert doc["totals"]["gpu_util_mean"] == pytest.approx(50)
    assert doc["source"]["usage_reading"].startswith("Slurm 24.05: a step's gres/gpuutil")
    # read as 23.02 (one GPU's value), the same line is 100% (clamped), and it is said
    doc = run(tmp_path, rows, slurm_version="23.02")
    assert doc["totals"]["gpu_util_mean"] == pytest.approx(100)
    assert "one GPU's value" in doc["source"]["usage_reading"]
    assert doc["totals"]["steps_gpu_usage_over_100"] == 1


def test_waits_preemptions_requeues(tmp_path):
    rows = [
        job(1, "gpu", 0, 60, 1860, "gres/gpu=4", state="PREEMPTED", qos="low"),
        job(1, "gpu", 1900, 2000, 2600, "gres/gpu=4", qos="low"),  # the requeued run
        job(2, "gpu", 0, 600, 1200, "gres/gpu=1", qos="high"),
        job(3, "gpu", 0, None, 300, "", state="CANCELLED by 0", qos="high"),
        job(4, "gpu", 0, None, None, "", state="PENDING", qos="high"),
    ]
    doc = run(tmp_path, rows)
    t = doc["totals"]
    assert t["jobs"] == 4  # job 1's two runs are one job
    assert t["pending_jobs"] == 1
    assert t["preemptions"] == 1 and t["requeues"] == 1
    assert t["gpu_hours_lost_to_preemption"] == pytest.approx(4 * 1800 / 3600)
    assert t["wait_s"] == {"p50": 100.0, "p95": pytest.approx(550.0), "max": 600.0}
    qos = {e["qos"]: e for e in doc["by_qos"]}
    assert qos["low"]["preemptions"] == 1 and qos["high"]["preemptions"] == 0
    assert qos["high"]["wait_s"]["max"] == 600


def test_het_job_counts_once_and_sums_gpus(tmp_path):
    rows = [
        [
            "10|10+0|gpu|n|a|u|1764547200|1764547200|1764550800|3600|60|COMPLETED|gres/gpu=2||",
            "11|10+1|gpu2|n|a|u|1764547200|1764547200|1764550800|3600|60|COMPLETED|gres/gpu=1||",
        ]
    ]
    doc = run(tmp_path, rows)
    assert doc["totals"]["jobs"] == 1
    assert doc["totals"]["gpu_hours_allocated"] == pytest.approx(3.0)
    parts = {e["partition"]: e["gpu_hours_allocated"] for e in doc["by_partition"]}
    assert parts == {"gpu": pytest.approx(2.0), "gpu2": pytest.approx(1.0)}


def test_fit_fraction_bases(tmp_path):
    rows = [
        # measured: 5000 MiB of an 81559 MiB H100 -> fits 1/7
        job(1, "gpu", 0, 0, 3600, "gres/gpu:h100=1,gres/gpu=1", usage="gres/gpumem=5000M"),
        # measured: 30000 MiB -> fits 1/2 only
        job(2, "gpu", 0, 0, 3600, "gres/gpu:h100=1,gres/gpu=1", usage="gres/gpumem=30000M"),
        # requested slice: 3g -> 3/7 fits 1/2
        job(3, "gpu", 0, 0, 7 * 3600, "gres/gpu:3g.40gb=1,gres/gpu=1"),
        # whole GPU, nothing measured (e.g. still running) -> UNKNOWN, not "does not fit"
        job(4, "gpu", 0, 0, 3600, "gres/gpu=1"),
        # two whole GPUs -> fits no fraction of one (a known need)
        job(5, "gpu", 0, 0, 3600, "gres/gpu=2"),
    ]
    ff = run(tmp_path, rows)["fit_fraction"]
    assert ff["basis_counts"] == {
        "measured_gpumem": 2,
        "requested_slice": 1,
        "multi_gpu_request": 1,
        "unknown_not_measured": 1,
        "unknown_gpu_size": 0,
    }
    # shares over the 4 runs with a known need; the unknown one is counted apart
    assert ff["known_runs"] == 4 and ff["unknown_runs"] == 1
    assert ff["unknown_gpu_hours"] == pytest.approx(1.0)
    assert ff["1/7"]["jobs"] == pytest.approx(1 / 4)
    assert ff["1/4"]["jobs"] == pytest.approx(1 / 4)
    assert ff["1/2"]["jobs"] == pytest.approx(3 / 4)
    # GPU-hours of known runs: 1 + 1 + 3 (3/7 x 7 h) + 2 = 7
    assert ff["1/2"]["gpu_hours"] == pytest.approx(5 / 7)
    assert "1 unknown (nothing measured)" in ff["basis"]


def test_fit_fraction_per_partition(tmp_path):
    rows = [
        job(1, "a", 0, 0, 3600, "gres/gpu:h100=1,gres/gpu=1", usage="gres/gpumem=5000M"),
        job(2, "b", 0, 0, 3600, "gres/gpu:h100=1,gres/gpu=1", usage="gres/gpumem=70000M"),
        job(3, "b", 0, 0, 3600, "gres/gpu=1"),
    ]
    parts = {e["partition"]: e for e in run(tmp_path, rows)["by_partition"]}
    assert parts["a"]["fit_fraction"]["1/7"]["jobs"] == 1.0
    assert parts["b"]["fit_fraction"]["1/2"]["jobs"] == 0.0
    assert parts["b"]["fit_fraction"]["unknown_runs"] == 1


def test_json_has_no_nan_and_contract_keys(tmp_path):
    import json

    doc = run(tmp_path, [job(1, "gpu", 0, 0, 3600, "gres/gpu=1")])
    json.dumps(doc, allow_nan=False)
    for key in ("schema_version", "generated_at", "window", "source", "totals", "by_partition",
                "by_qos", "by_account", "by_user", "by_kind", "fit_fraction", "timeseries",
                "rejected", "recommendations"):  # fmt: skip
        assert key in doc, key
    for key in ("rows_read", "rows_analyzed", "rows_rejected", "jobs", "gpu_jobs",
                "gpu_hours_allocated", "gpu_hours_used", "capacity_gpu_hours",
                "allocation_ratio", "preemptions", "requeues", "gpu_hours_lost_to_preemption",
                "wait_s"):  # fmt: skip
        assert key in doc["totals"], key
    assert {k: doc["source"][k] for k in ("kind", "files", "slurm_version")} == {
        "kind": "file", "files": [str(tmp_path / "dump.txt")], "slurm_version": None,
    }  # fmt: skip
    assert set(doc["by_qos"][0]) >= {"qos", "tier", "jobs", "wait_s", "waste_gpu_hours"}


def test_low_memory_gpu_hours(tmp_path):
    rows = [
        # 8000 MiB of an 81559 MiB H100: under a quarter of what it was given
        job(1, "gpu", 0, 0, 3600, "gres/gpu:h100=1,gres/gpu=1", usage="gres/gpumem=8000M"),
        job(2, "gpu", 0, 0, 3600, "gres/gpu:h100=1,gres/gpu=1", usage="gres/gpumem=60000M"),
        job(3, "gpu", 0, 0, 3600, "gres/gpu=1"),  # unknown memory: not counted either way
    ]
    doc = run(tmp_path, rows)
    assert doc["totals"]["low_memory_gpu_hours"] == pytest.approx(1.0)
    doc = run(tmp_path, [job(1, "gpu", 0, 0, 3600, "gres/gpu=1")])
    assert doc["totals"]["low_memory_gpu_hours"] is None


def test_low_memory_share_is_of_one_gpu_for_multi_gpu_jobs(tmp_path):
    # 4 T4s (15360 MiB each), 14000 MiB used on each: not low memory (it is per GPU)
    alloc = "gres/gpu:tesla_t4=4,gres/gpu=4"
    rows = [job(1, "t4", 0, 0, 3600, alloc, usage="gres/gpumem=14000M")]
    assert run(tmp_path, rows)["totals"]["low_memory_gpu_hours"] == pytest.approx(0.0)
    rows = [job(1, "t4", 0, 0, 3600, alloc, usage="gres/gpumem=2000M")]
    assert run(tmp_path, rows)["totals"]["low_memory_gpu_hours"] == pytest.approx(4.0)
    # Slurm 24.05+: the step's gpumem is a sum over its 4 GPUs (4 x 14000 MiB)
    rows = [job(1, "t4", 0, 0, 3600, alloc, usage="gres/gpumem=56000M")]
    doc = run(tmp_path, rows, slurm_version="24.05")
    assert doc["totals"]["low_memory_gpu_hours"] == pytest.approx(0.0)


def test_inventory_memory_and_partition_gpu_type(tmp_path):
    from pathlib import Path

    inventory = Path(__file__).resolve().parents[3] / "etc" / "examples" / "dgx-h100.json"
    rows = [job(1, "gpu", 0, 0, 3600, "gres/gpu=1", usage="gres/gpumem=5000M")]
    # generic gres/gpu only: without a type the memory (and so the measured basis) is unknown
    assert run(tmp_path, rows)["fit_fraction"]["basis_counts"]["measured_gpumem"] == 0
    doc = run(tmp_path, rows, gpu_types={"gpu": "h100"}, inventories=[inventory])
    assert doc["fit_fraction"]["basis_counts"]["measured_gpumem"] == 1
    assert doc["fit_fraction"]["1/7"]["jobs"] == 1.0  # 5000 of 81559 MiB


def test_requeued_job_fits_by_the_run_that_did_the_work(tmp_path):
    alloc = "gres/gpu:tesla_t4=1,gres/gpu=1"  # 15360 MiB
    rows = [
        # job 1: its first run was requeued after using 1000 MiB; the rerun needed 14000 MiB
        job(1, "t4", 0, 0, 600, alloc, state="REQUEUED", usage="gres/gpumem=1000M"),
        job(1, "t4", 600, 700, 4300, alloc, usage="gres/gpumem=14000M"),
        # job 2: one run at 1000 MiB, fits 1/7
        job(2, "t4", 0, 0, 3600, alloc, usage="gres/gpumem=1000M"),
        # job 3: nothing measured: unknown, not in the job denominator
        job(3, "t4", 0, 0, 3600, alloc),
    ]
    fit = run(tmp_path, rows)["fit_fraction"]
    assert fit["known_jobs"] == 2 and fit["known_runs"] == 3 and fit["unknown_runs"] == 1
    assert fit["1/7"]["jobs"] == pytest.approx(0.5)  # job 2 only, not job 1
    assert fit["1/2"]["jobs"] == pytest.approx(0.5)
    # GPU-hours are per run: 1000 MiB runs held 1/6 h + 1 h of the 1/6 + 1 + 1 known hours
    assert fit["1/7"]["gpu_hours"] == pytest.approx((1 / 6 + 1) / (1 / 6 + 1 + 1))


def unknowns(doc):
    found = doc["fit_fraction"]["unknown_gpu_types"]
    return [(u["type"], u["partition"], u["gpu_runs"]) for u in found]


def test_untyped_partition_without_size_is_named_with_its_fix(tmp_path):
    rows = [job(1, "old", 0, 0, 3600, "gres/gpu=1", usage="gres/gpumem=4000M")]
    doc = run(tmp_path, rows)
    assert unknowns(doc) == [("", "old", 1)]
    fix = doc["fit_fraction"]["unknown_gpu_types"][0]["fix"]
    assert "--gpu-type old=TYPE or --gpu-memory TYPE=SIZE" in fix
    # a size given for the partition (not a type) sizes its GPUs
    doc = run(tmp_path, rows, gpu_memory_mib={"old": 16000})
    assert unknowns(doc) == [] and doc["fit_fraction"]["1/4"]["jobs"] == 1.0


def test_gpu_type_of_unknown_size_gives_a_note(tmp_path):
    rows = [job(1, "t4", 0, 0, 3600, "gres/gpu=1", usage="gres/gpumem=4000M")]
    doc = run(tmp_path, rows, gpu_types={"t4": "notagpu"})
    assert unknowns(doc) == [("notagpu", None, 1)]
    assert any("'notagpu' given for partition 't4' is neither in the catalogue" in n
               for n in doc["notes"])  # fmt: skip


def test_partition_type_sizes_runs_whose_typed_name_is_unknown(tmp_path):
    rows = [job(1, "t4", 0, 0, 3600, "gres/gpu:weird_t4=1,gres/gpu=1", usage="gres/gpumem=3000M")]
    doc = run(tmp_path, rows)
    assert unknowns(doc) == [("weird_t4", None, 1)]
    assert "--gpu-type t4=TYPE" in doc["fit_fraction"]["unknown_gpu_types"][0]["fix"]
    doc = run(tmp_path, rows, gpu_types={"t4": "t4"})  # the admin's type: a T4, 15360 MiB
    assert unknowns(doc) == [] and doc["fit_fraction"]["1/4"]["jobs"] == 1.0
    assert any("'weird_t4'" in n and "sized as 't4'" in n for n in doc["notes"])
