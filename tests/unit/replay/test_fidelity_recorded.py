"""The replay against recorded runs of the fidelity traces on the real slurmctld.

The integration test (tests/integration/test_replay_fidelity.py) submits its trace and
replays it once; these recorded runs (tests/unit/replay/data/README.md) make the
comparison repeatable and add what one run cannot show: how far slurmctld agrees with
itself, which bounds what any model can reach.

- seed 11, the first trace (a 200-job burst of 1-3 s jobs, time limits drawn at random):
  three runs start only 68-81 % of the jobs in the same order as each other (1 s scheduler
  ticks, sub-second races pick among equal-priority jobs); the replay is held to that
  yardstick.
- seed 21, the current trace (a stream of one job a second, 2/4/6 s jobs, time limits by
  tier): slurmctld reproduces its own start order (>= 95 %), and the replay is held to the
  issue's target: >= 90 % of the jobs in the same order, mean wait within 10 %.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from slurmgpu.replay.cluster import QosSpec, from_capacity
from slurmgpu.replay.engine import replay
from slurmgpu.replay.fidelity import Fidelity, fidelity
from slurmgpu.replay.from_accounting import load_trace
from slurmgpu.replay.jobs import ReplayTrace
from slurmgpu.replay.slurm_config import parse_slurm_conf, sched_config

DATA = Path(__file__).resolve().parent / "data"
BURST = [DATA / f"fidelity-seed11-run{k}.txt" for k in (1, 2, 3)]
STREAM = [DATA / f"fidelity-seed21-run{k}.txt" for k in (1, 2)]
# the same stream as plain `sleep N` jobs (before `job_script`)
SLEEP = [DATA / f"fidelity-seed21-sleep-run{k}.txt" for k in (1, 2)]
# the test cluster's scheduler settings, as slurm.conf text: the model's inputs
SLURM_CONF = """
SchedulerType=sched/backfill
PriorityType=priority/multifactor
PriorityWeightQOS=10000
PriorityWeightAge=1000
PriorityMaxAge=7-0
SchedulerParameters=batch_sched_delay=0,bf_interval=1,bf_resolution=1
"""
QOS = (QosSpec("normal", 0), QosSpec("rp0", 1000), QosSpec("rp1", 500), QosSpec("rp2", 100))


def _replayed(path: Path) -> tuple[ReplayTrace, Fidelity]:
    trace = load_trace([path])
    model = from_capacity({"gpu": 8}, gpus_per_node={"gpu": 8}, qos=QOS)
    out = replay(trace, model, sched_config(parse_slurm_conf(SLURM_CONF)))
    return trace, fidelity(trace.submit_s, trace.recorded_start_s, out.start_s)


def _real_vs_real(paths: list[Path]) -> list[Fidelity]:
    """Each pair of recorded runs compared job by job.

    The jobs are matched by job id (each run on a fresh cluster: ids from 1, in submit
    order); each trace's times count from its first submit, so run A's starts are on run
    B's clock (the stream's submits follow a fixed schedule, see the test below).
    """
    traces = [load_trace([p]) for p in paths]
    out = []
    for a, b in itertools.combinations(traces, 2):
        where = {j: i for i, j in enumerate(a.job_id)}
        idx = [where[j] for j in b.job_id]
        out.append(fidelity(b.submit_s, a.recorded_start_s[idx], b.recorded_start_s))
    return out


@pytest.mark.parametrize("path", BURST, ids=lambda p: p.stem)
def test_replay_of_a_recorded_burst_run(path):
    trace, f = _replayed(path)
    assert f.jobs == len(trace) == 200
    assert f.recorded_mean_wait_s > 20  # a real queue formed
    assert f.mean_wait_error <= 0.10, f
    assert f.pair_order_agreement >= 0.90, f
    assert f.same_order_fraction >= 0.60, f


def test_replay_agrees_with_slurmctld_as_well_as_slurmctld_with_itself_on_the_burst():
    real = _real_vs_real(BURST)
    replayed = [_replayed(p)[1] for p in BURST]
    real_order = np.mean([f.same_order_fraction for f in real])
    real_pairs = np.mean([f.pair_order_agreement for f in real])
    # slurmctld itself stays far from 90 % of jobs in the same order on this trace
    assert 0.6 < real_order < 0.9, real
    # measured: replay 0.747 (0.790, 0.665, 0.785) vs slurmctld 0.727 (0.81, 0.695, 0.675);
    # the engine before whole-node reservations and the 1 s tick: 0.680 (fails here)
    assert np.mean([f.same_order_fraction for f in replayed]) >= real_order - 0.02, replayed
    assert np.mean([f.pair_order_agreement for f in replayed]) >= real_pairs - 0.02, replayed


@pytest.mark.parametrize("runs", [STREAM, SLEEP], ids=["stream", "sleep"])
def test_slurmctld_reproduces_its_start_order_on_the_stream_trace(runs):
    a, b = (load_trace([p]) for p in runs)
    assert list(a.job_id) == list(b.job_id)
    # one submit a second on a fixed schedule: the two runs' submits line up (sacct's
    # whole seconds may put one either side of a second's edge)
    assert np.abs(a.submit_s - b.submit_s).max() <= 1
    (f,) = _real_vs_real(runs)
    assert f.jobs == 200
    assert f.same_order_fraction >= 0.95, f
    assert f.mean_wait_error <= 0.05, f


@pytest.mark.parametrize("path", STREAM, ids=lambda p: p.stem)
def test_replay_of_a_recorded_stream_run_meets_the_issue_target(path):
    trace, f = _replayed(path)
    assert f.jobs == len(trace) == 200
    assert f.recorded_mean_wait_s > 10  # a real queue formed
    # issue #10: mean wait within 10 %, >= 90 % of the jobs in the same start order
    assert f.mean_wait_error <= 0.10, f
    assert f.same_order_fraction >= 0.90, f


@pytest.mark.parametrize("path", SLEEP, ids=lambda p: p.stem)
def test_replay_of_the_sleep_runs(path):
    """Plain `sleep N` jobs: sacct records a job started late in its second one second too
    long, and the replay runs it so (16 such jobs in run 1: 88.0 % in order, mean wait
    +16.6 %; 3 in run 2: 99.5 %, 1.5 %). Held to slurmctld's order, not to the mean wait."""
    trace, f = _replayed(path)
    assert f.jobs == len(trace) == 200
    assert f.same_order_fraction >= 0.85, f
    assert f.pair_order_agreement >= 0.95, f
