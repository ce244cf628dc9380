"""`slurmgpu replay --live` on this release's slurmctld: its configuration read, a short trace
replayed in the recorded start order.

The multi-node fidelity test (test_replay_fidelity.py, ~8 minutes) runs on the host's Slurm
only: the replay model does not depend on the release. What does is how the replay reads the
live cluster (`scontrol show config`, `sacctmgr show qos`, `scontrol show node/partition`),
so every release runs this: 24 jobs of the one-node stream trace (seed 21, one submit a
second, 1-8 GPUs, QOS tiers with time limits by tier, 2-6 s jobs; docs/replay.md
"Fidelity") on the session's one-node cluster, replayed through the command as a site runs
it. 71 s on 22.05 with the session cluster's start (the recording: 64 s).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from slurmgpu.replay import ReplayOptions
from slurmgpu.replay.engine import replay as run_engine
from slurmgpu.replay.fidelity import fidelity
from slurmgpu.replay.from_accounting import load_trace
from tests.harness import SlurmCluster
from tests.harness.replay_stream import record_stream

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slurm_only(
        "root",
        reason="on the host, test_replay_fidelity.py replays its recording with --live too",
    ),
]

JOBS = 24
QOS = {"rp0": 1000, "rp1": 500, "rp2": 100}
LIMIT_MIN = {"rp0": 1, "rp1": 2, "rp2": 4}
EXTRA_CONF = "\n".join(
    [
        "PriorityWeightQOS=10000",
        "PriorityWeightAge=1000",
        "PriorityMaxAge=7-0",
        "SchedulerParameters=batch_sched_delay=0,bf_interval=1,bf_resolution=1",
    ]
)


def trace(seed: int = 21, jobs: int = JOBS) -> list[tuple[int, str, int, int]]:
    """(GPUs, QOS, time limit minutes, run seconds): the first jobs of the one-node stream
    trace that tests/unit/replay/data/fidelity-seed21-run*.txt recorded (200 of them)."""
    rng = random.Random(seed)
    out = []
    for _ in range(jobs):
        gpus = rng.choices([1, 2, 4, 8], weights=[50, 28, 12, 10])[0]
        qos = rng.choices(list(QOS), weights=[15, 35, 50])[0]
        sleep = rng.choices([2, 4, 6], weights=[50, 35, 15])[0]
        out.append((gpus, qos, LIMIT_MIN[qos], sleep))
    return out


def record(c: SlurmCluster, out: Path) -> list[int]:
    """Configure `c`, submit the trace one job a second, wait, write its sacct to `out`."""
    c.reconfigure(extra_conf=EXTRA_CONF)
    for name, prio in QOS.items():
        c.sacctmgr("add", "qos", name, f"Priority={prio}", check=False)
        c.sacctmgr("modify", "qos", name, "set", f"Priority={prio}")
    c.allow_qos(*QOS)
    jobs = [
        ([f"--qos={qos}", f"--gres=gpu:{gpus}", "-c", "1", "--mem=100M", f"--time={limit}",
          "-o", "/dev/null"], secs)
        for gpus, qos, limit, secs in trace()
    ]  # fmt: skip
    # a quarter second into each second, as the 200-job recordings were
    return record_stream(c, jobs, 1.0, 0.25, out, timeout=120)


@pytest.fixture(scope="module")
def recorded(slurm_cluster: SlurmCluster, tmp_path_factory):
    c = slurm_cluster
    try:
        path = tmp_path_factory.mktemp("replay-live") / "sacct.txt"
        record(c, path)
        yield c, path
    finally:
        c.reset()


def test_replay_reads_the_live_cluster_and_keeps_the_start_order(recorded, monkeypatch):
    cluster, path = recorded
    monkeypatch.setenv("SLURM_CONF", cluster.env["SLURM_CONF"])
    res = CliRunner().invoke(main, ["replay", "--sacct-file", str(path), "--live",
                                    "--format", "json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    base = doc["baseline"]
    assert base["jobs"] == base["recorded"]["jobs"] == JOBS, base["skipped"]
    assert base["jobs_not_run"] == 0
    assert [(p["partition"], p["gpus"]) for p in base["by_partition"]] == [("gpu", 8)]

    from slurmgpu.replay import _with_live, build_model

    # what this release's scontrol and sacctmgr said
    options = _with_live(ReplayOptions(live=True))
    cfg = options.config
    assert (cfg.bf_interval_s, cfg.priority_weight_qos, cfg.priority_weight_age) == (1, 10000, 1000)
    assert cfg.priority_max_age_s == 7 * 86400 and cfg.backfill
    model = build_model(options)
    assert {q: model.qos_spec(q).priority for q in QOS} == QOS
    tr = load_trace([path])
    f = fidelity(tr.submit_s, tr.recorded_start_s, run_engine(tr, model, cfg).start_s)
    print(f"fidelity: {f}")
    assert f.jobs == JOBS
    assert f.recorded_mean_wait_s > 2, f  # a queue formed: the order is the scheduler's
    assert f.same_order_fraction >= 0.90, f
