"""The accounting store (`slurmgpu ingest`, `analyze --store`): the analysis of the store is
the analysis of the text, re-ingesting changes no number, a run's later row replaces its
earlier one, and a SIGKILLed ingest leaves the store as it was."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pyarrow.dataset as ds
import pytest
from click.testing import CliRunner

from slurmgpu.accounting import store
from slurmgpu.accounting.options import AnalysisOptions
from slurmgpu.accounting.pipeline import analyze
from slurmgpu.cli import HELP_OPTION_NAMES, main
from slurmgpu.errors import StoreError

DATA = Path(__file__).resolve().parents[2] / "data" / "sacct"
MIX = str(DATA / "synthetic-mix.txt")
XDMOD = str(DATA / "xdmod-shredder.txt")
# every dump of tests/data/sacct that analyze accepts (uva-18396137-verbatim.txt has no QOS)
DUMPS = ["slurm-22.05-harness.txt", "synthetic-mix.txt", "uva-fixture.txt", "xdmod-shredder.txt"]
NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
# the row ledger: what was read, not what was analyzed (an overlap reads rows twice)
LEDGER = {"rows_read", "rows_analyzed", "rows_rejected", "step_rows", "blank_lines",
          "rows_overlap_skipped", "rejected_reasons"}  # fmt: skip


def close(a, b) -> bool:
    """JSON values equal, floats up to rounding: a store merged from several ingests holds
    the runs in ingest order, so sums may add in another order than the one text's."""
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return a == pytest.approx(b, rel=1e-12, abs=1e-12)
    return a == b


def text_doc(files, **kw):
    return analyze(AnalysisOptions(files=list(files), now=NOW, **kw))


def store_doc(path, **kw):
    return analyze(AnalysisOptions(store=str(path), now=NOW, **kw))


def assert_same_document(a, b):
    """Field by field: every key of the JSON equal, the source says `store`."""
    ja, jb = a.to_json(), b.to_json()
    assert list(ja) == list(jb)
    for key in ja:
        if key == "source":
            assert jb["source"]["kind"] == "store"
            assert {**ja["source"], "kind": "store"} == jb["source"]
        else:
            assert ja[key] == jb[key], key


@pytest.mark.parametrize("name", DUMPS)
def test_store_document_equals_text_document(tmp_path, name):
    path = str(DATA / name)
    summary = store.ingest(tmp_path / "s", [path])
    text, stored = text_doc([path]), store_doc(tmp_path / "s")
    assert summary.runs_stored == len(text.frame) + text.document.totals.rows_outside_window
    assert_same_document(text.document, stored.document)
    pd.testing.assert_frame_equal(text.frame, stored.frame)


def test_store_document_equals_text_with_analysis_options(tmp_path):
    """Tier and shard fractions are derived on reading, so any analysis options apply."""
    store.ingest(tmp_path / "s", [MIX], usage_sums_gpus=True)
    kw = dict(
        tiers={"p1": "gold", "p2": "bronze"},
        shards_per_gpu={"gpu": 8.0},
        capacity={"gpu": 16.0, "mig": 8.0},
        slurm_version="24.05",
        since=datetime(2025, 12, 1, 0, 40, tzinfo=UTC),
        until=datetime(2025, 12, 1, 1, 30, tzinfo=UTC),
    )
    text, stored = text_doc([MIX], **kw), store_doc(tmp_path / "s", **kw)
    assert text.document.totals.rows_outside_window > 0
    assert {r.name for r in text.document.by_tier} >= {"gold", "bronze"}
    assert_same_document(text.document, stored.document)


def test_store_with_two_files_and_a_cluster_choice(tmp_path):
    store.ingest(tmp_path / "s", [MIX, XDMOD])
    assert_same_document(text_doc([MIX, XDMOD]).document, store_doc(tmp_path / "s").document)
    one = store_doc(tmp_path / "s", clusters=("c1",))
    assert_same_document(text_doc([MIX]).document, one.document)
    with pytest.raises(StoreError, match="no cluster nope"):
        store_doc(tmp_path / "s", clusters=("nope",))


