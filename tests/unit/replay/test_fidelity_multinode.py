"""The replay against recorded runs of the multi-node fidelity traces on the real slurmctld.

tests/integration/test_replay_fidelity.py submits its trace to a multi-node test cluster (a
bursty small-job partition and a big-job one, three QOS tiers, `fp0` preempting `fp2` with
REQUEUE) and replays it once; these recordings (tests/unit/replay/data/README.md) make the
comparison repeatable and show how far slurmctld agrees with itself on each trace design
(docs/replay.md "Fidelity on the multi-node cluster"): the first two designs (seeds 31 and
33, four nodes, jobs of seconds on a continuous 0.5 s submit grid), on which slurmctld
agreed with itself on only 84-86 % of the start order, and the grid trace (seed 41, six
nodes, 10 s windows) the integration test now records, on which it agrees on >= 95 % and
the replay meets the issue's targets.
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import numpy as np
import pytest

from slurmgpu.replay.cluster import QosSpec, from_capacity
from slurmgpu.replay.engine import SchedConfig, replay
from slurmgpu.replay.fidelity import Fidelity, fidelity
from slurmgpu.replay.from_accounting import load_trace
from slurmgpu.replay.jobs import ReplayTrace
from slurmgpu.replay.slurm_config import parse_slurm_conf, sched_config
from tests.unit.replay.test_fidelity_recorded import SLURM_CONF as ONE_NODE_SLURM_CONF

DATA = Path(__file__).resolve().parent / "data"
# the first design (seed 31: 341 burst jobs of 4-12 s at ~0.8 load, 179 big jobs of 2-6 s)
FIRST = [DATA / f"fidelity-multinode-seed31-run{k}.txt" for k in (1, 2)]
# the second design (seed 33: 437 burst jobs of 10-20 s at ~1.7 load, 83 big jobs of 4-8 s)
CURRENT = [DATA / f"fidelity-multinode-seed33-run{k}.txt" for k in (1, 2)]
# the then integration test's own recording of it
TEST_RUN = DATA / "fidelity-multinode-seed33-run3.txt"
# the grid trace (seed 41: 467 one-GPU burst jobs, 53 whole-node big jobs of 8-24 GPUs, on
# 2 + 3 nodes; tests/integration/test_replay_fidelity.py): three recordings, and the
# integration test's own (run 4)
GRID = [DATA / f"fidelity-multinode-grid41-run{k}.txt" for k in (1, 2, 3, 4)]
# the first grid design: six nodes (`big` on four, 8-32 GPUs), `big`'s limits by job size
GRID_BY_SIZE = [DATA / f"fidelity-multinode-gridsize-run{k}.txt" for k in (1, 2, 3)]
TIER_PRIORITY = {"fp0": 1000, "fp1": 500, "fp2": 100}
# the one-node test's scheduler settings, and a requeued job's 21 s wait (cred_expire + 1)
SLURM_CONF = ONE_NODE_SLURM_CONF + "AuthInfo=cred_expire=20\n"
QOS = (
    QosSpec("normal", 0),
    QosSpec("fp0", 1000, ("fp2",), 0, "requeue"),
    QosSpec("fp1", 500),
    QosSpec("fp2", 100, (), 0, "requeue"),
)
# a cheap stand-in for slurmctld's unknown sub-second phases (main tick, backfill pass, the
# GPUs' return after an end): the model at each of these
PHASES = (
    {},
    {"sched_tick_phase_s": 0.3},
    {"sched_tick_phase_s": 0.7},
    {"bf_phase_s": 0.2},
    {"bf_phase_s": 0.8},
    {"release_delay_s": 0.1},
    {"sched_tick_phase_s": 0.5, "bf_phase_s": 0.0},
)


def config(**changes) -> SchedConfig:
    return dataclasses.replace(sched_config(parse_slurm_conf(SLURM_CONF)), **changes)


def model():
    return from_capacity({"burst": 16, "big": 16}, gpus_per_node={"burst": 8, "big": 8}, qos=QOS)


def grid_model(big: int = 24):
    return from_capacity({"burst": 16, "big": big}, gpus_per_node={"burst": 8, "big": 8}, qos=QOS)


def by_partition(trace: ReplayTrace, recorded, replayed) -> dict[str, Fidelity]:
    out = {"all": fidelity(trace.submit_s, recorded, replayed)}
    for k, name in enumerate(trace.partitions):
        m = trace.partition == k
        out[name] = fidelity(trace.submit_s[m], recorded[m], replayed[m])
    return out


def real_vs_real(paths: list[Path]) -> dict[str, Fidelity]:
    """Two recordings job by job: matched in job-id order (the same submits, in order, each
    run's ids from its first), run A's starts moved onto run B's clock (the fixed grid)."""
    a, b = (load_trace([p]) for p in paths)
    oa, ob = np.argsort(a.job_id.astype(int)), np.argsort(b.job_id.astype(int))
    assert list(a.qos[oa]) == list(b.qos[ob]) and list(a.gpus[oa]) == list(b.gpus[ob])
    shifted = a.recorded_start_s[oa] - a.submit_s.min() + b.submit_s.min()
    sub = ReplayTrace.from_jobs([b.job(i) for i in ob])
    return by_partition(sub, shifted, sub.recorded_start_s)


def phase_agreement(trace: ReplayTrace) -> float:
    """The mean share of jobs in the same start order between the model's runs at PHASES
    (one run's starts cut to whole seconds, as sacct records them)."""
    starts = [replay(trace, model(), config(**kw)).start_s for kw in PHASES]
    pairs = itertools.combinations(starts, 2)
    return float(
        np.mean([fidelity(trace.submit_s, np.floor(a), b).same_order_fraction for a, b in pairs])
    )


def test_slurmctld_does_not_reproduce_its_order_on_the_first_design():
    f = real_vs_real(FIRST)
    assert f["all"].jobs == 520
    # measured: 84.2 % of the jobs in the same order (burst 86.8 %, big 90.5 %), mean waits
    # within 3 %: no model can be held to 90 % on this trace
    assert 0.80 <= f["all"].same_order_fraction <= 0.88, f
    assert f["burst"].same_order_fraction < 0.90, f
    for name in ("burst", "big"):
        assert f[name].mean_wait_error <= 0.05, (name, f[name])


def test_the_model_across_phases_predicts_slurmctld_s_own_agreement():
    """Why the test's trace was chosen by replaying candidates at several phases: on the
    first design the model agrees with itself across PHASES about as well as slurmctld's
    two recordings agree (84 % both)."""
    trace = load_trace([FIRST[0]])
    real = real_vs_real(FIRST)["all"].same_order_fraction
    assert abs(phase_agreement(trace) - real) <= 0.03


@pytest.mark.parametrize("path", FIRST, ids=lambda p: p.stem)
def test_replay_of_the_first_design_preempts_and_requeues_as_recorded(path):
    trace = load_trace([path])
    out = replay(trace, model(), config())
    # every job runs (a requeued job once started early left one pending forever, before)
    assert np.isfinite(out.start_s).all()
    assert trace.recorded_preemptions.sum() >= 20 and out.preemptions >= 20
    f = by_partition(trace, trace.recorded_start_s, out.start_s)
    # 69-70 % since a job's end runs the main pass at once and a requeued job queues by its
    # requeue time (77 % before: burst's mean wait -28 % instead of -17 %, big's -30 %
    # instead of +22 %)
    assert f["all"].same_order_fraction >= 0.68, f


def test_slurmctld_agrees_with_itself_better_on_the_test_s_trace():
    f = real_vs_real(CURRENT)
    # measured: 85.6 % (burst 90.4 %, big 91.6 %), mean waits within 2.0 % / 7.0 %: better
    # than the first design, still short of 90 % over both partitions together
    assert f["all"].same_order_fraction >= 0.83, f
    assert f["burst"].same_order_fraction >= 0.88 and f["big"].same_order_fraction >= 0.88, f
    assert f["burst"].mean_wait_error <= 0.05 and f["big"].mean_wait_error <= 0.10, f


def test_slurmctld_s_own_big_mean_wait_varies_twofold():
    # the test's own run against run 1: burst's mean wait 3 % apart, big's 100 % (13.7 s
    # against 27.5 s): why the test holds each partition to calibration's factor 2
    f = real_vs_real([CURRENT[0], TEST_RUN])
    assert f["burst"].mean_wait_error <= 0.05, f
    assert f["big"].mean_wait_error >= 0.5, f


@pytest.mark.parametrize("path", [*CURRENT, TEST_RUN], ids=lambda p: p.stem)
def test_replay_of_the_test_s_trace(path):
    """What the replay reaches (docs/replay.md "Fidelity on the multi-node cluster"): 75-82 %
    of the jobs in order; `burst`'s mean wait -5 to -7 % since a job's end runs the main
    pass at once and a requeued job queues by its requeue time (+14-17 % before: slurmctld
    starts 242 of 320 backlog jobs in the second a job ended on that node), `big`'s -58 %
    to -17 % (slurmctld's own varies twofold). Not the issue's 90 % / 10 %."""
    trace = load_trace([path])
    out = replay(trace, model(), config())
    assert np.isfinite(out.start_s).all()
    assert out.preemptions >= 10 and trace.recorded_preemptions.sum() >= 10
    f = by_partition(trace, trace.recorded_start_s, out.start_s)
    assert f["all"].jobs == 520
    assert f["all"].same_order_fraction >= 0.75, f
    assert f["burst"].same_order_fraction >= 0.84, f
    assert f["burst"].mean_wait_error <= 0.10, f
    ratio = f["big"].replayed_mean_wait_s / f["big"].recorded_mean_wait_s
    assert 0.4 <= ratio <= 2.0, f


# ------------------------------------------------------------------------ the grid trace


def pair_id(pair: tuple[Path, Path]) -> str:
    return "-vs-".join(p.stem.rsplit("-", 1)[-1] for p in pair)


def mechanisms(trace: ReplayTrace, starts: np.ndarray) -> dict[str, dict[str, int]]:
    """How much of each mechanism a run of the grid trace shows, per partition: jobs that
    waited, the most jobs pending at once, jobs started while an older job of their tier
    or one of a higher tier waited in their partition (what only backfill does), multi-node
    jobs; and, where `starts` are the recorded ones, the preemptions."""
    prio = np.array([TIER_PRIORITY.get(q, 0) for q in trace.qos_names])[trace.qos]
    out = {}
    for k, name in enumerate(trace.partitions):
        m = np.flatnonzero(trace.partition == k)
        sub, st, pr = trace.submit_s[m], starts[m], prio[m]
        ahead = 0
        for i in range(len(m)):
            before = (pr > pr[i]) | ((pr == pr[i]) & (m < m[i]))
            ahead += bool(np.any(before & (sub < st[i]) & (st > st[i])))
        t = np.arange(sub.min(), st.max() + 1)
        pending = (sub[None, :] <= t[:, None]) & (st[None, :] > t[:, None])
        out[name] = {
            "jobs": len(m),
            "waited": int((st > sub).sum()),
            "peak_pending": int(pending.sum(axis=1).max()),
            "started_ahead": ahead,
            "multi_node": int((trace.gpus[m] > 8).sum()),
            "preempted": int(trace.recorded_preemptions[m].sum()),
        }
    return out


@pytest.mark.parametrize("pair", list(itertools.combinations(GRID, 2)), ids=pair_id)
def test_slurmctld_reproduces_the_grid_trace(pair):
    """A trace the replay can be held to: two slurmctld runs agree on >= 95 % of the order
    and on each partition's mean wait within ~5 %. Measured (docs/replay.md "Fidelity on the
    multi-node cluster"): runs 1-3 pairwise 100 % of the jobs in the same order, overall and
    per partition, mean waits within 0.1 %; run 4 against each: 99.4 % overall, burst 100 %
    and 0.0 %, but big 96.2 % in order and its mean wait 11.2 % apart (18.8 s against 21.1 s:
    at 16 s two 8-GPU jobs landed on other nodes, as the nodes' epilog-complete RPCs came in
    another order, and a backfill reservation then took other nodes)."""
    f = real_vs_real(list(pair))
    assert f["all"].jobs == 520
    assert f["all"].same_order_fraction >= 0.99, f
    assert f["burst"].same_order_fraction >= 0.99 and f["burst"].mean_wait_error <= 0.02, f
    assert f["big"].same_order_fraction >= 0.95 and f["big"].mean_wait_error <= 0.12, f
    if "run4" not in pair_id(pair):
        assert f["big"].same_order_fraction >= 0.99 and f["big"].mean_wait_error <= 0.02, f


@pytest.mark.parametrize("path", GRID, ids=lambda p: p.stem)
def test_the_grid_trace_exercises_backlog_backfill_preemption_and_multi_node_jobs(path):
    trace = load_trace([path])
    got = mechanisms(trace, trace.recorded_start_s)
    burst, big = got["burst"], got["big"]
    # measured on each recording: burst 429-436 of 467 jobs waited, up to 111 pending at once;
    # big: 20 of 53 jobs multi-node, 2-4 started ahead of a waiting higher-priority job;
    # 24-26 preemptions (22 in burst, 2-4 in big), each requeued and run again
    assert burst["waited"] >= 400 and burst["peak_pending"] >= 100, got
    assert big["multi_node"] >= 20 and big["started_ahead"] >= 2 and big["waited"] >= 40, got
    assert burst["preempted"] >= 15 and big["preempted"] >= 2, got


@pytest.mark.parametrize("path", GRID, ids=lambda p: p.stem)
def test_replay_of_the_grid_trace_meets_the_issue_s_targets(path):
    """Issue #21: per partition the replay's mean wait within 10 % of the recorded one, and
    >= 90 % of the jobs in the same start order (docs/replay.md "Fidelity on the multi-node
    cluster"). Measured: 98.5-99.0 % of all jobs in order; burst 100 %, mean wait +2.3 to
    +2.8 %; big 90.6-96.2 %, -3.9 to +5.6 %; 24-27 preemptions replayed, 24-26 recorded."""
    trace = load_trace([path])
    out = replay(trace, grid_model(), config())
    assert np.isfinite(out.start_s).all()
    f = by_partition(trace, trace.recorded_start_s, out.start_s)
    assert f["all"].jobs == 520
    assert f["all"].same_order_fraction >= 0.97, f
    for name in ("burst", "big"):
        assert f[name].same_order_fraction >= 0.90, (name, f[name])
        assert f[name].mean_wait_error <= 0.10, (name, f[name])
    assert out.preemptions >= 20


@pytest.mark.parametrize("pair", list(itertools.combinations(GRID_BY_SIZE, 2)), ids=pair_id)
def test_slurmctld_reproduces_the_first_grid_design_too(pair):
    # measured: 100 % of the jobs in the same order in each pair, mean waits within 0.7 %
    f = real_vs_real(list(pair))
    for name in ("all", "burst", "big"):
        assert f[name].same_order_fraction >= 0.99, (name, f[name])
        assert f[name].mean_wait_error <= 0.02, (name, f[name])


@pytest.mark.parametrize("path", GRID_BY_SIZE, ids=lambda p: p.stem)
def test_replay_of_the_first_grid_design_misses_big(path):
    """Why the test's trace has one limit in `big` (docs/replay.md, "The first grid design"):
    with limits by job size, slurmctld's backfill reservations hang on whole-second
    coincidences of expected ends across partitions (cons_tres's will-run batches), which
    the replay does not reproduce: `burst` is replayed exactly, `big` is not (measured
    75.8 % of its jobs in order, mean wait +37 to +40 %)."""
    trace = load_trace([path])
    out = replay(trace, grid_model(big=32), config())
    f = by_partition(trace, trace.recorded_start_s, out.start_s)
    assert f["burst"].same_order_fraction >= 0.99 and f["burst"].mean_wait_error <= 0.05, f
    assert f["big"].same_order_fraction < 0.85 and f["big"].mean_wait_error > 0.25, f
