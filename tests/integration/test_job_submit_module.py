"""A site's own job_submit.lua that requires `gen-job-submit --module` (tests/data/tiers/
site-job_submit.lua: a default account, routing of long jobs, a 2-day limit, 30 minutes in
short) on the real cluster: the site's rules keep working, check what a job kind fills in,
and the tiers hold; a missing module leaves slurmctld up. And the partition PriorityTier
rule (#20): a lower tier's job cannot use a partition of a higher PriorityTier, where Slurm
would start it ahead of waiting higher-tier jobs."""

from __future__ import annotations

import pytest

from tests.integration.test_tiers import (
    EXTRA_CONF,
    GRES_CONF,
    NODE_LINE,
    POLICY,
    PROD,
    RND,
    USER,
    job_record,
    slurmgpu,
    update,
)

SITE_SCRIPT = POLICY.parent / "site-job_submit.lua"
# POLICY's tiers, with kinds whose limits the site script caps lower (3 days; 2 h in short)
MODULE_POLICY = POLICY.parent / "policy-module.toml"
SITE_USER = "sgt-site"
PARTITIONS = [
    "PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1",
    "PartitionName=long Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=1",
    "PartitionName=urgent Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=10",
    "PartitionName=short Nodes=ALL MaxTime=30 State=UP PriorityTier=1",
]


@pytest.fixture(scope="module")
def site_cluster(slurm_cluster):
    """test_tiers.py's accounts and users (prod, rnd, the harness account), and sgt-site,
    whose default is the harness account and who may charge rnd (the site's rule does)."""
    cluster = slurm_cluster
    module = cluster.conf_dir / "slurmgpu_tiers.lua"
    try:
        cluster.sacctmgr("add", "account", "prod,rnd", "Description=tier tests", check=False)
        cluster.sacctmgr("add", "user", "root", "account=prod,rnd", check=False)
        cluster.add_user(PROD, account="prod")  # idempotent: test_tiers.py adds them too
        cluster.add_user(RND, account="rnd")
        cluster.add_user(USER)
        cluster.add_user(SITE_USER)
        cluster.sacctmgr("add", "user", SITE_USER, "account=rnd", check=False)
        log = str(cluster.root / "site-qos.jsonl")
        slurmgpu(cluster, "qos", "apply", "--policy", str(POLICY), "--log", log, ok=(0, 3))
        make_module(cluster, module)
        with_site_script(cluster)
        yield cluster
    finally:
        cluster.scancel_all()
        module.unlink(missing_ok=True)
        cluster.reset()
        # test_tiers.py starts from no tier QOS (its first test creates them)
        cluster.sacctmgr("delete", "qos", "tier_p0,tier_p1,tier_p2", check=False)


def make_module(cluster, module):
    made = slurmgpu(
        cluster, "gen-job-submit", "--module", "--policy", str(MODULE_POLICY), "--check",
        "-o", str(module), check=False,
    )  # fmt: skip
    assert made.returncode in (0, 3), made.stderr  # 3: written (docs/acting.md)
    assert f"slurmgpu: {module}: checked: luac5.1 -p, dry run in" in made.stderr, made.stderr


def with_site_script(cluster):
    cluster.reconfigure(
        node_line=NODE_LINE,
        gres_conf=GRES_CONF,
        extra_conf=EXTRA_CONF,
        partitions=PARTITIONS,
        job_submit_lua=SITE_SCRIPT.read_text(),
    )


def sbatch(cluster, user, *args):
    return cluster.run(["sbatch", "--hold", *args, "--wrap", "true"], check=False, user=user)


def jobid_of(proc) -> int:
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.split()[-1])


