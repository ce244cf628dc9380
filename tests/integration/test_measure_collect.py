"""`slurmgpu collect` on the real 22.05 cluster: a job's Epilog stores its summary, and the
collector source reads it back from live sacct (AdminComment) and from the spool.

Before the job runs (it is submitted held), two collector passes sample the pynvml double
with processes of that job (the recorded host tree maps their PIDs to `job_<id>` through
cgroup v2 paths), so the state file holds the job's running summary. slurmd then runs the
real `Epilog=` script, `slurmgpu collect --epilog`, with Slurm's own environment
(SLURM_JOB_ID, SLURM_JOB_GPUS...). The job's AdminComment already holds a tier decision
record, which must survive.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from slurmgpu.accounting import AnalysisOptions, analyze
from slurmgpu.measure.jobstats import JobstatsSource
from slurmgpu.measure.summary import CollectorSource, decode, tokens
from slurmgpu.model.measure import RunRef
from tests.doubles.machines import machine, subprocess_env
from tests.harness import SlurmCluster
from tests.harness.cluster import CommandFailed

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TIER = "slurmgpu tier=P1 kind=finetune"
PIDS = (31001, 31002)  # the job's processes on GPU 0 and GPU 1


def host_tree(root: Path, job_id: int | str) -> Path:
    """The host tree of the job's two processes; `job_id` a job id (`job_<id>` cgroups) or a
    SLUID (26.05's cgroup names without CgroupJobIdPaths=yes)."""
    name = job_id if str(job_id).startswith("s") else f"job_{job_id}"
    for pid in PIDS:
        proc = root / "proc" / str(pid)
        proc.mkdir(parents=True)
        (proc / "cgroup").write_text(f"0::/system.slice/slurmstepd.scope/{name}/step_0\n")
        (proc / "status").write_text(f"Name:\tpython3\nPid:\t{pid}\nUid:\t0\t0\t0\t0\n")
    (root / "etc").mkdir()
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    return root


def loaded_machine(path: Path, util: tuple[int, int], energy_pass: int = 0) -> Path:
    data = machine("dgx-h100")
    for gpu, pid, pct, mem in zip(data["gpus"], PIDS, util, (30000, 4000), strict=False):
        gpu["processes"] = [{"pid": pid, "used_memory_mib": mem}]
        gpu["utilization"] = {"gpu": pct, "memory": 0}
    for gpu in data["gpus"]:  # NVML's energy counter, `energy_pass` passes on
        gpu["total_energy_mj"] = counter_mj(gpu["minor_number"], energy_pass)
    path.write_text(json.dumps(data))
    return path


def counter_mj(minor: int, energy_pass: int) -> int:
    """GPU `minor`'s energy counter at a pass: it draws (minor + 1) x 100 kJ between passes."""
    return 10**9 + minor * 10**6 + energy_pass * (minor + 1) * 100_000_000


def collector(*args: str, machine_file: Path | None = None, env=None) -> str:
    argv = [sys.executable, "-m", "slurmgpu", "collect", *args]
    proc = subprocess.run(
        argv,
        env=env or subprocess_env(machine_file),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def epilog_cluster(slurm_cluster: SlurmCluster, tmp_path_factory):
    work = tmp_path_factory.mktemp("collect")
    paths = {k: work / k for k in ("state.json", "spool", "epilog.log", "epilog.sh")}
    script = paths["epilog.sh"]
    script.write_text(
        "#!/bin/sh\n"
        f"export SLURM_CONF={slurm_cluster.slurm_conf}\n"
        f"export PYTHONPATH={ROOT}\n"  # the code under test, not whatever is installed
        f"{sys.executable} -m slurmgpu collect --epilog --state {paths['state.json']} "
        f"--spool {paths['spool']} --node gpu01 --log-file {paths['epilog.log']} || true\n"
        "exit 0\n"
    )
    script.chmod(0o755)
    slurm_cluster.reconfigure(extra_conf=f"Epilog={script}")
    try:
        yield slurm_cluster, paths
    finally:
        slurm_cluster.reset()


def sacct_run(c: SlurmCluster, job_id: int) -> RunRef:
    """The allocation row of live sacct as the accounting stage hands it to sources."""
    [row] = [
        r
        for r in c.sacct_rows(job_id, "JobIDRaw,Cluster,Start,End,NodeList,AdminComment")
        if r["JobIDRaw"] == str(job_id)
    ]

    def utc(text: str) -> datetime:
        return datetime.fromisoformat(text).astimezone(UTC).replace(tzinfo=None)

    return RunRef(
        row["JobIDRaw"], row["Cluster"], utc(row["Start"]), utc(row["End"]), row["NodeList"],
        3, row["AdminComment"],
    )  # fmt: skip


def test_epilog_stores_the_summary_where_sacct_and_the_spool_give_it_back(epilog_cluster, tmp_path):
    c, paths = epilog_cluster
    job = c.sbatch(
        "--hold", "--gres=gpu:3", "-o", "collect-%j.out",
        script='#!/bin/sh\necho "GPUS=$SLURM_JOB_GPUS"\nsleep 1\n',
    )  # fmt: skip
    c.scontrol("update", f"JobId={job}", f"AdminComment={TIER}")
    tree = host_tree(tmp_path / "host", job)
    common = ["--state", str(paths["state.json"]), "--host-root", str(tree), "--node", "gpu01"]
    out = collector(*common, machine_file=loaded_machine(tmp_path / "m1.json", (90, 30)))
    assert f"jobs: {job}" in out
    collector(*common, machine_file=loaded_machine(tmp_path / "m2.json", (70, 10), 1))

    c.scontrol("release", str(job))
    c.wait_job_state(job, "COMPLETED", timeout=60)
    rows = c.wait_sacct(
        job,
        lambda rows: any("sg1:" in r.get("AdminComment", "").lower() for r in rows),
        timeout=60,
        fields="JobIDRaw,AdminComment",
    )
    comment = next(r["AdminComment"] for r in rows if r["JobIDRaw"] == str(job))
    # the tier record is kept; sacctmgr 22.05 lower-cases the whole value (tier=p1)
    assert comment.lower().startswith(TIER.lower() + " sg1:"), comment

    allocated = {
        int(x)
        for x in (c.work_dir / f"collect-{job}.out").read_text().split("GPUS=")[1].split()[0]
        .split(",")
    }  # fmt: skip
    idle = allocated - {0, 1}  # GPUs the job held without a process on them: 0 %
    [token] = tokens(comment)
    summary = decode(token)
    assert (summary.job, summary.node, summary.samples) == (str(job), "gpu01", 2)
    assert {g.minor for g in summary.gpus} == {0, 1} | idle

    run = sacct_run(c, job)
    [measure] = CollectorSource().measures([run])
    expected_util = (80 + 20 + 0 * len(idle)) / (2 + len(idle))
    assert measure.util_mean_pct == pytest.approx(expected_util, abs=0.01)
    assert (measure.gpus_measured, measure.mem_used_max_mib) == (2 + len(idle), 30000)
    assert measure.gpu_memory_mib == pytest.approx(81559, abs=1)
    # energy: each GPU's counter growth between the two passes, held GPUs included
    held = {0, 1} | idle
    expected_j = sum(counter_mj(g, 1) - counter_mj(g, 0) for g in held) / 1000
    assert measure.energy_j == pytest.approx(expected_j, rel=0.01)
    assert not measure.energy_estimated
    # `analyze` of the live history over the job's run: its energy, measured for every
    # GPU-hour of the window
    since = run.start.replace(tzinfo=UTC)
    until = run.end.replace(tzinfo=UTC) + timedelta(seconds=1)
    opts = AnalysisOptions(since=since, until=until, env=c.env, measure_sources=[CollectorSource()])
    energy = analyze(opts).to_json()["energy"]
    assert energy["coverage"] == 1.0
    assert energy["kwh"] == pytest.approx(expected_j / 3.6e6, rel=0.01)

    # the same summary from the spool alone (a site that keeps AdminComment for jobstats)
    spooled = list((paths["spool"] / c.cluster_name).glob(f"{job}.gpu01.*.sg1"))
    assert len(spooled) == 1
    bare = RunRef(run.job_id, run.cluster, run.start, run.end, run.nodes, run.gpus, "")
    assert CollectorSource(paths["spool"]).measures([bare]) == [measure]
    state = json.loads(paths["state.json"].read_text())
    assert str(job) not in state["jobs"]  # the epilog took the job out of the state

    # a multi-node job: two more nodes' epilogs store at the same moment; each reads,
    # merges and reads back, so no node's summary is lost to the other's write
    machine_file = loaded_machine(tmp_path / "m3.json", (50, 50))
    epilogs = []
    for node in ("gpu02", "gpu03"):
        state_file = tmp_path / f"{node}.json"
        collector("--state", str(state_file), "--host-root", str(tree), "--node", node,
                  machine_file=machine_file)  # fmt: skip
        env = dict(os.environ) | c.env | {
            "SLURM_JOB_ID": str(job), "SLURM_CLUSTER_NAME": c.cluster_name,
        }  # fmt: skip
        argv = [sys.executable, "-m", "slurmgpu", "collect", "--epilog", "--state",
                str(state_file), "--node", node, "--log-file", str(tmp_path / "e.log")]  # fmt: skip
        epilogs.append(subprocess.Popen(argv, env=env))
    assert [p.wait(timeout=120) for p in epilogs] == [0, 0]
    rows = c.sacct_rows(job, "JobIDRaw,AdminComment")
    comment = next(r["AdminComment"] for r in rows if r["JobIDRaw"] == str(job))
    assert comment.lower().startswith(TIER.lower() + " sg1:"), comment
    nodes = sorted(decode(t).node for t in tokens(comment))
    assert nodes == ["gpu01", "gpu02", "gpu03"], (tmp_path / "e.log").read_text()


def test_sacctmgr_lower_cases_admin_comment_so_base64_cannot_survive(epilog_cluster, slurm_series):
    """The premise of SG1's base32: once a job has ended, only `sacctmgr modify job` can set
    its AdminComment, and Slurm 22.05's sacctmgr stores the value lower-cased. A jobstats
    `JS1:` value (base64) stored that way is unreadable; the jobstats source says so.
    24.11 and 25.11 keep the case (seen on their test clusters): the value is stored as
    given and the source does not call it lower-cased."""
    c, _ = epilog_cluster
    job = c.sbatch("--gres=gpu:1", script="#!/bin/sh\ntrue\n")
    c.wait_job_state(job, "COMPLETED", timeout=60)
    refused = c.run(["scontrol", "update", f"JobId={job}", "AdminComment=x"], check=False)
    assert refused.returncode != 0 and "already finished" in refused.stderr
    value = "JS1:H4sIAAAAAAAC/6tWSs7PS0lNVrJSMDQwMDAwMFCqBQA"
    c.sacctmgr("modify", "job", "where", f"JobID={job}", "set", f"AdminComment={value}")
    rows = c.wait_sacct(
        job, lambda rows: any(r["AdminComment"] for r in rows), fields="JobIDRaw,AdminComment"
    )
    stored = next(r["AdminComment"] for r in rows if r["JobIDRaw"] == str(job))
    source = JobstatsSource()
    ref = RunRef(str(job), c.cluster_name, None, None, "gpu01", 1, stored)
    measures = source.measures([ref])
    said = " ".join(w.message for w in source.warnings)
    if slurm_series < (24, 11):
        assert stored == value.lower()
        assert measures == [] and "lower-cased" in said
    else:
        assert stored == value
        assert "lower-cased" not in said


def test_analyze_on_live_sacct_shows_what_the_collector_measured(epilog_cluster, tmp_path):
    """The issue's end-to-end claim on 22.05 (which records no GPU use itself): a 1-GPU job
    measured by the collector shows utilization and a fit-to-slice share in `slurmgpu
    analyze` on live sacct, through the CLI a site runs from cron."""
    c, paths = epilog_cluster
    time.sleep(2)  # the window starts after every earlier job of the module has ended
    since = datetime.now(UTC).replace(microsecond=0)
    job = c.sbatch("--hold", "--gres=gpu:1", script="#!/bin/sh\nsleep 1\n")
    tree = tmp_path / "host"
    proc = tree / "proc" / str(PIDS[0])
    proc.mkdir(parents=True)
    (proc / "cgroup").write_text(f"0::/system.slice/slurmstepd.scope/job_{job}/step_0\n")
    (proc / "status").write_text(f"Name:\tpython3\nPid:\t{PIDS[0]}\nUid:\t0\t0\t0\t0\n")
    data = machine("dgx-h100")
    data["gpus"][0]["processes"] = [{"pid": PIDS[0], "used_memory_mib": 6000}]
    data["gpus"][0]["utilization"] = {"gpu": 35, "memory": 0}
    machine_file = tmp_path / "m.json"
    machine_file.write_text(json.dumps(data))
    collector("--state", str(paths["state.json"]), "--host-root", str(tree), "--node", "gpu01",
              machine_file=machine_file)  # fmt: skip
    c.scontrol("release", str(job))
    c.wait_job_state(job, "COMPLETED", timeout=60)
    # the epilog's AdminComment may reach slurmdbd before the job's eligible, start and end
    # times do (a held job's record has no eligible time until then), and `sacct -S -E`, what
    # analyze runs, lists only jobs with one: wait for the whole finished record
    c.wait_sacct(
        job,
        lambda rows: any(
            "sg1:" in r.get("AdminComment", "").lower()
            and r.get("State") == "COMPLETED"
            and all(r.get(k) not in ("", "Unknown", "None") for k in ("Eligible", "Start", "End"))
            for r in rows
            if r.get("JobIDRaw") == str(job)
        ),
        timeout=60,
        fields="JobIDRaw,State,Eligible,Start,End,AdminComment",
    )
    until = datetime.now(UTC).replace(microsecond=0)
    argv = [sys.executable, "-m", "slurmgpu", "analyze", "--format", "json",
            "--since", since.isoformat(), "--until", until.isoformat()]  # fmt: skip
    env = dict(os.environ) | c.env
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["totals"]["jobs"] == 1, doc["totals"]
    assert doc["utilization_basis"]["collector"] == 1
    # one GPU measured at 35% (its only sample); Slurm 22.05 itself measured nothing
    assert doc["utilization_basis"]["slurm_gpuutil"] == 0
    assert doc["totals"]["gpu_util_mean"] == pytest.approx(35.0, abs=0.01)
    fit = doc["fit_fraction"]
    # 6000 MiB of an 81559 MiB H100 (the size the summary carries): fits every slice size
    assert fit["basis_counts"]["measured_gpumem"] == 1
    assert fit["1/2"]["jobs"] == 1.0 and fit["1/7"]["jobs"] == 1.0


ARRAY_TASKS = 100
TASK_PASS = """#!{python}
# one array task: a collector pass that sees this task's process on GPU 0 (utilization = the
# task id, memory = 1000 + the task id), so every task's summary is its own and known
import json, os, subprocess, sys
from pathlib import Path

job, task = os.environ["SLURM_JOB_ID"], int(os.environ["SLURM_ARRAY_TASK_ID"])
work = Path({work!r}) / f"task-{{job}}"
proc = work / "host" / "proc" / "31001"
proc.mkdir(parents=True)
(proc / "cgroup").write_text(f"0::/system.slice/slurmstepd.scope/job_{{job}}/step_0\\n")
(proc / "status").write_text("Name:\\tpython3\\nPid:\\t31001\\nUid:\\t0\\t0\\t0\\t0\\n")
(work / "host" / "etc").mkdir()
(work / "host" / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\\n")
data = json.loads(Path({machine!r}).read_text())
for gpu in data["gpus"]:
    gpu["processes"] = []
data["gpus"][0]["processes"] = [{{"pid": 31001, "used_memory_mib": 1000 + task}}]
data["gpus"][0]["utilization"] = {{"gpu": task, "memory": 0}}
(work / "machine.json").write_text(json.dumps(data))
env = dict(os.environ, PYTHONPATH={pythonpath!r},
           SLURMGPU_FAKE_NVML_MACHINE=str(work / "machine.json"))
subprocess.run([sys.executable, "-m", "slurmgpu", "collect", "--state", {state!r},
                "--host-root", str(work / "host"), "--node", "gpu01"], env=env, check=True)
"""


def test_every_task_of_a_100_task_array_keeps_its_own_summary(epilog_cluster, tmp_path):
    """Issue #20: the epilog wrote `sacctmgr modify job where JobID=<raw id>`; for the array's
    last task the raw id is the array's id, which sacctmgr reads as every task of the array:
    96 of 100 summaries were lost and 97 tasks carried task 100's. Each task now writes its
    own record (`JobID=ARRAY_TASK`), found by its JobIDRaw."""
    c, paths = epilog_cluster
    from tests.doubles.machines import DOUBLES, MACHINES, ROOT

    script = TASK_PASS.format(
        python=sys.executable,
        work=str(tmp_path),
        machine=str(MACHINES / "dgx-h100.json"),
        pythonpath=os.pathsep.join([str(DOUBLES), str(ROOT)]),
        state=str(paths["state.json"]),
    )
    array = c.sbatch(f"--array=0-{ARRAY_TASKS - 1}%10", "-o", "/dev/null", script=script)
    fields = "JobIDRaw,JobID,State,AdminComment"

    def all_done(rows):
        tasks = [r for r in rows if "." not in r["JobID"]]
        return len(tasks) == ARRAY_TASKS and all(
            r["State"] == "COMPLETED" and "sg1:" in r["AdminComment"].lower() for r in tasks
        )

    deadline = time.monotonic() + 900
    rows: list[dict[str, str]] = []
    while not all_done(rows):
        if time.monotonic() > deadline:
            log = paths["epilog.log"].read_text() if paths["epilog.log"].exists() else ""
            raise AssertionError(f"the array's summaries after 900 s: {rows}\n{log[-4000:]}")
        time.sleep(2)
        try:
            rows = c.sacct_rows(array, fields)
        except CommandFailed:  # a busy munged (the machine's, shared): ask again
            continue
    tasks = {r["JobIDRaw"]: r for r in rows if "." not in r["JobID"]}
    assert len(tasks) == ARRAY_TASKS
    seen_tasks = set()
    runs = []
    for raw, row in tasks.items():
        task = int(row["JobID"].split("_")[1])
        [token] = tokens(row["AdminComment"])  # its own summary, and no other task's
        summary = decode(token)
        assert summary.job == raw, (row["JobID"], summary.job)
        [gpu] = summary.gpus
        assert (gpu.minor, gpu.util_mean_pct, gpu.mem_max_mib) == (0, task, 1000 + task), row
        seen_tasks.add(task)
        runs.append(RunRef(raw, c.cluster_name, None, None, "gpu01", 1, row["AdminComment"]))
    assert seen_tasks == set(range(ARRAY_TASKS))
    # and the collector source reads 100 distinct, right measures from them
    measures = {m.job_id: m for m in CollectorSource().measures(runs)}
    assert len(measures) == ARRAY_TASKS
    for raw, row in tasks.items():
        assert measures[raw].util_mean_pct == int(row["JobID"].split("_")[1])


@pytest.mark.slurm_not(
    "22.05", "24.11", fact="jobs show no SLUID before Slurm 25.11 (24.11's scontrol --json: none)"
)
def test_a_cgroup_named_by_the_jobs_sluid_is_that_job(slurm_cluster: SlurmCluster, tmp_path):
    """26.05 names job cgroups by SLUID unless CgroupJobIdPaths=yes: the collector asks this
    release's slurmctld (`scontrol show job --json`) which job a SLUID is."""
    c = slurm_cluster
    job = c.sbatch("--hold", "--gres=gpu:2", script="#!/bin/sh\nsleep 1\n")
    try:
        [record] = json.loads(c.scontrol("show", "job", str(job), "--json"))["jobs"]
        sluid = record.get("sluid") or record["step_id"]["sluid"]  # 26.05 / 25.11
        assert re.fullmatch(r"s[0-9A-HJKMNP-TV-Z]{13}", sluid), sluid
        tree = host_tree(tmp_path / "host", sluid)
        env = subprocess_env(loaded_machine(tmp_path / "m.json", (70, 10))) | c.env
        out = collector("--state", str(tmp_path / "state.json"), "--host-root", str(tree),
                        "--node", "gpu01", env=env)  # fmt: skip
        assert f"jobs: {job}" in out and sluid not in out, out
        state = json.loads((tmp_path / "state.json").read_text())
        assert list(state["jobs"]) == [str(job)]
    finally:
        c.scancel_all()
