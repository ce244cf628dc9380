"""`slurmgpu rebalance` on the multi-node cluster: a backlog in one partition takes an idle node
from another, its job starts, `--undo` puts it back, and a slurmctld restart forgets it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from tests.harness.multinode import MultiNodeCluster

pytestmark = pytest.mark.integration
PARTITIONS = (
    "PartitionName=train Nodes=gpu[01-02] Default=YES MaxTime=INFINITE State=UP",
    "PartitionName=infer Nodes=gpu[03-04] MaxTime=INFINITE State=UP",
)
FAST = ("--min-pending", "0", "--min-idle", "0")


def rebalance(cluster: MultiNodeCluster, log, *args: str):
    return cluster.run(
        [sys.executable, "-m", "slurmgpu", "rebalance", *args, "--log", str(log)], check=False
    )


def partition_nodes(cluster: MultiNodeCluster, name: str) -> str:
    out = cluster.scontrol("show", "-o", "partition", name)
    return next(f.split("=", 1)[1] for f in out.split() if f.startswith("Nodes="))


def test_a_backlog_takes_an_idle_node(fleet_cluster: MultiNodeCluster, tmp_path) -> None:
    log = tmp_path / "rebalance.jsonl"
    fleet_cluster.reconfigure(partitions=PARTITIONS)
    try:
        script = "#!/bin/sh\nsleep 120\n"
        running = [
            fleet_cluster.sbatch("-p", "train", "--gres=gpu:8", "--exclusive", script=script)
            for _ in range(2)
        ]
        for job in running:
            fleet_cluster.wait_job_state(job, "RUNNING", timeout=30)
        waiting = fleet_cluster.sbatch("-p", "train", "--gres=gpu:8", "--exclusive", script=script)
        fleet_cluster.wait_job_state(waiting, "PENDING", timeout=10)

        # hysteresis: the job has waited less than the default 300 s: nothing moves
        proc = rebalance(fleet_cluster, log, "plan")
        assert proc.returncode == 0, proc.stderr  # 0: no move (docs/acting.md, exit codes)
        assert "no move" in proc.stdout and f"job {waiting} (train) has waited" in proc.stdout

        dry = rebalance(fleet_cluster, log, "apply", "--dry-run", *FAST)
        assert dry.returncode == 3, dry.stderr  # 3: it would move a node
        # the node idle the longest moves; which of infer's two that is depends on the jobs
        # earlier tests ran there
        moved = re.search(r"^move (gpu0[34]): infer -> train", dry.stdout, re.M)
        assert moved and "dry run" in dry.stdout, dry.stdout
        node = moved.group(1)
        kept = "gpu04" if node == "gpu03" else "gpu03"
        train_after = "gpu[01-03]" if node == "gpu03" else "gpu[01-02,04]"
        assert partition_nodes(fleet_cluster, "train") == "gpu[01-02]"  # unchanged
        assert not log.exists()

        # live without --partitions-conf: the next reconfigure would undo it; refused
        refused = rebalance(fleet_cluster, log, "apply", *FAST)
        assert refused.returncode == 2 and refused.stderr.startswith(
            "slurmgpu: error: a live rebalance apply needs --partitions-conf"
        ), refused.stderr
        assert partition_nodes(fleet_cluster, "train") == "gpu[01-02]" and not log.exists()
        applied = rebalance(fleet_cluster, log, "apply", *FAST, "--transient")
        assert applied.returncode == 3, applied.stderr  # 3: it moved a node
        assert f"PartitionName=train Nodes={train_after}" in applied.stdout
        assert f"PartitionName=infer Nodes={kept}" in applied.stdout
        assert "do not survive a slurmctld restart" in applied.stdout
        assert partition_nodes(fleet_cluster, "train") == train_after
        assert partition_nodes(fleet_cluster, "infer") == kept
        fleet_cluster.wait_job_state(waiting, "RUNNING", timeout=30)
        job = fleet_cluster.scontrol("show", "-o", "job", str(waiting))
        assert f" NodeList={node} " in job
        entry = json.loads(log.read_text().splitlines()[0])
        assert entry["moves"][0]["node"] == node and f"job {waiting}" in entry["moves"][0]["reason"]

        # the job runs now: nothing waits, nothing more moves (floors: unit tests)
        again = rebalance(fleet_cluster, log, "plan", *FAST, "--cooldown", "0")
        assert "move " not in again.stdout

        undo = rebalance(fleet_cluster, log, "apply", "--undo")
        assert undo.returncode == 3, undo.stderr  # 3: partitions set back
        assert partition_nodes(fleet_cluster, "train") == "gpu[01-02]"
        assert partition_nodes(fleet_cluster, "infer") == "gpu[03-04]"
        assert rebalance(fleet_cluster, log, "apply", "--undo").returncode == 2  # nothing left

        # scontrol's change is memory only: a restarted slurmctld goes back to slurm.conf.
        # The job that waited runs now: another one waits, so that a node moves again (the
        # exit status says whether one did: 3; 0 would make this check say nothing)
        more = fleet_cluster.sbatch("-p", "train", "--gres=gpu:8", "--exclusive", script=script)
        fleet_cluster.wait_job_state(more, "PENDING", timeout=10)
        again = rebalance(fleet_cluster, log, "apply", *FAST, "--cooldown", "0", "--transient")
        assert again.returncode == 3, again.stdout + again.stderr
        assert partition_nodes(fleet_cluster, "train") != "gpu[01-02]"
        fleet_cluster.restart_slurmctld()
        assert partition_nodes(fleet_cluster, "train") == "gpu[01-02]"
    finally:
        fleet_cluster.reset()


# -- durable moves: the include file rebalance owns (issue #24) ---------------------------------


def _include(cluster: MultiNodeCluster):
    conf = cluster.conf_dir / "slurmgpu-partitions.conf"
    conf.write_text(
        "# the partitions slurmgpu rebalance may change\n" + "\n".join(PARTITIONS) + "\n"
    )
    cluster.reconfigure(partitions=(f"Include {conf}",))
    return conf


def _backlog(cluster: MultiNodeCluster) -> int:
    """Two whole-node jobs fill train, a third waits for a node."""
    script = "#!/bin/sh\nsleep 120\n"
    for _ in range(2):
        job = cluster.sbatch("-p", "train", "--gres=gpu:8", "--exclusive", script=script)
        cluster.wait_job_state(job, "RUNNING", timeout=30)
    waiting = cluster.sbatch("-p", "train", "--gres=gpu:8", "--exclusive", script=script)
    cluster.wait_job_state(waiting, "PENDING", timeout=10)
    return waiting


def _file_partitions(text: str) -> dict[str, str]:
    """{partition: Nodes=} of the include file's train and infer lines."""
    found = dict(re.findall(r"^PartitionName=(\S+) Nodes=(\S+)", text, re.M))
    return {p: found[p] for p in ("train", "infer")}


