"""`slurmgpu mig apply` on the multi-node test cluster (issue #12's acceptance).

Slurm is real (slurmctld, four namespaced slurmds, scontrol, squeue); the GPUs are the pynvml
double. gpu03 is the recorded DGX A100 (GPUs 0-2 in MIG mode, 3-7 whole), described by the
cluster's default gres.conf as eight whole A100s. The admin's command is the real CLI, run as
a subprocess with the node's environment (`MultiNodeCluster.node_env`: its own machine file,
NVML changes written back), its slurmd stop/start and the controller restart set to the
harness's control commands (`MultiNodeCluster.control_command`), as `systemctl` on a site.

- The re-layout: while a job keeps running on gpu01 (it must stay RUNNING throughout and
  complete, never requeued) and a job on gpu03 itself is waited for, gpu03 gets a new layout;
  then jobs asking for the new slices run on gpu03 and see them.
- A failure injected at every step, the way it happens for real: a failing command (scontrol,
  `slurmd -G`, the stop/start/restart commands, through PATH shims and a fail-once wrapper),
  the NVML double returning an error code, a job that outlasts the drain timeout, the
  controller keeping the old Gres on `scontrol reconfigure` (what 22.05 does), and a killed
  `mig apply` followed by `--recover`. Each leaves gpu03 DRAINED with a reason naming the
  step, its gres.conf, slurm.conf and NVML layout as before, and the other nodes untouched.
  One cluster for all cases; each case puts the node back in service.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from slurmgpu.sources.slurmd import check_gres_conf
from slurmgpu.util.hostlist import parse_id_list
from tests.harness.multinode import MultiNodeCluster, device_nodes

pytestmark = pytest.mark.integration
NODE = "gpu03"
OTHERS = ("gpu01", "gpu02", "gpu04")
# GPU 0 stays 7 x 1g.5gb, GPU 1 goes from 2 x 3g.20gb to 7 x 1g.5gb, GPU 2 from MIG to whole,
# GPU 7 from whole to 3 x 2g.10gb + 1 x 1g.5gb: create, destroy, MIG mode off and on
CONFIG = """version: v1
mig-configs:
  relayout:
    - devices: [0, 1]
      mig-enabled: true
      mig-devices:
        "1g.5gb": 7
    - devices: [2, 3, 4, 5, 6]
      mig-enabled: false
    - devices: [7]
      mig-enabled: true
      mig-devices:
        "2g.10gb": 3
        "1g.5gb": 1
"""
MIG_CONF = "GresTypes=gpu"
PREEMPTIBLE = "migp2"  # a QOS the tier policy marks preemptible
NEW_GRES = {("gpu", "a100", 5), ("gpu", "1g.5gb", 15), ("gpu", "2g.10gb", 3)}
# a command that fails once when FAILDIR/NAME exists (then runs normally again)
FAIL_ONCE = """#!/bin/sh
name=$1; shift
if [ -e "{faildir}/$name" ]; then
    rm -f "{faildir}/$name"
    echo "$name: injected failure" >&2
    exit 1
fi
exec "$@"
"""
# scontrol / slurmd shims: fail once when FAILDIR/PROG holds a pattern the arguments match
# (FAILDIR/PROG.skip: do nothing once, successfully, when the arguments match)
SHIM = """#!/bin/sh
f="{faildir}/{prog}"
if [ -e "$f" ] && printf '%s\\n' "$*" | grep -q -e "$(cat "$f")"; then
    rm -f "$f"
    echo "{prog}: error: injected failure ($*)" >&2
    exit 1
fi
if [ -e "$f.skip" ] && printf '%s\\n' "$*" | grep -q -e "$(cat "$f.skip")"; then
    rm -f "$f.skip"
    exit 0
