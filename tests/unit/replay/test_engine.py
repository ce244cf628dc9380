"""The scheduler on hand-sized cases whose Slurm outcome can be worked out on paper."""

import dataclasses
import math

from slurmgpu.model.changes import parse_change
from slurmgpu.replay.cluster import QosSpec, apply_change, from_capacity
from slurmgpu.replay.engine import CANCELLED, DONE, UNRUNNABLE, SchedConfig, replay
from slurmgpu.replay.jobs import MIG, ReplayJob, ReplayTrace

# the hand-worked cases below are about scheduling decisions: no submit/release latency,
# the main pass at each event, backfill on whole multiples of bf_interval
EXACT = {
    "submit_sched_delay_s": 0.0,
    "release_delay_s": 0.0,
    "sched_tick_s": 0.0,
    "bf_phase_s": 0.0,
    "spread_submits": False,
}
QOS = (QosSpec("p0", 1000, ("p2",)), QosSpec("p1", 500), QosSpec("p2", 100, (), 60))


def job(i, submit, dur, gpus, qos="p1", part="gpu", limit=None, **kw):
    return ReplayJob(str(i), part, qos, qos, float(submit), float(dur),
                     float(limit or dur), float(gpus), **kw)  # fmt: skip


def run(jobs, gpus=8, config=None, changes=(), **cap):
    trace = ReplayTrace.from_jobs(jobs)
    model = from_capacity({"gpu": gpus, **cap}, gpu_types={"gpu": "h100"}, qos=QOS)
    for c in changes:
        model = apply_change(model, parse_change(c))
    return trace, replay(trace, model, config or SchedConfig(bf_interval_s=10, **EXACT))


def killed(trace, outcome):
    """The job ids of the runs ended by preemption, in the order they ended."""
    runs = outcome.runs
    return [trace.job_id[j] for j, p in zip(runs.job, runs.preempted, strict=True) if p]


def starts(trace, outcome):
    return {trace.job_id[i]: outcome.start_s[i] for i in range(len(trace))}


def test_jobs_queue_for_a_full_node_in_submit_order():
    trace, out = run([job(1, 0, 100, 8), job(2, 5, 100, 8), job(3, 6, 50, 8)])
    assert starts(trace, out) == {"1": 0, "2": 100, "3": 200}
    assert list(out.state) == [DONE] * 3


def test_higher_qos_priority_goes_first():
    trace, out = run([job(1, 0, 100, 8), job(2, 5, 100, 8, "p2"), job(3, 6, 100, 8, "p0")])
    assert starts(trace, out) == {"1": 0, "3": 100, "2": 200}


def test_backfill_starts_a_short_job_that_delays_no_one():
    # 4 GPUs busy until 1000; an 8-GPU job waits for them; a 4-GPU job of limit 500 fits
    # before 1000 and is backfilled, one of limit 2000 would delay the big job and is not
    jobs = [
        job(1, 0, 1000, 4),
        job(2, 1, 100, 8),
        job(3, 2, 400, 4, limit=500),
        job(4, 3, 400, 4, limit=2000),
    ]
    trace, out = run(jobs)
    s = starts(trace, out)
    assert s["3"] == 10  # the first backfill pass (bf_interval 10 s)
    assert s["2"] == 1000  # not delayed
    assert s["4"] == 1100  # after the big job


def test_without_backfill_the_short_job_waits_its_turn():
    jobs = [job(1, 0, 1000, 4), job(2, 1, 100, 8), job(3, 2, 400, 4, limit=500)]
    trace, out = run(jobs, config=SchedConfig(backfill=False, **EXACT))
    assert starts(trace, out) == {"1": 0, "2": 1000, "3": 1100}


