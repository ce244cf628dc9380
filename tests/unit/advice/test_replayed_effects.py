"""`advice.analyze` fills each recommendation's `estimated_effect.replay` from a replay of the
window's own runs when the cluster's capacity is known (issue #10, item 6)."""

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from slurmgpu.accounting import AnalysisOptions
from slurmgpu.accounting.document import AnalysisDocument
from slurmgpu.advice import analyze
from slurmgpu.errors import UsageError

DUMP = Path(__file__).resolve().parents[2] / "data" / "sacct" / "synthetic-mix.txt"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _analyze(**kw):
    return analyze(AnalysisOptions(files=[DUMP], now=NOW, **kw)).document


def test_with_capacity_each_change_is_replayed_and_round_trips():
    doc = _analyze(capacity={"gpu": 16, "mig": 8}, gpu_types={"gpu": "h100"})
    with_change = [r for r in doc.recommendations if r.changes]
    assert with_change, "the dump's preemption makes a tier_adjust with a change"
    for rec in with_change:
        assert rec.replayed is not None
        assert rec.replayed.changes == rec.changes
        before, after = rec.replayed.allocation_ratio
        assert 0 < before <= 1 and 0 < after <= 1
        blob = rec.to_json()["estimated_effect"]["replay"]
        assert blob["basis"] == "replay" and blob["changes"] == list(rec.changes)
        assert {p["partition"] for p in blob["by_partition"]} == {"gpu", "mig"}
    text = json.dumps(doc.to_json())
    assert AnalysisDocument.from_json(json.loads(text)).to_json() == doc.to_json()


def test_never_or_no_capacity_leaves_the_rule_estimate_alone_and_says_why():
    never = _analyze(capacity={"gpu": 16, "mig": 8}, replay_effects="never")
    assert all(r.replayed is None for r in never.recommendations)
    assert not any("replayed" in n for n in never.notes)
    unknown = _analyze()
    assert all(r.replayed is None for r in unknown.recommendations)
    assert any("not replayed: the cluster's capacity is unknown" in n for n in unknown.notes)
    for rec in unknown.recommendations:
        assert "replay" not in rec.to_json()["estimated_effect"]


def test_a_bad_mode_is_named():
    with pytest.raises(UsageError, match="replay effects 'sometimes'"):
        _analyze(replay_effects="sometimes")


def test_text_and_html_show_the_replayed_effect():
    from slurmgpu.views.report import render_report

    doc = _analyze(capacity={"gpu": 16, "mig": 8}, gpu_types={"gpu": "h100"})
    text = render_report(doc, "text")
    assert "     replayed: allocation " in text and "p95 wait" in text
    html = render_report(doc, "html")
    assert "Replayed on this window&#39;s jobs: allocation" in html or (
        "Replayed on this window's jobs: allocation" in html
    )
