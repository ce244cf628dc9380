"""`slurmgpu idle` and `slurmgpu job` through the CLI: summaries, errors as one line."""

from __future__ import annotations

import base64
import gzip
import json

from click.testing import CliRunner

from slurmgpu.cli import main

POLICY = """default_tier = "P2"
[tiers.P0]
priority = 1000
[tiers.P2]
priority = 100
[idle]
window_min = 60
warn_after_min = [30]
"""
HEADER = (
    "JobIDRaw|JobID|Cluster|Partition|QOS|Account|User|Submit|Start|End|ElapsedRaw|"
    "State|AllocTRES|NodeList|AdminComment|Comment|JobName"
)
START = 1_764_547_200


def js1(util: float, gpus: int = 1) -> str:
    """A jobstats summary as its epilog stores it (base64 of gzip of compact JSON)."""
    stats = {
        "gpu_utilization": {str(g): util for g in range(gpus)},
        "gpu_used_memory": {str(g): 2**30 for g in range(gpus)},
        "gpu_total_memory": {str(g): 80 * 2**30 for g in range(gpus)},
    }
    doc = {"nodes": {"gpu01": stats}, "total_time": 7200, "gpus": gpus}
    raw = json.dumps(doc, separators=(",", ":")).encode()
    return "JS1:" + base64.b64encode(gzip.compress(raw)).decode()


def row(job: int, hours: float, admin: str, gpus: int = 1, qos: str = "p2") -> list[str]:
    end = START + int(hours * 3600)
    tres = f"billing=1,cpu=1,gres/gpu={gpus},mem=1G,node=1"
    alloc = [
        str(job),
        str(job),
        "c1",
        "gpu",
        qos,
        "ml",
        "bob",
        str(START),
        str(START),
        str(end),
        str(end - START),
        "COMPLETED",
        tres,
        "gpu01",
        admin,
        "",
        "j",
    ]
    step = [
        f"{job}.batch",
        f"{job}.batch",
        "c1",
        "",
        "",
        "ml",
        "bob",
        str(START),
        str(START),
        str(end),
        str(end - START),
        "COMPLETED",
        "cpu=1,mem=1G,node=1",
        "gpu01",
        "",
        "",
        "batch",
    ]
    return ["|".join(alloc), "|".join(step)]


def write(tmp_path, rows: list[str], policy: str = POLICY):
    (tmp_path / "p.toml").write_text(policy)
    (tmp_path / "s.txt").write_text("\n".join([HEADER, *rows]) + "\n")
    return ["--policy", str(tmp_path / "p.toml"), "--sacct-file", str(tmp_path / "s.txt")]


