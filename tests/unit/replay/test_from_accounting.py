"""The adapter: the accounting loader's per-run frame -> one replay job per Slurm job."""

from pathlib import Path

import numpy as np
import pytest

from slurmgpu.replay.from_accounting import load_trace
from slurmgpu.replay.jobs import MIG, SHARD, WHOLE

DATA = Path(__file__).resolve().parents[2] / "data" / "sacct"


def test_synthetic_mix_becomes_jobs_with_every_row_accounted_for():
    trace = load_trace([DATA / "synthetic-mix.txt"], shards_per_gpu={"gpu": 4})
    jobs = {j.job_id: j for j in trace.jobs()}
    # not GPU jobs and jobs that never started are counted, not dropped
    assert trace.skipped["not a GPU job"] == 2  # 1011 and 1018, on the cpu partition
    # array 1006's range `1006_[3-5]` is pending (it requested a GPU); the range shares
    # JobIDRaw 1006 with task 1006_2, which ran
    assert trace.skipped["never started (pending when the dump was taken)"] == 1
    assert "1006_2" in jobs
    # 1005 was cancelled before it started: replayed as a job pending until its cancel time
    cancelled = jobs["1005"]
    assert np.isnan(cancelled.recorded_start_s) and np.isnan(cancelled.recorded_end_s)
    assert cancelled.cancel_s > cancelled.submit_s
    assert trace.cancelled_pending().sum() == 1
    assert set(trace.partitions) == {"gpu", "mig"}
    # 1004 was preempted once and ran again: one job, the last run's 600 s of work
    j = jobs["1004"]
    assert (j.gpus, j.duration_s, j.recorded_preemptions) == (8.0, 600.0, 1)
    assert j.timelimit_s == 36000.0  # TimelimitRaw 600 minutes
    assert jobs["1002"].kind == MIG and jobs["1002"].mig_profile == "1g.10gb"
    assert jobs["1003"].kind == SHARD and jobs["1003"].gpus == 4.0
    assert jobs["1001"].kind == WHOLE and jobs["1001"].gpus == 2.0
    # submit order, times from the first submit
    assert list(trace.submit_s) == sorted(trace.submit_s)
    assert trace.submit_s[0] == 0.0


def test_recorded_runs_keep_the_preempted_run():
    trace = load_trace([DATA / "synthetic-mix.txt"])
    runs = trace.recorded_runs
    assert runs is not None
    k = trace.partitions.index("gpu")
    lost = runs.preempted & (runs.partition == k)
    # 1004's first run (8 GPUs, 1800 s) was PREEMPTED; 1013's REQUEUED run (1 GPU, 600 s) is a
    # requeue (an admin's or a node failure's), not a preemption: analyze counts it apart too
    assert np.isclose(((runs.end_s - runs.start_s) * runs.equiv)[lost].sum(), 8 * 1800)
    # every run belongs to its job: both runs of 1004 point at the one replay job
    i = list(trace.job_id).index("1004")
    assert (runs.job == i).sum() == 2
    assert (runs.job >= 0).all()


def test_harness_dump_from_real_slurm_loads():
    trace = load_trace([DATA / "slurm-22.05-harness.txt"])
    assert len(trace) > 0
    assert (trace.duration_s >= 0).all()
    assert not np.isnan(trace.recorded_start_s).any()


def test_npu_jobs_are_replayed_on_their_partitions_npus(tmp_path):
    from tests.unit.accounting.sacct_text import job, text

    rows = [
        job(1, "npu", 0, 10, 3610, "cpu=8,gres/npu=2,gres/npu:910b=2,node=1"),
        job(2, "npu", 5, 20, 620, "cpu=4,gres/npu:910b=1,node=1"),
        job(3, "gpu", 0, 10, 610, "cpu=4,gres/gpu=1,gres/gpu:h100=1,node=1"),
        job(4, "cpu", 0, 10, 610, "cpu=4,node=1"),
    ]
    path = tmp_path / "dump.txt"
    path.write_text(text(rows))
    trace = load_trace([path])
    jobs = {j.job_id: j for j in trace.jobs()}
    assert set(jobs) == {"1", "2", "3"}  # the NPU jobs are accelerator jobs now
    assert (jobs["1"].kind, jobs["1"].gpus, jobs["1"].partition) == (WHOLE, 2.0, "npu")
    assert jobs["2"].gpus == 1.0 and jobs["3"].gpus == 1.0
    assert trace.skipped["not a GPU job"] == 1
    # recorded device-hours: 2 NPUs x 1 h, 1 NPU and 1 GPU x 10 min
    runs = trace.recorded_runs
    assert float(np.sum(runs.equiv * (runs.end_s - runs.start_s))) / 3600 == pytest.approx(
        2 * 1.0 + 1 * 600 / 3600 + 1 * 600 / 3600
    )


def test_live_capacity_gives_npu_partitions_their_npus():
    from slurmgpu.accounting.capacity import capacity_from_scontrol

    cap = capacity_from_scontrol(
        [
            {"NodeName": "a1", "Gres": "npu:910b:8(S:0-1)"},
            {"NodeName": "a2", "Gres": "npu:910b:8(S:0-1)"},
            {"NodeName": "g1", "Gres": "gpu:h100:8"},
        ],
        [{"PartitionName": "npu", "Nodes": "a[1-2]"}, {"PartitionName": "gpu", "Nodes": "g1"}],
    )
    assert cap.partition_npus == {"npu": (16.0, 2, "910b")}
    assert cap.partition_gpus == {"npu": 0.0, "gpu": 8.0}  # analysis GPU capacity unchanged
