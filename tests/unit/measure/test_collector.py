"""`slurmgpu collect` through the pynvml double and a recorded host tree (cgroup v1 and v2)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from slurmgpu.measure.collector import CollectOptions, collect, epilog
from slurmgpu.measure.collector.cgroup import ProcessMapper
from slurmgpu.measure.collector.nvml import sample_node
from slurmgpu.measure.summary import decode
from tests.doubles.gpu_load import COLLECT_HOST, GIB_MIB, load_h100, load_mig
from tests.doubles.machines import install_double, variant

HOST = COLLECT_HOST


@pytest.fixture
def nvml(monkeypatch):
    return install_double(monkeypatch)


def options(tmp_path: Path, **kw) -> CollectOptions:
    base = dict(state=tmp_path / "state.json", node="gpu01", cluster="c1", host_root=HOST)
    return CollectOptions(**(base | kw))


def serve(nvml, tmp_path, name, change):
    nvml.use_machine(variant(tmp_path, name, change))


def test_cgroup_v1_and_v2_paths_map_to_jobs_and_users():
    mapper = ProcessMapper(HOST)
    v1, v2 = mapper.job_of(2101), mapper.job_of(2203)
    assert (v1.job_id, v1.uid, v1.user) == ("4242", 1000, "alice")
    assert (v2.job_id, v2.uid, v2.user) == ("4243", 1001, "bob")
    assert mapper.job_of(2304) is None  # a login session, not a Slurm task
    assert mapper.job_of(99999) is None  # exited between NVML and /proc


def test_cgroups_named_by_sluid_map_to_job_ids(tmp_path):
    # Slurm 26.05 without CgroupJobIdPaths=yes: the job's cgroup is its SLUID
    root = tmp_path / "host"
    paths = {
        3001: "0::/system.slice/slurmstepd.scope/s1XXM8YJHNA100/step_0/user/task_0",
        3002: "0::/system.slice/slurmstepd.scope/s6M9M8YJJNH900/step_batch/user/task_0",
        3003: "0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_0",  # IdPaths=yes
        3004: "0::/user.slice/session-3.scope",  # s + 13 characters nowhere: no job
    }
    for pid, line in paths.items():
        (root / "proc" / str(pid)).mkdir(parents=True)
        (root / "proc" / str(pid) / "cgroup").write_text(line + "\n")
        (root / "proc" / str(pid) / "status").write_text("Uid:\t1000\t1000\t1000\t1000\n")
    asked = []

    def resolve():
        asked.append(1)
        return {"s1XXM8YJHNA100": "4242"}

    mapper = ProcessMapper(root, resolve)
    assert mapper.job_of(3003).job_id == "77" and not asked  # no SLUID met: Slurm not asked
    assert mapper.job_of(3001).job_id == "4242"
    # one Slurm did not know (ended meanwhile): kept under its SLUID, and said
    assert mapper.job_of(3002).job_id == "s6M9M8YJJNH900"
    assert mapper.unresolved == {"s6M9M8YJJNH900"} and len(asked) == 1  # asked once a pass
    assert mapper.job_of(3004) is None


def test_a_pass_asks_slurm_for_sluids_and_a_failure_is_a_problem(nvml, tmp_path, monkeypatch):
    from slurmgpu.errors import SlurmCommandError
    from slurmgpu.measure import collector

    calls = []

    def fake_run(argv, timeout_s):
        calls.append(argv)
        if len(calls) == 1:
            # 26.05 (v0.0.45): jobs[].sluid; 25.11 (v0.0.44): jobs[].step_id.sluid
            return (
                '{"jobs": [{"job_id": 4242, "sluid": "s1XXM8YJHNA100"}, {"job_id": 9},'
                ' {"job_id": 7, "step_id": {"sluid": "s8KNM8YKTSJ100", "job_id": {}}}]}'
            )
        raise SlurmCommandError("scontrol: error: slurmctld not answering")

    monkeypatch.setattr(collector, "_run", fake_run)
    problems: list[str] = []
    assert collector.job_sluids(options(tmp_path), problems) == {
        "s1XXM8YJHNA100": "4242",
        "s8KNM8YKTSJ100": "7",
    }
    assert calls[0] == ["scontrol", "show", "job", "--json"] and problems == []
    assert collector.job_sluids(options(tmp_path), problems) == {}
    assert problems and "slurmctld not answering" in problems[0]


def test_a_pass_attributes_devices_and_writes_the_textfile(nvml, tmp_path):
    serve(nvml, tmp_path, "dgx-h100", lambda d: load_h100(d, [80, 40, 5]))
    result = collect(options(tmp_path, textfile=tmp_path / "tf" / "slurmgpu.prom"))
    assert result.devices == 8 and result.jobs == ["4242", "4243"] and result.errors == []
    text = (tmp_path / "tf" / "slurmgpu.prom").read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("slurmgpu_gpu_memory_used_bytes"))
    assert 'gpu="0"' in line and 'jobid="4242"' in line and 'user="alice"' in line
    assert line.endswith(f" {30 * 2**30}")
    assert 'slurmgpu_gpu_utilization_percent{node="gpu01",gpu="1"' in text
    shared = [ln for ln in text.splitlines() if "utilization_percent" in ln and 'gpu="1"' in ln]
    assert {'jobid="4242"' in s for s in shared} == {True, False} and len(shared) == 2
    assert 'gpu="2",gpu_instance="",profile="",uuid=' in text and 'jobid="",user=""' in text


def test_two_passes_average_utilization_and_keep_the_highest_memory(nvml, tmp_path):
    serve(nvml, tmp_path, "dgx-h100", lambda d: load_h100(d, [80, 40]))
    collect(options(tmp_path))
    serve(nvml, tmp_path, "dgx-h100", lambda d: load_h100(d, [20, 10]))
    collect(options(tmp_path))
    state = json.loads((tmp_path / "state.json").read_text())
    g0 = state["jobs"]["4242"]["gpus"]["0"]
    assert (g0["util_sum"], g0["util_samples"], g0["samples"]) == (100, 2, 2)
    assert state["jobs"]["4242"]["samples"] == 2 and state["jobs"]["4243"]["user"] == "bob"
    # job 4243's process memory is unknown: the device's used memory stands in for it
    assert state["jobs"]["4243"]["gpus"]["1"]["mem_max_mib"] == 2 * GIB_MIB


def test_mig_instances_have_memory_but_no_utilization(nvml, tmp_path):
    serve(nvml, tmp_path, "dgx-a100-mig", load_mig)
    sample = sample_node()
    mig = [d for d in sample.devices if d.processes]
    assert [(d.key, d.profile, d.util_pct) for d in mig] == [
        ("1/gi1", "3g.20gb", None),
        ("1/gi2", "3g.20gb", None),
        ("2/gi6", "1g.10gb", None),
    ]
    textfile = tmp_path / "mig.prom"
    collect(options(tmp_path, textfile=textfile), sample)
    text = textfile.read_text()
    util_lines = [ln for ln in text.splitlines() if ln.startswith("slurmgpu_gpu_utilization_pe")]
    assert util_lines and not any('gpu="1"' in ln or 'gpu="2"' in ln for ln in util_lines)
    assert 'gpu="1",gpu_instance="1",profile="3g.20gb"' in text
    assert 'slurmgpu_gpu_utilization_supported{node="gpu01",gpu="1",gpu_instance="1"' in text


def test_epilog_stores_the_summary_in_the_spool_and_forgets_the_job(nvml, tmp_path):
    serve(nvml, tmp_path, "dgx-h100", lambda d: load_h100(d, [80, 40]))
    collect(options(tmp_path))
    spool = tmp_path / "spool"
    env = {"SLURM_JOB_ID": "4242", "SLURM_JOB_GPUS": "0,1,5"}
    assert epilog(options(tmp_path, spool=spool, admin_comment=False), env) == 0
    [path] = (spool / "c1").iterdir()
    summary = decode(path.read_text().strip())
    assert (summary.job, summary.node, summary.samples) == ("4242", "gpu01", 1)
    by_minor = {g.minor: g for g in summary.gpus}
    assert sorted(by_minor) == [0, 1, 5]  # GPU 5 was allocated and never used: 0 %
    assert by_minor[0].util_mean_pct == 80 and by_minor[0].mem_max_mib == 30 * GIB_MIB
    assert by_minor[5].util_mean_pct == 0 and by_minor[5].mem_total_mib == pytest.approx(81559.0)
    state = json.loads((tmp_path / "state.json").read_text())
    assert "4242" not in state["jobs"] and "4243" in state["jobs"]


def test_mig_job_summary_has_profiles_and_no_utilization(nvml, tmp_path):
    serve(nvml, tmp_path, "dgx-a100-mig", load_mig)
    collect(options(tmp_path))
    spool = tmp_path / "spool"
    epilog(options(tmp_path, spool=spool, admin_comment=False), {"SLURM_JOB_ID": "4250"})
    [path] = (spool / "c1").iterdir()
    s = decode(path.read_text().strip())
    assert [(g.minor, g.gi, g.profile, g.util_mean_pct) for g in s.gpus] == [
        (1, 1, "3g.20gb", None),
        (1, 2, "3g.20gb", None),
        (2, 6, "1g.10gb", None),
    ]
    assert [g.mem_total_mib for g in s.gpus] == [19968.0, 19968.0, 9856.0]


def test_epilog_never_fails(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="slurmgpu.collect")
    assert epilog(options(tmp_path), {}) == 0
    assert "SLURM_JOB_ID" in caplog.text
    assert epilog(options(tmp_path), {"SLURM_JOB_ID": "77"}) == 0
    assert "no sample saw job 77" in caplog.text
    # the state path cannot even be created (a file where a directory should be)
    (tmp_path / "blocker").write_text("")
    bad = options(tmp_path, state=tmp_path / "blocker" / "state.json")
    assert epilog(bad, {"SLURM_JOB_ID": "77"}) == 0
    assert "failed" in caplog.text


def test_corrupt_state_is_replaced_and_said(nvml, tmp_path, caplog):
    (tmp_path / "state.json").write_text("{half a file")
    serve(nvml, tmp_path, "dgx-h100", lambda d: load_h100(d, [50]))
    result = collect(options(tmp_path))
    assert any("not a collector state file" in e for e in result.errors)
    assert "4242" in json.loads((tmp_path / "state.json").read_text())["jobs"]


def test_a_lost_gpu_is_reported_not_dropped_silently(nvml, tmp_path):
    def change(d):
        load_h100(d, [80])
        d["gpus"][3]["lost"] = True

    serve(nvml, tmp_path, "dgx-h100", change)
    result = collect(options(tmp_path, textfile=tmp_path / "x.prom"))
    assert result.devices == 7 and result.errors == ["GPU index 3: GPU is lost"]
    assert 'slurmgpu_collect_errors{node="gpu01"} 1' in (tmp_path / "x.prom").read_text()


def test_cli_pass_and_nvml_failure(nvml, tmp_path):
    serve(nvml, tmp_path, "dgx-h100", lambda d: load_h100(d, [80]))
    args = ["collect", "--state", str(tmp_path / "s.json"), "--host-root", str(HOST)]
    out = CliRunner().invoke(main, [*args, "--node", "n1"])
    assert out.exit_code == 0, out.output
    assert "8 GPU devices, jobs: 4242 4243" in out.output
    serve(nvml, tmp_path, "dgx-h100", lambda d: d.update(init_error="DRIVER_NOT_LOADED"))
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 1
    # no vendor answered: each one's reason, NVML's first (amdsmi and DCMI are absent here)
    last = out.output.strip().splitlines()[-1]
    assert last.startswith("slurmgpu: error: NVML: Driver Not Loaded; amdsmi: "), last
    assert "; DCMI: cannot load libdcmi" in last


def test_cli_epilog_exits_zero_even_when_storing_fails(tmp_path):
    # no scontrol answers for this job: the AdminComment store fails, the epilog still exits 0
    state = tmp_path / "s.json"
    state.write_text(
        json.dumps(
            {
                "v": 1,
                "whole_gpus": {},
                "jobs": {
                    "9": {
                        "user": "a",
                        "first": 1,
                        "last": 2,
                        "samples": 1,
                        "gpus": {
                            "0": {
                                "minor": 0,
                                "gi": None,
                                "profile": None,
                                "uuid": "GPU-x",
                                "mem_total_mib": 100.0,
                                "mem_max_mib": 1.0,
                                "util_sum": 5.0,
                                "util_samples": 1,
                                "samples": 1,
                            }
                        },
                    }
                },
            }
        )
    )
    log = tmp_path / "epilog.log"
    env = {"SLURM_JOB_ID": "9", "PATH": str(tmp_path), "SLURM_CONF": "/nonexistent"}
    out = CliRunner().invoke(
        main, ["collect", "--epilog", "--state", str(state), "--log-file", str(log)], env=env
    )
    assert out.exit_code == 0
    text = log.read_text()
    assert "job 9: AdminComment not updated: sacct: command not found" in text
    # nothing stored it: the summary is in the log, where an admin can still recover it
    token = text.split("summary stored nowhere; it was: ")[1].split()[0]
    assert decode(token).gpus[0].util_mean_pct == 5.0


def test_cli_unwritable_paths_are_one_line_errors(nvml, tmp_path):
    serve(nvml, tmp_path, "dgx-h100", lambda d: load_h100(d, [80]))
    (tmp_path / "file").write_text("")
    args = ["collect", "--host-root", str(HOST), "--state", str(tmp_path / "file" / "s.json")]
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 1 and out.output.startswith("slurmgpu: error: ")
    assert "/file: " in out.output and len(out.output.splitlines()) == 1


def test_the_admin_comment_goes_to_the_one_record_of_the_task(monkeypatch):
    """`sacct -j 7` of an array's last task (raw id 7 = the array's id) lists every task: the
    record is picked by JobIDRaw and written as `JobID=7_2`, never `JobID=7` (issue #20).
    A busy munged once is retried. (The real thing: test_measure_collect.py, 100 tasks.)"""
    import slurmgpu.measure.collector as collector
    from slurmgpu.errors import SlurmCommandError
    from slurmgpu.measure.summary import GpuSummary, JobSummary, encode

    summary = JobSummary("7", "c1", "gpu01", 100, 200, 3,
                         (GpuSummary(0, None, None, "GPU-x", 80.0, 1.0, 50.0, 3, 3),))  # fmt: skip
    stored = {"7": "slurmgpu tier=p1"}
    calls: list[list[str]] = []
    busy = [True]

    def fake_run(argv, timeout_s):
        calls.append(argv)
        if argv[0] == "sacct":
            if busy.pop() if busy else False:
                raise SlurmCommandError("sacct exited 1: If munged is up, restart it")
            rows = [f"8|7_0|{encode(summary)}", "9|7_1|", f"7|7_2|{stored['7']}"]
            return "\n".join(rows) + "\n"
        assert argv[:6] == ["sacctmgr", "-i", "modify", "job", "where", "JobID=7_2"], argv
        stored["7"] = argv[-1].split("=", 1)[1]
        return ""

    monkeypatch.setattr(collector, "_run", fake_run)
    collector.store_admin_comment(summary, settle_s=0)
    assert stored["7"] == f"slurmgpu tier=p1 {encode(summary)}"
    assert sum(1 for c in calls if c[0] == "sacctmgr") == 1
