"""The replay against recorded runs of the multi-node fidelity trace on the real slurmctld.

tests/integration/test_replay_fidelity.py submits its trace to the multi-node test cluster
(two partitions of two 8-GPU nodes, a bursty small-job one and a big-job one, three QOS
tiers, `fp0` preempting `fp2` with REQUEUE) and replays it once; these recordings
(tests/unit/replay/data/README.md) make the comparison repeatable and show how far slurmctld
agrees with itself on each trace design (docs/replay.md "Fidelity").
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
# the test's trace (seed 33: 437 burst jobs of 10-20 s at ~1.7 load, 83 big jobs of 4-8 s)
CURRENT = [DATA / f"fidelity-multinode-seed33-run{k}.txt" for k in (1, 2)]
# the integration test's own recording of it
TEST_RUN = DATA / "fidelity-multinode-seed33-run3.txt"
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
