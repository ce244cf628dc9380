"""The typed analysis document: frozen, JSON in contract order, read back by from_json, and
one meaning of `gpu_hours` across its tables (recorded dumps in tests/data/sacct)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from slurmgpu.accounting import AnalysisDocument, AnalysisOptions, analyze
from slurmgpu.accounting.document import GroupRow, GroupStats, Totals

SACCT = Path(__file__).resolve().parents[2] / "data" / "sacct"
DUMPS = ["synthetic-mix.txt", "uva-fixture.txt", "slurm-22.05-harness.txt"]

GROUP_KEYS = [
    "jobs", "gpu_jobs", "pending_jobs", "gpu_hours_allocated", "gpu_hours_used",
    "capacity_gpu_hours", "allocation_ratio", "idle_gpu_hours", "pending_gpu_hours",
    "gpu_util_mean", "util_known_gpu_hours", "waste_gpu_hours", "low_memory_gpu_hours",
    "wait_s", "preemptions", "requeues", "gpu_hours_lost_to_preemption",
    "gpu_hours_lost_to_requeue",
]  # fmt: skip
DOCUMENT_KEYS = [
    "schema_version", "generated_at", "window", "source", "totals", "utilization_basis",
    "measure_warnings", "by_partition", "by_cluster", "by_qos", "by_tier", "by_account",
    "by_user", "by_kind",
    "fit_fraction", "timeseries", "rejected", "notes", "recommendations", "by_accelerator",
    "energy", "energy_cost",
]  # fmt: skip


@pytest.fixture(scope="module", params=DUMPS)
def document(request) -> AnalysisDocument:
    result = analyze(AnalysisOptions(files=[SACCT / request.param], capacity={"gpu": 16}))
    assert result.document.to_json() == result.to_json() == result.to_dict()
    return result.document


def _plain(value) -> bool:
    """Only JSON's own types, all the way down."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return value is None or type(value) in (str, int, float, bool)


def test_to_json_is_plain_json_in_contract_order(document):
    data = document.to_json()
    assert _plain(data)
    json.dumps(data, allow_nan=False)  # raises on NaN/inf
    assert list(data) == DOCUMENT_KEYS
    assert list(data["totals"])[: len(GROUP_KEYS)] == GROUP_KEYS
    for row in data["by_partition"]:
        assert list(row) == ["partition", *GROUP_KEYS, "fit_fraction"]
    for row in data["by_qos"]:
        assert list(row) == ["qos", *GROUP_KEYS, "tier"]
    for row in data["by_cluster"]:
        assert list(row) == ["cluster", *GROUP_KEYS]
    for row in data["by_user"]:
        assert list(row) == ["user", *GROUP_KEYS]
    assert "backend_note" not in data["source"] and "capacity_error" not in data["source"]


def test_from_json_reads_back_the_same_document(document):
    again = AnalysisDocument.from_json(json.loads(json.dumps(document.to_json())))
    assert again == document
    assert again.to_json() == document.to_json()


def test_document_is_frozen(document):
    with pytest.raises(dataclasses.FrozenInstanceError):
        document.totals.jobs = 0  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        document.by_partition[0].name = "other"  # type: ignore[misc]
    assert isinstance(document.by_partition, tuple)
    assert isinstance(document.totals, Totals) and isinstance(document.totals, GroupStats)
    assert all(isinstance(r, GroupRow) for r in document.by_qos)


def test_gpu_hours_mean_one_thing_in_every_table(document):
    """Allocated GPU-hours: every grouping and the time series add up to the total."""
    total = document.totals.gpu_hours_allocated
    assert total > 0
    for attr, _key in AnalysisDocument.GROUPINGS:
        rows = getattr(document, attr)
        assert sum(r.gpu_hours_allocated for r in rows) == pytest.approx(total, rel=1e-9)
    series = sum(p.gpu_hours_allocated for p in document.timeseries.points)
    assert series == pytest.approx(total, rel=1e-6)
    for p in document.timeseries.points:
        assert sum(p.by_partition.values()) == pytest.approx(p.gpu_hours_allocated, abs=1e-6)


def test_rows_reconcile_and_waits_are_typed(document):
    t = document.totals
    assert t.rows_read == t.rows_analyzed + t.rows_rejected
    assert len(document.rejected) == min(t.rows_rejected, 100)
    assert sum(t.rejected_reasons.values()) == t.rows_rejected
    for row in (t, *document.by_partition):
        w = row.wait_s
        if w.p50 is not None:
            assert w.p50 <= w.p95 <= w.max