def test_preemption_with_grace_time_then_requeue_from_the_start():
    cfg = SchedConfig(bf_interval_s=10, requeue_delay_s=120, **EXACT)
    jobs = [job(1, 0, 1000, 8, "p2"), job(2, 100, 50, 8, "p0")]
    trace, out = run(jobs, config=cfg)
    s = starts(trace, out)
    assert s["2"] == 160  # after the 60 s GraceTime of the victim's QOS (p2)
    assert out.preemptions == 1
    # the victim is killed at 160, eligible at 280, reruns its whole 1000 s
    assert out.end_s[list(trace.job_id).index("1")] == 280 + 1000
    lost = [
        (e - st) * q
        for st, e, q, p in zip(
            out.runs.start, out.runs.end, out.runs.equiv, out.runs.preempted, strict=False
        )
        if p
    ]
    assert lost == [160 * 8]


def test_preempt_mode_cancel_counts_the_victim_as_not_run():
    jobs = [job(1, 0, 1000, 8, "p2"), job(2, 100, 50, 8, "p0")]
    trace, out = run(jobs, changes=["tier:p2:mode=cancel"])
    assert out.state[list(trace.job_id).index("1")] == CANCELLED
    assert out.unrunnable_reasons == {"preempted and cancelled (PreemptMode=cancel)": 1}


def test_qos_that_may_not_preempt_waits():
    jobs = [job(1, 0, 1000, 8, "p1"), job(2, 100, 50, 8, "p0")]
    trace, out = run(jobs)
    assert starts(trace, out)["2"] == 1000
    assert out.preemptions == 0


def test_victims_are_the_oldest_lower_qos_jobs_on_the_nodes_the_preemptor_gets():
    # as slurmctld 22.05 chose them on the multi-node test cluster (docs/replay.md): the p2
    # jobs are taken out oldest first until the 8-GPU p0 job fits a node; job 1 (node A,
    # beside a p1 job it may not preempt) was taken out first but is not on the node it
    # gets, so only jobs 3 and 4 (node B) are preempted
    jobs = [job(1, 0, 900, 4, "p2"), job(2, 0, 900, 4, "p1"), job(3, 1, 900, 4, "p2"),
            job(4, 2, 900, 4, "p2"), job(5, 50, 10, 8, "p0")]  # fmt: skip
    trace, out = run(jobs, gpus=16)
    assert out.preemptions == 2
    assert starts(trace, out)["5"] == 110  # the victims' 60 s GraceTime
    assert sorted(killed(trace, out)) == ["3", "4"]


def test_the_oldest_victim_goes_first_even_when_a_smaller_one_would_do():
    # node A: an 8-GPU p2 job (the oldest); node B: two 4-GPU p2 jobs; a 4-GPU p0 job
    # preempts the oldest (slurmctld: job 26 took job 11's 2 GPUs, not a younger 1-GPU job)
    jobs = [job(1, 0, 900, 8, "p2"), job(2, 1, 900, 4, "p2"), job(3, 2, 900, 4, "p2"),
            job(4, 50, 10, 4, "p0")]  # fmt: skip
    trace, out = run(jobs, gpus=16)
    assert out.preemptions == 1
    assert killed(trace, out) == ["1"]


def test_a_one_node_victim_goes_before_an_older_multi_node_one():
    # slurmctld orders preemption candidates by QOS priority, then node count, then job id
    # (preempt.c _sort_by_prio with preempt/qos's _gen_job_prio); seen on the grid trace: an
    # 8-GPU fp0 job preempted a 1-node fp2 job, not the older 2-node fp2 job beside it
    jobs = [job(1, 0, 900, 16, "p2"), job(2, 1, 900, 8, "p2"), job(3, 50, 10, 8, "p0")]
    trace, out = run(jobs, gpus=24, changes=["tier:p2:grace_s=0"])
    assert killed(trace, out) == ["2"]
    assert starts(trace, out)["3"] == 50


def test_a_multi_node_job_preempts_on_whole_nodes():
    jobs = [job(1, 0, 900, 8, "p2"), job(2, 0, 900, 4, "p2"), job(3, 0, 900, 4, "p1"),
            job(4, 50, 10, 16, "p0")]  # fmt: skip
    trace, out = run(jobs, gpus=24)
    # nodes: job 1 alone, jobs 2 + 3 together (p1: not preemptable), one idle; the 16-GPU
    # job takes the idle node and job 1's
    assert starts(trace, out)["4"] == 110
    assert killed(trace, out) == ["1"]


