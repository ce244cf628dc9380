"""Tiers on the real cluster: QOS in slurmdbd, job_submit.lua in slurmctld, preemption, wrapper.

The node is reconfigured with shards (gpu:h100:8 + shard:32, i.e. 4 per GPU) so the policy's
1/4 and 1/2 GPU slices exist; the module restores the harness default afterwards. Jobs are
submitted, updated and preempted as ordinary Unix users (made by `SlurmCluster.add_user`):
PROD in account prod (P0, P1, P2), RND in rnd (P1, P2), USER in the harness account (P2).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmgpu.sources.slurm import parse_scontrol_record

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "tests" / "data" / "tiers" / "policy-integration.toml"
NODE_LINE = (
    "NodeName=gpu01 CPUs=16 Sockets=2 CoresPerSocket=8 ThreadsPerCore=1 RealMemory=64000 "
    "Gres=gpu:h100:8,shard:32"
)
GRES_CONF = "Name=gpu Type=h100 File=/dev/nvidia[0-7]\nName=shard Count=32\n"
GRACE_S = 10  # the policy's P0 grace_time_s: KillWait for the requeued P2 victims
# What the policy needs and the harness does not set by default.
EXTRA_CONF = f"PriorityWeightQOS=10000\nAccountingStoreFlags=job_comment\nKillWait={GRACE_S}\n"
PROD, RND, USER = "sgt-prod", "sgt-rnd", "sgt-user"


def slurmgpu(
    cluster, *args: str, check: bool = True, sbatch_as: str | None = None, ok: tuple = (0,)
):
    """Run the CLI against the test cluster (its SLURM_CONF); with `check`, an exit status
    not in `ok` fails the test (3: it changed something, docs/acting.md).

    With `sbatch_as`, the sbatch that `slurmgpu submit` execs runs as that Unix user (the
    test's Python may live where ordinary users cannot run it, e.g. under /root).
    """
    env = {**os.environ, **cluster.env, "XDG_CACHE_HOME": str(cluster.root / "cache")}
    if sbatch_as:
        shim = cluster.work_dir / f"sbatch-as-{sbatch_as}"
        shim.write_text(f'#!/bin/sh\nexec runuser -u {sbatch_as} -- sbatch "$@"\n')
        shim.chmod(0o755)
        env["SLURMGPU_SBATCH"] = str(shim)
    proc = subprocess.run(
        [sys.executable, "-m", "slurmgpu", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    if check and proc.returncode not in ok:
        raise AssertionError(
            f"slurmgpu {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


def stored_gres(series: tuple[int, int], request: str) -> str:
    """A --gres request as TresPerNode shows it: `gres:shard:2` on 22.05, `gres/shard:2` on
    24.11 (seen on both test clusters; job_submit.lua must write the same form)."""
    return ("gres/" if series >= (23, 2) else "gres:") + request


def job_record(cluster, jobid: int) -> dict[str, str]:
    """`scontrol show job` as a dict. Comment/AdminComment hold `key=value` text that the
    one-line parser would split, so they come from their own lines of the long format."""
    record = parse_scontrol_record(cluster.scontrol("show", "-o", "job", str(jobid)).strip())
    for line in cluster.scontrol("show", "job", str(jobid)).splitlines():
        m = re.match(r"^\s*(Comment|AdminComment)=(.*?)\s*$", line)
        if m:
            record[m.group(1)] = m.group(2)
    return record


def association_qos(cluster, key: str, *where: str) -> dict[str, set[str]]:
    """{Account or User: its QOS names} of the associations `where` selects on this cluster."""
    out = cluster.sacctmgr(
        "show", "assoc", "--parsable2", "--noheader", "where",
        f"cluster={cluster.cluster_name}", *where, f"format={key},QOS",
    )  # fmt: skip
    return {line.split("|")[0]: set(line.split("|")[1].split(",")) for line in out.split()}


@pytest.fixture(scope="module")
def tiers_cluster(slurm_cluster):
    cluster = slurm_cluster
    cluster.sacctmgr("add", "account", "prod,rnd", "Description=tier tests", check=False)
    cluster.sacctmgr("add", "user", "root", "account=prod,rnd", check=False)
    cluster.add_user(PROD, account="prod")
    cluster.add_user(RND, account="rnd")
    cluster.add_user(USER)
    try:
        yield cluster
    finally:
        cluster.scancel_all()
        cluster.reset()


def test_qos_apply_creates_the_tiers_and_is_idempotent(tiers_cluster):
    cluster = tiers_cluster
    plan = slurmgpu(cluster, "qos", "plan", "--policy", str(POLICY), ok=(3,))  # 3: to do
    # requeued when preempted: no Slurm GraceTime, the grace is KillWait (docs/policy.md)
    assert "sacctmgr -i add qos tier_p2 Priority=100 PreemptMode=requeue " in plan.stdout
    assert "PreemptType=preempt/qos" in plan.stdout and "KillWait=10" in plan.stdout
    # the harness default has PriorityWeightQOS=0: the plan says so
    assert (
        "slurm.conf has PriorityWeightQOS=0, the policy needs PriorityWeightQOS=10000"
        in plan.stderr
    )
    assert "slurm.conf has KillWait=5 sec, the policy needs KillWait=10" in plan.stderr
    # --dry-run and --emit DIR run nothing
    dry = slurmgpu(cluster, "qos", "apply", "--policy", str(POLICY), "--dry-run", ok=(3,))
    assert "# dry run: nothing run" in dry.stdout and "ran:" not in dry.stdout
    emit_dir = cluster.root / "qos-emit"
    slurmgpu(cluster, "qos", "apply", "--policy", str(POLICY), "--emit", str(emit_dir), ok=(3,))
    script = (emit_dir / "qos-apply.sh").read_text()
    assert "\nrun add qos tier_p2 Priority=100 PreemptMode=requeue " in script
    assert "tier_p2" not in cluster.sacctmgr("show", "qos", "--parsable2", "--noheader")
    log = cluster.root / "qos.jsonl"
    applied = slurmgpu(cluster, "qos", "apply", "--policy", str(POLICY), "--log", str(log), ok=(3,))
    assert "slurmdbd matches the policy" in applied.stdout
    from slurmgpu.fleet.qos import QosLogEntry
    from slurmgpu.util.journal import read_records

    rounds = read_records(log, QosLogEntry)  # validated, sealed
    assert rounds and rounds[0].commands[0][:3] == ("add", "qos", "tier_p2")
    assert "tier_p2" not in {q.name for q in rounds[0].qos_before}
    ran = [ln[len("ran: ") :] for ln in applied.stdout.splitlines() if ln.startswith("ran: ")]
    assert len(ran) == sum(len(r.commands) for r in rounds)
    out = cluster.sacctmgr(
        "show",
        "qos",
        "--parsable2",
        "--noheader",
        "format=Name,Priority,Preempt,PreemptMode,GraceTime",
    )
    rows = {line.split("|")[0]: line for line in out.splitlines()}
    assert rows["tier_p0"] == "tier_p0|1000|tier_p2|cluster|00:00:00"
    assert rows["tier_p2"] == "tier_p2|100||requeue|00:00:00"
    assert rows["tier_p1"] == "tier_p1|500||cluster|00:00:00"
    qos_of = association_qos(cluster, "Account", "user=root")
    assert {"tier_p0", "tier_p1", "tier_p2"} <= qos_of["prod"]
    assert {"tier_p1", "tier_p2"} <= qos_of["rnd"] and "tier_p0" not in qos_of["rnd"]
    assert "tier_p2" in qos_of[cluster.account] and "tier_p0" not in qos_of[cluster.account]
    # the ordinary users inherit their account's tiers
    qos_of = association_qos(cluster, "User", f"user={PROD},{RND},{USER}")
    assert {"tier_p0", "tier_p1", "tier_p2"} <= qos_of[PROD]
    assert {"tier_p1", "tier_p2"} <= qos_of[RND] and "tier_p0" not in qos_of[RND]
    assert "tier_p2" in qos_of[USER] and not {"tier_p0", "tier_p1"} & qos_of[USER]
    again = slurmgpu(cluster, "qos", "plan", "--policy", str(POLICY))  # exit 0: nothing to do
    assert "# sacctmgr: nothing to do" in again.stdout
    same = slurmgpu(cluster, "qos", "apply", "--policy", str(POLICY), "--log", str(log))
    assert "ran:" not in same.stdout  # exit 0: unchanged
    assert "sacctmgr -i" not in again.stdout

    # --undo: the QOS and associations as before the apply (from the journal), then apply again
    fields = "format=Name,Priority,Preempt,PreemptMode,GraceTime"
    undo = slurmgpu(cluster, "qos", "apply", "--undo", "--log", str(log), ok=(3,))
    assert "slurmdbd is as before the last apply" in undo.stdout, undo.stdout
    out = cluster.sacctmgr("show", "qos", "--parsable2", "--noheader", fields)
    assert not {"tier_p0", "tier_p1", "tier_p2"} & {ln.split("|")[0] for ln in out.split()}
    qos_of = association_qos(cluster, "Account", "user=root")
    assert not {"tier_p0", "tier_p1", "tier_p2"} & set().union(*qos_of.values())
    replan = slurmgpu(cluster, "qos", "plan", "--policy", str(POLICY), ok=(3,))
    assert "sacctmgr -i add qos tier_p2 Priority=100 PreemptMode=requeue " in replan.stdout
    nothing = slurmgpu(cluster, "qos", "apply", "--undo", "--log", str(log), check=False)
    assert nothing.returncode == 2 and "nothing to undo" in nothing.stderr
    slurmgpu(cluster, "qos", "apply", "--policy", str(POLICY), "--log", str(log), ok=(3,))
    assert "nothing to do" in slurmgpu(cluster, "qos", "plan", "--policy", str(POLICY)).stdout


def test_emitted_qos_script_is_idempotent(tiers_cluster, tmp_path):
    """#33: the emitted qos-apply.sh exited 1 on its second run (sacctmgr refuses to add a
    QOS that exists). Now a second run is no error, and the script tells changed (3) from
    unchanged (0) as the commands do; an account slurmdbd does not know is warned about."""
    cluster = tiers_cluster
    policy = tmp_path / "policy.toml"
    text = POLICY.read_text()
    policy.write_text(
        text.replace('accounts = ["prod", "rnd"]', 'accounts = ["prod", "rnd", "nosuch"]')
    )
    env = {**os.environ, **cluster.env}
    cluster.sacctmgr("delete", "qos", "tier_p0,tier_p1,tier_p2", check=False)
    plan = slurmgpu(cluster, "qos", "plan", "--policy", str(policy), ok=(3,))
    assert "tier P1 names account nosuch, which slurmdbd does not know" in plan.stderr
    emitted, again = tmp_path / "emit", tmp_path / "again"
    slurmgpu(cluster, "qos", "apply", "--policy", str(policy), "--emit", str(emitted), ok=(3,))
    slurmgpu(cluster, "qos", "apply", "--policy", str(policy), "--emit", str(again), ok=(3,))
    script = emitted / "qos-apply.sh"
    assert script.read_bytes() == (again / "qos-apply.sh").read_bytes()  # same inputs
    runs = [
        subprocess.run(["sh", str(script)], capture_output=True, text=True, env=env)
        for _ in range(3)
    ]
    assert [r.returncode for r in runs] == [3, 0, 0], [(r.stdout, r.stderr) for r in runs]
    assert runs[1].stdout == "qos-apply.sh: unchanged\n" and runs[1].stderr == ""
    # the script did what apply would: at most a second round is left (inheritance)
    slurmgpu(cluster, "qos", "apply", "--policy", str(POLICY), "--log", str(tmp_path / "log"),
             ok=(0, 3))  # fmt: skip
    assert "nothing to do" in slurmgpu(cluster, "qos", "plan", "--policy", str(POLICY)).stdout


@pytest.fixture(scope="module")
def routed_cluster(tiers_cluster):
    """The cluster with the rendered job_submit.lua loaded, shards, and the QOS applied."""
    cluster = tiers_cluster
    slurmgpu(
        cluster, "qos", "apply", "--policy", str(POLICY), "--log", str(cluster.root / "q.jsonl"),
        ok=(0, 3),
    )  # fmt: skip
    target = cluster.root / "job_submit.lua"
    slurmgpu(
        cluster, "gen-job-submit", "--policy", str(POLICY), "--check", "-o", str(target), ok=(3,)
    )
    cluster.reconfigure(
        node_line=NODE_LINE,
        gres_conf=GRES_CONF,
        extra_conf=EXTRA_CONF,
        job_submit_lua=target.read_text(),
    )
    return cluster


def test_job_submit_lua_is_loaded_and_routes(routed_cluster, slurm_series):
    cluster = routed_cluster
    config = cluster.scontrol("show", "config")
    assert re.search(r"^JobSubmitPlugins\s*=\s*lua$", config, re.M), config
    # an ordinary user's submission: job_submit.lua may still write AdminComment
    jobid = cluster.sbatch("--hold", "--comment=exp 7 tier=P1 kind=finetune", user=RND)
    job = job_record(cluster, jobid)
    assert job["QOS"] == "tier_p1"
    assert job["TresPerNode"] == stored_gres(slurm_series, "shard:2")
    assert job["Partition"] == "gpu"
    assert job["TimeLimit"] == "12:00:00"
    assert job["AdminComment"] == "slurmgpu tier=P1 kind=finetune"
    assert job["Comment"] == "exp 7 tier=P1 kind=finetune"
    # nothing named: the default tier, the user's own GPU request and time untouched
    jobid = cluster.sbatch("--hold", "--gres=gpu:3", "-t", "5", user=USER)
    job = job_record(cluster, jobid)
    assert (job["QOS"], job["TresPerNode"], job["TimeLimit"]) == (
        "tier_p2",
        stored_gres(slurm_series, "gpu:3"),
        "00:05:00",
    )
    assert job["AdminComment"] == "slurmgpu tier=P2"
    assert job["Requeue"] == "1"  # P2 is requeued when preempted: made requeueable
    # a kind's slice goes next to a non-GPU --gres, and -A is matched case-insensitively
    jobid = cluster.sbatch("--hold", "-A", "PROD", "--comment=tier=P0 kind=inference", user=PROD)
    assert job_record(cluster, jobid)["QOS"] == "tier_p0"
    proc = cluster.run(
        ["sbatch", "--hold", "--no-requeue", "--wrap", "true"], check=False, user=USER
    )
    assert proc.returncode != 0
    assert "slurmgpu: tier P2 jobs are requeued when preempted: --no-requeue" in proc.stderr
    # with the settings in place the plan no longer warns about slurm.conf
    plan = slurmgpu(cluster, "qos", "plan", "--policy", str(POLICY))
    assert plan.stderr == "" and "nothing to do" in plan.stdout
    cluster.scancel_all()


def test_unauthorised_p0_is_refused_with_the_allowed_tiers(routed_cluster):
    cluster = routed_cluster
    proc = cluster.run(["sbatch", "--qos=tier_p0", "--wrap", "true"], check=False, user=RND)
    assert proc.returncode != 0
    assert (
        f"sbatch: error: slurmgpu: tier P0 is not allowed for user {RND} (account rnd); "
        "allowed tiers: P1, P2"
    ) in proc.stderr
    proc = cluster.run(["sbatch", "--comment=tier=P9", "--wrap", "true"], check=False, user=RND)
    assert proc.returncode != 0
    assert "slurmgpu: unknown tier 'P9': use P0, P1, P2" in proc.stderr
    cluster.scancel_all()


def update(cluster, user: str, jobid: int, *settings: str):
    """`scontrol update JobId=N SETTINGS` as `user` (the completed process)."""
    return cluster.run(["scontrol", "update", f"JobId={jobid}", *settings], check=False, user=user)


def test_updates_as_an_ordinary_user_hold_the_tiers(routed_cluster):
    cluster = routed_cluster
    p1 = cluster.sbatch("--hold", "--comment=exp tier=P1 kind=finetune", user=RND)
    # raising to a tier the owner may not use is refused, by QOS or by the comment's tag
    assert update(cluster, RND, p1, "QOS=tier_p0").returncode != 0
    assert update(cluster, RND, p1, "Comment=tier=P0").returncode != 0
    assert job_record(cluster, p1)["QOS"] == "tier_p1"
    # ordinary updates no longer fail on AdminComment
    proc = update(cluster, RND, p1, "Comment=exp 8 tier=P1 kind=finetune")
    assert proc.returncode == 0, proc.stderr
    assert job_record(cluster, p1)["Comment"] == "exp 8 tier=P1 kind=finetune"
    # QOS= (empty): slurmctld would reset it to the association default (normal); the job
    # goes to the default tier instead, and the comment's tag records the move
    proc = update(cluster, RND, p1, "QOS=")
    assert proc.returncode == 0, proc.stderr
    job = job_record(cluster, p1)
    assert job["QOS"] == "tier_p2" and job["Comment"] == "exp 8 tier=P2 kind=finetune"
    assert job["AdminComment"] == "slurmgpu tier=P1 kind=finetune"  # the decision at submission
    assert job["Requeue"] == "1"
    # a QOS that is no tier's lands in the default tier too; Requeue=0 is refused in P2
    proc = update(cluster, RND, p1, "QOS=normal")
    assert proc.returncode == 0, proc.stderr
    assert job_record(cluster, p1)["QOS"] == "tier_p2"
    assert update(cluster, RND, p1, "Requeue=0").returncode != 0
    assert job_record(cluster, p1)["Requeue"] == "1"
    # the owner may go back up to a tier they may use, and down again
    assert update(cluster, RND, p1, "QOS=tier_p1").returncode == 0
    assert job_record(cluster, p1)["QOS"] == "tier_p1"
    proc = update(cluster, RND, p1, "QOS=tier_p2")
    assert proc.returncode == 0, proc.stderr
    assert job_record(cluster, p1)["QOS"] == "tier_p2"
    # another user cannot touch the job at all (Slurm's own rule)
    assert update(cluster, USER, p1, "QOS=tier_p2").returncode != 0
    # root's update also refreshes the AdminComment record
    proc = update(cluster, "root", p1, "QOS=tier_p1")
    assert proc.returncode == 0, proc.stderr
    job = job_record(cluster, p1)
    assert job["AdminComment"] == "slurmgpu tier=P1 kind=finetune"
    assert job["Comment"] == "exp 8 tier=P1 kind=finetune"
    # a P2 user's QOS= stays in P2
    p2 = cluster.sbatch("--hold", user=USER)
    assert update(cluster, USER, p2, "QOS=").returncode == 0
    assert job_record(cluster, p2)["QOS"] == "tier_p2"
    assert update(cluster, USER, p2, "QOS=tier_p1").returncode != 0
    cluster.scancel_all()


UNITS = 10  # seconds of work each victim must finish, one unit per second
ROUNDS = 2  # P0 preempts every victim this many times

# One unit of work per second; the progress file is the checkpoint a rerun resumes from.
WORK = """
work() {
  n=$(cat "$1" 2>/dev/null || echo 0)
  while [ "$n" -lt UNITS ]; do
    sleep 1
    n=$((n + 1))
    echo "$n" > "$1.tmp" && mv "$1.tmp" "$1"
  done
}
""".replace("UNITS", str(UNITS))


def victim_scripts(work_dir: Path) -> dict[str, tuple[list[str], str]]:
    """The job shapes people run: {name: (sbatch options, script)}; 8 GPUs in all."""
    prog = f"{work_dir}/prog-$SLURM_JOB_NAME${{SLURM_ARRAY_TASK_ID:+-$SLURM_ARRAY_TASK_ID}}"
    # "done" is decided from the checkpoint, never from a step's exit status (docs/policy.md):
    # a step stopped by SIGTERM may return 0 and the script may run one more command
    done = f'[ "$(cat {prog})" -ge {UNITS} ] && echo "DONE $(cat {prog})" >> {prog}.done'
    head = f"#!/bin/sh\n{WORK}\nP={prog}\n"
    return {
        # the work in an srun step
        "steps": (["--gres=gpu:2"], head + f"srun sh -c '{WORK} work $0' \"$P\"\n{done}\n"),
        # the work in the batch script itself, no steps
        "nosteps": (["--gres=gpu:2"], head + f'work "$P"\n{done}\n'),
        # a step that traps SIGTERM and exits 0 (the batch script then goes on)
        "trapexit": (
            ["--gres=gpu:1"],
            head + f'srun sh -c \'trap "exit 0" TERM; {WORK} work $0\' "$P"\n{done}\n',
        ),
        # a script whose SIGTERM handler (a slow checkpoint) overruns the grace: SIGKILL
        "slowstop": (["--gres=gpu:1"], head + f"trap 'sleep 60' TERM\nwork \"$P\"\n{done}\n"),
        # a job array of two tasks
        "array": (["--gres=gpu:1", "--array=0-1"], head + f'work "$P"\n{done}\n'),
    }


def progress(work_dir: Path, name: str) -> int:
    try:
        return int((work_dir / f"prog-{name}").read_text().strip() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def user_job_ids(cluster, user: str, names: list[str]) -> dict[str, int]:
    """{name or name-task: job id} of `user`'s pending/running jobs, once all `names` show."""
    deadline = time.monotonic() + 30
    while True:
        out = cluster.run(["squeue", "-h", "-u", user, "-o", "%A %j %K"]).stdout
        ids = {}
        for line in out.splitlines():
            jobid, name, task = line.split()
            ids[name if task in ("N/A", "") else f"{name}-{task}"] = int(jobid)
        if sorted(ids) == sorted(names) or time.monotonic() > deadline:
            return ids
        time.sleep(0.25)


