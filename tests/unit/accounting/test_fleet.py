"""GPU sizes on fleets the catalogue does not know, measure sources, and the node move on the
month issue #8 describes. Lines are shaped as `sacct -a -D -P` prints them (epoch times)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from slurmgpu.accounting import AnalysisOptions, analyze
from slurmgpu.model.changes import parse_change
from slurmgpu.model.measure import JobGpuMeasure, RunRef

from .sacct_text import B, job, text

EXAMPLES = Path(__file__).resolve().parents[3] / "etc" / "examples"


def run(tmp_path, rows, **kw):
    path = tmp_path / "dump.txt"
    path.write_text(text(rows))
    return analyze(AnalysisOptions(files=[path], **kw)).to_json()


def t4_jobs(gres="gres/gpu:tesla_t4=1,gres/gpu=1", n=4):
    # T4 jobs (AutoDetect type name `tesla_t4`): 3000 MiB measured of a 15360 MiB GPU
    return [job(i, "t4", 0, 0, 3600, gres, usage="gres/gpumem=3000M,gres/gpuutil=40")
            for i in range(1, n + 1)]  # fmt: skip


def t4_inventory(tmp_path) -> Path:
    """A T4 node's snapshot: the recorded DGX H100 one with NVML's T4 name and size."""
    snap = json.loads((EXAMPLES / "dgx-h100.json").read_text())
    for gpu in snap["gpus"]:
        gpu.update(name="Tesla T4", memory_mib=15360, mig_devices=[])
    path = tmp_path / "t4-node.json"
    path.write_text(json.dumps(snap))
    return path


def test_unknown_gpu_type_names_the_type_and_the_fix(tmp_path):
    # a type the catalogue does not know (Quadro RTX 8000, as AutoDetect names it)
    ff = run(tmp_path, t4_jobs("gres/gpu:quadro_rtx_8000=1,gres/gpu=1"))["fit_fraction"]
    assert ff["basis_counts"]["unknown_gpu_size"] == 4  # memory measured, GPU size unknown
    assert ff["1/2"]["jobs"] is None and ff["unknown_runs"] == 4
    (entry,) = ff["unknown_gpu_types"]
    assert entry["type"] == "quadro_rtx_8000" and entry["gpu_runs"] == 4
    assert "--gpu-memory quadro_rtx_8000=SIZE" in entry["fix"]


def test_catalogue_knows_autodetect_and_short_names(tmp_path):
    # `tesla_t4` (AutoDetect) and `t4` (site name) both size from the catalogue's T4
    for gres in ("gres/gpu:tesla_t4=1,gres/gpu=1", "gres/gpu:t4=1,gres/gpu=1"):
        ff = run(tmp_path, t4_jobs(gres))["fit_fraction"]
        assert ff["basis_counts"]["measured_gpumem"] == 4 and ff["unknown_gpu_types"] == []


def test_gpu_memory_option_gives_the_size(tmp_path):
    ff = run(tmp_path, t4_jobs(), gpu_memory_mib={"TESLA_T4": 15360})["fit_fraction"]
    assert ff["basis_counts"]["measured_gpumem"] == 4 and ff["unknown_gpu_types"] == []
    assert ff["1/4"]["jobs"] == 1.0  # 3000 of 15360 MiB
    assert ff["1/7"]["jobs"] == 0.0


def test_inventory_nvml_name_matches_autodetect_type(tmp_path):
    # "Tesla T4" in the snapshot must size jobs typed `tesla_t4` (Slurm's AutoDetect name)
    ff = run(tmp_path, t4_jobs(), inventories=[t4_inventory(tmp_path)])["fit_fraction"]
    assert ff["basis_counts"]["measured_gpumem"] == 4


def test_gpu_type_for_a_partition_that_does_not_exist_is_said(tmp_path):
    doc = run(tmp_path, t4_jobs("gres/gpu=1"), gpu_types={"t4x": "t4"})
    assert any("partition 't4x'" in n and "no effect" in n for n in doc["notes"])
    # the intended use: partition t4's GPUs are of type t4, sized by --gpu-memory
    doc = run(tmp_path, t4_jobs("gres/gpu=1"), gpu_types={"t4": "t4"},
              gpu_memory_mib={"t4": 15360})  # fmt: skip
    assert doc["notes"] == []
    assert doc["fit_fraction"]["basis_counts"]["measured_gpumem"] == 4


@dataclass
class TinySource:
    """A measure source that knows two runs, one of them with its GPU's size."""

    name: str = "jobstats"

    def __post_init__(self) -> None:
        self.seen: list[RunRef] = []

    def measures(self, runs: list[RunRef]) -> list[JobGpuMeasure]:
        self.seen = list(runs)
        return [
            JobGpuMeasure("1", self.name, 1, 20.0, 2000.0, 15360.0),
            JobGpuMeasure("2", self.name, 1, 70.0, None, None),
            JobGpuMeasure("999", self.name, 1, 5.0, 1.0, 1.0),  # a run not in the data
        ]