def test_without_grace_time_the_preemptor_starts_in_the_same_pass():
    cfg = SchedConfig(bf_interval_s=10, sched_tick_s=1.0, sched_tick_phase_s=0.0,
                      bf_phase_s=0.5, release_delay_s=0.0, spread_submits=False)  # fmt: skip
    jobs = [job(1, 0, 900, 8, "p2"), job(2, 100.3, 10, 8, "p0")]
    trace, out = run(jobs, config=cfg, changes=["tier:p2:grace_s=0"])
    # the main tick after the submit preempts job 1 and starts job 2 (slurmctld starts the
    # preemptor in the preemption's second), not one tick later
    assert starts(trace, out)["2"] == 101


def test_a_requeued_job_waits_for_its_begin_time():
    # job 1 (the oldest p2) is preempted at 100, killed at 160, eligible at 160 + 120; the
    # p0 job ends at 170 and frees its node: job 1 must not start there before 280
    cfg = SchedConfig(bf_interval_s=10, requeue_delay_s=120, **EXACT)
    jobs = [job(1, 0, 1000, 8, "p2"), job(2, 1, 1000, 8, "p2"), job(3, 100, 10, 8, "p0")]
    trace, out = run(jobs, gpus=16, config=cfg)
    runs = out.runs
    first = sorted(s for j, s in zip(runs.job, runs.start, strict=True) if trace.job_id[j] == "1")
    assert first == [0, 280]
    assert list(out.state) == [DONE] * 3


def test_a_requeued_job_queues_by_its_requeue_time():
    # slurmctld sets a requeued job's submit time to the requeue (job_mgr.c
    # _job_requeue_op) and orders equal priorities by submit time (job_scheduler.c
    # sort_job_queue2): job 1 (p2, preempted at 100, eligible at 105) goes behind job 2 (p2,
    # submitted at 50) but ahead of job 4 (p2, submitted after the requeue)
    cfg = SchedConfig(bf_interval_s=10, requeue_delay_s=5, **EXACT)
    jobs = [job(1, 0, 1000, 8, "p2"), job(2, 50, 100, 8, "p2"), job(3, 100, 10, 8, "p0"),
            job(4, 101, 10, 8, "p2")]  # fmt: skip
    trace, out = run(jobs, config=cfg, changes=["tier:p2:grace_s=0"])
    assert killed(trace, out) == ["1"]
    runs = {(trace.job_id[j], s) for j, s in zip(out.runs.job, out.runs.start, strict=True)}
    assert runs == {("1", 0), ("3", 100), ("2", 110), ("1", 210), ("4", 1210)}


def test_multi_node_job_takes_whole_idle_nodes():
    jobs = [job(1, 0, 100, 4), job(2, 1, 100, 16)]
    trace, out = run(jobs, gpus=24)
    assert starts(trace, out) == {"1": 0, "2": 1}
    trace, out = run([job(1, 0, 100, 4), job(2, 1, 100, 24)], gpus=24)
    assert starts(trace, out)["2"] == 100


def test_mig_jobs_use_a_carved_pool_and_small_whole_jobs_may_too():
    jobs = [
        job(1, 0, 100, 1, kind=MIG, mig_profile="1g.10gb"),
        job(2, 0, 100, 8),
        job(3, 0, 100, 1, need_mib=6000.0),  # fits a 1g.10gb (9.75 GiB) with 10 % headroom
        job(4, 0, 100, 1, need_mib=60000.0),  # does not: needs a whole GPU
    ]
    trace, out = run(jobs, gpus=16, changes=["carve:gpu:8:1g.10gb=7"])
    s = starts(trace, out)
    assert s["1"] == 0 and s["2"] == 0 and s["3"] == 0
    assert s["4"] == 100  # the whole GPUs are all taken by job 2
    assert list(out.on_slice) == [False, False, True, False]
    slice_equiv = [q for j, q in zip(out.runs.job, out.runs.equiv, strict=False) if j in (0, 2)]
    assert all(math.isclose(q, 1 / 7) for q in slice_equiv)