fi
exec {real} "$@"
"""


@dataclass
class Site:
    """gpu03 as its admin sees it, and what the tests compare against."""

    cluster: MultiNodeCluster
    tmp: Path
    faildir: Path
    env: dict[str, str]
    argv: list[str]
    machine_file: Path
    gres_conf: Path

    def apply(self, *extra: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [*self.argv, *extra],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        self.cluster.sync()
        return proc

    def fail(self, name: str, pattern: str = "") -> None:
        (self.faildir / name).write_text(pattern)

    def record(self, name: str = NODE) -> dict[str, str]:
        return self.cluster.node_record(name)


def _gres_set(text: str) -> set[tuple[str, str | None, int]]:
    from slurmgpu.sources.slurm import parse_gres_string

    return {(g.name, g.type, g.count) for g in parse_gres_string(text)}


def layout(machine_file: Path) -> list[tuple[bool, list[tuple[str, int]]]]:
    """The double's MIG state per GPU: mode, and (profile, GPU-instance id) of each slice."""
    gpus = json.loads(machine_file.read_text())["gpus"]
    return [
        (
            bool(g.get("mig_mode", [0])[0]),
            sorted((m["profile"], m["gi_id"]) for m in g.get("mig_devices", [])),
        )
        for g in gpus
    ]


@pytest.fixture(scope="module")
def site(fleet_cluster, tmp_path_factory):
    cluster = fleet_cluster
    tmp = tmp_path_factory.mktemp("mig-apply")
    faildir = tmp / "fail"
    bindir = tmp / "bin"
    faildir.mkdir()
    bindir.mkdir()
    (tmp / "plan.yaml").write_text(CONFIG)
    fail_once = bindir / "fail-once"
    fail_once.write_text(FAIL_ONCE.format(faildir=faildir))
    for prog in ("scontrol", "slurmd"):
        real = shutil.which(prog, path=cluster.node_env(NODE)["PATH"])
        assert real, prog
        (bindir / prog).write_text(SHIM.format(faildir=faildir, prog=prog, real=real))
    for path in bindir.iterdir():
        path.chmod(0o755)
    env = cluster.node_env(NODE)
    clean_path = env["PATH"]
    env["PATH"] = f"{bindir}:{clean_path}"

    def control(action: str, name: str | None = None) -> str:
        # the harness's own commands run with the PATH without shims
        argv = cluster.control_command(action, name)
        return shlex.join([str(fail_once), action, "env", f"PATH={clean_path}", *argv])

    argv = [
        *(sys.executable, "-m", "slurmgpu", "mig", "apply", "--node", NODE),
        *("--config", "relayout", "--config-file", str(tmp / "plan.yaml")),
        *("--gres-conf", str(cluster.conf_dir / "gres.conf")),
        *("--slurm-conf", str(cluster.slurm_conf), "--journal-dir", str(tmp / "journal")),
        *("--host-root", str(cluster.node_host_root(NODE)), "--poll", "0.5"),
        *("--stop-slurmd", control("stop-slurmd", NODE)),
        *("--start-slurmd", control("start-slurmd", NODE)),
        *("--restart-slurmctld", control("restart-slurmctld")),
    ]
    machine_file = cluster.node_host_root(NODE).parent / "machine.json"
    yield Site(cluster, tmp, faildir, env, argv, machine_file, cluster.conf_dir / "gres.conf")
    cluster.reset()  # the default configs and recorded machines for the modules after this


@pytest.fixture(scope="module")
def mig_site(site):
    """The cluster with GresTypes=gpu. 22.05 splits MultipleFiles= (MIG) records into one GPU
    per file once shard is in GresTypes (test_gen_gres.py); then jobs asking for gpu03's
    a100 or 2g.10gb slices got `gpu:2g.10gb:0(IDX:)` here. So mig apply refuses it."""
    site.cluster.reconfigure(extra_conf=MIG_CONF)
    return site


def test_a_controller_with_shard_in_gres_types_is_refused(site) -> None:
    assert "shard" in site.cluster.slurm_conf.read_text().split("GresTypes=")[1].split()[0]
    before = (site.gres_conf.read_text(), layout(site.machine_file))
    proc = site.apply()
    assert proc.returncode == 2, proc.stderr
    assert "GresTypes=gpu,shard: with shard, Slurm splits MIG records" in proc.stderr
    assert (site.gres_conf.read_text(), layout(site.machine_file)) == before
    assert "DRAIN" not in site.record()["State"]