def test_measure_source_wins_over_slurm_and_is_counted(tmp_path):
    rows = t4_jobs("gres/gpu:quadro_rtx_8000=1,gres/gpu=1", n=3)  # a size the catalogue lacks
    rows[0] = job(1, "t4", 0, 0, 3600, "gres/gpu:quadro_rtx_8000=1,gres/gpu=1",
                  usage="gres/gpumem=3000M,gres/gpuutil=40", admin="JS1:abc")  # fmt: skip
    source = TinySource()
    doc = run(tmp_path, rows, measure_sources=[source])
    refs = {r.job_id: r for r in source.seen}
    assert set(refs) == {"1", "2", "3"} and refs["1"].gpus == 1.0
    assert refs["1"].admin_comment == "JS1:abc"  # jobstats summaries live there
    assert doc["utilization_basis"] == {"jobstats": 2, "slurm_gpuutil": 1}
    # time-averaged 20% and 70% replace Slurm's high-water 40%; run 3 keeps 40%
    assert doc["totals"]["gpu_util_mean"] == pytest.approx((20 + 70 + 40) / 3)
    # run 1's measure carries its GPU size: its need is known, the others' is not
    ff = doc["fit_fraction"]
    assert ff["basis_counts"]["measured_gpumem"] == 1
    assert ff["basis_counts"]["unknown_gpu_size"] == 2


def test_node_move_fires_on_the_month_of_issue_8(tmp_path):
    """Two partitions ~90% allocated with p95 waits of 6 h and 16 h, one 42% allocated with a
    3-minute p95 wait: whole nodes move from the idle one, graded by unmet demand."""
    H, day = 3600, 86400
    rows, n = [], 1
    # busy1/busy2: 16 GPUs each, two 8-GPU jobs at a time for 27 of 30 days (90%), each job
    # waited 6 h (busy1) or 16 h (busy2)
    for part, wait in (("busy1", 6 * H), ("busy2", 16 * H)):
        for d in range(27):
            for _ in range(2):
                start = d * day
                rows.append(job(n, part, start - wait, start, start + day, "gres/gpu=8"))
                n += 1
    # idle: 32 GPUs, 42% allocated (13.44 GPUs on average), 3-minute waits
    for d in range(30):
        for k in range(14):
            start = d * day
            gpus = 1 if k < 13 else 0.44
            end = start + int(day * gpus) if k == 13 else start + day
            rows.append(job(n, "idle", start - 180, start, end, "gres/gpu=1"))
            n += 1
    since = datetime.fromtimestamp(B, UTC)
    doc = run(tmp_path, rows, capacity={"busy1": 16, "busy2": 16, "idle": 32},
              since=since, until=since + timedelta(days=30))  # fmt: skip
    parts = {e["partition"]: e for e in doc["by_partition"]}
    assert parts["idle"]["allocation_ratio"] == pytest.approx(0.42, abs=0.01)
    assert parts["busy1"]["allocation_ratio"] == pytest.approx(0.9, abs=0.01)
    moves = [r for r in doc["recommendations"] if r["kind"] == "move_nodes"]
    assert moves, doc["recommendations"]
    # the most starved (by waiting GPU-hours) is served first
    assert moves[0]["evidence"]["to"]["partition"] == "busy2"
    assert all(m["evidence"]["from"]["partition"] == "idle" for m in moves)
    moved = sum(m["estimated_effect"]["gpus_moved"] for m in moves)
    assert moved % 8 == 0 and moved >= 8
    # the donor stays under its target after all moves
    assert 13.44 / (32 - moved) <= 0.70 + 1e-9
    assert all(m["estimated_effect"]["demand_gpu_hours_served"] > 0 for m in moves)
    # each move is a change `replay --what-if` takes, in the replay's own grammar
    for m in moves:
        change = parse_change(m["change"])
        assert m["changes"] == [m["change"]]
        assert (change.source, change.gpus) == ("idle", m["estimated_effect"]["gpus_moved"])
        assert change.target == m["evidence"]["to"]["partition"]


def test_measure_with_a_start_lands_on_that_run_of_a_requeued_job(tmp_path):
    rows = [
        job(7, "gpu", 0, 0, 3600, "gres/gpu:h100=1,gres/gpu=1", state="PREEMPTED"),
        job(7, "gpu", 3700, 3700, 7300, "gres/gpu:h100=1,gres/gpu=1"),
    ]
    first_start = datetime.fromtimestamp(B, UTC)

    class FirstRun:
        name = "collector"

        def measures(self, runs):
            return [JobGpuMeasure("7", self.name, 1, 10.0, None, None, start=first_start)]

    doc = run(tmp_path, rows, measure_sources=[FirstRun()])
    assert doc["utilization_basis"]["collector"] == 1
    # the preempted first run got the 10%; the later run has none: mean over known = 10
    assert doc["totals"]["gpu_util_mean"] == pytest.approx(10.0)
    assert doc["totals"]["util_known_gpu_hours"] == pytest.approx(1.0)