def test_jobs_that_can_never_run_are_counted_not_dropped():
    jobs = [job(1, 0, 10, 32), job(2, 0, 10, 1, part="nowhere"),
            job(3, 0, 10, 1, kind=MIG, mig_profile="3g.40gb")]  # fmt: skip
    _trace, out = run(jobs)
    assert list(out.state) == [UNRUNNABLE] * 3
    assert sum(out.unrunnable_reasons.values()) == 3


def test_shards_pool():
    from slurmgpu.replay.jobs import SHARD

    jobs = [job(1, 0, 100, 3, kind=SHARD), job(2, 0, 100, 3, kind=SHARD)]
    trace, out = run(jobs, changes=["shard:gpu:1:4"])
    assert starts(trace, out) == {"1": 0, "2": 100}


def test_age_lifts_an_old_low_qos_job_over_a_new_one():
    # with a large age weight and a short max age, a p2 job that waited long outranks p1
    cfg = SchedConfig(
        priority_weight_qos=1000,
        priority_weight_age=10000,
        priority_max_age_s=1000,
        priority_calc_period_s=1,
        bf_interval_s=10,
        **EXACT,
    )
    jobs = [job(1, 0, 2000, 8), job(2, 10, 100, 8, "p2"), job(3, 1900, 100, 8, "p1")]
    trace, out = run(jobs, config=cfg)
    assert starts(trace, out) == {"1": 0, "2": 2000, "3": 2100}


def test_main_scheduler_runs_on_its_tick_and_backfill_on_its_phase():
    # slurmctld's main scheduler runs on a 1 s tick (phase 0 here), backfill every
    # bf_interval at its own phase (0.5); a burst's submits in one second are spread over it.
    # With `defer` a job's end only flags the tick too (the next test: without it)
    cfg = SchedConfig(bf_interval_s=1, release_delay_s=0.05, sched_on_end=False)
    jobs = [job(1, 0, 10, 8, "p2"), job(2, 0, 10, 8, "p1"), job(3, 0, 10, 8, "p0")]
    trace, out = run(jobs, config=cfg)
    # spread over second 0 (at 0, 1/3, 2/3): the backfill pass at 0.5 sees jobs 1 and 2
    # and starts the p1 one; its GPUs return at 10.55, the main tick at 11 takes job 3 (p0);
    # job 3's end (21.05) is first seen by the backfill pass at 21.5
    assert starts(trace, out) == {"2": 0.5, "3": 11.0, "1": 21.5}
    assert out.end_s[1] == 10.5  # the job's own End is not moved
    # without spreading, the pass at 0.5 sees the whole burst: p0 first
    trace, out = run(jobs, config=SchedConfig(bf_interval_s=1, spread_submits=False))
    assert starts(trace, out)["3"] == 0.5


