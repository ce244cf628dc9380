"""What `replay` takes from the dumps themselves: GPU types, rejected rows, never-started jobs,
requeues vs preemptions, and the QOS a `tier:` change may name."""

import json

from click.testing import CliRunner

from slurmgpu.cli import main

HEADER = (
    "JobIDRaw|JobID|Cluster|Partition|QOS|Account|User|Submit|Start|End|ElapsedRaw|"
    "TimelimitRaw|State|AllocTRES|ReqTRES|NodeList|JobName"
)
A100 = "cpu=1,gres/gpu:nvidia_a100-sxm4-80gb=1,gres/gpu=1"


def _row(job, submit, start, end, elapsed, state, alloc, req=None, qos="p1", part="gpu"):
    return (
        f"{job}|{job}|c|{part}|{qos}|a|u|{submit}|{start}|{end}|{elapsed}|120|{state}|"
        f"{alloc}|{req or alloc}|n1|j"
    )


def _dump(tmp_path, *rows):
    path = tmp_path / "dump.txt"
    path.write_text("\n".join([HEADER, *rows]) + "\n")
    return str(path)


def _replay(path, *args):
    res = CliRunner().invoke(
        main, ["replay", "--sacct-file", path, "--capacity", "gpu=8", "--format", "json", *args]
    )
    return res


def test_a_carve_analyze_recommends_replays_with_the_type_from_the_dumps(tmp_path):
    rows = [
        _row(i, "2026-01-01T00:00:00", "2026-01-01T00:00:00", "2026-01-01T01:00:00", 3600,
             "COMPLETED", A100)
        for i in range(1, 5)
    ]  # fmt: skip
    res = _replay(_dump(tmp_path, *rows), "--what-if", "carve:gpu:2:1g.10gb=7")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    carved = doc["scenarios"][0]
    assert carved["change"] == "carve:gpu:2:1g.10gb=7"
    assert {p["partition"]: p["gpus"] for p in carved["by_partition"]} == {"gpu": 8}


def test_rejected_rows_and_never_started_gpu_jobs_are_said(tmp_path):
    path = _dump(
        tmp_path,
        _row(1, "2026-01-01T00:00:00", "2026-01-01T00:10:00", "2026-01-01T01:00:00", 3000,
             "COMPLETED", A100),
        _row(2, "2026-01-01T00:00:00", "2026-01-01T01:10:00", "2026-01-01T00:00:00", 3000,
             "COMPLETED", A100),
        _row(3, "2026-01-01T00:30:00", "Unknown", "Unknown", 0, "PENDING", "",
             req="cpu=1,gres/gpu:nvidia_a100-sxm4-80gb=2,gres/gpu=2"),
    )  # fmt: skip
    res = _replay(path)
    assert res.exit_code == 0, res.output
    base = json.loads(res.output)["baseline"]
    assert base["skipped"] == {
        "never started (pending when the dump was taken)": 1,
        "rejected rows of the dumps": 1,
    }
    assert base["rejected"] == [
        {"file": path, "line": 3,
         "reason": "End 2026-01-01T00:00:00 is before Start 2026-01-01T01:10:00"}
    ]  # fmt: skip
    text = CliRunner().invoke(main, ["replay", "--sacct-file", path, "--capacity", "gpu=8"])
    assert f"rejected rows:\n  {path}:3: End" in text.output


def test_a_requeued_run_is_not_a_preemption_and_a_tier_change_names_a_known_qos(tmp_path):
    path = _dump(
        tmp_path,
        _row(7, "2026-01-01T00:00:00", "2026-01-01T00:00:00", "2026-01-01T00:20:00", 1200,
             "REQUEUED", A100),
        _row(7, "2026-01-01T00:20:00", "2026-01-01T00:21:00", "2026-01-01T01:21:00", 3600,
             "COMPLETED", A100),
        _row(8, "2026-01-01T00:00:00", "2026-01-01T00:00:00", "2026-01-01T00:30:00", 1800,
             "PREEMPTED", A100, qos="p2"),
        _row(8, "2026-01-01T00:30:00", "2026-01-01T00:31:00", "2026-01-01T01:31:00", 3600,
             "COMPLETED", A100, qos="p2"),
    )  # fmt: skip
    res = _replay(path)
    assert res.exit_code == 0, res.output
    recorded = json.loads(res.output)["baseline"]["recorded"]
    assert recorded["preemptions"] == 1  # job 8's PREEMPTED run; job 7 was requeued
    assert abs(recorded["gpu_hours_lost"] - 0.5) < 1e-9
    bad = CliRunner().invoke(
        main, ["replay", "--sacct-file", path, "--capacity", "gpu=8", "--what-if",
               "tier:p3:grace_s=60"],
    )  # fmt: skip
    assert bad.exit_code == 2 and bad.output.count("\n") == 1
    assert "QOS 'p3' is neither in the policy nor in the dumps (known: p1, p2)" in bad.output
    assert _replay(path, "--what-if", "tier:p2:grace_s=60").exit_code == 0
