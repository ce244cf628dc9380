"""Report output plumbing: time options, dated paths, atomic writes, the progress line."""

from __future__ import annotations

import datetime as dt
import io
import re
import shlex
from pathlib import Path

import pytest

from slurmgpu.accounting.when import parse_when
from slurmgpu.cli import HELP_OPTION_NAMES
from slurmgpu.cli.progress import LoadProgress
from slurmgpu.cli.report import expand_output, report, write_report
from slurmgpu.errors import SlurmgpuError, UsageError
from slurmgpu.util.atomic import write_atomic

NOW = dt.datetime(2026, 12, 2, 14, 0, tzinfo=dt.UTC)
ROOT = Path(__file__).resolve().parents[3]


def test_expand_output():
    assert expand_output("r-%Y-%m-%d.html", NOW) == "r-2026-12-02.html"
    assert expand_output("plain.html", NOW) == "plain.html"


def test_write_atomic_temp_name_is_invisible_to_the_textfile_collector(tmp_path):
    seen = []
    write_atomic(tmp_path / "slurmgpu.prom", "x 1\n", validate=seen.append)
    (tmp,) = seen
    assert tmp.parent == tmp_path
    assert re.fullmatch(r"\.slurmgpu\.prom\..+\.tmp", tmp.name)
    assert not tmp.name.endswith(".prom")  # node_exporter reads only *.prom
    assert not tmp.exists()


def test_write_report_replaces_whole_file_mode_0644_no_backup(tmp_path):
    target = tmp_path / "slurmgpu.prom"
    target.write_text("old 1\n")
    write_report(target, "# TYPE slurmgpu_jobs gauge\nslurmgpu_jobs 3\n", "prom")
    assert target.read_text() == "# TYPE slurmgpu_jobs gauge\nslurmgpu_jobs 3\n"
    assert target.stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["slurmgpu.prom"]


@pytest.mark.parametrize(("fmt", "bad"), [("prom", "slurmgpu_jobs three\n"), ("json", "{x")])
def test_write_report_invalid_output_leaves_old_file(tmp_path, fmt, bad):
    target = tmp_path / f"r.{fmt}"
    target.write_text("old\n")
    with pytest.raises(SlurmgpuError, match=f"{fmt} report failed validation"):
        write_report(target, bad, fmt)
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == [f"r.{fmt}"]  # no temp file left