def test_hive_folders_readable_by_a_plain_dataset(tmp_path):
    store.ingest(tmp_path / "s", [MIX, XDMOD])
    folders = sorted(p.parent.relative_to(tmp_path / "s").as_posix()
                     for p in (tmp_path / "s").rglob("*.parquet"))  # fmt: skip
    assert folders == ["cluster=c1/month=2025-12", "cluster=phillips/month=2020-07",
                       "cluster=ub-hpc/month=2015-06", "cluster=ub-hpc/month=2016-08"]  # fmt: skip
    table = ds.dataset(tmp_path / "s", format="parquet", partitioning="hive").to_table()
    runs = len(text_doc([MIX, XDMOD]).frame)
    assert table.num_rows == runs
    assert set(table.column("cluster").to_pylist()) == {"c1", "phillips", "ub-hpc"}


def test_reingest_same_dump_changes_nothing(tmp_path):
    s = tmp_path / "s"
    store.ingest(s, [MIX])
    before = (s / "_manifest.json").read_bytes()
    doc = store_doc(s).document.to_json()
    copy = tmp_path / "copy.txt"
    copy.write_bytes(Path(MIX).read_bytes())
    again = store.ingest(s, [MIX, str(copy)])
    assert again.files_read == () and again.files_skipped == (MIX, str(copy))
    assert (s / "_manifest.json").read_bytes() == before
    assert store_doc(s).document.to_json() == doc


def _split_by_job(path: str, tmp_path: Path) -> tuple[str, str]:
    """Two dumps of one: the first 2/3 of the jobs and the last 2/3 (a third in both)."""
    header, *lines = Path(path).read_text().splitlines()
    groups: dict[str, list[str]] = {}
    for line in lines:
        groups.setdefault(line.split("|")[0].split(".")[0], []).append(line)
    jobs = list(groups)
    cut1, cut2 = len(jobs) // 3, 2 * len(jobs) // 3
    out = []
    for name, part in (("a.txt", jobs[:cut2]), ("b.txt", jobs[cut1:])):
        f = tmp_path / name
        f.write_text("\n".join([header, *(x for j in part for x in groups[j])]) + "\n")
        out.append(str(f))
    return out[0], out[1]


@pytest.mark.parametrize("order", ["ab", "ba"])
def test_overlapping_dumps_neither_lose_nor_double_a_run(tmp_path, order):
    a, b = _split_by_job(MIX, tmp_path)
    s = tmp_path / "s"
    for f in (a, b) if order == "ab" else (b, a):
        store.ingest(s, [f])
    full, stored = text_doc([MIX]).document.to_json(), store_doc(s).document.to_json()
    assert stored["totals"]["rows_overlap_skipped"] > 0  # the third in both, counted once
    for key in full:
        if key == "totals":
            differ = {k for k in full[key] if not close(full[key][k], stored[key][k])}
            assert differ <= LEDGER, differ
        elif key not in ("source", "rejected"):  # (rejected rows name the split files)
            assert close(full[key], stored[key]), key
    # and once more: nothing changes
    store.ingest(s, [a, b])
    assert store_doc(s).document.to_json() == stored


def _running_then_ended(tmp_path: Path) -> tuple[str, str]:
    """The mix with job 1012 RUNNING (as dumped) and a later dump where it ended, and the
    pending array range 1006_[3-5] replaced by its started task."""
    text = Path(MIX).read_text()
    running = "1012|1012|c1|gpu|p1|ml|alice|1764552200|1764552300|Unknown|100|60|RUNNING|"
    ended = "1012|1012|c1|gpu|p1|ml|alice|1764552200|1764552300|1764555900|3600|60|COMPLETED|"
    assert running in text
    first, later = tmp_path / "first.txt", tmp_path / "later.txt"
    first.write_text(text)
    later.write_text(text.replace(running, ended))
    return str(first), str(later)