def _job_script(body: str) -> str:
    return "#!/bin/sh\n" + body + "\n"


def _job_field(cluster: MultiNodeCluster, jobid: int, key: str) -> str:
    text = cluster.scontrol("show", "-d", "job", str(jobid))
    m = re.search(rf"\b{key}=(\S*)", text)
    return m.group(1) if m else ""


# -- failures at each step -----------------------------------------------------------------------


def _machine_error(site: Site, gpu: int, call: str, code: str) -> None:
    data = json.loads(site.machine_file.read_text())
    data["gpus"][gpu].setdefault("errors", {})[call] = code
    site.machine_file.write_text(json.dumps(data, indent=1))


def _job_on_node(site: Site) -> int:
    jobid = site.cluster.sbatch("-w", NODE, "--gres=gpu:a100:1", script=_job_script("sleep 300"))
    assert site.cluster.wait_job_state(jobid, "RUNNING", timeout=60) == "RUNNING"
    return jobid


CASES = {
    "drain": dict(shim=("scontrol", "State=DRAIN")),
    "wait_jobs": dict(job=True, args=("--drain-timeout", "2")),
    "stop_slurmd": dict(fail_once="stop-slurmd"),
    "apply_layout": dict(
        nvml=(7, "nvmlDeviceCreateGpuInstanceWithPlacement", "once:INSUFFICIENT_RESOURCES")
    ),
    "inventory": dict(nvml=(7, "nvmlDeviceGetMigDeviceHandleByIndex", "UNKNOWN")),
    "write_gres": dict(shim=("slurmd", "-G")),
    "reconfigure": dict(fail_once="restart-slurmctld"),
    "start_slurmd": dict(fail_once="start-slurmd"),
    # no controller restart, and `scontrol reconfigure` swallowed once: the controller keeps
    # the old GPU count (22.05's own reconfigure does that; 25.11's applies the new count)
    "verify": dict(
        no_restart=True, skip=("scontrol", "reconfigure"), args=("--verify-timeout", "5")
    ),
    "resume": dict(shim=("scontrol", "State=RESUME")),
}


@pytest.fixture
def clean_node(mig_site):
    """Old files and layout before a case; the node back in service after it."""
    site = mig_site
    old = (site.gres_conf.read_text(), site.cluster.slurm_conf.read_text())
    machine = site.machine_file.read_text()
    others = {n: (site.record(n)["State"], site.record(n)["Gres"]) for n in OTHERS}
    yield old, layout(site.machine_file), others, site.record()["Gres"]
    cluster = site.cluster
    cluster.scancel_all()
    for path in site.faildir.iterdir():
        path.unlink()
    shutil.rmtree(site.tmp / "journal", ignore_errors=True)
    cluster.sync()
    if (site.gres_conf.read_text(), cluster.slurm_conf.read_text()) != old:
        cluster.reconfigure(extra_conf=MIG_CONF)  # a case failed its checks: start clean
    else:
        site.machine_file.write_text(machine)  # drops the injected error codes
        cluster.resume_node(NODE)


def _assert_rolled_back(site: Site, step: str, before) -> None:
    old_files, old_layout, others, old_gres = before
    record = site.record()
    assert "DRAIN" in record["State"], record
    assert f"failed at {step}" in record.get("Reason", ""), record
    assert (site.gres_conf.read_text(), site.cluster.slurm_conf.read_text()) == old_files
    assert layout(site.machine_file) == old_layout
    assert _gres_set(record["Gres"]) == _gres_set(old_gres), record["Gres"]
    for name, (state, gres) in others.items():
        # a restarted slurmctld shows nodes UNKNOWN until their slurmd registers again
        site.cluster.wait_node(name, lambda r, s=state: r["State"] == s, timeout=30)
        assert site.record(name)["Gres"] == gres
    assert site.cluster.nodes[NODE].alive()  # its slurmd runs again (drained)


