"""Fidelity of `slurmgpu replay` against the real slurmctld on the multi-node test cluster.

Four nodes of 8 GPUs (the fleet cluster, tests/harness/multinode.py) in two partitions:
`burst` (gpu01, gpu02), fed bursts of many small jobs (1-2 GPUs: jobs smaller than a node
placed across nodes), and `big` (gpu03, gpu04), fed 4-, 8- and 16-GPU jobs (the 16-GPU ones
on both nodes: multi-node jobs). Three QOS tiers, multifactor priority (QOS + age), backfill
every second, and preemption (`PreemptType=preempt/qos`, `PreemptMode=REQUEUE`): the top
tier `fp0` preempts the low tier `fp2`, whose jobs are requeued and run again. 520 jobs are
submitted on a fixed 0.5 s grid (`trace()`), each running 4-20 s and ending on the second
sacct records (`job_script` in tests/harness/replay_stream.py). Its sacct is replayed with
the configuration read from the live cluster (`--live`: scontrol show config, sacctmgr show
qos, scontrol show node/partition).

Asserted: what the replay reaches, not yet the issue's targets (#21: per partition the mean
wait within 10 % and >= 90 % of the jobs in the same start order), which this trace does not
let any model be held to: two recordings of it on the same slurmctld agree on 85.6 % of the
jobs' order (burst 90.4 %, big 91.6 %), and slurmctld's own `big` mean wait was 13.7, 25.6
and 27.5 s in three runs. Measured (docs/replay.md "Fidelity on the multi-node cluster"):
78.5-84 % of the jobs in order (burst 87-91.5 %, big 76-79.5 %), mean wait +14-17 %
(burst) and -30 % to +41 % (big). The bounds below sit under those; the numbers are printed (-s).
Run on the host's Slurm only: the replay model does not depend on the release, and this
test takes ~9 minutes; 24.11 and 25.11 run the short `test_replay_live.py` (the live
configuration of that release read, a small trace replayed).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from slurmgpu.replay import ReplayOptions
from slurmgpu.replay.engine import replay as run_engine
from slurmgpu.replay.fidelity import fidelity
from slurmgpu.replay.from_accounting import load_trace
from tests.harness.replay_stream import record_stream

pytestmark = [
    pytest.mark.integration,
    # the recording alone takes ~8.5 minutes here: above the suite's 600 s default
    pytest.mark.timeout(900),
    pytest.mark.slurm_only(
        "host",
        reason="the replay model does not depend on the release and this recording takes "
        "~9 minutes; 24.11/25.11 run test_replay_live.py (their live config, a short trace)",
    ),
]

JOBS = 520
SUBMIT_GAP_S = 0.5
QOS = {"fp0": 1000, "fp1": 500, "fp2": 100}
LIMIT_MIN = {"fp0": 1, "fp1": 2, "fp2": 4}
PREEMPTS = {"fp0": "fp2"}  # fp0 preempts fp2; fp2's jobs are requeued
REQUEUE_DELAY_S = 20  # AuthInfo=cred_expire: a requeued job waits this + 1 s (Slurm: 120)
SEED = 33
# what the replay reaches on this trace, not the 90 % / 10 % (see the docstring):
# measured 78.5-81.5 % of the jobs in order (per partition 76-89 %), the mean wait over both
# partitions within 11-18 %; per partition within the factor of 2 that `replay --calibrate`
# calls calibrated (slurmctld's own `big` mean wait was 13.7, 25.6 and 27.5 s in three runs)
ORDER_MIN = 0.75
PART_ORDER_MIN = 0.70
WAIT_ERROR_MAX = 0.25
PART_WAIT_FACTOR = 2.0
PARTITIONS = (
    "PartitionName=burst Nodes=gpu[01-02] Default=YES MaxTime=INFINITE State=UP",
    "PartitionName=big Nodes=gpu[03-04] MaxTime=INFINITE State=UP",
)
EXTRA_CONF = "\n".join(
    [
        "PriorityWeightQOS=10000",
        "PriorityWeightAge=1000",
        "PriorityMaxAge=7-0",
        # backfill every second, so seconds-long jobs see it (Slurm's default is 30 s)
        "SchedulerParameters=batch_sched_delay=0,bf_interval=1,bf_resolution=1",
        f"AuthInfo=cred_expire={REQUEUE_DELAY_S}",
    ]
)


def trace(seed: int = SEED) -> list[tuple[str, int, str, int, int]]:
    """(partition, GPUs, QOS, time limit minutes, run seconds) per grid slot, reproducible.

    `burst` gets its jobs in bursts (runs of 12-24 consecutive slots: 6-12 s of submits), 1
    GPU (80 %) or 2, of 10 or 20 s; between bursts `big` gets 4-, 8- or 16-GPU jobs of 4 or
    8 s. `burst` is loaded to ~1.7 of its 16 GPUs over the stream (a backlog that drains
    after it), `big` to ~0.8. The time limit follows the tier, as in the one-node trace
    before it. The shape was chosen (seed included) by replaying candidates at seven
    scheduler phases, a cheap stand-in for slurmctld's unknown ones, and keeping one whose
    replays agree with each other (>= 93 % of jobs in the same order, mean waits within 5 %
    per partition); on the first design that agreement was 84 %, and slurmctld's two
    recordings of it agreed at 84 % too (docs/replay.md "Fidelity").
    """
    rng = random.Random(seed)
    out: list[tuple[str, int, str, int, int]] = []
    burst_left = 0
    while len(out) < JOBS:
        if burst_left == 0 and rng.random() < 0.3:
            burst_left = rng.randint(12, 24)
        qos = rng.choices(list(QOS), weights=[15, 35, 50])[0]
        if burst_left:
            burst_left -= 1
            gpus = rng.choices([1, 2], weights=[80, 20])[0]
            secs = rng.choices([10, 20], weights=[60, 40])[0]
            out.append(("burst", gpus, qos, LIMIT_MIN[qos], secs))
        else:
            gpus = rng.choices([4, 8, 16], weights=[50, 40, 10])[0]
            secs = rng.choices([4, 8], weights=[60, 40])[0]
            out.append(("big", gpus, qos, LIMIT_MIN[qos], secs))
    return out


def sbatch_args(partition: str, gpus: int, qos: str, limit: int) -> list[str]:
    """A job of `gpus` GPUs: up to 8 on one node, 16 as 8 on each of two nodes."""
    nodes = -(-gpus // 8)
    args = [f"--partition={partition}", f"--qos={qos}", f"--time={limit}", "-o", "/dev/null"]
    args += [f"--nodes={nodes}", f"--gres=gpu:{gpus // nodes}", "-c", "1", "--mem=100M"]
    return args


def configure(c) -> None:
    """The partitions, scheduler settings and QOS tiers of the fidelity trace on `c`."""
    c.reconfigure(partitions=list(PARTITIONS), extra_conf=EXTRA_CONF)
    for name in QOS:  # all of them first: a Preempt= names another
        c.sacctmgr("add", "qos", name, check=False)
    for name, prio in QOS.items():
        settings = [f"Priority={prio}", "GraceTime=0"]
        if name in PREEMPTS:
            settings.append(f"Preempt={PREEMPTS[name]}")
        if name in PREEMPTS.values():
            settings.append("PreemptMode=requeue")
        c.sacctmgr("modify", "qos", name, "set", *settings)
    c.allow_qos(*QOS)


def record(c, out: Path) -> list[int]:
    """Configure `c`, submit the trace on its grid, wait, write its sacct to `out`.

    Also the way to record it again for the unit tests (tests/unit/replay/data/README.md).
    """
    configure(c)
    jobs = [(sbatch_args(part, gpus, qos, limit), secs) for part, gpus, qos, limit, secs in trace()]
    # 0.1 s past the grid's points: never two submits in one scheduler tick
    return record_stream(c, jobs, SUBMIT_GAP_S, 0.1, out, timeout=540)


@pytest.fixture(scope="module")
def recorded(fleet_cluster, tmp_path_factory):
    c = fleet_cluster
    try:
        path = tmp_path_factory.mktemp("replay") / "sacct.txt"
        ids = record(c, path)
        yield c, path, ids
    finally:
        c.reset()


def test_replay_matches_slurmctld_per_partition(recorded, monkeypatch):
    cluster, path, _ids = recorded
    monkeypatch.setenv("SLURM_CONF", cluster.env["SLURM_CONF"])
    # the whole command, as a site runs it
    res = CliRunner().invoke(main, ["replay", "--sacct-file", str(path), "--live",
                                    "--format", "json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    base, rec = doc["baseline"], doc["baseline"]["recorded"]
    assert base["jobs"] == rec["jobs"] == JOBS, base["skipped"]
    assert base["jobs_not_run"] == 0
    assert {p["partition"]: p["gpus"] for p in base["by_partition"]} == {"big": 16, "burst": 16}

    from slurmgpu.replay import _with_live, build_model

    options = _with_live(ReplayOptions(live=True))
    assert options.config.bf_interval_s == 1
    assert options.config.requeue_delay_s == REQUEUE_DELAY_S + 1  # cred_expire + 1 s
    model = build_model(options)
    assert model.qos_spec("fp0").preempts == ("fp2",)
    tr = load_trace([path])
    outcome = run_engine(tr, model, options.config)
    # preemption happened, in the record and in the replay
    assert tr.recorded_preemptions.sum() > 0 and outcome.preemptions > 0
    print(f"recorded preemptions {int(tr.recorded_preemptions.sum())}, "
          f"replayed {outcome.preemptions}")  # fmt: skip
    f = fidelity(tr.submit_s, tr.recorded_start_s, outcome.start_s)
    print(f"fidelity: {f}")  # shown with -s; the numbers go into docs/replay.md
    assert f.jobs == JOBS
    assert f.same_order_fraction >= ORDER_MIN, f
    for k, name in enumerate(tr.partitions):
        mine = tr.partition == k
        fp = fidelity(tr.submit_s[mine], tr.recorded_start_s[mine], outcome.start_s[mine])
        print(f"{name}: {fp}")
        assert fp.recorded_mean_wait_s > 5, fp  # a real queue formed, or the test proves nothing
        ratio = fp.replayed_mean_wait_s / fp.recorded_mean_wait_s
        assert 1 / PART_WAIT_FACTOR <= ratio <= PART_WAIT_FACTOR, (name, fp)
        assert fp.same_order_fraction >= PART_ORDER_MIN, (name, fp)
    assert f.mean_wait_error <= WAIT_ERROR_MAX, f
    assert np.isclose(base["wait_s"]["mean"], f.replayed_mean_wait_s)
