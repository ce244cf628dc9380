"""Fidelity of `slurmgpu replay` against the real slurmctld.

A generated trace (200 jobs: 1-8 GPUs, three QOS tiers, time limits of 1-4 minutes,
durations compressed to 2, 4 or 6 seconds) is submitted as a stream, one job per second on
a fixed schedule, to the test cluster (one node, 8 GPUs) configured with multifactor
priority (QOS + age) and backfill every second. Its sacct is then replayed with the same
configuration read from the live cluster (`--live`: scontrol show config, sacctmgr show qos,
scontrol show node/partition).

Asserted: the issue's targets (#10): the replayed mean wait within 10 % of the recorded one,
and >= 90 % of the jobs in the same start order (`same_order_fraction`, docs/replay.md).
The trace is built so that slurmctld reproduces its own start order (one submit a second,
time limits by tier, each job ending on the second sacct records: two recordings agreed on
100 % of the jobs); the earlier burst of 1-3 s jobs did not (slurmctld agreed with itself
at ~73 %, so no model could reach 90 % on it). See docs/replay.md, "Fidelity".
"""

from __future__ import annotations

import json
import random
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
from slurmgpu.sources.sacct import SACCT_FIELDS
from tests.harness import SlurmCluster

pytestmark = pytest.mark.integration

JOBS = 200
SUBMIT_GAP_S = 1.0
QOS = {"rp0": 1000, "rp1": 500, "rp2": 100}
LIMIT_MIN = {"rp0": 1, "rp1": 2, "rp2": 4}
SEED = 21
EXTRA_CONF = "\n".join(
    [
        "PriorityWeightQOS=10000",
        "PriorityWeightAge=1000",
        "PriorityMaxAge=7-0",
        # backfill every second, so seconds-long jobs see it (Slurm's default is 30 s)
        "SchedulerParameters=batch_sched_delay=0,bf_interval=1,bf_resolution=1",
    ]
)


def trace(seed: int = SEED) -> list[tuple[int, str, int, int]]:
    """(GPUs, QOS, time limit minutes, sleep seconds) per job, reproducible.

    The time limit follows the tier (rp0 1 minute, rp1 2, rp2 4: the urgent work is the
    short work): with limits drawn independently, whether backfill may start a job ahead of
    a blocked one hinges on which jobs are running at the pass's instant, and slurmctld's
    own runs disagree (docs/replay.md, "Fidelity").
    """
    rng = random.Random(seed)
    out = []
    for _ in range(JOBS):
        gpus = rng.choices([1, 2, 4, 8], weights=[50, 28, 12, 10])[0]
        qos = rng.choices(list(QOS), weights=[15, 35, 50])[0]
        sleep = rng.choices([2, 4, 6], weights=[50, 35, 15])[0]
        out.append((gpus, qos, LIMIT_MIN[qos], sleep))
    return out


def job_script(seconds: int) -> str:
    """A job of `seconds` s whose End sacct records `seconds` after its Start.

    sacct records Start and End in whole seconds: a plain `sleep N` (N + ~0.06 s) started
    late in its second is recorded as N + 1 s, and the replay then runs it a second too
    long. This job runs N s from its script's start, but ends by 0.9 s into the second
    N s after its recorded Start (`squeue`'s StartTime): a job started late in its second
    is cut short by up to ~0.1 s. Its end stays tied to its start, as a plain sleep's does
    (a version ending every job at a fixed point of the wall-clock second did not
    reproduce: docs/replay.md, "Fidelity").
    """
    return (
        "#!/bin/sh\n"
        "t0=$(date +%s.%N)\n"
        'st=$(SLURM_TIME_FORMAT=%s squeue -h -j "$SLURM_JOB_ID" -o %S)\n'
        f'awk -v st="$st" -v t0="$t0" -v now="$(date +%s.%N)" \'BEGIN {{ e = t0 + {seconds};'
        f" if (e > st + {seconds} + 0.9) e = st + {seconds} + 0.9; d = e - now; if (d < 0) d = 0;"
        ' printf "%.3f\\n", d }\' | xargs sleep\n'
    )


def _wait_all_done(cluster: SlurmCluster, ids: list[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    wanted = set(ids)
    while wanted & set(cluster.active_job_ids()):
        assert time.monotonic() < deadline, "the trace did not finish in time"
        time.sleep(1)


def record(c: SlurmCluster, out: Path) -> list[int]:
    """Configure `c`, submit the trace on its schedule, wait, write its sacct to `out`.

    Also used to record the unit tests' data (tests/unit/replay/data/README.md).
    """
    c.reconfigure(extra_conf=EXTRA_CONF)
    for name, prio in QOS.items():
        c.sacctmgr("add", "qos", name, f"Priority={prio}", check=False)
        c.sacctmgr("modify", "qos", name, "set", f"Priority={prio}")
    c.allow_qos(*QOS)
    since = datetime.now(UTC) - timedelta(seconds=5)
    ids = []
    # submits on a fixed grid, a quarter second into the second: never two in one tick
    t0 = float(int(time.time()) + 2) + 0.25
    for k, (gpus, qos, limit, sleep) in enumerate(trace()):
        time.sleep(max(0.0, t0 + k * SUBMIT_GAP_S - time.time()))
        args = [f"--qos={qos}", f"--gres=gpu:{gpus}", "-c", "1", "--mem=100M"]
        args += [f"--time={limit}", "-o", "/dev/null"]
        ids.append(c.sbatch(*args, script=job_script(sleep)))
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
    out.write_text(text)
    return ids


@pytest.fixture(scope="module")
def recorded(slurm_cluster: SlurmCluster, tmp_path_factory):
    c = slurm_cluster
    try:
        path = tmp_path_factory.mktemp("replay") / "sacct.txt"
        ids = record(c, path)
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
    tr = load_trace([path])
    outcome = run_engine(tr, build_model(options), options.config)
    f = fidelity(tr.submit_s, tr.recorded_start_s, outcome.start_s)
    print(f"fidelity: {f}")  # shown with -s; the numbers go into docs/replay.md
    assert f.jobs == JOBS
    assert f.recorded_mean_wait_s > 10  # a real queue formed, or the test proves nothing
    # the targets
    assert f.mean_wait_error <= 0.10, f
    assert f.same_order_fraction >= 0.90, f
    assert np.isclose(base["wait_s"]["mean"], f.replayed_mean_wait_s)