@pytest.mark.parametrize("order", ["in time", "reversed"])
def test_a_running_job_is_replaced_by_its_ended_row(tmp_path, order):
    first, later = _running_then_ended(tmp_path)
    s = tmp_path / "s"
    for f in (first, later) if order == "in time" else (later, first):
        store.ingest(s, [f])
    got = store_doc(s)
    job = got.frame[got.frame["job_id"] == "1012"]
    assert len(job) == 1 and job["state"].iloc[0] == "COMPLETED"
    expect = text_doc([later]).document.to_json()
    mine = got.document.to_json()
    for key in ("window", "by_partition", "by_user", "timeseries", "fit_fraction"):
        assert close(mine[key], expect[key]), key
    differ = {k for k in expect["totals"] if not close(expect["totals"][k], mine["totals"][k])}
    assert differ <= LEDGER, differ


def test_merge_drops_a_pending_row_once_the_job_started(tmp_path):
    header = "JobIDRaw|JobID|Cluster|Partition|QOS|User|Submit|Start|End|ElapsedRaw|State|AllocTRES"
    queued = "77|77|c1|gpu|normal|u|1764547200|Unknown|Unknown|0|PENDING|"
    started = "77|77|c1|gpu|normal|u|1764547200|1764547800|Unknown|60|RUNNING|gres/gpu=1"
    ended = "77|77|c1|gpu|normal|u|1764547200|1764547800|1764551400|3600|COMPLETED|gres/gpu=1"
    s = tmp_path / "s"
    for i, row in enumerate((queued, started, queued, ended, started)):
        f = tmp_path / f"d{i}.txt"
        f.write_text(f"{header}\n{row}\n")
        store.ingest(s, [str(f)])
    frame = store_doc(s).frame
    assert frame["state"].tolist() == ["COMPLETED"]
    assert frame["elapsed_s"].tolist() == [3600]