def _wait_reason(cluster: MultiNodeCluster, job: int, reasons: tuple[str, ...]) -> None:
    """Until the scheduler has looked at the job again (a released job's reason is `None`
    until then, and rebalance rightly does not count it as waiting for nodes)."""
    deadline = time.monotonic() + 30
    while (
        reason := cluster.run(["squeue", "-h", "-j", str(job), "-o", "%r"]).stdout.strip()
    ) not in reasons:
        assert time.monotonic() < deadline, f"job {job} pending reason {reason!r}"
        time.sleep(0.5)


def test_emit_changes_nothing_and_a_move_in_the_include_file_survives_reconfigure(
    fleet_cluster: MultiNodeCluster, tmp_path
) -> None:
    cluster = fleet_cluster
    log = tmp_path / "rebalance.jsonl"
    try:
        conf = _include(cluster)
        original = conf.read_text()
        waiting = _backlog(cluster)
        durable = ("--partitions-conf", str(conf))

        # --emit: the new include file and its diff in DIR, nothing live changed
        out = tmp_path / "emit"
        emitted = rebalance(cluster, log, "apply", *FAST, *durable, "--emit", str(out))
        assert emitted.returncode == 3, emitted.stderr  # 3: the live file would change
        assert "nothing live was touched" in emitted.stderr
        assert conf.read_text() == original and not log.exists()
        assert partition_nodes(cluster, "train") == "gpu[01-02]"
        assert partition_nodes(cluster, "infer") == "gpu[03-04]"
        new = (out / conf.name).read_text()
        assert new != original and f"--- {conf}" in (out / "changes.diff").read_text()
        assert (out / "steps.txt").read_text().splitlines()[-1] == "scontrol reconfigure"

        # applied by hand: the diff patched into the live file, one `scontrol reconfigure`;
        # the waiting job is held meanwhile: were it to start on the moved node, that node
        # would no longer be the one idle the longest and the live run below would pick the
        # other (a real difference of state, not of emit and apply)
        cluster.scontrol("hold", str(waiting))
        subprocess.run(["patch", "-s", str(conf), str(out / "changes.diff")], check=True)
        assert conf.read_text() == new
        cluster.scontrol("reconfigure")
        by_hand = {p: partition_nodes(cluster, p) for p in ("train", "infer")}
        assert by_hand["train"] != "gpu[01-02]", by_hand
        assert by_hand == _file_partitions(new)

        # put it back, then the live run: the same file and the same partitions
        conf.write_text(original)
        cluster.scontrol("reconfigure")
        assert partition_nodes(cluster, "train") == "gpu[01-02]"
        cluster.scontrol("release", str(waiting))
        _wait_reason(cluster, waiting, ("Resources", "Priority"))
        # emit once more on the state the live run sees: which of the two idle nodes is idle
        # the longest can change meanwhile (the by-hand move and reconfigures touch the nodes'
        # LastBusyTime on some releases), and emit must match apply on the same state
        again = tmp_path / "emit-again"
        emitted = rebalance(cluster, log, "apply", *FAST, *durable, "--emit", str(again))
        assert emitted.returncode == 3, emitted.stderr
        assert conf.read_text() == original and not log.exists()
        expected = (again / conf.name).read_text()
        applied = rebalance(cluster, log, "apply", *FAST, *durable)
        assert applied.returncode == 3, applied.stderr
        assert f"written to {conf}" in applied.stdout
        assert conf.read_text() == expected
        moved = {p: partition_nodes(cluster, p) for p in ("train", "infer")}
        assert moved == _file_partitions(expected) and moved["train"] != "gpu[01-02]"

        # durable: a reconfigure and a slurmctld restart keep the move
        cluster.scontrol("reconfigure")
        assert {p: partition_nodes(cluster, p) for p in ("train", "infer")} == moved
        cluster.restart_slurmctld()
        assert {p: partition_nodes(cluster, p) for p in ("train", "infer")} == moved

        # --undo puts both the live partitions and the file back
        undo = rebalance(cluster, log, "apply", "--undo")
        assert undo.returncode == 3, undo.stderr
        assert "restored PartitionName=train Nodes=gpu[01-02]" in undo.stdout
        assert conf.read_text() == original
        cluster.scontrol("reconfigure")
        assert partition_nodes(cluster, "train") == "gpu[01-02]"
    finally:
        cluster.reset()