def test_a_job_end_runs_the_main_scheduler_at_once():
    # slurmctld 22.05: the end's EPILOG_COMPLETE RPC calls schedule() (proc_req.c
    # _slurm_rpc_epilog_complete), which runs the main scheduler within milliseconds, not
    # at the next 1 s tick: the freed GPUs go to the next job when they return (end + the
    # release delay); a submit only flags the tick
    cfg = SchedConfig(bf_interval_s=1, release_delay_s=0.05)
    assert cfg.sched_on_end
    jobs = [job(1, 0, 10, 8, "p2"), job(2, 0, 10, 8, "p1"), job(3, 0, 10, 8, "p0")]
    trace, out = run(jobs, config=cfg)
    # job 2 starts at backfill's 0.5 (as above); its GPUs return at 10.55, and the pass that
    # the end runs starts job 3 (p0) there; job 3's GPUs return at 20.6: job 1 starts then
    assert starts(trace, out) == {"2": 0.5, "3": 10.55, "1": 20.6}
    # the pass also takes what was submitted since the last one (schedule() walks every
    # partition's queue): job 5, submitted at 12.2 into the other partition's idle node,
    # starts at job 4's end (12.3), before the tick at 13
    jobs = [job(4, 0, 11.75, 8, "p1"), job(5, 12.2, 10, 8, "p1", part="other")]
    cfg = SchedConfig(bf_interval_s=30, release_delay_s=0.05, spread_submits=False)
    trace, out = run(jobs, config=cfg, other=8)
    assert starts(trace, out) == {"4": 0.5, "5": 12.3}
    # with `defer`, the tick at 13 takes it
    trace, out = run(jobs, config=dataclasses.replace(cfg, sched_on_end=False), other=8)
    assert starts(trace, out)["5"] == 13


def test_backfill_reserves_whole_nodes():
    # Slurm's backfill plans whole nodes: the 8-GPU job blocked behind job 1 reserves the
    # node from job 1's expected end (t=100) on, so a 1-GPU job of limit 200 may not start
    # on the 7 idle GPUs at t=10 (it would run into the reservation); one of limit 80 may
    # (one of 90 would end at 100, exactly when the reservation starts: Slurm counts that
    # as a conflict too)
    jobs = [job(1, 0, 50, 1, "p0", limit=100), job(2, 1, 10, 8, "p0"),
            job(3, 2, 20, 1, "p1", limit=200), job(4, 3, 20, 1, "p1", limit=80)]  # fmt: skip
    trace, out = run(jobs)
    s = starts(trace, out)
    assert s["4"] == 10  # the first backfill pass (bf_interval 10)
    assert s["2"] == 50  # job 1 ends early: the main pass starts the 8-GPU job at once
    assert s["3"] == 60  # only after job 2


def test_a_job_cancelled_while_pending_holds_its_place_until_its_cancel():
    """Two 8-GPU nodes; 12 GPUs busy until 100 s. c (16 GPUs, both nodes) waits from 10 s and
    was cancelled at 60 s (sacct: CANCELLED, no Start); b (4 GPUs, limit 1000 s) from 20 s.
    While c pends, backfill reserves both nodes for it at 100 s and b (whose limit crosses
    that) may not start in the 4 free GPUs; at c's cancel b starts (the next pass, 60 s)."""
    from dataclasses import replace

    jobs = [
        ReplayJob("a1", "gpu", "q", "q", 0.0, 100.0, 100.0, 8.0),
        ReplayJob("a2", "gpu", "q", "q", 0.0, 100.0, 100.0, 4.0),
        ReplayJob("c", "gpu", "q", "q", 10.0, 500.0, 500.0, 16.0, cancel_s=60.0),
        ReplayJob("b", "gpu", "q", "q", 20.0, 50.0, 1000.0, 4.0),
    ]
    trace, out = run(jobs, gpus=16)
    start = dict(zip(trace.job_id, out.start_s, strict=True))
    assert start["b"] == 60.0
    assert start["c"] == float("inf")
    assert out.unrunnable_reasons == {"cancelled while pending (as recorded)": 1}
    # without c (as the adapter replayed such jobs before), b starts at once
    trace, out = run([j for j in jobs if j.job_id != "c"], gpus=16)
    assert dict(zip(trace.job_id, out.start_s, strict=True))["b"] == 20.0
    # a replay quicker than the record starts c: it runs until its cancel (the user's scancel)
    quick = [jobs[0], jobs[1], replace(jobs[2], cancel_s=150.0), jobs[3]]
    trace, out = run(quick, gpus=16)
    got = dict(zip(trace.job_id, zip(out.start_s, out.end_s, strict=True), strict=True))
    assert got["c"] == (100.0, 150.0)
    assert got["b"][0] == 150.0
    assert not out.unrunnable_reasons