def test_preempted_p2_jobs_of_every_shape_requeue_and_finish(routed_cluster):
    """P0 preempts P2 jobs of every shape (srun steps, no steps, a step that exits 0 on
    SIGTERM, a 2-task array) twice, and in the second round also a script whose SIGTERM
    handler overruns the grace; each is requeued every time and finishes its work."""
    cluster = routed_cluster
    work = cluster.work_dir / "preempt"
    work.mkdir(mode=0o1777)
    work.chmod(0o1777)
    shapes = victim_scripts(work)

    def submit(name: str) -> None:
        options, script = shapes[name]
        out = str(work / f"{name}-%A_%a.out")
        cluster.sbatch("-J", name, "-o", out, *options, script=script, user=USER)

    for name in ("steps", "nosteps", "trapexit", "array"):
        submit(name)
    names = ["steps", "nosteps", "trapexit", "array-0", "array-1"]
    preempted = dict.fromkeys([*names, "slowstop"], 0)
    delays = []
    for round_ in range(1, ROUNDS + 1):
        if round_ == 2:  # round 1 measures victims that stop at once, round 2 the slow one
            submit("slowstop")
            names.append("slowstop")
        ids = user_job_ids(cluster, USER, names)
        assert sorted(ids) == sorted(names), ids
        for name in names:
            cluster.wait_job_state(ids[name], "RUNNING", timeout=60)
        # every victim has done some work in this run (so a rerun resumes, not restarts)
        floor = {n: progress(work, n) for n in names}
        deadline = time.monotonic() + 30
        while any(progress(work, n) <= floor[n] for n in names):
            assert time.monotonic() < deadline, {n: progress(work, n) for n in names}
            time.sleep(0.25)
        assert all(progress(work, n) < UNITS for n in names)
        submitted = time.monotonic()
        p0 = cluster.sbatch(
            "--comment=tier=P0 kind=training", script="#!/bin/sh\nsleep 2\n", user=PROD
        )
        cluster.wait_job_state(p0, "RUNNING", timeout=GRACE_S + 30)
        delays.append(time.monotonic() - submitted)
        for name in names:
            preempted[name] += 1
            record = job_record(cluster, ids[name])
            assert record["JobState"] == "PENDING", (name, record["JobState"])
            assert record["Restarts"] == str(preempted[name]), (name, record["Restarts"])
        cluster.wait_job_state(p0, "COMPLETED", timeout=60)
        # a requeued job waits ~2 min (BeginTime); its owner may start it now
        for name in names:
            proc = update(cluster, USER, ids[name], "StartTime=now")
            # an array task may already have started: the update of its sibling task (same
            # array) released it too, and Slurm then says it is no longer pending (seen on 24.11)
            started = "no longer pending" in proc.stderr
            assert proc.returncode == 0 or started, proc.stderr
    ids = user_job_ids(cluster, USER, names)
    for name in names:
        cluster.wait_job_state(ids[name], "COMPLETED", timeout=UNITS + 60)
    # nothing lost: every job finished all its work exactly once, after every preemption
    for name in names:
        assert progress(work, name) == UNITS, name
        assert (work / f"prog-{name}.done").read_text() == f"DONE {UNITS}\n", name
        jobid = str(ids[name])

        def runs_of(rows, jobid=jobid):
            # `sacct -j` of an array's first task also lists its other tasks
            return [r for r in rows if r["JobIDRaw"] == jobid]

        rows = cluster.wait_sacct(
            ids[name],
            lambda rows, runs_of=runs_of: "COMPLETED" in [r["State"] for r in runs_of(rows)],
            timeout=60,
            fields="JobID,JobIDRaw,State,QOS",
        )
        states = sorted(r["State"] for r in runs_of(rows))
        assert states == ["COMPLETED"] + ["PREEMPTED"] * preempted[name], (name, states)
        assert {r["QOS"] for r in runs_of(rows)} == {"tier_p2"}
    assert sum(preempted.values()) == 11
    print(f"P0 start delays (s): {', '.join(f'{d:.1f}' for d in delays)}")
    # P0 starts at once when the victims stop on SIGTERM, and within the grace (KillWait)
    # + a few seconds when one overruns it
    assert delays[0] <= 5, delays
    assert delays[1] <= GRACE_S + 5, delays
    cluster.scancel_all()


