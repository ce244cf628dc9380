"""Fidelity of `slurmgpu replay` against the real slurmctld.

A generated trace (200 jobs: 1-8 GPUs, three QOS tiers, time limits of 1-4 minutes, durations
compressed to 1-3 seconds) is submitted in one burst (about 3 s) to the test cluster (one
node, 8 GPUs) configured with multifactor priority (QOS + age) and backfill every second.
Its sacct is then replayed with the same configuration read from the live cluster (`--live`:
scontrol show config, sacctmgr show qos, scontrol show node/partition).

Targets (issue #10): the replayed mean wait within 10 % of the recorded one, and >= 90 % in
the same start order. Asserted: the mean wait; job PAIRS started in the same order >= 90 %
(`pair_order_agreement`); and the share of jobs keeping their relative order
(`same_order_fraction`) >= 55 %. That last one is NOT the issue's 90 %: three recorded runs
of this very trace on the same slurmctld agree with each other at only 68-81 %
(tests/unit/replay/test_fidelity_recorded.py), and the replay agrees with them as well as
they agree with each other (docs/replay.md, "Fidelity").
"""

from __future__ import annotations

import json
import random
import time
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from slurmgpu.replay import ReplayOptions
from slurmgpu.replay.engine import replay as run_engine
from slurmgpu.replay.fidelity import fidelity
from slurmgpu.replay.from_accounting import load_trace
from slurmgpu.sources.sacct import SACCT_FIELDS
from tests.harness import SlurmCluster

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slurm_only(
        "host",
        reason="calibrated on the host's 22.05; a second 4-minute run would not fit CI",
    ),
]

JOBS = 200
QOS = {"rp0": 1000, "rp1": 500, "rp2": 100}
EXTRA_CONF = "\n".join(
    [
        "PriorityWeightQOS=10000",
        "PriorityWeightAge=1000",
        "PriorityMaxAge=7-0",
        # backfill every second, so seconds-long jobs see it (Slurm's default is 30 s)
        "SchedulerParameters=batch_sched_delay=0,bf_interval=1,bf_resolution=1",
    ]
)


def _trace(seed: int = 11) -> list[tuple[int, str, int, int]]:
    """(GPUs, QOS, time limit minutes, sleep seconds) per job, reproducible."""
    rng = random.Random(seed)
    out = []
    for _ in range(JOBS):
        gpus = rng.choices([1, 2, 4, 8], weights=[50, 28, 12, 10])[0]
        qos = rng.choices(list(QOS), weights=[15, 35, 50])[0]
        out.append((gpus, qos, rng.choice([1, 2, 4]), rng.choice([1, 2, 3])))
    return out


def _wait_all_done(cluster: SlurmCluster, ids: list[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    wanted = set(ids)
    while wanted & set(cluster.active_job_ids()):
        assert time.monotonic() < deadline, "the trace did not finish in time"
        time.sleep(1)


@pytest.fixture(scope="module")
def recorded(slurm_cluster: SlurmCluster, tmp_path_factory):
    c = slurm_cluster
    c.reconfigure(extra_conf=EXTRA_CONF)
    try:
        for name, prio in QOS.items():
            c.sacctmgr("add", "qos", name, f"Priority={prio}", check=False)
            c.sacctmgr("modify", "qos", name, "set", f"Priority={prio}")
        c.allow_qos(*QOS)
        since = datetime.now(UTC) - timedelta(seconds=5)
        ids = []
        for gpus, qos, limit, sleep in _trace():
            args = [f"--qos={qos}", f"--gres=gpu:{gpus}", "-c", "1", "--mem=100M"]
            args += [f"--time={limit}", "-o", "/dev/null"]
            ids.append(c.sbatch(*args, script=f"#!/bin/sh\nsleep {sleep}\n"))
        _wait_all_done(c, ids, timeout=300)
        until = datetime.now(UTC) + timedelta(seconds=5)
        stamp = "%Y-%m-%dT%H:%M:%S"
        argv = ["env", "TZ=UTC", "SLURM_TIME_FORMAT=%s", "sacct", "-a", "-D", "-P",
                "-S", since.strftime(stamp), "-E", until.strftime(stamp),
                "--format", ",".join(SACCT_FIELDS)]  # fmt: skip
        # sacct learns the last ends a moment after squeue forgets the jobs
        deadline = time.monotonic() + 60
        while True:
            text = c.run(argv).stdout
            done = sum(
                1
                for ln in text.splitlines()[1:]
                if ln.split("|")[0].isdigit() and ln.split("|")[13] == "COMPLETED"
            )
            if done >= JOBS or time.monotonic() > deadline:
                break
            time.sleep(1)
        path = tmp_path_factory.mktemp("replay") / "sacct.txt"
        path.write_text(text)
        yield c, path, ids
    finally:
        c.reset()


def test_replay_matches_slurmctld(recorded, monkeypatch):
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
    assert [p["gpus"] for p in base["by_partition"]] == [8]

    # per job, through the library with the same live settings
    from slurmgpu.replay import _with_live, build_model

    options = _with_live(ReplayOptions(live=True))
    assert options.config.bf_interval_s == 1
    assert options.config.priority_weight_qos == 10000
    trace = load_trace([path])
    outcome = run_engine(trace, build_model(options), options.config)
    f = fidelity(trace.submit_s, trace.recorded_start_s, outcome.start_s)
    print(f"fidelity: {f}")  # shown with -s; the numbers go into docs/replay.md
    assert f.jobs == JOBS
    assert f.recorded_mean_wait_s > 20  # a real queue formed, or the test proves nothing
    assert f.mean_wait_error <= 0.10, f
    assert f.pair_order_agreement >= 0.90, f
    # slurmctld vs itself on this trace: 0.675-0.81, the replay 0.665-0.79 (docs/replay.md);
    # the floor leaves room for a noisier run; far below it: a broken priority order
    assert f.same_order_fraction >= 0.55, f
    assert np.isclose(base["wait_s"]["mean"], f.replayed_mean_wait_s)
