"""`report --trend monthly`: each month's numbers are those of an analysis of that month;
the store (read a month at a time) gives the same trend as the text, field by field."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmgpu.accounting import store, trend
from slurmgpu.accounting.options import AnalysisOptions
from slurmgpu.accounting.pipeline import analyze
from slurmgpu.cli import main
from slurmgpu.views.report import check_prom_text

from .test_store import DUMPS, close

DATA = Path(__file__).resolve().parents[2] / "data" / "sacct"
MIX = str(DATA / "synthetic-mix.txt")
XDMOD = str(DATA / "xdmod-shredder.txt")
NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def _trend(**kw):
    return trend.trend(AnalysisOptions(now=NOW, **kw)).to_json()


def _same(a, b):
    a, b = dict(a), dict(b)
    assert a.pop("source")["kind"] != b.pop("source")["kind"]
    assert close(a, b)


@pytest.mark.parametrize("name", DUMPS)
def test_store_trend_equals_text_trend(tmp_path, name):
    path = str(DATA / name)
    store.ingest(tmp_path / "s", [path])
    _same(_trend(files=[path]), _trend(store=str(tmp_path / "s")))


def test_store_trend_over_many_months_and_clusters_equals_text(tmp_path):
    """xdmod-shredder: three clusters over five years; a pending array range stays open
    month after month (carried, not re-read)."""
    store.ingest(tmp_path / "s", [MIX, XDMOD])
    text, mine = _trend(files=[MIX, XDMOD]), _trend(store=str(tmp_path / "s"))
    assert len(text["months"]) > 60
    _same(text, mine)
    window = dict(since=datetime(2016, 2, 10, tzinfo=UTC), until=datetime(2016, 9, 3, tzinfo=UTC))
    _same(_trend(files=[XDMOD], **window), _trend(store=str(tmp_path / "s"), **window))
    one = _trend(store=str(tmp_path / "s"), clusters=("c1",))
    assert one["months"] == ["2025-12"]
    _same(_trend(files=[MIX]), one)


def test_each_month_is_the_analysis_of_that_month():
    """Allocation, use, capacity and fit shares of a month = analyze(since=month, until=next)."""
    kw = dict(files=[XDMOD], capacity={"general-compute": 100.0})
    doc = _trend(**kw)
    months = [(r["month"], r) for r in doc["rows"]]
    checked = 0
    for month in ("2015-06", "2015-07", "2016-08"):
        a = datetime.strptime(month, "%Y-%m").replace(tzinfo=UTC)
        b = a.replace(month=a.month + 1)
        since = max(a, datetime.fromisoformat(doc["window"]["since"]))
        ana = analyze(AnalysisOptions(now=NOW, since=since, until=b, **kw)).document
        rows = {r["partition"]: r for m, r in months if m == month}
        for group in ana.by_partition:
            row = rows[group.name]
            assert row["gpu_hours_allocated"] == group.gpu_hours_allocated
            assert row["jobs"] == group.jobs
            assert row["allocation_ratio"] == group.allocation_ratio
            assert row["gpu_hours_used"] == group.gpu_hours_used
            assert row["fit"] == group.fit_fraction.to_json()
            checked += 1
        assert rows["*"]["gpu_hours_allocated"] == ana.totals.gpu_hours_allocated
        assert rows["*"]["jobs"] == ana.totals.jobs
    assert checked >= 3


def test_waits_are_of_the_runs_started_in_the_month():
    doc = _trend(files=[MIX])
    frame = analyze(AnalysisOptions(now=NOW, files=[MIX])).frame
    started = frame[frame["start"].notna()]
    waits = (started["start"] - started["submit"]).dt.total_seconds()
    total = doc["rows"][0]
    assert total["partition"] == "*" and total["runs_started"] == len(waits)
    assert total["wait_mean_s"] == pytest.approx(waits.mean())
    assert total["wait_p95_s"] == pytest.approx(waits.quantile(0.95))


def test_month_bounds_clip_to_the_window():
    b = trend.month_bounds(datetime(2025, 11, 20, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC))
    assert [(x.isoformat()[:10], y.isoformat()[:10]) for x, y in b] == [
        ("2025-11-20", "2025-12-01"),
        ("2025-12-01", "2026-01-01"),
        ("2026-01-01", "2026-01-02"),
    ]


def test_cli_trend_every_format_from_store_and_text(tmp_path):
    s = str(tmp_path / "s")
    run = CliRunner().invoke
    assert run(main, ["ingest", "--store", s, "--sacct-file", XDMOD]).exit_code == 0
    outs = {}
    for src in (["--store", s], ["--sacct-file", XDMOD]):
        for fmt in ("text", "json", "html", "prom"):
            r = run(main, ["report", *src, "--trend", "monthly", "--format", fmt])
            assert r.exit_code == 0, r.output
            outs[(src[0], fmt)] = r.output
    text = outs[("--store", "text")]
    assert "2015-06" in text and "(all)" in text and "wait p95" in text
    check_prom_text(outs[("--store", "prom")])
    assert 'slurmgpu_trend_jobs{month="2015-06",partition="*"}' in outs[("--store", "prom")]
    assert outs[("--store", "prom")] == outs[("--sacct-file", "prom")]
    assert outs[("--store", "html")].startswith("<!DOCTYPE html>")
    doc = json.loads(outs[("--store", "json")])
    assert doc["kind"] == "trend" and doc["freq"] == "monthly"
    out = tmp_path / "trend.json"
    r = run(main, ["report", "--store", s, "--trend", "monthly", "--format", "json", "-o", out])
    assert r.exit_code == 0 and json.loads(out.read_text())["months"] == doc["months"]
    bad = run(main, ["report", "--store", s, "--trend", "weekly"])
    assert bad.exit_code == 2