def test_undo_after_a_reconfigure_says_nothing_was_restored(
    fleet_cluster: MultiNodeCluster, tmp_path
) -> None:
    cluster = fleet_cluster
    log = tmp_path / "rebalance.jsonl"
    cluster.reconfigure(partitions=PARTITIONS)
    try:
        _backlog(cluster)
        assert rebalance(cluster, log, "apply", *FAST, "--transient").returncode == 3
        assert partition_nodes(cluster, "train") != "gpu[01-02]"
        cluster.scontrol("reconfigure")  # memory-only moves: slurm.conf wins
        assert partition_nodes(cluster, "train") == "gpu[01-02]"
        undo = rebalance(cluster, log, "apply", "--undo")
        assert undo.returncode == 0, undo.stderr  # 0: nothing set back (docs/acting.md)
        assert "restored" not in undo.stdout
        assert "unchanged PartitionName=train Nodes=gpu[01-02] (already so" in undo.stdout
    finally:
        cluster.reset()


def test_the_floor_counts_usable_nodes(fleet_cluster: MultiNodeCluster, tmp_path) -> None:
    cluster = fleet_cluster
    log = tmp_path / "rebalance.jsonl"
    cluster.reconfigure(partitions=PARTITIONS)
    try:
        cluster.scontrol("update", "NodeName=gpu04", "State=DRAIN", "Reason=broken")
        _backlog(cluster)
        plan = rebalance(cluster, log, "plan", *FAST)
        assert plan.returncode == 0, plan.stderr
        # infer has two nodes, one of them drained: gpu03 is its last usable one and stays
        assert not re.search(r"^move ", plan.stdout, re.M), plan.stdout
        assert "only 0 can move" in plan.stdout
        cluster.resume_node("gpu04")
        assert re.search(
            r"^move gpu0[34]: infer -> train", rebalance(cluster, log, "plan", *FAST).stdout, re.M
        )
    finally:
        cluster.reset()


