"""`slurmgpu autopilot` on the multi-node cluster: a compressed day whose mix shifts, passes
between the phases that make a real rebalance move (journaled), sacct showing its effect, 0
jobs lost, and a forced worsening of the donor's waits rolled back by the next pass.

Timeline (~2-3 minutes): whole-GPU training jobs in `train` (2 nodes), then a shifted phase of
many 2-GPU jobs in P0/P1/P2 in `infer` (1 node, queueing); a dry run (changes nothing); pass 1
in apply mode moves a `train` node to `infer` because the calibrated replay proves the move
(`--candidate move:train:infer:8`: the replay judges it, the guardrails check it); the same
small-job phase again runs on 2 nodes (shorter waits, sacct) while a burst of whole-node jobs
in `train`, now 1 node, waits (the forced worsening); pass 2 verifies: `train`'s waits grew
beyond the tolerance, so it rolls the move back (rebalance's journal undo).
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import time

import pytest

from tests.harness.multinode import MultiNodeCluster

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slurm_only(
        "host",
        reason="the pass's decisions do not depend on the release, and it acts only through "
        "rebalance apply, which test_fleet_rebalance.py runs on every release (~3 minutes)",
    ),
]
PARTITIONS = (
    "PartitionName=train Nodes=gpu[01-02] Default=YES MaxTime=INFINITE State=UP",
    "PartitionName=infer Nodes=gpu03 MaxTime=INFINITE State=UP",
    "PartitionName=spare Nodes=gpu04 MaxTime=INFINITE State=UP",
)
POLICY = """
default_tier = "P2"
[tiers.P0]
qos = "p0"
priority = 1000
preempts = ["P2"]
[tiers.P1]
qos = "p1"
priority = 500
preempts = ["P2"]
[tiers.P2]
qos = "p2"
priority = 100
[autopilot]
mode = "apply"
max_nodes_per_pass = 1
max_nodes_per_day = 4
cooldown_h = 0
verify_after_min = 0
min_gain = 0.02
rollback_tolerance = 0.25
rollback_slack_s = 5
kill_switch = "{switch}"
[objective]
perturb_submit_s = 5           # the workload is compressed: jobs of seconds, not hours
[objective.partitions.infer]
mean_wait = 2                  # the site weighs its inference queue twice
"""
SMALL = [("p0", 4), ("p1", 8), ("p2", 12)]  # (QOS, jobs) of each small-job phase


def nodes_of(cluster: MultiNodeCluster, name: str) -> str:
    out = cluster.scontrol("show", "-o", "partition", name)
    return next(f.split("=", 1)[1] for f in out.split() if f.startswith("Nodes="))


def submit(cluster, partition: str, qos: str, gres: str, seconds: int, *extra: str) -> int:
    script = f"#!/bin/sh\nsleep {seconds}\n"
    return cluster.sbatch("-p", partition, f"--qos={qos}", f"--gres={gres}", *extra, script=script)


def drain_queue(cluster: MultiNodeCluster, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while cluster.active_job_ids():
        assert time.monotonic() < deadline, cluster.run(["squeue"]).stdout
        time.sleep(1)


def small_phase(cluster: MultiNodeCluster) -> list[int]:
    return [submit(cluster, "infer", q, "gpu:2", 10) for q, n in SMALL for _ in range(n)]


def sacct_rows(cluster: MultiNodeCluster, jobs: list[int]) -> list[dict[str, str]]:
    out = cluster.run(
        ["env", "TZ=UTC", "SLURM_TIME_FORMAT=%s", "sacct", "-X", "-n", "-P",
         "-j", ",".join(map(str, jobs)),
         "--format=JobID,Partition,QOS,State,Submit,Start,End"],
    ).stdout  # fmt: skip
    keys = ("job", "partition", "qos", "state", "submit", "start", "end")
    return [dict(zip(keys, line.split("|"), strict=True)) for line in out.splitlines() if line]


def busy_share(rows: list[dict[str, str]], gpus_each: int, gpus: int) -> float:
    """Allocated GPU-seconds of the jobs over the partition's GPU-seconds from the first
    submit to the last end (the phase's span)."""
    span = max(int(r["end"]) for r in rows) - min(int(r["submit"]) for r in rows)
    used = sum(int(r["end"]) - int(r["start"]) for r in rows) * gpus_each
    return used / (gpus * span)


def mean_wait(rows: list[dict[str, str]], **where: str) -> float:
    sel = [r for r in rows if all(r[k] == v for k, v in where.items())]
    assert sel, where
    return sum(int(r["start"]) - int(r["submit"]) for r in sel) / len(sel)


def pass_(cluster, policy, state, since, *extra, code: int = 3):
    """One pass; `code`: its exit status (3: it changed the cluster or, dry, would; every
    pass of this test does: would-apply, applied, rolled-back)."""
    argv = [sys.executable, "-m", "slurmgpu", "autopilot", "--policy", str(policy), "--since",
            since, "--live", "--state-dir", str(state), "--format", "json",
            "--candidate", "move:train:infer:8", "--transient", *extra]  # fmt: skip
    proc = cluster.run(argv, check=False, timeout=120)
    assert proc.returncode == code, proc.stderr + proc.stdout
    return json.loads(proc.stdout)


def test_autopilot_moves_a_node_sacct_shows_it_and_a_worsening_is_rolled_back(
    fleet_cluster: MultiNodeCluster, tmp_path
) -> None:
    cluster = fleet_cluster
    t0 = time.monotonic()
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY.format(switch=tmp_path / "disable"))
    state = tmp_path / "state"
    cluster.reconfigure(partitions=PARTITIONS)
    for q in ("p2", "p1", "p0"):
        cluster.sacctmgr("add", "qos", q, check=False)
    cluster.sacctmgr("modify", "qos", "p0", "set", "Priority=1000", "Preempt=p2")
    cluster.sacctmgr("modify", "qos", "p1", "set", "Priority=500", "Preempt=p2")
    cluster.allow_qos("p0", "p1", "p2")
    since = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    try:
        # phase 1: whole-GPU training; phase 2: the shift to many small jobs on one node
        train1 = [submit(cluster, "train", "p1", "gpu:8", 8, "--exclusive") for _ in range(2)]
        drain_queue(cluster)
        before = small_phase(cluster)
        drain_queue(cluster)
        time.sleep(2)  # slurmdbd has the last job's end

        dry = pass_(cluster, policy, state, since, "--dry-run")
        assert dry["status"] == "would-apply", json.dumps(dry, indent=1)
        assert not state.exists() and nodes_of(cluster, "train") == "gpu[01-02]"

        first = pass_(cluster, policy, state, since)
        assert first["status"] == "applied", json.dumps(first, indent=1)
        (move,) = first["moves"]
        assert move["source"] == "train" and move["target"] == "infer"
        assert first["score"] < -0.05 and first["predicted"]
        kept = "gpu02" if move["node"] == "gpu01" else "gpu01"
        assert nodes_of(cluster, "train") == kept
        assert nodes_of(cluster, "infer") in ("gpu[01,03]", "gpu[02-03]")
        journal = [json.loads(x) for x in (state / "rebalance.jsonl").read_text().splitlines()]
        # the intent logged before scontrol, the apply after it (same time, by the autopilot)
        assert [e["action"] for e in journal] == ["intent", "apply"]
        assert journal[0]["time"] == journal[1]["time"]
        assert journal[1]["by"] == f"autopilot {first['change_id']}"
        assert journal[0]["moves"][0]["node"] == move["node"]

        # the shifted mix again, now on two nodes; a burst of whole-node jobs in the donor
        after = small_phase(cluster)
        train2 = [submit(cluster, "train", "p1", "gpu:8", 8, "--exclusive") for _ in range(4)]
        drain_queue(cluster)
        time.sleep(2)

        rows = sacct_rows(cluster, train1 + before + after + train2)
        assert len(rows) == len(train1 + before + after + train2)
        assert {r["state"] for r in rows} == {"COMPLETED"}, rows  # 0 jobs lost
        ids = {str(j) for j in after}
        small_before = [r for r in rows if r["job"] in {str(j) for j in before}]
        small_after = [r for r in rows if r["job"] in ids]
        w = {
            "infer_before": mean_wait(small_before), "infer_after": mean_wait(small_after),
            "p0_before": mean_wait(small_before, qos="p0"),
            "p0_after": mean_wait(small_after, qos="p0"),
            "train_before": mean_wait([r for r in rows if r["job"] in map(str, train1)]),
            "train_after": mean_wait([r for r in rows if r["job"] in map(str, train2)]),
        }  # fmt: skip
        share = (busy_share(small_before, 2, 8), busy_share(small_after, 2, 16))
        print("measured mean waits (s):", w, f"elapsed {time.monotonic() - t0:.0f} s")
        print(f"infer allocated share of its GPUs over the phase: {share[0]:.2f} -> {share[1]:.2f}")
        print("predicted:", json.dumps(first["predicted"]), "score", first["score"])
        assert w["infer_after"] < w["infer_before"], w
        assert w["p0_after"] <= w["p0_before"] + 2, w
        assert w["train_after"] > w["train_before"] * 1.25 + 5, w

        second = pass_(cluster, policy, state, since)
        assert second["status"] == "rolled-back", json.dumps(second, indent=1)
        assert any("partition:train" in r and "WORSE" in r for r in second["verification"])
        assert nodes_of(cluster, "train") == "gpu[01-02]" and nodes_of(cluster, "infer") == "gpu03"
        journal = [json.loads(x) for x in (state / "rebalance.jsonl").read_text().splitlines()]
        assert [e["action"] for e in journal] == ["intent", "apply", "undo"]
        assert journal[2]["undoes"] == journal[1]["time"]
        changes = [json.loads(x) for x in (state / "changes.jsonl").read_text().splitlines()]
        assert [c["action"] for c in changes] == ["apply", "rollback"]
        assert changes[1]["of"] == changes[0]["id"] == first["change_id"]
        prom = (state / "autopilot.prom").read_text()
        assert 'slurmgpu_autopilot_last_pass_status{status="rolled-back"} 1' in prom
        print(f"autopilot e2e: {time.monotonic() - t0:.0f} s")
    finally:
        cluster.reset()
