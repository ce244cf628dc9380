"""`slurmgpu report` end to end through click's CliRunner on a small recorded sacct dump.

tests/data/reports/sacct-small.txt (one day, 2026-11-30): 2 H100 x 1 h (gres/gpuutil 50%),
a hostile user name with 1 H100 x 30 min, a 1g.10gb MIG slice x 2 h (1/7 GPU), a job
preempted after 30 min and requeued for 1 h, a CPU job, a pending job, a 2-task array of
1 H100 x 15 min, and one malformed row (ElapsedRaw `abc`).
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from slurmgpu.views.report import check_prom_text

DUMP = Path(__file__).resolve().parents[2] / "data" / "reports" / "sacct-small.txt"
WINDOW = ["--since", "2026-11-30", "--until", "2026-12-01"]
CAPACITY = ["--capacity", "gpu=8", "--capacity", "mig=7"]
# hand-computed from the dump: 2*1 + 1*0.5 + 1/7*2 + 1*0.5 + 1*1 + 2*0.25
GPU_HOURS = 2 + 0.5 + 2 / 7 + 0.5 + 1 + 0.5


def report(*args: str):
    result = CliRunner().invoke(
        main, ["report", "--sacct-file", str(DUMP), *WINDOW, *args], catch_exceptions=False
    )
    return result


def test_text_to_stdout():
    result = report(*CAPACITY)
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "GPU-hours allocated  4.8 of 360.0 capacity (1.3%)" in out  # 8+7 GPUs x 24 h
    assert "16 read = 15 analyzed + 1 rejected" in out
    assert f"{DUMP}:17: " in out  # the malformed row, by line number
    assert "1 preempted (0.5 GPU-hours lost)" in out
    assert result.stderr == ""  # no TTY under CliRunner: no progress line


def test_json_output_file_is_the_analysis(tmp_path):
    target = tmp_path / "week.json"
    result = report("--format", "json", "--output", str(target), *CAPACITY)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    doc = json.loads(target.read_text())
    assert doc["schema_version"] == 2
    assert doc["totals"]["gpu_hours_allocated"] == pytest.approx(GPU_HOURS)
    assert doc["totals"]["rows_read"] == 16 and doc["totals"]["rows_rejected"] == 1
    parts = {g["partition"]: g for g in doc["by_partition"]}
    assert parts["gpu"]["gpu_hours_allocated"] == pytest.approx(4.5)
    assert parts["mig"]["gpu_hours_allocated"] == pytest.approx(2 / 7)
    assert parts["cpu"]["capacity_gpu_hours"] is None  # unknown, not 0
    assert target.stat().st_mode & 0o777 == 0o644
    # the same document `slurmgpu analyze --format json` prints (bar the clock)
    analyzed = CliRunner().invoke(
        main, ["analyze", "--sacct-file", str(DUMP), *WINDOW, *CAPACITY, "--format", "json"]
    )
    other = json.loads(analyzed.stdout)
    assert {k: v for k, v in other.items() if k != "generated_at"} == {
        k: v for k, v in doc.items() if k != "generated_at"
    }


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [a for a, _ in attrs]


def test_html_escapes_names_from_accounting(tmp_path):
    target = tmp_path / "report.html"
    result = report("--format", "html", "--output", str(target))
    assert result.exit_code == 0, result.stderr
    page = target.read_text()
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    parser = _Tags()
    parser.feed(page)
    assert "script" not in parser.tags and "img" not in parser.tags
    assert "src" not in parser.attrs and "onerror" not in parser.attrs
    assert "https://" not in page and "http://" not in page
    assert page.count("<svg ") >= 5


def test_prom_textfile_atomic_and_repeatable(tmp_path):
    target = tmp_path / "slurmgpu.prom"
    for _ in range(2):  # the second run replaces the first, leaving nothing else behind
        result = report("--format", "prom", "--output", str(target), *CAPACITY)
        assert result.exit_code == 0, result.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["slurmgpu.prom"]
    text = target.read_text()
    check_prom_text(text)
    samples = dict(ln.rsplit(" ", 1) for ln in text.splitlines() if not ln.startswith("#"))
    assert float(samples["slurmgpu_gpu_hours_allocated"]) == pytest.approx(GPU_HOURS)
    assert samples['slurmgpu_partition_gpu_hours_allocated{partition="gpu"}'] == "4.5"
    assert samples['slurmgpu_partition_capacity_gpu_hours{partition="gpu"}'] == "192"
    assert 'slurmgpu_partition_capacity_gpu_hours{partition="cpu"}' not in samples
    assert samples['slurmgpu_qos_preemptions{qos="p2",tier="p2"}'] == "1"
    assert float(samples['slurmgpu_partition_gpu_util_mean_ratio{partition="gpu"}']) == 0.5


def test_dated_output_name(tmp_path):
    result = report("--format", "json", "--output", str(tmp_path / "report-%Y.json"))
    assert result.exit_code == 0, result.stderr
    (written,) = tmp_path.iterdir()
    assert re.fullmatch(r"report-20\d\d\.json", written.name)


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--since", "yesterday"], 2, "--since 'yesterday': use an ISO date/time"),
        (["--since", "2026-12-01", "--until", "2026-11-30"], 2, "is not before --until"),
        (["--output", "/nonexistent-dir/r.txt"], 2, "directory /nonexistent-dir does not exist"),
        (["--capacity", "gpu"], 2, "--capacity"),
    ],
)
def test_user_mistakes_are_one_line(args, code, message):
    result = CliRunner().invoke(main, ["report", "--sacct-file", str(DUMP), *args])
    assert result.exit_code == code
    assert result.stderr.startswith("slurmgpu: error: ")
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


def test_dump_without_a_required_column(tmp_path):
    dump = tmp_path / "cut.txt"
    lines = DUMP.read_text().splitlines()
    dump.write_text("\n".join(ln.rsplit("|", 17)[0] for ln in lines) + "\n")  # cut to 5 columns
    result = CliRunner().invoke(main, ["report", "--sacct-file", str(dump), *WINDOW])
    assert result.exit_code == 1
    assert result.stderr.startswith("slurmgpu: error: ")
    assert "required column" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_dump_without_window_covers_its_whole_span_like_analyze():
    runner = CliRunner()
    rep = runner.invoke(main, ["report", "--sacct-file", str(DUMP), "--format", "json"])
    ana = runner.invoke(main, ["analyze", "--sacct-file", str(DUMP), "--format", "json"])
    assert rep.exit_code == 0 and ana.exit_code == 0, rep.output + ana.output
    r, a = json.loads(rep.stdout), json.loads(ana.stdout)
    assert r["window"] == a["window"]
    assert r["totals"]["jobs"] == a["totals"]["jobs"]
    assert r["totals"]["rows_outside_window"] == 0  # nothing of the dump is left out
