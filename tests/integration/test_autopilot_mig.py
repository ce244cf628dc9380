"""`slurmgpu autopilot --mig-partition` on the multi-node cluster: MIG slices carved from the
forecast through the real `mig apply` library (issue #22 item 3, its MIG half).

gpu03 is the recorded DGX A100 (40 GB A100s), here with MIG off on all eight GPUs: the
partition `mig` starts with whole GPUs only. Timeline (~3 minutes):

- Phase A: 24 small jobs (4 P0, 8 P1, 12 P2; 1 whole GPU, 8 s each) queue on its 8 GPUs.
  Each one's measured GPU memory (4300 MiB of 40960: fits a 1g.5gb slice) is stored in its
  AdminComment the way `slurmgpu collect`'s epilog stores it (the collector's `SG1:` summary
  merged into AdminComment, `sacctmgr -i modify job`): Slurm 22.05 and the pynvml double
  record no gres/gpumem.
- The history: 3 days of the same mix before today, hourly (a saved sacct dump the test
  writes, with the same summaries), plus the live phase A from sacct: the forecast by slice
  needs more than its 1 h buckets. The decision is the real chain: forecast by slice ->
  demand -> mig plan on gpu03's live NVML inventory -> the calibrated replay of the carve.
- `--dry-run`: would-apply, nothing changed (NVML layout, gres.conf, node state, state dir).
- `--mode apply`: gpu03 re-laid out by `mig apply` (drain, relayout, gres.conf checked by
  `slurmd -G`, slurm.conf, the controller restarted: 22.05's reconfigure keeps old Gres,
  slurmd restart, verify, resume), journaled in the state dir.
- Phase B: the same mix asking `gpu:1g.5gb:1` runs on the new slices. From sacct: 0 jobs lost,
  P0 waits, and the measured-need allocation (min(need, allocated) x run time over allocated
  GPU-equivalent seconds; need = 4300/40960 GPU, a whole A100 = 1, a 1g.5gb slice = 1/7).
- The module puts the default configs and recorded machines back (`cluster.reset()`).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmgpu.measure.summary import GpuSummary, JobSummary, merge_admin_comment
from slurmgpu.sources.sacct import sacct_text
from tests.harness.multinode import MultiNodeCluster, load_machine

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slurm_only(
        "host",
        reason="the pass's MIG decision does not depend on the release, and it acts only "
        "through mig apply, which test_mig_apply.py runs on every release (~3 minutes)",
    ),
]
NODE = "gpu03"
PARTITIONS = (
    "PartitionName=gpu Nodes=gpu[01-02],gpu04 Default=YES MaxTime=INFINITE State=UP",
    "PartitionName=mig Nodes=gpu03 MaxTime=INFINITE State=UP",
)
MIG_CONF = "GresTypes=gpu"  # mig apply refuses shard in GresTypes (test_mig_apply.py)
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
kill_switch = "{switch}"
[objective]
perturb_submit_s = 5
"""
MIX = [("p0", 4), ("p1", 8), ("p2", 12)]  # (QOS, jobs) of each phase
SLEEP_S = 8
GPU_MIB = 40960.0  # an A100-SXM4-40GB as NVML reports it
USED_MIB = 4300.0  # measured per job: fits 1g.5gb (4864 MiB) with the forecast's 10 % margin
NEED = USED_MIB / GPU_MIB
# the saved history: 72 hours before today's, each with the mix of 24 1-GPU jobs of 15 min
HISTORY_H, HISTORY_RUN_S = 72, 900
HEADER = (
    "Cluster|JobIDRaw|JobID|Partition|QOS|Account|User|Submit|Start|End|ElapsedRaw|TimelimitRaw|State|"
    "AllocTRES|TRESUsageInMax|AdminComment"
)


def summary_comment(job: int | str, start: int, end: int, minor: int) -> str:
    """AdminComment as the collector's epilog leaves it: its summary of a 1-GPU run."""
    gpu = GpuSummary(minor, None, None, f"GPU-{minor}", GPU_MIB, USED_MIB, 30.0, 4, 4)
    summary = JobSummary(str(job), "", NODE, start + 1, max(start + 1, end - 1), 4, (gpu,))
    return merge_admin_comment("", summary)