def test_write_report_missing_directory(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        write_report(tmp_path / "nope" / "r.html", "<html>", "html")
    with pytest.raises(UsageError, match="is a directory"):
        write_report(tmp_path, "<html>", "html")


def test_progress_is_silent_without_a_terminal(tmp_path):
    stream = io.StringIO()  # like stderr under cron: isatty() is False
    with LoadProgress("reading", [], stream=stream, delay_s=0, interval_s=0.01) as progress:
        assert not progress.enabled
    assert stream.getvalue() == ""


def test_progress_fraction_follows_the_open_file(tmp_path):
    dump = tmp_path / "dump.txt"
    dump.write_bytes(b"x" * 4096)
    progress = LoadProgress("reading", [dump], enabled=False)
    with open(dump, "rb", buffering=0) as fh:  # unbuffered: the position is what was read
        fh.read(1024)
        assert progress.fraction() == pytest.approx(0.25)
        assert "25% (0/0 MiB)" in progress.line(3.0)
    assert progress.fraction() == 1.0  # read and closed: done


def test_progress_draws_and_clears_on_a_terminal(tmp_path):
    stream = io.StringIO()
    with LoadProgress(
        "querying sacct", [], stream=stream, enabled=True, delay_s=0, interval_s=0.01
    ):
        import time

        time.sleep(0.1)
    out = stream.getvalue()
    assert "querying sacct: 0s" in out
    assert out.endswith("\r\x1b[K")


def _commands(path: Path, prefix: str) -> list[list[str]]:
    lines = []
    # the units say @SLURMGPU@ where install-units puts the installed command
    # install-units fills @SLURMGPU@, and @POLICY@ with `--policy FILE` or nothing
    text = path.read_text().replace("@SLURMGPU@", "slurmgpu").replace(" @POLICY@", "")
    for line in text.splitlines():
        if prefix in line and not line.lstrip().startswith("#"):
            argv = shlex.split(line[line.index(prefix) :])
            lines.append(argv[1:])
    return lines


@pytest.mark.parametrize(
    "unit",
    [
        "etc/systemd/slurmgpu-report.service",
        "etc/systemd/slurmgpu-report-prom.service",
        "etc/cron/slurmgpu-report",
    ],
)
def test_example_units_use_valid_report_options(unit):
    path = ROOT / unit
    commands = _commands(path, "slurmgpu report")
    assert commands, f"no slurmgpu report command in {unit}"
    for argv in commands:
        assert argv[0] == "report"
        args = [a.replace("%%", "%").replace("\\%", "%") for a in argv[1:]]
        ctx = report.make_context(
            "report", args, help_option_names=HELP_OPTION_NAMES
        )  # raises on an unknown option or value
        assert ctx.params["fmt"] in ("html", "json", "prom")
        assert ctx.params["output"].startswith("/var/lib/")
        parse_when(ctx.params["since"], now=NOW, option="--since")


def test_progress_says_analyzing_once_everything_is_read(tmp_path):
    dump = tmp_path / "dump.txt"
    dump.write_bytes(b"x" * 2048)
    progress = LoadProgress("reading", [dump], enabled=False)
    with open(dump, "rb") as fh:
        fh.read()
    assert progress.line(4.0) == "reading: read 0 MiB, analyzing 4s"


def test_progress_counts_earlier_files_as_read(tmp_path):
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_bytes(b"x" * 3000)
    second.write_bytes(b"y" * 1000)
    progress = LoadProgress("reading", [first, second], enabled=False)
    with open(second, "rb", buffering=0) as fh:
        fh.read(500)
        assert progress.fraction() == pytest.approx(3500 / 4000)


def test_fit_by_partition_in_text_and_html():
    import json

    from slurmgpu.accounting.document import AnalysisDocument
    from slurmgpu.views.report import render_html, render_text

    data = Path(__file__).resolve().parents[2] / "data" / "reports" / "analysis-week.json"
    analysis = json.loads(data.read_text())
    analysis["by_partition"][0]["partition"] = "t4"
    analysis["by_partition"][0]["fit_fraction"] = {
        "1/7": {"jobs": 0.0, "gpu_hours": 0.0}, "1/4": {"jobs": 0.5, "gpu_hours": 0.4},
        "1/2": {"jobs": 1.0, "gpu_hours": 1.0},
        "known_runs": 2, "unknown_runs": 3, "unknown_gpu_hours": 1.5,
    }  # fmt: skip
    analysis["fit_fraction"].update(known_runs=2, unknown_runs=3, unknown_gpu_hours=1.5)
    document = AnalysisDocument.from_json(analysis)
    text = render_text(document)
    assert "By partition" in text and "3 runs" in text
    assert "shares are over the 2 GPU runs with a known need; 3 runs" in text
    html = render_html(document)
    assert 'id="fit-by-partition"' in html and "<td>t4</td>" in html


@pytest.mark.parametrize("command", ["analyze", "report"])
def test_analyze_and_report_draw_the_progress_line(monkeypatch, command):
    """Both commands run their analysis inside the progress line (drawn on a terminal)."""
    from click.testing import CliRunner

    from slurmgpu.cli import main
    from slurmgpu.cli import progress as progress_module

    drawn = io.StringIO()
    seen = []

    class OnATerminal(LoadProgress):
        def __init__(self, label, files=(), **kwargs):
            seen.append((label, [Path(f).name for f in files]))
            super().__init__(label, files, stream=drawn, enabled=True, delay_s=0, interval_s=0.01)

        def __exit__(self, *exc):
            import time

            time.sleep(0.05)  # let the drawing thread run once
            return super().__exit__(*exc)

    monkeypatch.setattr(progress_module, "LoadProgress", OnATerminal)
    dump = ROOT / "tests" / "data" / "sacct" / "uva-fixture.txt"
    out = CliRunner().invoke(main, [command, "--sacct-file", str(dump), "--format", "json"])
    assert out.exit_code == 0, out.output
    assert seen == [("reading sacct dumps", ["uva-fixture.txt"])]
    assert "reading sacct dumps" in drawn.getvalue() and drawn.getvalue().endswith("\r\x1b[K")