# -- issue 33: a killed run settled first, one lock directory, a held lock waited for ---------


def _killed_between_updates(cluster: MultiNodeCluster, log, conf) -> None:
    """What a run SIGKILLed between its two `scontrol update`s leaves: its intent logged,
    the include file already written, gpu03 added to train but still in infer."""
    from slurmgpu.fleet.rebalance import LogEntry
    from slurmgpu.model.rebalance import Move
    from slurmgpu.util.journal import append_record

    before = {"train": "gpu[01-02]", "infer": "gpu[03-04]"}
    after = {"train": "gpu[01-03]", "infer": "gpu04"}
    append_record(
        log,
        LogEntry(
            time="2026-01-01T10:00:00",
            action="intent",
            moves=(Move("gpu03", "infer", "train", "job 1 has waited"),),
            before=before,
            after=after,
            partitions_conf=str(conf),
            by="rebalance apply",
        ),
    )
    text = conf.read_text()
    conf.write_text(text.replace("Nodes=gpu[01-02]", "Nodes=gpu[01-03]").replace(
        "Nodes=gpu[03-04]", "Nodes=gpu04"
    ))  # fmt: skip
    cluster.scontrol("update", "PartitionName=train", "Nodes=gpu[01-03]")
    assert partition_nodes(cluster, "train") == "gpu[01-03]"
    assert partition_nodes(cluster, "infer") == "gpu[03-04]"  # gpu03 in two partitions