def history_dump(path: Path, before: int, cluster_name: str) -> None:
    """sacct -P text of the days before `before` (epoch, an hour boundary): each hour the mix
    submitted at once on the 8 whole A100s, so it runs in three waves (as phase A does)."""
    qos = [q for q, n in MIX for _ in range(n)]
    rows, jid = [], 900000
    t0 = before - HISTORY_H * 3600
    for h in range(HISTORY_H):
        submit = t0 + h * 3600
        for k, q in enumerate(qos):
            start = submit + (k // 8) * HISTORY_RUN_S
            end = start + HISTORY_RUN_S
            admin = summary_comment(jid, start, end, k % 8)
            rows.append(
                f"{cluster_name}|{jid}|{jid}|mig|{q}|acct|u|{submit}|{start}|{end}|"
                f"{HISTORY_RUN_S}|60|COMPLETED|cpu=1,gres/gpu:a100=1,gres/gpu=1,node=1||{admin}"
            )
            jid += 1
    path.write_text(HEADER + "\n" + "\n".join(rows) + "\n")


def whole_gpus(cluster: MultiNodeCluster) -> None:
    """gpu03 as the recorded DGX A100 with MIG off on every GPU (what the default gres.conf
    describes: eight whole a100), from its slurmd's next start."""
    data = load_machine("dgx-a100-mig")
    for gpu in data["gpus"]:
        gpu["mig_mode"] = [0, 0]
        gpu["mig_devices"] = []
    cluster.set_machine_data(NODE, data)
    cluster.restart_node(NODE)


def layout(cluster: MultiNodeCluster) -> list[tuple[bool, list[str]]]:
    return [
        (bool(g.get("mig_mode", [0])[0]), sorted(m["profile"] for m in g.get("mig_devices", [])))
        for g in cluster.machine_data(NODE)["gpus"]
    ]


def gres_of(cluster: MultiNodeCluster) -> dict[str, int]:
    from slurmgpu.sources.slurm import parse_gres_string

    return {g.type or "": g.count for g in parse_gres_string(cluster.node_record(NODE)["Gres"])}


def phase(cluster: MultiNodeCluster, gres: str) -> list[int]:
    script = f"#!/bin/sh\nsleep {SLEEP_S}\n"
    return [
        cluster.sbatch("-p", "mig", f"--qos={q}", f"--gres={gres}", script=script)
        for q, n in MIX
        for _ in range(n)
    ]


def drain_queue(cluster: MultiNodeCluster, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while cluster.active_job_ids():
        assert time.monotonic() < deadline, cluster.run(["squeue"]).stdout
        time.sleep(1)


def sacct_rows(cluster: MultiNodeCluster, jobs: list[int]) -> list[dict[str, str]]:
    out = cluster.run(
        ["env", "TZ=UTC", "SLURM_TIME_FORMAT=%s", "sacct", "-X", "-n", "-P",
         "-j", ",".join(map(str, jobs)),
         "--format=JobID,QOS,State,Submit,Start,End,NodeList,AllocTRES,AdminComment"],
    ).stdout  # fmt: skip
    keys = ("job", "qos", "state", "submit", "start", "end", "nodes", "tres", "admin")
    rows = [dict(zip(keys, ln.split("|", 8), strict=True)) for ln in out.splitlines() if ln]
    return [r for r in rows if r["job"] in {str(j) for j in jobs}]


def store_measures(cluster: MultiNodeCluster, rows: list[dict[str, str]]) -> None:
    """Each run's summary into its AdminComment, the way the collector's epilog stores it
    (`measure.collector.store_admin_comment`: slurmctld refuses `scontrol update` of a
    finished job, so the accounting record is changed with sacctmgr)."""
    for k, r in enumerate(rows):
        admin = summary_comment(r["job"], int(r["start"]), int(r["end"]), k % 8)
        cluster.sacctmgr("modify", "job", "where", f"JobID={r['job']}", "set",
                         f"AdminComment={admin}")  # fmt: skip


def mean_wait(rows: list[dict[str, str]], qos: str | None = None) -> float:
    sel = [r for r in rows if qos is None or r["qos"] == qos]
    assert sel, qos
    return sum(int(r["start"]) - int(r["submit"]) for r in sel) / len(sel)


def job_gres(cluster: MultiNodeCluster, rows: list[dict[str, str]]) -> None:
    """Each row's `gres`: what Slurm gave the job (`scontrol show -d job`'s
    `JOB_GRES=gpu:1g.5gb:1`, kept for a finished job; sacct's AllocTRES has only the types
    in AccountingStorageTRES). Read while slurmctld still lists the jobs (MinJobAge)."""
    for r in rows:
        text = cluster.scontrol("show", "-d", "job", r["job"])
        m = re.search(r"\bJOB_GRES=(gpu:\S+)", text)
        assert m, text
        r["gres"] = m.group(1)


def allocated_equiv(gres: str) -> float:
    """GPU-equivalents of one 1-GPU allocation: a whole A100 1, a 1g.5gb slice 1/7."""
    if gres == "gpu:1g.5gb:1":
        return 1 / 7
    assert gres == "gpu:a100:1", gres
    return 1.0


def need_allocation(rows: list[dict[str, str]]) -> float:
    """sum(min(need, allocated) x run time) / sum(allocated x run time)."""
    used = alloc = 0.0
    for r in rows:
        run = int(r["end"]) - int(r["start"])
        a = allocated_equiv(r["gres"])
        used += min(NEED, a) * run
        alloc += a * run
    return used / alloc


def test_autopilot_carves_mig_slices_from_the_forecast_and_small_jobs_run_on_them(
    fleet_cluster: MultiNodeCluster, tmp_path
) -> None:
    cluster = fleet_cluster
    t0 = time.monotonic()
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY.format(switch=tmp_path / "disable"))
    state = tmp_path / "state"
    gres_conf = cluster.conf_dir / "gres.conf"
    try:
        cluster.reconfigure(extra_conf=MIG_CONF, partitions=PARTITIONS)
        whole_gpus(cluster)
        assert layout(cluster) == [(False, [])] * 8
        assert gres_of(cluster) == {"a100": 8}
        for q in ("p2", "p1", "p0"):
            cluster.sacctmgr("add", "qos", q, check=False)  # may exist from an earlier test
        cluster.sacctmgr("modify", "qos", "p0", "set", "Priority=1000", "Preempt=p2")
        cluster.sacctmgr("modify", "qos", "p1", "set", "Priority=500", "Preempt=p2")
        cluster.allow_qos("p0", "p1", "p2")
        since = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(seconds=5)

        # phase A: whole GPUs only, more jobs than GPUs; their measured memory stored
        before = phase(cluster, "gpu:1")
        drain_queue(cluster)
        time.sleep(2)  # slurmdbd has the last job's end
        rows_a = sacct_rows(cluster, before)
        assert len(rows_a) == len(before)
        job_gres(cluster, rows_a)
        assert {r["gres"] for r in rows_a} == {"gpu:a100:1"}, rows_a
        store_measures(cluster, rows_a)
        stored = {r["job"]: r["admin"] for r in sacct_rows(cluster, before)}
        assert all("sg1:" in a.lower() for a in stored.values()), stored

        # the history: the saved days before this hour, and the live sacct of phase A
        history = tmp_path / "history.sacct"
        config = cluster.run(["scontrol", "show", "config"]).stdout
        name = next(ln.split("=", 1)[1].strip() for ln in config.splitlines()
                    if ln.startswith("ClusterName"))  # fmt: skip
        history_dump(history, int(time.time()) // 3600 * 3600, name)
        live = tmp_path / "live.sacct"
        now = dt.datetime.now(dt.UTC).replace(microsecond=0)
        live.write_text(sacct_text(since, now, env=cluster.env), errors="surrogateescape")
        assert all(str(j) in live.read_text() for j in before)

        def autopilot(*extra: str) -> dict:
            argv = [
                sys.executable, "-m", "slurmgpu", "autopilot", "--policy", str(policy),
                "--sacct-file", str(history), "--sacct-file", str(live), "--live",
                "--state-dir", str(state), "--format", "json", "--no-forecast",
                "--mig-partition", "mig", "--mig-gres-conf", str(gres_conf),
                "--mig-slurm-conf", str(cluster.slurm_conf),
                "--mig-host-root", str(cluster.node_host_root(NODE)),
                "--mig-drain-timeout", "60",
                "--mig-stop-slurmd", " ".join(cluster.control_command("stop-slurmd", NODE)),
                "--mig-start-slurmd", " ".join(cluster.control_command("start-slurmd", NODE)),
                "--mig-restart-slurmctld", " ".join(cluster.control_command("restart-slurmctld")),
                *extra,
            ]  # fmt: skip
            proc = subprocess.run(argv, env=cluster.node_env(NODE), capture_output=True,
                                  text=True, timeout=240, check=False)  # fmt: skip
            cluster.sync()
            # 3: the pass changed the cluster, or dry would (both passes here: would-apply,
            # applied; docs/acting.md, exit codes)
            assert proc.returncode == 3, proc.stderr + proc.stdout
            return json.loads(proc.stdout)

        # the dry run decides the carve and changes nothing
        old = (gres_conf.read_text(), cluster.slurm_conf.read_text(), layout(cluster))
        dry = autopilot("--dry-run", "--mode", "apply")
        assert dry["status"] == "would-apply", json.dumps(dry, indent=1)
        (carve,) = dry["changes"]
        assert carve.startswith("carve:mig:") and "1g.5gb=" in carve, carve
        assert [m["node"] for m in dry["mig"]] == [NODE]
        assert any("MIG mig: forecast demand 1g=" in n for n in dry["notes"]), dry["notes"]
        (pred,) = [x for x in dry["predicted"] if x["partition"] == "mig"]
        assert pred["mean_wait_after_s"] < pred["mean_wait_before_s"] and dry["score"] < 0
        assert (gres_conf.read_text(), cluster.slurm_conf.read_text(), layout(cluster)) == old
        assert not state.exists()
        record = cluster.node_record(NODE)
        assert "DRAIN" not in record["State"] and gres_of(cluster) == {"a100": 8}

        # one pass in apply mode: the same decision, carved through mig apply
        started = time.monotonic()
        first = autopilot("--mode", "apply")
        apply_s = time.monotonic() - started
        assert first["status"] == "applied", json.dumps(first, indent=1)
        assert first["changes"] == [carve] and first["mig"] == dry["mig"]
        changes = [json.loads(x) for x in (state / "changes.jsonl").read_text().splitlines()]
        assert [c["action"] for c in changes] == ["apply"]
        assert changes[0]["mig"][0]["node"] == NODE and changes[0]["changes"] == [carve]
        journal = json.loads((state / f"mig-apply-{NODE}.json").read_text())
        assert journal["state"] == "done", journal
        after = first["mig"][0]["after"]  # per GPU: `whole` or `1g.5gb=6,1g.10gb=1`
        assert [
            "whole" if not mode else ",".join(f"{p}={s.count(p)}" for p in sorted(set(s)))
            for mode, s in layout(cluster)
        ] == after
        slices = sum(s.count("1g.5gb") for _, s in layout(cluster))
        whole = sum(1 for mode, _ in layout(cluster) if not mode)
        record = cluster.wait_node(NODE, lambda r: r["State"] == "IDLE", timeout=60)
        gres = gres_of(cluster)
        assert gres.get("1g.5gb") == slices and gres.get("a100", 0) == whole, record["Gres"]
        assert gres_conf.read_text() != old[0]

        # phase B: the same mix on the slices
        after_jobs = phase(cluster, "gpu:1g.5gb:1")
        drain_queue(cluster)
        time.sleep(2)
        rows_b = sacct_rows(cluster, after_jobs)
        assert len(rows_b) == len(after_jobs)
        job_gres(cluster, rows_b)
        rows = rows_a + rows_b
        assert {r["state"] for r in rows} == {"COMPLETED"}, rows  # 0 jobs lost
        assert {r["nodes"] for r in rows} == {NODE}
        assert {r["gres"] for r in rows_b} == {"gpu:1g.5gb:1"}, [r["tres"] for r in rows_b]
        w = {
            "all_a": mean_wait(rows_a), "all_b": mean_wait(rows_b),
            "p0_a": mean_wait(rows_a, "p0"), "p0_b": mean_wait(rows_b, "p0"),
        }  # fmt: skip
        share = (need_allocation(rows_a), need_allocation(rows_b))
        span = [max(int(r["end"]) for r in x) - min(int(r["submit"]) for r in x)
                for x in (rows_a, rows_b)]  # fmt: skip
        print(*(n for n in first["notes"] if "forecast demand" in n))
        print(f"carve {carve}: {slices} x 1g.5gb, {whole} whole; mig apply pass {apply_s:.0f} s")
        print("predicted:", json.dumps(first["predicted"]), "score", first["score"])
        print("measured mean waits (s):", w, "phase spans (s):", span)
        print(f"measured-need allocation: {share[0]:.3f} -> {share[1]:.3f}")
        assert w["p0_b"] <= w["p0_a"] + 2, w
        # a 1g.5gb slice holds at most 4864/1.1 MiB of need: 0.755 of its 1/7 GPU
        assert share[1] >= 0.7 and share[1] >= 5 * share[0], share
        print(f"autopilot MIG e2e: {time.monotonic() - t0:.0f} s")
    finally:
        cluster.reset()  # the default configs and recorded machines (gpu03's MIG layout)
