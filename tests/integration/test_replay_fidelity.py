"""Fidelity of `slurmgpu replay` against the real slurmctld on a multi-node test cluster.

Five namespaced slurmds of 8 GPUs (tests/harness/multinode.py, all the recorded DGX H100) in
two partitions: `burst` (gpu01-02), fed bursts of many 1-GPU jobs, and `big` (gpu03-05),
fed whole-node jobs of 8, 16 and 24 GPUs (the last two multi-node). Three QOS tiers,
multifactor priority (QOS + age), backfill every second, and preemption
(`PreemptType=preempt/qos`, `PreemptMode=REQUEUE`, `GraceTime=0`): the top tier `fp0`
preempts the low tier `fp2`, whose jobs are requeued and run again 21 s later
(`AuthInfo=cred_expire=20`). 520 jobs, submitted in groups on a 10 s grid (`trace()`), each
ending at a fixed point of its grid window (`grid_job_script` in
tests/harness/replay_stream.py). Its sacct is replayed with the configuration read from the
live cluster (`--live`: scontrol show config, sacctmgr show qos, scontrol show
node/partition).

Asserted: the issue's targets (#21): per partition the replay's mean wait within 10 % of the
recorded one, and >= 90 % of the jobs in the same start order; besides, each partition's
jobs >= 85 % in order (measured 90.6-100 %: `big` has 53 jobs, so one slurmctld placement
race moves it by points; docs/replay.md). Why this trace and not the earlier ones (slurmctld
agreed with itself on only 84-86 % of their order), and what slurmctld reaches against
itself on it, measured over recordings in tests/unit/replay/data: docs/replay.md "Fidelity
on the multi-node cluster". The numbers are printed (-s). Run on the host's Slurm only: the
replay model does not depend on the release, and the cluster's start and the recording take
~7 minutes; 24.11 and 25.11 run the short `test_replay_live.py` (the live configuration of
that release read, a small trace replayed).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from slurmgpu.replay import ReplayOptions
from slurmgpu.replay.engine import replay as run_engine
from slurmgpu.replay.fidelity import fidelity
from slurmgpu.replay.from_accounting import load_trace
from tests.harness.replay_stream import (
    dump_sacct,
    grid_job_script,
    raise_priority,
    submit_slots,
    wait_all_done,
)

pytestmark = [
    pytest.mark.integration,
    # the cluster's start and the recording take ~7 minutes here: above the 600 s default
    pytest.mark.timeout(900),
    pytest.mark.slurm_only(
        "host",
        reason="the replay model does not depend on the release and this recording takes "
        "~7 minutes; 24.11/25.11 run test_replay_live.py (their live config, a short trace)",
    ),
]

JOBS = 520
NODES = tuple(f"gpu0{i}=dgx-h100" for i in range(1, 6))
PARTITIONS = (
    "PartitionName=burst Nodes=gpu[01-02] Default=YES MaxTime=INFINITE State=UP",
    "PartitionName=big Nodes=gpu[03-05] MaxTime=INFINITE State=UP",
)
QOS = {"fp0": 1000, "fp1": 500, "fp2": 100}
BURST_LIMIT_MIN = {"fp0": 1, "fp1": 2, "fp2": 4}  # burst: the time limit follows the tier
BIG_LIMIT_MIN = 2  # big: one limit (see trace())
PREEMPTS = {"fp0": "fp2"}  # fp0 preempts fp2; fp2's jobs are requeued
REQUEUE_DELAY_S = 20  # AuthInfo=cred_expire: a requeued job waits this + 1 s (Slurm: 120)
SEED = 41
# the grid: group k's fp0 and fp1 jobs are submitted from ORIGIN + k * PERIOD + SUBMIT_S,
# its fp2 jobs from ORIGIN + k * PERIOD + LOW_SUBMIT_S; a job started in window
# W = floor((start - ORIGIN + SHIFT) / PERIOD) ends at ORIGIN + W * PERIOD + END_PHASE + its
# run seconds (tests/harness/replay_stream.py grid_job_script)
GROUPS = 30
PERIOD_S = 10.0
SUBMIT_S = 0.1
LOW_SUBMIT_S = 2.1
END_PHASE_S = 6.0
SHIFT_S = 1.0
# the targets (#21): mean wait within 10 % per partition, >= 90 % of the jobs in order
ORDER_MIN = 0.90
PART_WAIT_ERROR_MAX = 0.10
# not the issue's: each partition's jobs in order too (measured 90.6-100 % over four runs)
PART_ORDER_MIN = 0.85
EXTRA_CONF = "\n".join(
    [
        "PriorityWeightQOS=10000",
        "PriorityWeightAge=1000",
        "PriorityMaxAge=7-0",
        # backfill every second (Slurm's default is 30 s)
        "SchedulerParameters=batch_sched_delay=0,bf_interval=1,bf_resolution=1",
        f"AuthInfo=cred_expire={REQUEUE_DELAY_S}",
    ]
)

Job = tuple[str, int, str, int, int]  # partition, GPUs, QOS, time limit minutes, run seconds


def trace(seed: int = SEED) -> list[list[Job]]:
    """The jobs of each grid group, reproducible; each group in priority order (`slots()`
    submits its fp0 and fp1 jobs at the group's time, its fp2 jobs 2 s later).

    `burst`: 1-GPU jobs of 10 s (80 %) or 20 s, tiers fp0/fp1/fp2 10/60/30 %, in bursts: three
    groups of 22 jobs, then two of 6 (~1.5x burst's 16 GPUs while a burst lasts, ~0.9 over
    the trace): a backlog forms in each burst and drains between them. `big`: 1-2 jobs a
    group of 8 (60 %), 16 or 24 GPUs (whole nodes; 16 and 24 multi-node), 10 s, tiers
    15/35/50 %, all with a 2-minute limit: a job of several nodes waits for them while the
    others run (backfill starts what fits outside its reservation), and `fp0` jobs preempt
    running `fp2` ones.

    What makes slurmctld reproduce it (each measured, docs/replay.md): every job ends at a
    fixed point of its 10 s window, 4 s before the next group, whatever started it (no
    sub-second race between an end and a submit); a group is submitted in priority order, so
    a scheduler pass that sees only part of it sees its top jobs; its fp2 jobs go in 2 s
    after the rest, so a job an fp0 job preempts (requeued with the second of its preemption
    as its new submit time, which is the group's second or the next one as slurmctld's tick
    falls) always queues ahead of them and behind the fp2 jobs before; `burst` jobs are all 1 GPU
    and `big` jobs whole nodes, so which node a job is placed on (the order of the nodes'
    epilog-complete RPCs decides that) changes what starts later only where a backfill
    reservation picks the lowest-numbered nodes (seen once in four runs); `big` has one time
    limit, so no backfill decision there hangs on whole-second coincidences of expected ends
    (with limits by job size, slurmctld's own runs still agreed, but its decisions then
    hung on such coincidences across partitions that a replay cannot reproduce: docs/replay.md).
    """
    rng = random.Random(seed)
    groups: list[list[Job]] = []
    count = 0
    for k in range(GROUPS):
        jobs: list[Job] = []
        for _ in range((22, 22, 22, 6, 6)[k % 5]):
            qos = rng.choices(list(QOS), weights=[10, 60, 30])[0]
            secs = rng.choices([10, 20], weights=[80, 20])[0]
            jobs.append(("burst", 1, qos, BURST_LIMIT_MIN[qos], secs))
        for _ in range((2, 2, 2, 2, 1)[k % 5]):
            qos = rng.choices(list(QOS), weights=[15, 35, 50])[0]
            gpus = rng.choices([8, 16, 24], weights=[60, 30, 10])[0]
            jobs.append(("big", gpus, qos, BIG_LIMIT_MIN, 10))
        jobs = jobs[: JOBS - count]
        count += len(jobs)
        jobs.sort(key=lambda j: -QOS[j[2]])  # stable: submit order within a tier
        groups.append(jobs)
    return groups


def slots(groups: list[list[Job]]) -> list[tuple[float, list[Job]]]:
    """(seconds past the origin, jobs) to submit: per group, fp0 and fp1 jobs, then fp2."""
    out = []
    for k, group in enumerate(groups):
        out.append((k * PERIOD_S + SUBMIT_S, [j for j in group if j[2] != "fp2"]))
        out.append((k * PERIOD_S + LOW_SUBMIT_S, [j for j in group if j[2] == "fp2"]))
    return out


def sbatch_args(partition: str, gpus: int, qos: str, limit: int) -> list[str]:
    """A job of `gpus` GPUs: up to 8 on one node, more as 8 on each of several nodes."""
    nodes = -(-gpus // 8)
    args = [f"--partition={partition}", f"--qos={qos}", f"--time={limit}", "-o", "/dev/null"]
    args += [f"--nodes={nodes}", f"--gres=gpu:{gpus // nodes}", "-c", "1", "--mem=100M"]
    return args


def configure(c) -> None:
    """The QOS tiers of the fidelity trace on `c` (its partitions and settings are its own)."""
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


def daemon_pids(c) -> list[int]:
    """slurmctld, slurmdbd, MariaDB, munge and every node's slurmd (those this harness runs)."""
    pids = [d.pid for d in c._daemons.values() if d.pid]
    return pids + [p for node in c.nodes.values() for p in node.pids]


def record(c, out: Path) -> dict:
    """Configure `c`, submit the trace on its grid, wait, write its sacct to `out`.

    The daemons' threads get nice -10 and so does this process (sbatch inherits it): the
    machines this runs on are shared, and a slurmctld thread that waits for a core shifts its
    decisions. Also the way to record it again for the unit tests
    (tests/unit/replay/data/README.md). Returns what the recording saw (submit times, load).
    """
    configure(c)
    threads = raise_priority(daemon_pids(c))
    os.setpriority(os.PRIO_PROCESS, 0, -10)
    load_before = os.getloadavg()
    since = datetime.now(UTC) - timedelta(seconds=5)
    origin = float(int(time.time()) + 3)
    todo = [
        (at, [(sbatch_args(part, gpus, qos, limit),
               grid_job_script(secs, origin, PERIOD_S, END_PHASE_S, SHIFT_S))
              for part, gpus, qos, limit, secs in jobs])
        for at, jobs in slots(trace())
    ]  # fmt: skip
    submits = submit_slots(c, todo, origin)
    ids = [jid for jid, _, _ in submits]
    wait_all_done(c, ids, timeout=600)
    done_s = time.time() - origin
    dump_sacct(c, since, out, len(ids))
    # how far into its 10 s window the last sbatch of a slot returned
    late = max(done % PERIOD_S for _, _, done in submits)
    return {"threads_reniced": threads, "load_before": load_before,
            "load_after": os.getloadavg(), "last_submit_in_its_window_s": late,
            "done_s": done_s, "ids": ids}  # fmt: skip


@pytest.fixture(scope="module")
def grid_cluster():
    """Its own five identical nodes (the session's fleet cluster has four unlike ones)."""
    from tests.harness.multinode import MultiNodeCluster
    from tests.integration.conftest import require_slurm

    require_slurm()
    c = MultiNodeCluster(
        nodes=NODES, partitions=list(PARTITIONS), extra_conf=EXTRA_CONF,
        keep=bool(os.environ.get("SLURMGPU_KEEP_CLUSTER")),
    )  # fmt: skip
    c.up()
    try:
        yield c
    finally:
        c.down()


@pytest.fixture(scope="module")
def recorded(grid_cluster, tmp_path_factory):
    path = tmp_path_factory.mktemp("replay") / "sacct.txt"
    seen = record(grid_cluster, path)
    print(f"recording: {json.dumps({k: v for k, v in seen.items() if k != 'ids'})}")
    if keep := os.environ.get("SLURMGPU_KEEP_RECORDING"):  # to store it as unit-test data
        shutil.copy(path, keep)
    return grid_cluster, path, seen


def test_replay_matches_slurmctld_per_partition(recorded, monkeypatch):
    cluster, path, seen = recorded
    # every group was in before the first of its window's job ends
    assert seen["last_submit_in_its_window_s"] < END_PHASE_S - 1, seen
    monkeypatch.setenv("SLURM_CONF", cluster.env["SLURM_CONF"])
    # the whole command, as a site runs it
    res = CliRunner().invoke(main, ["replay", "--sacct-file", str(path), "--live",
                                    "--format", "json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    base, rec = doc["baseline"], doc["baseline"]["recorded"]
    assert base["jobs"] == rec["jobs"] == JOBS, base["skipped"]
    assert base["jobs_not_run"] == 0
    assert {p["partition"]: p["gpus"] for p in base["by_partition"]} == {"big": 24, "burst": 16}

    from slurmgpu.replay import _with_live, build_model

    options = _with_live(ReplayOptions(live=True))
    assert options.config.bf_interval_s == 1
    assert options.config.requeue_delay_s == REQUEUE_DELAY_S + 1  # cred_expire + 1 s
    assert options.config.sched_on_end  # no `defer`: a job's end runs the main scheduler
    model = build_model(options)
    assert model.qos_spec("fp0").preempts == ("fp2",)
    tr = load_trace([path])
    outcome = run_engine(tr, model, options.config)
    # preemption and multi-node jobs happened, in the record and in the replay
    assert tr.recorded_preemptions.sum() >= 10 and outcome.preemptions >= 10
    assert (tr.gpus > 8).sum() >= 10
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
        assert fp.recorded_mean_wait_s > 15, fp  # a real queue formed, or the test proves nothing
        assert fp.mean_wait_error <= PART_WAIT_ERROR_MAX, (name, fp)
        assert fp.same_order_fraction >= PART_ORDER_MIN, (name, fp)
    assert np.isclose(base["wait_s"]["mean"], f.replayed_mean_wait_s)