def test_site_rules_keep_working_with_the_module(site_cluster):
    cluster = site_cluster
    assert "site job_submit.lua loaded with slurmgpu tiers" in cluster.log_tail("slurmctld", 400)
    # site rule 1 (default account rnd) runs first, so the tiers see account rnd: P1 allowed
    job = job_record(cluster, jobid_of(sbatch(cluster, SITE_USER, "--comment=tier=P1")))
    assert (job["Account"], job["QOS"]) == ("rnd", "tier_p1")
    assert job["AdminComment"] == "slurmgpu tier=P1"
    # site rule 2: a 2-day job lands in long; the kind's partition does not override it
    job = job_record(cluster, jobid_of(sbatch(cluster, USER, "-t", "2-00:00:00")))
    assert (job["Partition"], job["QOS"]) == ("long", "tier_p2")
    job = job_record(cluster, jobid_of(sbatch(cluster, USER, "--comment=kind=finetune")))
    assert (job["Partition"], job["TimeLimit"]) == ("gpu", "12:00:00")
    # site rule 3: over 2 days is refused with the site's message, before any tier rule
    proc = sbatch(cluster, USER, "-t", "3-00:00:00")
    assert proc.returncode != 0 and "site: the longest job allowed here is 2 days" in proc.stderr
    proc = update(cluster, "root", job_record(cluster, jobid_of(sbatch(cluster, USER)))["JobId"],
                  "TimeLimit=3-00:00:00")  # fmt: skip
    assert proc.returncode != 0
    cluster.scancel_all()


def test_the_site_rules_check_what_a_kind_fills_in(site_cluster):
    """#33: the module filled a kind's partition and time limit after the site's rules had
    checked the job (kind=training got 3 days past the 2-day cap, a kind routed to a
    30-minute partition got 2 hours). `fill` runs before the site's rules, and never
    fills above the partition's MaxTime."""
    cluster = site_cluster
    proc = sbatch(cluster, USER, "--comment=kind=training")
    assert proc.returncode != 0, proc.stdout
    assert "site: the longest job allowed here is 2 days" in proc.stderr
    job = job_record(cluster, jobid_of(sbatch(cluster, USER, "--comment=kind=quick")))
    assert (job["Partition"], job["TimeLimit"], job["QOS"]) == ("short", "00:30:00", "tier_p2")
    # what the user asks is still judged by the site: 2 h in short is refused
    proc = sbatch(cluster, USER, "--comment=kind=quick", "-t", "2:00:00")
    assert proc.returncode != 0 and "site: short jobs run 30 minutes at most" in proc.stderr
    # and the tiers still hold on the filled jobs
    proc = sbatch(cluster, RND, "--qos=tier_p0", "--comment=kind=quick")
    assert proc.returncode != 0 and "slurmgpu: tier P0 is not allowed" in proc.stderr
    cluster.scancel_all()


def test_the_tiers_hold_through_the_module(site_cluster):
    cluster = site_cluster
    proc = sbatch(cluster, RND, "--qos=tier_p0")
    assert proc.returncode != 0
    assert (
        f"slurmgpu: tier P0 is not allowed for user {RND} (account rnd); allowed tiers: P1, P2"
        in proc.stderr
    )
    proc = sbatch(cluster, USER, "--no-requeue")
    assert "slurmgpu: tier P2 jobs are requeued when preempted" in proc.stderr
    p2 = jobid_of(sbatch(cluster, USER))
    job = job_record(cluster, p2)
    assert (job["QOS"], job["AdminComment"], job["Requeue"]) == ("tier_p2", "slurmgpu tier=P2", "1")
    # updates go through the module's job_modify: no escape from the tiers
    assert update(cluster, USER, p2, "QOS=").returncode == 0
    assert job_record(cluster, p2)["QOS"] == "tier_p2"
    assert update(cluster, USER, p2, "QOS=tier_p1").returncode != 0
    p0 = jobid_of(sbatch(cluster, PROD, "--comment=tier=P0 kind=inference"))
    assert job_record(cluster, p0)["QOS"] == "tier_p0"
    cluster.scancel_all()


def test_a_missing_module_leaves_slurmctld_up_and_refuses_jobs(site_cluster):
    """#33: a bare `require` of a missing slurmgpu_tiers.lua stopped slurmctld from starting.
    The site script's guarded require keeps it up: the site's rules still answer, every job
    the tiers cannot check is refused with a user message, and each refusal is logged as an
    error."""
    cluster = site_cluster
    module = cluster.conf_dir / "slurmgpu_tiers.lua"
    module.unlink()
    try:
        with_site_script(cluster)  # restarts slurmctld: it must come up
        assert "slurmgpu_tiers.lua did not load" in cluster.log_tail("slurmctld", 400)
        refusal = "job_submit.lua: slurmgpu_tiers.lua did not load, job refused"

        def refusals() -> int:  # slurm.log_error's lines in the log file
            lines = cluster.log_tail("slurmctld", 2000).split("--- slurmctld stdout")[0]
            return sum(1 for line in lines.splitlines() if "error:" in line and refusal in line)

        before = refusals()
        for _ in range(2):
            proc = sbatch(cluster, USER, "--comment=kind=quick")
            assert proc.returncode != 0, proc.stdout
            assert "the tier rules are not loaded; job refused" in proc.stderr
        assert refusals() == before + 2, cluster.log_tail("slurmctld", 60)  # each time
        # the site's own rules still run (and answer first)
        proc = sbatch(cluster, USER, "-t", "3-00:00:00")
        assert "site: the longest job allowed here is 2 days" in proc.stderr
    finally:
        cluster.scancel_all()
        make_module(cluster, module)
        with_site_script(cluster)