def test_a_summary_at_zero_proves_idleness(tmp_path):
    rows = (
        row(1, 2, js1(0.0, gpus=2), gpus=2)
        + row(2, 2, js1(0.5))
        + row(3, 2, js1(50))
        + row(4, 0.5, js1(0.0))
        + row(5, 2, js1(0.0), gpus=2)
    )
    result = CliRunner().invoke(main, ["idle", *write(tmp_path, rows), "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    (job,) = doc["jobs"]
    assert job["job_id"] == "1" and job["basis"] == "summary"
    assert job["flagged_at"] == "2025-12-01T01:00:00Z"  # start + the 60-minute window
    assert job["warnings"] == ["2025-12-01T00:30:00Z"]
    assert job["reclaimable_gpu_hours"] == 2.0  # (end - flag) 1 h x 2 GPUs
    undecided = {u["job_id"]: u["reason"] for u in doc["undecided"]}
    assert undecided == {
        "2": "summary mean only: the rule needs samples",
        "5": "summary of 1 of 2 GPUs",
    }
    assert doc["measured"] == {"series": 0, "summary": 5}
    assert doc["ranking"]["users"] == [
        {"user": "bob", "idle_gpu_hours": 2.0, "reclaimable_gpu_hours": 2.0, "runs": 1}
    ]
    assert doc["ranking"]["accounts"][0]["account"] == "ml"


def test_without_input_is_a_usage_error(tmp_path):
    (tmp_path / "p.toml").write_text(POLICY)
    result = CliRunner().invoke(main, ["idle", "--policy", str(tmp_path / "p.toml")])
    assert result.exit_code == 2
    assert result.output.strip() == "slurmgpu: error: give --sacct-file FILE... or --since WHEN"


def test_a_policy_without_idle_table_is_refused(tmp_path):
    args = write(tmp_path, row(1, 2, ""), POLICY.split("[idle]")[0])
    result = CliRunner().invoke(main, ["idle", *args])
    assert result.exit_code == 2
    assert "the policy has no [idle] table" in result.output


def test_a_missing_dump_is_one_line(tmp_path):
    (tmp_path / "p.toml").write_text(POLICY)
    result = CliRunner().invoke(
        main, ["idle", "--policy", str(tmp_path / "p.toml"), "--sacct-file", "/nonexistent"]
    )
    assert result.exit_code == 2
    assert result.output.strip() == "slurmgpu: error: --sacct-file /nonexistent: no such file"


def test_live_needs_somewhere_to_send(tmp_path):
    (tmp_path / "p.toml").write_text(POLICY)
    result = CliRunner().invoke(
        main,
        ["idle", "--live", "--policy", str(tmp_path / "p.toml"), "--state-dir", str(tmp_path)],
    )
    assert result.exit_code == 2
    assert "--live needs --smtp HOST[:PORT] or --webhook URL" in result.output


def test_job_rejects_a_non_id():
    result = CliRunner().invoke(main, ["job", "12;rm"])
    assert result.exit_code == 2
    assert result.output.strip() == "slurmgpu: error: '12;rm': not a job id"


def test_a_shard_job_is_a_share_of_one_gpu(tmp_path):
    policy = POLICY.replace('default_tier = "P2"', 'default_tier = "P2"\nshards_per_gpu = 4')
    rows = row(7, 2, js1(0.0))
    rows[0] = rows[0].replace("gres/gpu=1", "gres/shard=2")
    args = write(tmp_path, rows, policy)
    result = CliRunner().invoke(main, ["idle", *args, "--format", "json"])
    assert result.exit_code == 0, result.output
    (job,) = json.loads(result.output)["jobs"]
    assert (job["gpus"], job["devices"]) == (0.5, 1)
    assert job["reclaimable_gpu_hours"] == 0.5  # 1 h after the flag x half a GPU


def test_report_gains_the_waste_ranking_and_the_retrospective_total(tmp_path):
    from slurmgpu.views.report import check_prom_text

    rows = row(1, 2, js1(0.0, gpus=2), gpus=2) + row(3, 2, js1(50))
    args = write(tmp_path, rows)
    base = ["report", "--policy", args[1], "--sacct-file", args[3]]
    doc = json.loads(CliRunner().invoke(main, [*base, "--format", "json"]).output)
    assert doc["idle"]["reclaimable_gpu_hours"] == 2.0 and doc["idle"]["flagged_runs"] == 1
    assert doc["idle"]["ranking"]["users"][0] == {
        "user": "bob", "idle_gpu_hours": 2.0, "reclaimable_gpu_hours": 2.0, "runs": 1
    }  # fmt: skip
    assert doc["totals"]["gpu_jobs"] == 2  # the analysis itself is unchanged beside it
    text = CliRunner().invoke(main, base).output
    assert "reclaimable: 2.00 GPU-hours in 1 runs" in text
    assert "waste ranking, users" in text
    prom = CliRunner().invoke(main, [*base, "--format", "prom"]).output
    check_prom_text(prom)
    assert "slurmgpu_idle_reclaimable_gpu_hours 2.0" in prom
    assert 'slurmgpu_idle_user_gpu_hours{user="bob"} 2.0' in prom
    html = CliRunner().invoke(main, [*base, "--format", "html"]).output
    assert "Waste ranking: users" in html and html.rstrip().endswith("</html>")
    plain = CliRunner().invoke(main, [*base, "--no-idle", "--format", "json"]).output
    assert "idle" not in json.loads(plain)


def test_a_damaged_live_state_is_one_line_and_left_alone(tmp_path):
    (tmp_path / "p.toml").write_text(POLICY)
    state = tmp_path / "state"
    state.mkdir()
    (state / "state.json").write_text("{not json")
    args = ["idle", "--live", "--dry-run", "--policy", str(tmp_path / "p.toml"),
            "--prometheus", "http://127.0.0.1:9", "--state-dir", str(state)]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1
    assert result.output.startswith(f"slurmgpu: error: {state}/state.json: unreadable idle state")
    assert len(result.output.strip().splitlines()) == 1
    assert sorted(p.name for p in state.iterdir()) == ["state.json"]  # nothing written


def test_the_action_journal_is_sealed_and_checked(tmp_path):
    from dataclasses import replace

    import pytest

    from slurmgpu.idle.live import IdleAction, read_journal
    from slurmgpu.util.journal import JournalError, append_record

    entry = IdleAction("2026-12-03T18:00:00Z", "42", "bob", "2026-12-03T16:00:00Z", "cancel",
                       1.0, "begin")  # fmt: skip
    append_record(tmp_path / "journal.jsonl", entry)
    append_record(tmp_path / "journal.jsonl", replace(entry, phase="done"))
    assert [e.phase for e in read_journal(tmp_path)] == ["begin", "done"]
    text = (tmp_path / "journal.jsonl").read_text().replace('"bob"', '"eve"', 1)
    (tmp_path / "journal.jsonl").write_text(text)
    with pytest.raises(JournalError, match=r"journal\.jsonl:1: its checksum does not match"):
        read_journal(tmp_path)


def test_an_implausible_summary_decides_nothing(tmp_path):
    """A jobstats mean of -5 % or 250 % is no reading: the run is undecided, never flagged
    (before: -5 % was left out as 'without utilization', 250 % counted as busy)."""
    rows = row(11, 2, js1(-5.0)) + row(12, 2, js1(250.0)) + row(13, 2, js1(0.0))
    result = CliRunner().invoke(main, ["idle", *write(tmp_path, rows), "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert [j["job_id"] for j in doc["jobs"]] == ["13"]
    undecided = {u["job_id"]: u["reason"] for u in doc["undecided"]}
    assert undecided["12"] == "summary utilization 250% implausible"
    assert undecided["11"] == "summary without utilization"
