"""What-ifs end to end on a synthetic history: the issue's "move capacity from a half-idle
partition to a backlogged one" case and a carving that absorbs small jobs."""

import numpy as np

from slurmgpu.replay import ReplayOptions, parse_change, replay_trace
from slurmgpu.replay.jobs import ReplayJob, ReplayTrace


def history(seed=7):
    """`train` (32 GPUs) is offered 40 GPUs of 4-GPU jobs; `infer` (32 GPUs) gets ~8 GPUs of
    1-GPU jobs of measured ~6 GB, mostly idle."""
    rng = np.random.default_rng(seed)
    jobs = []
    for i in range(300):
        t = float(i * 360)
        jobs.append(ReplayJob(f"t{i}", "train", "normal", "normal", t, 3600.0, 7200.0, 4.0))
        jobs.append(
            ReplayJob(f"i{i}", "infer", "normal", "normal", t, float(rng.integers(1800, 3600)),
                      7200.0, 1.0, need_mib=6000.0)
        )  # fmt: skip
    return ReplayTrace.from_jobs(jobs)


def run(*changes):
    opts = ReplayOptions(
        capacity={"train": 32, "infer": 32},
        gpu_types={"train": "h100", "infer": "h100"},
        what_if=tuple(parse_change(c) for c in changes),
    )
    return replay_trace(history(), opts)


def part(block, name):
    return next(p for p in block.by_partition if p.partition == name)


def test_moving_idle_nodes_to_the_backlog_cuts_its_p95_wait_and_loses_nothing():
    report = run("move:infer:train:16")
    base, moved = report.baseline, report.scenarios[0]
    assert part(base, "train").wait_s.p95 > 5 * 3600  # a real backlog
    assert part(base, "infer").allocation_ratio < 0.5  # mostly idle
    assert part(moved, "train").wait_s.p95 < part(base, "train").wait_s.p95 / 2
    assert moved.gpu_hours_lost == 0 and moved.preemptions == 0
    assert moved.jobs_not_run == 0
    # the infer jobs still run, now queueing a little on 16 GPUs
    assert part(moved, "infer").wait_s.p95 < 2 * 3600
    assert moved.gpu_hours_allocated >= base.gpu_hours_allocated * 0.99


def test_carving_lets_small_measured_jobs_run_on_slices():
    report = run("move:infer:train:24", "carve:infer:24:1g.10gb=7")
    moved, carved = report.scenarios
    # 8 whole GPUs left for infer: its 1-GPU jobs queue; with 24 GPUs carved into 168
    # instances of 9.75 GiB (and 8 whole) the ~6 GB jobs run on slices and do not queue
    assert part(moved, "infer").wait_s.p95 > 300
    assert carved.jobs_on_slices > 250
    assert part(carved, "infer").wait_s.p95 <= 60
