"""`analyze` straight from the real cluster's sacct: GPU-hours and states of jobs this test ran.

Jobs run under their own account (`acctana`) so other tests' jobs in the same session do not
enter the checks. Each job script prints its own start and end time; GPU-hours are checked
against GPUs x that elapsed time.

Tolerance, per run: 3 s. sacct's times have 1 s resolution (up to 1 s at each end), and Slurm's
Start precedes the script's first line by the launch (about 1 s here) while End follows its
last line by the step teardown; a wrong GPU count or a missed/double-counted step would be off
by whole multiples of the elapsed time, far outside 3 s.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from slurmgpu.accounting import AnalysisOptions, analyze
from tests.harness import SlurmCluster

pytestmark = pytest.mark.integration

ACCOUNT = "acctana"
QOS_LOW, QOS_HIGH = "acctana_lo", "acctana_hi"
TOLERANCE_S = 3.0
TIMED = '#!/bin/sh\necho "START $(date +%s)"\n{body}\necho "END $(date +%s)"\n'


def _times(cluster: SlurmCluster, name: str) -> list[tuple[int, int | None]]:
    """(start, end) pairs the script printed (one per run; end None if it was killed)."""
    runs: list[list] = []
    for line in (cluster.work_dir / name).read_text().splitlines():
        word, _, value = line.partition(" ")
        if word == "START":
            runs.append([int(value), None])
        elif word == "END" and runs:
            runs[-1][1] = int(value)  # an END belongs to the run that printed the last START
    return [(s, e) for s, e in runs]


@pytest.fixture(scope="module")
def ran(slurm_cluster: SlurmCluster):
    c = slurm_cluster
    c.sacctmgr("add", "qos", QOS_LOW)
    c.sacctmgr("add", "qos", QOS_HIGH, f"Preempt={QOS_LOW}", "PreemptMode=requeue", "GraceTime=2")
    c.sacctmgr("add", "account", ACCOUNT)
    c.sacctmgr(
        "add", "user", "root", f"Account={ACCOUNT}", f"QOS=normal,{QOS_LOW},{QOS_HIGH}",
        "DefaultQOS=normal",
    )  # fmt: skip
    try:
        # sacct/slurmctld learn new QOS a moment later
        deadline = time.monotonic() + 30
        while QOS_HIGH not in c.run(["sacctmgr", "-n", "-P", "show", "qos", "format=Name"]).stdout:
            assert time.monotonic() < deadline, "QOS never appeared"
            time.sleep(0.5)
        since = datetime.now(UTC) - timedelta(seconds=2)
        yield _run_jobs(c) | {"since": since}
    finally:
        c.scancel_all()
        c.sacctmgr("delete", "user", "root", "where", f"account={ACCOUNT}", check=False)
        c.sacctmgr("delete", "account", ACCOUNT, check=False)
        c.sacctmgr("delete", "qos", QOS_HIGH, check=False)
        c.sacctmgr("delete", "qos", QOS_LOW, check=False)


def _run_jobs(c: SlurmCluster) -> dict:
    a = f"--account={ACCOUNT}"
    whole = c.sbatch(
        a, "--gres=gpu:2", "--comment=slurmgpu tier=P1 kind=finetune", "-o", "whole-%j.out",
        script=TIMED.format(body="sleep 4"),
    )  # fmt: skip
    array = c.sbatch(
        a, "--gres=gpu:1", "--array=0-2", "-o", "array-%A_%a.out",
        script=TIMED.format(body="sleep 3"),
    )  # fmt: skip
    cancel = c.sbatch(a, "--gres=gpu:1", "-o", "cancel-%j.out",
                      script=TIMED.format(body="sleep 300"))  # fmt: skip
    c.wait_job_state(cancel, "RUNNING", timeout=60)
    time.sleep(3)
    cancelled_at = time.time()
    c.run(["scancel", str(cancel)])
    c.wait_job_state(whole, "COMPLETED", timeout=90)
    c.wait_job_state(cancel, "CANCELLED", timeout=60)
    # wait for every array task to finish (squeue empty of this account)
    deadline = time.monotonic() + 90
    while c.run(["squeue", "-h", "-A", ACCOUNT]).stdout.strip():
        assert time.monotonic() < deadline, c.run(["squeue"]).stdout
        time.sleep(0.5)

    # preemption: a low-QOS job on all 8 GPUs, then a high-QOS one needing them
    low_script = TIMED.format(
        body='if [ "${SLURM_RESTART_COUNT:-0}" -ge 1 ]; then sleep 2; else sleep 300; fi'
    )
    low = c.sbatch(a, f"--qos={QOS_LOW}", "--gres=gpu:8", "--requeue", "-o", "low-%j.out",
                   "--open-mode=append", script=low_script)  # fmt: skip
    c.wait_job_state(low, "RUNNING", timeout=60)
    time.sleep(3)
    high = c.sbatch(a, f"--qos={QOS_HIGH}", "--gres=gpu:8", "-o", "high-%j.out",
                    script=TIMED.format(body="sleep 3"))  # fmt: skip
    c.wait_job_state(high, "COMPLETED", timeout=120)
    c.wait_job_state(low, "PENDING", timeout=60)
    c.scontrol("update", f"JobId={low}", "StartTime=now")
    c.wait_job_state(low, "COMPLETED", timeout=120)
    c.wait_sacct(
        low,
        lambda rows: sum(1 for r in rows if r["JobID"] == str(low) and r["End"] != "Unknown") >= 2,
        timeout=60,
    )
    return {
        "whole": whole,
        "array": array,
        "cancel": cancel,
        "cancelled_at": cancelled_at,
        "low": low,
        "high": high,
    }


def _analysis(c: SlurmCluster, ran: dict, backend: str = "sacct"):
    until = datetime.now(UTC) + timedelta(seconds=5)
    return analyze(AnalysisOptions(since=ran["since"], until=until, env=c.env, backend=backend))


def _rows(frame, job_id: str):
    return frame[frame["job_id"] == job_id].sort_values("start")


def test_states_and_gpu_hours_from_live_sacct(
    slurm_cluster: SlurmCluster, ran: dict, slurm_series: tuple[int, int]
) -> None:
    c = slurm_cluster
    result = _analysis(c, ran)
    doc = result.to_json()
    # the Slurm under test: 22.05.8 on the host, 24.11.5 from the Debian 13 root
    series = "{}.{:02d}.".format(*slurm_series)
    assert doc["source"]["kind"] == "sacct" and doc["source"]["slurm_version"].startswith(series)
    t = doc["totals"]
    assert t["rows_read"] == t["rows_analyzed"] + t["rows_rejected"]
    assert t["rows_rejected"] == 0, doc["rejected"]
    f = result.frame
    f = f[f["account"] == ACCOUNT]
    expected_gh = 0.0

    def check(job_id: str, gpus: int, elapsed: float, state: str, i: int = 0):
        nonlocal expected_gh
        rows = _rows(f, job_id)
        row = rows.iloc[i]
        assert row["state"] == state, (job_id, rows[["job_id", "state"]])
        assert row["gpu_count"] == gpus
        assert abs(row["elapsed_s"] - elapsed) <= TOLERANCE_S, (job_id, row["elapsed_s"], elapsed)
        assert abs(row["gpu_hours"] - gpus * elapsed / 3600) <= gpus * TOLERANCE_S / 3600
        expected_gh += gpus * elapsed / 3600

    ((s, e),) = _times(c, f"whole-{ran['whole']}.out")
    check(str(ran["whole"]), 2, e - s, "COMPLETED")
    whole = _rows(f, str(ran["whole"])).iloc[0]
    assert whole["kind"] == "finetune" and whole["tag_tier"] == "P1"
    for task in range(3):
        ((s, e),) = _times(c, f"array-{ran['array']}_{task}.out")
        check(f"{ran['array']}_{task}", 1, e - s, "COMPLETED")
    ((s, _e),) = _times(c, f"cancel-{ran['cancel']}.out")
    check(str(ran["cancel"]), 1, ran["cancelled_at"] - s, "CANCELLED")
    assert _rows(f, str(ran["cancel"])).iloc[0]["cancelled_by_uid"] == 0
    ((s, e),) = _times(c, f"high-{ran['high']}.out")
    check(str(ran["high"]), 8, e - s, "COMPLETED")
    low_runs = _times(c, f"low-{ran['low']}.out")
    assert len(low_runs) == 2 and low_runs[0][1] is None  # killed, then a full second run
    rows = _rows(f, str(ran["low"]))
    assert list(rows["state"]) == ["PREEMPTED", "COMPLETED"]
    preempted_elapsed = rows.iloc[0]["elapsed_s"]
    # the first run ended when the high job's preemption took the GPUs: it ran at least the 3 s
    # the test waited, and ended before the high job's script started
    high_start = _times(c, f"high-{ran['high']}.out")[0][0]
    assert 3 <= preempted_elapsed <= high_start - low_runs[0][0] + TOLERANCE_S
    expected_gh += 8 * preempted_elapsed / 3600
    s, e = low_runs[1]
    check(str(ran["low"]), 8, e - s, "COMPLETED", i=1)

    acct = next(e for e in doc["by_account"] if e["account"] == ACCOUNT)
    assert acct["jobs"] == 7  # whole, 3 array tasks, cancelled, low (2 runs = 1 job), high
    assert acct["gpu_jobs"] == 7
    assert acct["preemptions"] == 1 and acct["requeues"] == 1
    assert acct["gpu_hours_lost_to_preemption"] == pytest.approx(8 * preempted_elapsed / 3600)
    assert abs(acct["gpu_hours_allocated"] - expected_gh) <= 8 * 7 * TOLERANCE_S / 3600
    assert acct["gpu_hours_used"] is None  # Slurm 22.05 has no gres/gpuutil: unknown, not 0
    part = next(e for e in doc["by_partition"] if e["partition"] == "gpu")
    assert part["capacity_gpu_hours"] == pytest.approx(8 * _hours(doc))  # from scontrol
    qos = {e["qos"]: e for e in doc["by_qos"]}
    assert qos[QOS_LOW]["preemptions"] == 1 and qos[QOS_HIGH]["preemptions"] == 0
    assert {r["kind"] for r in doc["recommendations"]} <= {"mig_carve", "shard", "move_nodes",
                                                            "tier_adjust", "none"}  # fmt: skip


def _hours(doc: dict) -> float:
    w = doc["window"]
    a = datetime.fromisoformat(w["since"].replace("Z", "+00:00"))
    b = datetime.fromisoformat(w["until"].replace("Z", "+00:00"))
    return (b - a).total_seconds() / 3600


def test_sacct_json_backend_agrees_with_text(slurm_cluster: SlurmCluster, ran: dict) -> None:
    text = _analysis(slurm_cluster, ran, "sacct").frame
    js = _analysis(slurm_cluster, ran, "sacct-json").frame
    cols = ["job_id", "state", "gpu_count", "elapsed_s", "gpu_hours", "wait_s"]

    def mine(f):
        f = f[f["account"] == ACCOUNT][cols].astype(str)
        return sorted(map(tuple, f.to_numpy().tolist()))

    assert mine(js) == mine(text)
    assert len(mine(text)) == 8


def test_split_live_query_matches_one_call(slurm_cluster: SlurmCluster, ran: dict) -> None:
    until = datetime.now(UTC) + timedelta(seconds=5)
    kw = {"since": ran["since"], "until": until, "env": slurm_cluster.env, "backend": "sacct"}
    one = analyze(AnalysisOptions(**kw, chunk_hours=24))
    split = analyze(AnalysisOptions(**kw, chunk_hours=10 / 3600))  # a call per 10 s
    cols = ["job_id", "state", "gpu_count", "elapsed_s", "gpu_hours", "wait_s"]

    def mine(f):
        f = f[f["account"] == ACCOUNT][cols].astype(str)
        return sorted(map(tuple, f.to_numpy().tolist()))

    assert mine(split.frame) == mine(one.frame)
    assert split.document.totals.rows_overlap_skipped > 0
    assert "sacct calls of" in (split.document.source.backend_note or "")


def test_cli_json_from_live_cluster(slurm_cluster: SlurmCluster, ran: dict) -> None:
    import json

    from click.testing import CliRunner

    from slurmgpu.cli import main

    # the CLI reads SLURM_CONF from the environment, like an admin's shell
    r = CliRunner(env=dict(slurm_cluster.env)).invoke(
        main, ["analyze", "--since", "1h", "--format", "json", "--backend", "sacct"]
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert any(e["account"] == ACCOUNT for e in doc["by_account"])


# A node with one GPU carved into 7x 1g.10gb and 7 whole H100s, each of those shareable as 8
# shards (Slurm spreads `Count=56` over the 7 files). Fake device nodes stand in for the GPUs;
# Slurm schedules them for real.
SLICED_NODE = (
    "NodeName=gpu01 CPUs=16 Sockets=2 CoresPerSocket=8 ThreadsPerCore=1 RealMemory=64000 "
    "Gres=gpu:1g.10gb:7,gpu:h100:7,shard:56"
)
SLICED_GRES = (
    "Name=gpu Type=1g.10gb File=/dev/nvidia[0-6]\n"
    "Name=gpu Type=h100 File=/dev/nvidia[7-13]\n"
    "Name=shard Count=56 File=/dev/nvidia[7-13]\n"
)
SLICED_TRES = "AccountingStorageTRES=gres/gpu,gres/shard,gres/gpu:1g.10gb,gres/gpu:h100"


@pytest.fixture(scope="module")
def sliced(slurm_cluster: SlurmCluster):
    c = slurm_cluster
    c.reconfigure(node_line=SLICED_NODE, gres_conf=SLICED_GRES, extra_conf=SLICED_TRES)
    try:
        since = datetime.now(UTC) - timedelta(seconds=2)
        mig = c.sbatch("--gres=gpu:1g.10gb:1", "-o", "mig-%j.out",
                       script=TIMED.format(body="sleep 3"))  # fmt: skip
        shard = c.sbatch("--gres=shard:2", "-o", "shard-%j.out",
                         script=TIMED.format(body="sleep 3"))  # fmt: skip
        for jobid in (mig, shard):
            c.wait_job_state(jobid, "COMPLETED", timeout=90)
            c.wait_sacct(jobid, lambda rows: any(r["End"] != "Unknown" for r in rows))
        until = datetime.now(UTC) + timedelta(seconds=5)
        result = analyze(AnalysisOptions(since=since, until=until, env=c.env, backend="sacct"))
        yield {"mig": mig, "shard": shard, "result": result}
    finally:
        c.reset()


def test_mig_and_shard_jobs_count_as_gpu_fractions(slurm_cluster: SlurmCluster, sliced) -> None:
    c = slurm_cluster
    f = sliced["result"].frame
    doc = sliced["result"].to_json()
    mig = f[f["job_id"] == str(sliced["mig"])].iloc[0]
    assert mig["mig_profile"] == "1g.10gb" and mig["gpu_count"] == 1
    ((s, e),) = _times(c, f"mig-{sliced['mig']}.out")
    assert abs(mig["gpu_hours"] - (e - s) / 7 / 3600) <= TOLERANCE_S / 7 / 3600
    assert pd_isna(mig["gpu_util_pct"])
    shard = f[f["job_id"] == str(sliced["shard"])].iloc[0]
    assert shard["shards"] == 2 and shard["shard_fraction_known"]
    # scontrol: shard:56 over 7 whole GPUs -> 8 shards per GPU, so 2 shards are 1/4 GPU
    ((s, e),) = _times(c, f"shard-{sliced['shard']}.out")
    assert shard["gpu_equiv"] == pytest.approx(2 / 8)
    assert abs(shard["gpu_hours"] - (e - s) / 4 / 3600) <= TOLERANCE_S / 4 / 3600
    part = next(p for p in doc["by_partition"] if p["partition"] == "gpu")
    # capacity from scontrol: 7 slices of 1/7 + 7 whole GPUs = 8 GPUs
    assert part["capacity_gpu_hours"] == pytest.approx(8 * _hours(doc))
    ff = doc["fit_fraction"]
    assert ff["basis_counts"]["requested_slice"] >= 1


def pd_isna(value) -> bool:
    import pandas as pd

    return bool(pd.isna(value))


def test_live_ingest_into_a_store_gives_the_live_analysis(
    slurm_cluster: SlurmCluster, ran: dict, tmp_path
) -> None:
    """`slurmgpu ingest --since` (#27): the store's runs are the live query's, and the same
    window ingested again changes no run."""
    from slurmgpu.accounting.store import ingest_command

    until = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=5)
    since = ran["since"].replace(microsecond=0)
    window = {
        "since": since.strftime("%Y-%m-%dT%H:%M:%S"),
        "until": until.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    store = tmp_path / "s"
    first = ingest_command(store, [], **window, env=slurm_cluster.env, chunk_hours=10 / 3600)
    assert first.runs_read > 0 and first.partitions_written
    kw = {"since": since, "until": until, "env": slurm_cluster.env}
    live = analyze(AnalysisOptions(**kw, backend="sacct"))
    cols = ["job_id", "state", "gpu_count", "elapsed_s", "gpu_hours", "wait_s"]

    def mine(f):
        f = f[f["account"] == ACCOUNT][cols].astype(str)
        return sorted(map(tuple, f.to_numpy().tolist()))

    stored = analyze(AnalysisOptions(since=since, until=until, store=str(store)))
    assert mine(stored.frame) == mine(live.frame) and len(mine(live.frame)) == 8
    again = ingest_command(store, [], **window, env=slurm_cluster.env)
    assert again.runs_stored == first.runs_stored
    stored = analyze(AnalysisOptions(since=since, until=until, store=str(store)))
    assert mine(stored.frame) == mine(live.frame)
    assert stored.document.source.kind == "store"