def kill_at_the_first_new_file(cmd, env, s, listed) -> subprocess.Popen:
    """Run `cmd` and SIGKILL it as soon as a partition file not in `listed` appears in `s`."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if any(p not in listed for p in s.glob("cluster=*/month=*/part-*.parquet")):
            break
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    else:
        pytest.fail(f"{cmd[3]} wrote no partition file")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return proc


def test_a_sigkilled_ingest_leaves_the_store_and_the_next_completes(tmp_path):
    s = tmp_path / "s"
    store.ingest(s, [MIX])
    before = (s / "_manifest.json").read_bytes()
    doc = store_doc(s).document.to_json()
    env = {**os.environ, store.SLEEP_ENV: "60"}
    cmd = [sys.executable, "-m", "slurmgpu", "ingest", "--store", str(s), "--sacct-file", XDMOD]
    listed = {s / p["path"] for p in json.loads(before)["partitions"]}
    proc = kill_at_the_first_new_file(cmd, env, s, listed)
    assert proc.returncode == -signal.SIGKILL
    stray = [p for p in s.glob("cluster=*/month=*/*") if p not in listed]
    assert stray  # written, but no manifest lists it
    assert (s / "_manifest.json").read_bytes() == before
    assert store_doc(s).document.to_json() == doc
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "1 file(s) ingested" in done.stdout
    manifest = json.loads((s / "_manifest.json").read_text())
    on_disk = {p.relative_to(s).as_posix() for p in s.glob("cluster=*/month=*/*")}
    assert on_disk == {p["path"] for p in manifest["partitions"]}  # no stray file left
    assert_same_document(text_doc([MIX, XDMOD]).document, store_doc(s).document)


# ---------------------------------------------------------------------------- the command line


def run(*args):
    return CliRunner().invoke(main, list(args))


def test_cli_ingest_then_analyze_and_report_json_equal_the_text(tmp_path):
    s = str(tmp_path / "s")
    r = run("ingest", "--store", s, "--sacct-file", MIX)
    assert r.exit_code == 0, r.output
    assert "1 file(s) ingested" in r.output and "cluster=c1/month=2025-12" in r.output
    for command in ("analyze", "report"):
        text = json.loads(run(command, "--sacct-file", MIX, "--format", "json").output)
        mine = json.loads(run(command, "--store", s, "--format", "json").output)
        for doc in (text, mine):
            doc.pop("generated_at")
        assert mine.pop("source")["kind"] == "store"
        text.pop("source")
        assert mine == text


def _one_error_line(result, exit_code=1):
    assert result.exit_code == exit_code, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("slurmgpu: error: "), result.output
    return lines[0]


def test_hostile_store_paths_and_manifests(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    line = _one_error_line(run("ingest", "--store", str(a_file), "--sacct-file", MIX))
    assert "not a directory" in line
    assert "not a directory" in _one_error_line(run("analyze", "--store", str(a_file)))
    assert "no such store" in _one_error_line(run("analyze", "--store", str(tmp_path / "no")))
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    line = _one_error_line(run("ingest", "--store", str(other), "--sacct-file", MIX))
    assert "not an accounting store" in line
    s = tmp_path / "s"
    assert run("ingest", "--store", str(s), "--sacct-file", MIX).exit_code == 0
    manifest = s / "_manifest.json"
    good = manifest.read_text()
    for bad in ('{"format": "slurmgpu-store-1", "files": [', "[1, 2]", '{"format": "v9"}'):
        manifest.write_text(bad)
        for args in (("analyze", "--store", str(s)),
                     ("ingest", "--store", str(s), "--sacct-file", XDMOD)):  # fmt: skip
            assert "manifest" in _one_error_line(run(*args))
    manifest.write_text(good)
    for part in s.glob("cluster=*/month=*/*.parquet"):
        part.write_bytes(b"PAR1 not really")
    assert "cannot read a store partition" in _one_error_line(run("analyze", "--store", str(s)))


def test_usage_options(tmp_path):
    assert "only with --store" in _one_error_line(run("analyze", "--cluster", "c1"), 2)
    line = _one_error_line(run("analyze", "--store", str(tmp_path), "--sacct-file", MIX), 2)
    assert "give one of them" in line
    s = str(tmp_path / "s")
    assert run("ingest", "--store", s, "--sacct-file", MIX).exit_code == 0
    line = _one_error_line(run("analyze", "--store", s, "--slurm-version", "24.05"))
    assert "same Slurm version" in line
    bad_tz = run("ingest", "--store", s, "--sacct-file", MIX, "--timezone", "Mars/Base")
    assert "time zone" in _one_error_line(bad_tz, 2)


def test_empty_store_is_an_error_not_an_empty_analysis(tmp_path):
    (tmp_path / "s").mkdir()
    assert "empty" in _one_error_line(run("analyze", "--store", str(tmp_path / "s")))


def test_real_entry_point_one_line(tmp_path):
    bad = tmp_path / "file"
    bad.write_text("x")
    r = subprocess.run(
        [sys.executable, "-m", "slurmgpu", "analyze", "--store", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith("slurmgpu: error: ") and len(r.stderr.splitlines()) == 1


def test_ingest_timer_unit_runs_a_valid_ingest():
    """etc/systemd/slurmgpu-ingest.service: its command parses as `slurmgpu ingest`."""
    import shlex

    from slurmgpu.accounting.when import parse_when
    from slurmgpu.cli.store import ingest

    root = Path(__file__).resolve().parents[3]
    unit = (root / "etc/systemd/slurmgpu-ingest.service").read_text()
    lines = [x for x in unit.splitlines() if x.startswith("ExecStart=")]
    assert len(lines) == 1
    argv = shlex.split(lines[0].partition("=")[2])
    assert argv[1] == "ingest"
    ctx = ingest.make_context("ingest", argv[2:], help_option_names=HELP_OPTION_NAMES)
    assert ctx.params["store"].startswith("/var/lib/slurmgpu/")
    assert parse_when(ctx.params["since"], now=NOW) < NOW
    timer = (root / "etc/systemd/slurmgpu-ingest.timer").read_text()
    assert "OnCalendar=" in timer and "Persistent=true" in timer