def test_no_lower_tier_job_through_a_higher_priority_tier_partition(site_cluster):
    """The #20 gap: P1 waits in gpu (PriorityTier 1) for a full node; a P2 job in urgent
    (PriorityTier 10) would be scheduled before it. It is refused at submission and by
    update; P0 (the first tier) may use urgent; the waiting P1 job starts first."""
    cluster = site_cluster
    blocker = cluster.sbatch("--gres=gpu:8", "--comment=tier=P1", "-A", "rnd",
                             script="#!/bin/sh\nsleep 6\n", user=RND)  # fmt: skip
    cluster.wait_job_state(blocker, "RUNNING", timeout=60)
    waiting = cluster.sbatch("--gres=gpu:8", "--comment=tier=P1", "-A", "rnd", user=RND)
    for partition in ("urgent", "gpu,urgent"):
        proc = cluster.run(
            ["sbatch", "-p", partition, "--gres=gpu:8", "--wrap", "true"], check=False, user=USER
        )
        assert proc.returncode != 0, proc.stdout
        assert (
            "slurmgpu: partition urgent has PriorityTier=10, above partition gpu's 1: Slurm "
            "would start this tier P2 job ahead of waiting jobs of higher tiers; only tier P0 "
            "jobs may use it"
        ) in proc.stderr
    # a P2 job that asks for the gpu partition cannot be moved there either
    p2 = cluster.sbatch("--gres=gpu:8", user=USER)
    assert update(cluster, USER, p2, "Partition=urgent").returncode != 0
    assert job_record(cluster, p2)["Partition"] == "gpu"
    # the first tier may: its jobs are ahead of everyone's anyway
    p0 = jobid_of(sbatch(cluster, PROD, "-p", "urgent", "--comment=tier=P0"))
    assert job_record(cluster, p0)["Partition"] == "urgent"
    cluster.run(["scancel", str(p0)])
    # when the blocker ends, the waiting P1 job (not the P2 one) gets the node
    cluster.wait_job_state(waiting, "RUNNING", timeout=60)
    assert cluster.job_state(p2) == "PENDING"
    cluster.scancel_all()


def test_without_the_rule_slurm_starts_the_lower_tier_first(site_cluster):
    """Why the rule exists, shown on the same cluster without job_submit.lua: P1 waits in gpu
    (PriorityTier 1), a P2 job in urgent (PriorityTier 10) arrives later, and when the node
    frees Slurm starts the P2 job, although the P1 job's QOS priority is higher."""
    cluster = site_cluster
    cluster.reconfigure(
        node_line=NODE_LINE, gres_conf=GRES_CONF, extra_conf=EXTRA_CONF, partitions=PARTITIONS
    )
    blocker = cluster.sbatch("--gres=gpu:8", "--qos=tier_p1", "-A", "rnd",
                             script="#!/bin/sh\nsleep 5\n", user=RND)  # fmt: skip
    cluster.wait_job_state(blocker, "RUNNING", timeout=60)
    waiting = cluster.sbatch("--gres=gpu:8", "--qos=tier_p1", "-A", "rnd", "-p", "gpu",
                             script="#!/bin/sh\nsleep 30\n", user=RND)  # fmt: skip
    late = cluster.sbatch("--gres=gpu:8", "--qos=tier_p2", "-p", "urgent",
                          script="#!/bin/sh\nsleep 30\n", user=USER)  # fmt: skip
    cluster.wait_job_state(late, "RUNNING", timeout=60)
    assert cluster.job_state(waiting) == "PENDING"
    cluster.scancel_all()