@pytest.mark.parametrize("step", list(CASES))
def test_a_failure_at_each_step_leaves_the_node_drained_with_its_old_config(
    mig_site, clean_node, step, slurm_series
) -> None:
    site = mig_site
    case = CASES[step]
    argv = list(site.argv)
    if "shim" in case:
        site.fail(*case["shim"])
    if "skip" in case:
        site.fail(case["skip"][0] + ".skip", case["skip"][1])
    if "fail_once" in case:
        site.fail(case["fail_once"])
    if "nvml" in case:
        _machine_error(site, *case["nvml"])
    if case.get("job"):
        _job_on_node(site)
    if case.get("no_restart"):
        i = argv.index("--restart-slurmctld")
        del argv[i : i + 2]
    started = time.monotonic()
    proc = subprocess.run(
        [*argv, *case.get("args", ())],
        env=site.env, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    site.cluster.sync()
    print(f"{step}: {time.monotonic() - started:.1f} s")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # 25.11+: slurmd runs through the MIG change; its stop command first runs when
    # start_slurmd restarts it, so a failing stop fails that step
    failed = "start_slurmd" if step == "stop_slurmd" and slurm_series >= (25, 11) else step
    assert f"slurmgpu: error: {NODE}: mig apply failed at {failed}" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not list(site.faildir.iterdir())  # the injected failure did happen
    _assert_rolled_back(site, failed, clean_node)
    journal = json.loads((site.tmp / "journal" / f"mig-apply-{NODE}.json").read_text())
    assert journal["state"] == "rolled-back" and journal["error"].startswith(failed)


def test_a_killed_apply_is_rolled_back_by_recover(mig_site, clean_node) -> None:
    site = mig_site
    _job_on_node(site)  # keeps the run in wait_jobs
    journal = site.tmp / "journal" / f"mig-apply-{NODE}.json"
    proc = subprocess.Popen(
        site.argv, env=site.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 60
    while not (journal.exists() and "drain" in json.loads(journal.read_text())["done"]):
        assert proc.poll() is None and time.monotonic() < deadline, "apply never drained"
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    again = site.apply()
    assert again.returncode == 2 and "run `slurmgpu mig apply --recover` first" in again.stderr
    recovered = site.apply("--recover")
    assert recovered.returncode == 3, recovered.stderr  # 3: it rolled a run back
    assert f"{NODE}: mig apply relayout: rolled-back" in recovered.stderr
    _assert_rolled_back(site, "wait_jobs", clean_node)
    assert "stopped midway" in site.record()["Reason"]


# -- one lock per node, --emit, and a rebalance move kept (issues #20, #24) --------------------


def test_a_second_apply_of_the_same_node_waits_boundedly_then_refuses(mig_site, clean_node) -> None:
    site = mig_site
    _job_on_node(site)  # keeps the first run in wait_jobs
    journal = site.tmp / "journal" / f"mig-apply-{NODE}.json"
    first = subprocess.Popen(
        [*site.argv, "--drain-timeout", "45"],
        env=site.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not (journal.exists() and "drain" in json.loads(journal.read_text())["done"]):
        assert first.poll() is None and time.monotonic() < deadline, "apply never drained"
        time.sleep(0.2)
    for extra in ((), ("--recover",)):
        started = time.monotonic()
        second = site.apply(*extra, timeout=30)
        # the holder named at once, waited for 10 s (util.lock.DEFAULT_WAIT_S), then refused:
        # never for as long as the first run takes
        assert 10 <= time.monotonic() - started < 20
        assert second.returncode == 1, second.stderr
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 2 and lines[0].startswith(
            f"slurmgpu: {NODE} is held by pid {first.pid}: mig apply relayout"
        ), second.stderr
        assert lines[1].startswith(
            f"slurmgpu: error: {NODE}: another slurmgpu command is changing it (pid {first.pid}: "
            "mig apply relayout"
        ), second.stderr
        assert "(waited 10 s)" in lines[1]
    _out, err = first.communicate(timeout=120)
    site.cluster.sync()
    assert first.returncode == 1 and "failed at wait_jobs" in err, err
    # the first run's journal is its own, not overwritten by the refused ones
    record = json.loads(journal.read_text())
    assert record["state"] == "rolled-back" and record["error"].startswith("wait_jobs")
    _assert_rolled_back(site, "wait_jobs", clean_node)


REBALANCE_PARTITIONS = (
    "PartitionName=train Nodes=gpu[01-02] Default=YES MaxTime=INFINITE State=UP",
    "PartitionName=infer Nodes=gpu[03-04] MaxTime=INFINITE State=UP",
)


def _partition_nodes(cluster: MultiNodeCluster, name: str) -> str:
    out = cluster.scontrol("show", "-o", "partition", name)
    return next(f.split("=", 1)[1] for f in out.split() if f.startswith("Nodes="))


def _statements(text: str) -> list[str]:
    """What Slurm reads of a config file (comments, like the inventory digest, left out)."""
    return [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def test_emit_changes_nothing_and_the_live_run_writes_its_files_keeping_a_rebalance(
    mig_site, clean_node
) -> None:
    site = mig_site
    cluster = site.cluster
    # partitions in the include file rebalance owns; a backlog in train takes a node of infer
    include = cluster.conf_dir / "slurmgpu-partitions.conf"
    include.write_text("\n".join(REBALANCE_PARTITIONS) + "\n")
    cluster.reconfigure(extra_conf=MIG_CONF, partitions=(f"Include {include}",))
    script = _job_script("sleep 120")
    for _ in range(2):
        job = cluster.sbatch("-p", "train", "--gres=gpu:8", "--exclusive", script=script)
        assert cluster.wait_job_state(job, "RUNNING", timeout=30) == "RUNNING"
    waiting = cluster.sbatch("-p", "train", "--gres=gpu:8", "--exclusive", script=script)
    cluster.wait_job_state(waiting, "PENDING", timeout=10)
    rebalance = cluster.run(
        [
            *(sys.executable, "-m", "slurmgpu", "rebalance", "apply"),
            *("--min-pending", "0", "--min-idle", "0", "--partitions-conf", str(include)),
            *("--log", str(site.tmp / "rebalance.jsonl")),
        ],
        check=False,
    )
    assert rebalance.returncode == 3, rebalance.stderr  # 3: it moved a node
    moved = {p: _partition_nodes(cluster, p) for p in ("train", "infer")}
    assert moved["train"] != "gpu[01-02]", moved
    cluster.scontrol("reconfigure")  # the move is in the include file: slurm.conf keeps it
    assert {p: _partition_nodes(cluster, p) for p in ("train", "infer")} == moved
    cluster.scancel_all()
    cluster.wait_node(NODE, lambda r: r["State"] == "IDLE", timeout=60)

    # --emit: DIR holds the new gres.conf and slurm.conf, their diff and the steps
    old_files = (site.gres_conf.read_text(), cluster.slurm_conf.read_text())
    old_layout = layout(site.machine_file)
    out = site.tmp / "emit"
    emitted = site.apply("--emit", str(out))
    assert emitted.returncode == 3, emitted.stderr  # 3: the node would change
    assert "nothing live was touched" in emitted.stderr
    assert (site.gres_conf.read_text(), cluster.slurm_conf.read_text()) == old_files
    assert layout(site.machine_file) == old_layout
    assert "DRAIN" not in site.record()["State"]
    assert not (site.tmp / "journal" / f"mig-apply-{NODE}.json").exists()
    assert sorted(p.name for p in out.iterdir()) == [
        "changes.diff", "gres.conf", "slurm.conf", "steps.txt"
    ]  # fmt: skip
    diff = (out / "changes.diff").read_text()
    assert f"--- {site.gres_conf}" in diff and f"+++ {cluster.slurm_conf}" in diff
    steps = (out / "steps.txt").read_text().splitlines()
    assert steps[0].startswith(f"drain: scontrol update NodeName={NODE} State=DRAIN")

    # the live run writes what was emitted, and its controller restart keeps the move
    applied = site.apply()
    assert applied.returncode == 3, applied.stdout + applied.stderr
    assert _statements(site.gres_conf.read_text()) == _statements((out / "gres.conf").read_text())
    assert cluster.slurm_conf.read_text() == (out / "slurm.conf").read_text()
    assert _gres_set(site.record()["Gres"]) == NEW_GRES
    assert {p: _partition_nodes(cluster, p) for p in ("train", "infer")} == moved
    # the node is as the config says now: a dry run and --emit see nothing to change (0)
    files = (site.gres_conf.read_text(), cluster.slurm_conf.read_text())
    dry = site.apply("--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert f"# {site.gres_conf}: unchanged" in dry.stdout
    again = site.apply("--emit", str(site.tmp / "emit-again"))
    assert again.returncode == 0, again.stderr
    assert (site.gres_conf.read_text(), cluster.slurm_conf.read_text()) == files


# -- the re-layout -------------------------------------------------------------------------------


def test_relayout_while_another_node_runs_jobs_then_mig_jobs_run_on_the_new_slices(
    mig_site, slurm_series
) -> None:
    site = mig_site
    cluster = site.cluster
    release = site.tmp / "release-gpu01"
    other = cluster.sbatch(
        "-w", "gpu01", "--gres=gpu:h100:1",
        script=_job_script(f"while [ ! -e {release} ]; do sleep 0.5; done"),
    )  # fmt: skip
    local = cluster.sbatch("-w", NODE, "--gres=gpu:a100:1", script=_job_script("sleep 6"))
    # a job of a preemptible tier on gpu03 is requeued, not waited for
    cluster.sacctmgr("add", "qos", PREEMPTIBLE, check=False)  # may exist from an earlier run
    cluster.allow_qos(PREEMPTIBLE)
    preempted = cluster.sbatch(
        "-w", NODE, "--gres=gpu:a100:1", f"--qos={PREEMPTIBLE}", script=_job_script("sleep 300")
    )  # fmt: skip
    for jobid in (other, local, preempted):
        assert cluster.wait_job_state(jobid, "RUNNING", timeout=60) == "RUNNING"
    old_others = {n: site.record(n)["Gres"] for n in OTHERS}

    started = time.monotonic()
    proc = subprocess.Popen(
        [*site.argv, "--requeue-qos", PREEMPTIBLE],
        env=site.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen_states, drained_while_local_ran = set(), False
    while proc.poll() is None:
        seen_states.add(cluster.job_state(other) or "(slurmctld restarting)")
        if cluster.job_state(local) == "RUNNING" and "DRAIN" in site.record().get("State", ""):
            drained_while_local_ran = True
        time.sleep(0.5)
        assert time.monotonic() - started < 240, "mig apply did not finish in 240 s"
    out, err = proc.communicate()
    cluster.sync()
    elapsed = time.monotonic() - started
    assert proc.returncode == 3, out + err  # 3: re-laid out
    assert f"{NODE}: mig apply relayout: done" in err
    print(f"mig apply on {NODE}: {elapsed:.1f} s")
    # 25.11's slurmd holds no NVML handle: it ran through the change and was restarted after
    journal = json.loads((site.tmp / "journal" / f"mig-apply-{NODE}.json").read_text())
    assert journal["slurmd_kept_running"] is (slurm_series >= (25, 11)), journal

    # gpu01's job ran throughout (slurmctld restarted twice meanwhile), never requeued
    assert seen_states - {"(slurmctld restarting)"} == {"RUNNING"}, seen_states
    release.touch()
    assert cluster.wait_job_state(other, "COMPLETED", timeout=60) == "COMPLETED"
    assert _job_field(cluster, other, "Restarts") == "0"
    # the job on gpu03 itself was waited for, not requeued or killed
    assert drained_while_local_ran
    assert cluster.wait_job_state(local, "COMPLETED", timeout=30) == "COMPLETED"
    assert _job_field(cluster, local, "Restarts") == "0"
    # the preemptible one was requeued (the apply took far less than its 300 s), not lost
    assert _job_field(cluster, preempted, "Restarts") == "1"
    assert cluster.job_state(preempted) in ("PENDING", "RUNNING")
    cluster.run(["scancel", str(preempted)])  # it would hold one of the A100s below
    cluster.wait_job_state(preempted, "CANCELLED", timeout=30)

    # Slurm's view of gpu03 is the new layout, and it is back in service
    record = site.record()
    assert _gres_set(record["Gres"]) == NEW_GRES, record["Gres"]
    assert "DRAIN" not in record["State"], record
    assert {n: site.record(n)["Gres"] for n in OTHERS} == old_others
    # the double holds the new layout
    now = layout(site.machine_file)
    assert [sorted(p for p, _ in slices) for _, slices in now] == [
        ["1g.5gb"] * 7, ["1g.5gb"] * 7, [], [], [], [], [],
        ["1g.5gb", "2g.10gb", "2g.10gb", "2g.10gb"],
    ]  # fmt: skip
    assert [mode for mode, _ in now] == [True, True, False, False, False, False, False, True]

    # MIG jobs run on the new slices, on gpu03, and see the slices' device files
    caps = sorted(
        p.rsplit("/", 1)[1]
        for p, _, _ in device_nodes(cluster.machine_data(NODE))
        if p.startswith("nvidia-caps/")
    )
    show = (
        "hostname; echo CVD=$CUDA_VISIBLE_DEVICES; ls /dev/nvidia-caps | sort | tr '\\n' ' '\n"
        "echo; scontrol show -d job $SLURM_JOB_ID | grep -o 'GRES=[^ ]*(IDX:[^ ]*'"
    )
    small = cluster.sbatch("--gres=gpu:1g.5gb:14", script=_job_script(show))  # old: none
    medium = cluster.sbatch("--gres=gpu:2g.10gb:3", script=_job_script(show))  # GPU 7's
    whole = cluster.sbatch("--gres=gpu:a100:5", script=_job_script(show))  # GPU 2 is whole
    jobs = ((small, "1g.5gb", 14), (medium, "2g.10gb", 3), (whole, "a100", 5))
    node_line = next(
        ln
        for ln in cluster.slurm_conf.read_text().splitlines()
        if ln.startswith(f"NodeName={NODE} ")
    )
    check = check_gres_conf(site.gres_conf.read_text(), node_line)
    assert check.ok, check.errors
    records = check.parsed
    wanted = {
        "1g.5gb": {("1g.5gb", f"/dev/nvidia{i}") for i in (0, 1, 7)},
        "2g.10gb": {("2g.10gb", "/dev/nvidia7")},
        "a100": {("a100", f"/dev/nvidia{i}") for i in range(2, 7)},
    }
    for jobid, profile, count in jobs:
        assert cluster.wait_job_state(jobid, "COMPLETED", timeout=90) == "COMPLETED"
        assert _job_field(cluster, jobid, "NodeList") == NODE
        output = Path(_job_field(cluster, jobid, "StdOut")).read_text().split("\n")
        assert output[0] == NODE
        assert output[2].split() == caps, (output, caps)
        idx = re.fullmatch(rf"GRES=gpu:{re.escape(profile)}:{count}\(IDX:(\S+)\)", output[3])
        assert idx, output  # Slurm gave the job `count` slices of that profile
        assert len(parse_id_list(idx.group(1))) == count
        ids = parse_id_list(idx.group(1))
        assert len(ids) == count
        # no device cgroup here: Slurm 22.05 sets CUDA_VISIBLE_DEVICES to the node's indices
        assert output[1] == "CVD=" + ",".join(str(i) for i in ids), output
        # those indices, in the order slurmd's own parser gives the node's records, are
        # slices of that profile on the GPUs the layout put them on
        got = {(records[i].type, records[i].files[0]) for i in ids}
        assert got <= wanted[profile], (got, ids)