def test_wrapper_finetune_lands_with_slice_qos_and_partition(routed_cluster, slurm_series):
    cluster = routed_cluster
    script = cluster.work_dir / "finetune.sh"  # readable by the user who submits it
    script.write_text("#!/bin/sh\n#SBATCH -J lora-7b\n#SBATCH --time=7\nsleep 30\n")
    proc = slurmgpu(
        cluster,
        "submit",
        "--tier",
        "P1",
        "--kind",
        "finetune",
        "--policy",
        str(POLICY),
        "--hold",
        "--",
        str(script),
        sbatch_as=RND,
    )
    jobid = int(re.search(r"Submitted batch job (\d+)", proc.stdout).group(1))
    job = job_record(cluster, jobid)
    assert job["QOS"] == "tier_p1"
    assert job["TresPerNode"] == stored_gres(slurm_series, "shard:2")
    assert job["Partition"] == "gpu"
    assert job["JobName"] == "lora-7b"  # the script's #SBATCH lines still count
    assert job["TimeLimit"] == "00:07:00"  # ... and win over the kind's 12 h
    assert job["AdminComment"] == "slurmgpu tier=P1 kind=finetune"
    assert job["UserId"].startswith(f"{RND}(")
    # --gpu-mem picks the smallest live slice: a quarter H100 (one of 4 shards) holds 10G
    proc = slurmgpu(cluster, "submit", "--gpu-mem", "10G", "--dry-run", "--", str(script))
    assert "--gres=shard:1" in proc.stdout.split()
    proc = slurmgpu(cluster, "submit", "--gpu-mem", "30G", "--dry-run", "--", str(script))
    assert "--gres=shard:2" in proc.stdout.split()
    cluster.scancel_all()
