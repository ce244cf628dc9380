"""Result blocks (waits, allocation over the window, utilization) and slurm.conf settings."""

import numpy as np
import pytest

from slurmgpu.errors import UsageError
from slurmgpu.replay import ReplayOptions, replay_trace
from slurmgpu.replay.engine import SchedConfig
from slurmgpu.replay.jobs import ReplayJob, ReplayTrace
from slurmgpu.replay.results import Waits
from slurmgpu.replay.slurm_config import parse_slurm_conf, sched_config, slurm_minutes


def test_waits_percentiles_ignore_jobs_that_never_started():
    w = Waits.of(np.array([0.0, 10.0, 20.0, np.nan]))
    assert (w.p50, w.max, w.mean, w.jobs) == (10.0, 20.0, 10.0, 3)
    assert Waits.of(np.array([np.nan])).p50 is None


def test_allocation_over_the_recorded_window_and_utilization_series():
    # one 8-GPU node; two 4-GPU jobs of 1 h each, recorded back to back over 2 h
    jobs = [
        ReplayJob("1", "gpu", "normal", "normal", 0.0, 3600.0, 3600.0, 4.0,
                  recorded_start_s=0.0, recorded_end_s=3600.0),
        ReplayJob("2", "gpu", "normal", "normal", 0.0, 3600.0, 3600.0, 4.0,
                  recorded_start_s=3600.0, recorded_end_s=7200.0),
    ]  # fmt: skip
    exact = SchedConfig(
        submit_sched_delay_s=0, release_delay_s=0, sched_tick_s=0, spread_submits=False
    )
    options = ReplayOptions(capacity={"gpu": 8}, config=exact)
    report = replay_trace(ReplayTrace.from_jobs(jobs), options)
    rec, base = report.recorded, report.baseline
    assert rec.window_hours == base.window_hours == 2.0
    assert rec.allocation_ratio == pytest.approx(0.5)  # 8 GPU-h of 16
    assert rec.wait_s.max == 3600.0
    # the replay runs both at once: same GPU-hours, no wait
    assert base.gpu_hours_allocated == pytest.approx(8.0)
    assert base.wait_s.max == 0.0
    util = np.array(base.utilization)
    assert util[: len(util) // 2] == pytest.approx(1.0) and util[len(util) // 2 :].max() == 0


def test_slurm_durations():
    assert slurm_minutes("5", "k") == 300
    assert slurm_minutes("7-0", "k") == 7 * 86400
    assert slurm_minutes("00:05:00", "k") == 300
    assert slurm_minutes("7-00:00:00", "k") == 7 * 86400
    with pytest.raises(UsageError):
        slurm_minutes("soon", "PriorityMaxAge")


def test_sched_config_from_slurm_conf_text():
    text = (
        "PriorityWeightQOS=100000 # tiers\nPriorityWeightAge=10\nPriorityMaxAge=1-0\n"
        "SchedulerParameters=batch_sched_delay=0,bf_interval=2,bf_max_job_test=50\n"
        "SchedulerType=sched/backfill\n"
    )
    cfg = sched_config(parse_slurm_conf(text))
    assert cfg == SchedConfig(
        priority_weight_qos=100000,
        priority_weight_age=10,
        priority_max_age_s=86400,
        bf_interval_s=2,
        bf_max_job_test=50,
    )
    assert not sched_config({"SchedulerType": "sched/builtin"}).backfill
    # SchedulerParameters=defer: a job's end only flags the tick (epilog complete queues it)
    assert cfg.sched_on_end
    assert not sched_config({"SchedulerParameters": "bf_interval=1,defer"}).sched_on_end
    with pytest.raises(UsageError, match="bf_interval=x"):
        sched_config({"SchedulerParameters": "bf_interval=x"})


def test_requeue_delay_from_authinfo_cred_expire():
    # slurmctld holds a requeued job until cred_expire + 1 s (seen on 22.05: Eligible of the
    # next run = the preemption + 21 s with cred_expire=20); Slurm's default 120 s
    assert SchedConfig().requeue_delay_s == 121
    conf = parse_slurm_conf("AuthInfo=socket=/run/munge.sock,cred_expire=20\n")
    assert sched_config(conf).requeue_delay_s == 21
    # as `scontrol show config` prints it
    assert sched_config({"AuthInfo": "cred_expire=30"}).requeue_delay_s == 31
    assert sched_config({"AuthInfo": "socket=/x"}).requeue_delay_s == 121
    with pytest.raises(UsageError, match="cred_expire"):
        sched_config({"AuthInfo": "cred_expire=soon"})


def test_same_order_fraction_counts_jobs_out_of_place():
    from slurmgpu.replay.fidelity import fidelity, same_order_fraction

    rec = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    assert same_order_fraction(rec, rec * 10) == 1.0
    assert same_order_fraction(rec, np.array([0.0, 3.0, 1.0, 2.0, 4.0])) == 0.8
    # ties in the recorded second do not count as disorder
    assert same_order_fraction(np.array([5.0, 5.0]), np.array([7.0, 6.0])) == 1.0
    f = fidelity(np.zeros(5), rec, rec * 1.05)
    assert f.mean_wait_error == pytest.approx(0.05)
    assert f.pair_order_agreement == 1.0


def test_pair_order_agreement():
    from slurmgpu.replay.fidelity import pair_order_agreement

    rec = np.array([0.0, 1.0, 2.0, 3.0])
    assert pair_order_agreement(rec, rec[::-1].copy()) == 0.0
    # one swapped neighbour pair of 6 pairs
    assert pair_order_agreement(rec, np.array([0.0, 2.0, 1.0, 3.0])) == pytest.approx(5 / 6)


def test_same_second_submits_are_spread_in_job_order():
    from slurmgpu.replay.engine import _spread

    out = _spread(np.array([0.0, 0.0, 0.0, 0.0, 5.0, 7.5, 9.0, 9.0]))
    # the k-th of m jobs in second S at S + k/m; a fractional time is kept as it is
    assert out.tolist() == [0.0, 0.25, 0.5, 0.75, 5.0, 7.5, 9.0, 9.5]
    assert (np.diff(out) >= 0).all()  # still sorted: the run loop relies on it


def test_same_rank_counts_ties_within_a_second_and_shifts():
    from slurmgpu.replay.fidelity import same_order_fraction, same_rank_fraction

    rec = np.array([0.0, 0.0, 1.0, 2.0, 3.0])
    # the two tied jobs swap (still the same ranks), all in the same seconds: every job
    assert same_rank_fraction(rec, np.array([0.4, 0.2, 1.5, 2.5, 3.5])) == 1.0
    # the last job started first: it and every job it overtook change rank, except the two
    # tied ones (recorded ranks 0-1, replayed 1-2: some order of the ties keeps one place)
    late_first = np.array([1.0, 1.0, 2.0, 3.0, 0.0])
    assert same_rank_fraction(rec, late_first) == 0.4
    assert same_order_fraction(rec, late_first) == 0.8  # only one job out of place
