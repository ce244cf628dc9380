"""`slurmgpu ingest` of `sacct --json` dumps (the recorded 22.05/24.11/25.11 documents), and
SLUIDs (26.05's `jobs[].sluid`) as a run's key where present."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmgpu.accounting import store
from slurmgpu.cli import main

from .test_store import assert_same_document, store_doc, text_doc

DATA = Path(__file__).resolve().parents[2] / "data" / "sacct"


@pytest.mark.parametrize("version", ["22.05", "24.11", "25.11"])
def test_json_dump_store_equals_its_analysis(tmp_path, version):
    path = str(DATA / f"slurm-{version}-harness.json")
    r = CliRunner().invoke(main, ["ingest", "--store", str(tmp_path / "s"), "--sacct-file", path])
    assert r.exit_code == 0, r.output
    assert_same_document(text_doc([path]).document, store_doc(tmp_path / "s").document)


def test_json_and_text_of_the_same_jobs_are_one_run_each(tmp_path):
    text, js = (str(DATA / f"slurm-25.11-harness.{x}") for x in ("txt", "json"))
    s = tmp_path / "s"
    store.ingest(s, [text])
    again = store.ingest(s, [js])
    runs = len(text_doc([text]).frame)
    assert again.runs_stored == runs and again.runs_superseded == runs
    assert store_doc(s).document.by_partition == text_doc([text]).document.by_partition


def _with_sluids(tmp_path: Path, name: str, sluids: list[str]) -> str:
    doc = json.loads((DATA / "slurm-25.11-harness.json").read_text())
    for job, sluid in zip(doc["jobs"], sluids, strict=False):
        job["sluid"] = sluid
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


def test_sluid_keys_where_present(tmp_path):
    """A SLUID is stored; a row without one is the same run as the row with one; two rows
    of the same job id, times and different SLUIDs are two runs (a job id reused)."""
    n = len(json.loads((DATA / "slurm-25.11-harness.json").read_text())["jobs"])
    first = _with_sluids(tmp_path, "a.json", [f"s{i:013d}" for i in range(n)])
    s = tmp_path / "s"
    store.ingest(s, [str(DATA / "slurm-25.11-harness.txt")])
    store.ingest(s, [first])
    frame = store_doc(s).frame
    assert sorted(frame["sluid"].astype(str)) == [f"s{i:013d}" for i in range(n)]
    assert store.ingest(s, [str(DATA / "slurm-25.11-harness.json")]).runs_stored == n
    other = _with_sluids(
        tmp_path, "b.json", ["sZZZZZZZZZZZZZ"] + [f"s{i:013d}" for i in range(1, n)]
    )
    assert store.ingest(s, [other]).runs_stored == n + 1
