"""Delta files, `slurmgpu store compact` and `store prune`: an ingest that supersedes no
stored row writes only its new rows; compacting merges a month's files into one without
changing a number, crash-safe; pruning drops old months."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmgpu.accounting import store, store_compact
from slurmgpu.cli import main
from slurmgpu.errors import StoreError, UsageError

from .test_store import (
    MIX,
    XDMOD,
    assert_same_document,
    kill_at_the_first_new_file,
    store_doc,
    text_doc,
)

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def _disjoint(path: str, tmp_path: Path, n: int = 3) -> list[str]:
    """`n` dumps with the jobs of `path` dealt out (no job in two)."""
    header, *lines = Path(path).read_text().splitlines()
    groups: dict[str, list[str]] = {}
    for line in lines:
        groups.setdefault(line.split("|")[0].split(".")[0], []).append(line)
    out = []
    for i in range(n):
        f = tmp_path / f"part{i}.txt"
        jobs = list(groups)[i::n]
        f.write_text("\n".join([header, *(x for j in jobs for x in groups[j])]) + "\n")
        out.append(str(f))
    return out


def _files(s: Path) -> set[str]:
    return {p.relative_to(s).as_posix() for p in s.glob("cluster=*/month=*/*")}


def test_disjoint_ingests_append_deltas_and_compact_merges_them(tmp_path):
    s = tmp_path / "s"
    parts = _disjoint(MIX, tmp_path)
    for f in parts:
        store.ingest(s, [f])
    manifest = json.loads((s / "_manifest.json").read_text())
    (part,) = manifest["partitions"]
    assert len(store.part_files(part)) == 3  # a base file and two deltas
    assert _files(s) == set(store.part_files(part))
    whole = text_doc(parts).document
    before = store_doc(s).document
    assert_same_document(whole, before)
    dry = store_compact.compact(s, dry_run=True, now=NOW)
    assert dry.partitions == ("cluster=c1/month=2025-12",) and dry.files_before == 3
    assert len(_files(s)) == 3
    done = store_compact.compact(s, now=NOW)
    assert (done.files_before, done.files_after) == (3, 1)
    (part,) = json.loads((s / "_manifest.json").read_text())["partitions"]
    assert "deltas" not in part and _files(s) == {part["path"]}
    assert part["rows"] == dry.rows
    assert store_doc(s).document.to_json() == before.to_json()
    again = store_compact.compact(s, now=NOW)
    assert again.partitions == ()


def test_compact_leaves_the_current_month_unless_told(tmp_path):
    s = tmp_path / "s"
    for f in _disjoint(MIX, tmp_path, 2):
        store.ingest(s, [f])
    in_dec = datetime(2025, 12, 20, tzinfo=UTC)
    assert store_compact.compact(s, now=in_dec).partitions == ()
    assert store_compact.compact(s, before="2026-01", now=in_dec).files_after == 1
    with pytest.raises(UsageError):
        store_compact.compact(s, before="2026-13")


def test_an_overlap_rewrites_the_partition_as_one_file(tmp_path):
    s = tmp_path / "s"
    a, b = _disjoint(MIX, tmp_path, 2)
    store.ingest(s, [a])
    store.ingest(s, [b])
    store.ingest(s, [MIX])  # every run again: all stored rows superseded
    (part,) = json.loads((s / "_manifest.json").read_text())["partitions"]
    assert len(store.part_files(part)) == 1
    doc = store_doc(s).document.to_json()
    assert doc["by_partition"] == text_doc([MIX]).document.to_json()["by_partition"]


def test_prune_keeps_the_last_months(tmp_path):
    s = tmp_path / "s"
    store.ingest(s, [MIX, XDMOD])
    months = lambda: sorted(p["month"] for p in store.read_manifest(s)["partitions"])  # noqa: E731
    assert months() == ["2015-06", "2016-08", "2020-07", "2025-12"]
    dry = store_compact.prune(s, keep_months=13, dry_run=True, now=NOW)
    assert len(dry.partitions) == 3 and months() == ["2015-06", "2016-08", "2020-07", "2025-12"]
    done = store_compact.prune(s, keep_months=13, now=NOW)
    assert done.rows == dry.rows > 0
    assert months() == ["2025-12"]
    assert sorted(p.name for p in s.iterdir() if p.is_dir()) == ["cluster=c1"]
    manifest = store.read_manifest(s)
    assert {p["month"] for p in manifest["pruned"]} == {"2015-06", "2016-08", "2020-07"}
    assert (
        store_doc(s).document.to_json()["by_partition"]
        == (text_doc([MIX]).document.to_json()["by_partition"])
    )
    store_compact.prune(s, keep_months=1, now=datetime(2027, 3, 1, tzinfo=UTC))
    with pytest.raises(StoreError, match="pruned"):
        store_doc(s)
    with pytest.raises(UsageError):
        store_compact.prune(s, keep_months=0)


def test_a_sigkilled_compact_leaves_the_store_and_the_next_completes(tmp_path):
    s = tmp_path / "s"
    (tmp_path / "x").mkdir()
    for f in _disjoint(MIX, tmp_path) + _disjoint(XDMOD, tmp_path / "x"):
        store.ingest(s, [f])
    before = (s / "_manifest.json").read_bytes()
    doc = store_doc(s).document.to_json()
    listed = {s / p for p in _files(s)}
    env = {**os.environ, store.SLEEP_ENV: "60"}
    cmd = [sys.executable, "-m", "slurmgpu", "store", "compact", "--store", str(s)]
    kill_at_the_first_new_file(cmd, env, s, listed)
    assert (s / "_manifest.json").read_bytes() == before
    assert store_doc(s).document.to_json() == doc
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((s / "_manifest.json").read_text())
    assert all(len(store.part_files(p)) == 1 for p in manifest["partitions"])
    assert _files(s) == {p["path"] for p in manifest["partitions"]}
    assert store_doc(s).document.to_json() == doc


def test_cli_store_compact_and_prune(tmp_path):
    s = str(tmp_path / "s")
    run = CliRunner().invoke
    for f in _disjoint(MIX, tmp_path, 2):
        assert run(main, ["ingest", "--store", s, "--sacct-file", f]).exit_code == 0
    r = run(main, ["store", "compact", "--store", s, "--dry-run"])
    assert r.exit_code == 0 and "would be compacted (2 file(s) -> 1" in r.output
    r = run(main, ["store", "compact", "--store", s])
    assert r.exit_code == 0 and "1 partition(s) compacted" in r.output
    r = run(main, ["store", "prune", "--store", s, "--keep-months", "1", "--dry-run"])
    assert r.exit_code == 0 and "would be pruned" in r.output
    r = run(main, ["store", "prune", "--store", s, "--keep-months", "0"])
    assert r.exit_code == 2 and r.output.startswith("slurmgpu: error: ")
    r = run(main, ["store", "compact", "--store", str(tmp_path / "none")])
    assert r.exit_code == 1 and "no accounting store" in r.output