def test_a_killed_run_is_undone_first_and_a_held_node_lock_is_waited_for(
    fleet_cluster: MultiNodeCluster, tmp_path
) -> None:
    cluster = fleet_cluster
    log, locks = tmp_path / "rebalance.jsonl", tmp_path / "locks"
    try:
        conf = _include(cluster)
        original = conf.read_text()
        _killed_between_updates(cluster, log, conf)
        # another command (a mig apply, say) holds gpu03 in the one lock directory
        holder = subprocess.Popen(
            [
                sys.executable, "-c",
                "import time; from slurmgpu.util.lock import lock_dir, node_locks\n"
                "with node_locks(lock_dir(), ['gpu03'], 'mig apply relayout'):\n"
                "    print('held', flush=True); time.sleep(120)",
            ],
            stdout=subprocess.PIPE, text=True, env={**os.environ, "SLURMGPU_LOCK_DIR": str(locks)},
        )  # fmt: skip
        try:
            assert holder.stdout.readline() == "held\n"
            argv = ["env", f"SLURMGPU_LOCK_DIR={locks}", sys.executable, "-m", "slurmgpu"]
            argv += ["rebalance", "apply", *FAST, "--partitions-conf", str(conf), "--log", str(log)]
            start = time.monotonic()
            blocked = cluster.run(argv, check=False)
            waited = time.monotonic() - start
            assert blocked.returncode == 1, blocked.stderr
            lines = blocked.stderr.splitlines()
            assert lines[0].startswith("slurmgpu: gpu03 is held by pid ")
            assert "mig apply relayout" in lines[0] and "waiting up to 10 s" in lines[0]
            assert lines[-1].startswith("slurmgpu: error: gpu03: another slurmgpu command")
            assert "(waited 10 s)" in lines[-1] and 10 <= waited < 40
            assert partition_nodes(cluster, "infer") == "gpu[03-04]"  # nothing done meanwhile
        finally:
            holder.kill()
            holder.wait()
        # the holder is gone: the killed run's half move is undone before anything else
        done = cluster.run(argv, check=False)
        assert done.returncode == 3, done.stderr  # 3: the killed run's move undone
        assert "recovered: undid the move of 2026-01-01T10:00:00" in done.stdout, done.stdout
        assert partition_nodes(cluster, "train") == "gpu[01-02]"
        assert partition_nodes(cluster, "infer") == "gpu[03-04]"
        assert conf.read_text() == original  # the include file agrees with the live partitions
        entries = [json.loads(x) for x in log.read_text().splitlines()]
        assert [e["action"] for e in entries] == ["intent", "undo"]
        assert entries[1]["undoes"] == "2026-01-01T10:00:00"
        cluster.scontrol("reconfigure")  # and the file holds what is live
        assert partition_nodes(cluster, "train") == "gpu[01-02]"
    finally:
        cluster.reset()


def test_under_the_locks_an_admins_edit_stops_the_move_and_a_drained_node_stays(
    fleet_cluster: MultiNodeCluster, tmp_path, monkeypatch
) -> None:
    """The plan is read, then the cluster changes before the locks are taken: an admin's
    partition edit stops the move and is kept (not reverted); a node drained meanwhile is
    not moved. Nothing is logged either time."""
    from slurmgpu.fleet.rebalance import (
        MoveRefused,
        RebalanceOptions,
        apply_plan,
        current_plan,
        node_problems,
    )
    from slurmgpu.sources import queue

    monkeypatch.setenv("SLURMGPU_LOCK_DIR", str(tmp_path / "locks"))
    cluster, env = fleet_cluster, fleet_cluster.env
    log = tmp_path / "rebalance.jsonl"
    cluster.reconfigure(partitions=PARTITIONS)
    node = None
    try:
        _backlog(cluster)
        plan = current_plan(RebalanceOptions(min_pending_s=0, min_idle_s=0), log, env)
        (move,) = plan.moves
        node = move.node
        # an admin gives infer gpu01 too, after the plan read the partitions
        cluster.scontrol("update", "PartitionName=infer", "Nodes=gpu[01,03-04]")
        with pytest.raises(MoveRefused, match=r"partition infer has Nodes=gpu\[01,03-04\] now"):
            apply_plan(plan, log, env)
        assert partition_nodes(cluster, "infer") == "gpu[01,03-04]"  # kept, not reverted
        assert partition_nodes(cluster, "train") == "gpu[01-02]" and not log.exists()

        cluster.scontrol("update", "PartitionName=infer", "Nodes=gpu[03-04]")  # as planned
        cluster.scontrol("update", f"NodeName={node}", "State=DRAIN", "Reason=broken")
        with pytest.raises(MoveRefused, match=f"{node} is drained or down now: not moved"):
            apply_plan(plan, log, env, recheck=lambda: node_problems(plan.moves, queue.nodes(env)))
        assert partition_nodes(cluster, "infer") == "gpu[03-04]" and not log.exists()
    finally:
        if node is not None:
            cluster.resume_node(node)
        cluster.reset()
