"""The replay against three recorded runs of the fidelity trace on the real slurmctld.

The integration test (tests/integration/test_replay_fidelity.py) submits the trace and
replays it once; these recorded runs (tests/unit/replay/data/README.md) make the
comparison repeatable and add what one run cannot show: how far slurmctld agrees with
itself. Three runs of the same 200-job burst start only 68-81 % of the jobs in the same
order as each other (1-3 s jobs, 1 s scheduler ticks: sub-second races pick among
equal-priority jobs); the replay is held to that yardstick, not to a number no scheduler
reaches on this trace.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from slurmgpu.replay.cluster import QosSpec, from_capacity
from slurmgpu.replay.engine import replay
from slurmgpu.replay.fidelity import fidelity
from slurmgpu.replay.from_accounting import load_trace
from slurmgpu.replay.slurm_config import parse_slurm_conf, sched_config

DATA = Path(__file__).resolve().parent / "data"
RUNS = [DATA / f"fidelity-seed11-run{k}.txt" for k in (1, 2, 3)]
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


def _replayed(path: Path):
    trace = load_trace([path])
    model = from_capacity({"gpu": 8}, gpus_per_node={"gpu": 8}, qos=QOS)
    out = replay(trace, model, sched_config(parse_slurm_conf(SLURM_CONF)))
    return trace, fidelity(trace.submit_s, trace.recorded_start_s, out.start_s)


def _real_vs_real():
    """Each pair of recorded runs compared job by job (by job id)."""
    traces = [load_trace([p]) for p in RUNS]
    out = []
    for a, b in itertools.combinations(traces, 2):
        where = {j: i for i, j in enumerate(a.job_id)}
        idx = [where[j] for j in b.job_id]
        out.append(fidelity(b.submit_s, a.recorded_start_s[idx], b.recorded_start_s))
    return out


@pytest.mark.parametrize("path", RUNS, ids=lambda p: p.stem)
def test_replay_of_a_recorded_run(path):
    trace, f = _replayed(path)
    assert f.jobs == len(trace) == 200
    assert f.recorded_mean_wait_s > 20  # a real queue formed
    assert f.mean_wait_error <= 0.10, f
    assert f.pair_order_agreement >= 0.90, f
    assert f.same_order_fraction >= 0.60, f


def test_replay_agrees_with_slurmctld_as_well_as_slurmctld_with_itself():
    real = _real_vs_real()
    replayed = [_replayed(p)[1] for p in RUNS]
    real_order = np.mean([f.same_order_fraction for f in real])
    real_pairs = np.mean([f.pair_order_agreement for f in real])
    # slurmctld itself stays far from 90 % of jobs in the same order on this trace
    assert 0.6 < real_order < 0.9, real
    # measured: replay 0.747 (0.790, 0.665, 0.785) vs slurmctld 0.727 (0.81, 0.695, 0.675);
    # the engine before whole-node reservations and the 1 s tick: 0.680 (fails here)
    assert np.mean([f.same_order_fraction for f in replayed]) >= real_order - 0.02, replayed
    assert np.mean([f.pair_order_agreement for f in replayed]) >= real_pairs - 0.02, replayed
