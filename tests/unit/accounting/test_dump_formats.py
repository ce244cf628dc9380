"""Saved dumps in the other forms sacct writes: `--delimiter=$'\\x1f'` text (as the live
query uses) and `sacct --json` documents, plain or gzipped, read like `sacct -P` text."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmgpu.accounting.load import load_files, sniff_dump
from slurmgpu.cli import main
from slurmgpu.errors import SacctParseError
from slurmgpu.sources.sacct import json_dump_records

DATA = Path(__file__).resolve().parents[2] / "data" / "sacct"
TEXT = DATA / "slurm-22.05-harness.txt"  # the same jobs as the JSON (test_sources.py)
JSON = DATA / "slurm-22.05-harness.json"
COLS = ["job_id", "state", "gpu_count", "elapsed_s", "gpu_hours", "wait_s", "start", "end",
        "partition", "qos", "account", "user"]  # fmt: skip


def frame_of(result):
    return result.frame[COLS].sort_values("job_id").astype(str).to_numpy().tolist()


def test_sniff():
    assert sniff_dump(b'\xef\xbb\xbf  {"jobs": []}') == "json"
    assert sniff_dump(b"JobID\x1fState\n1\x1fCOMPLETED\n") == "unit-separator"
    assert sniff_dump(b"JobID|State\n1|x\x1fy\n") == "pipe"


def test_unit_separator_dump_reads_like_the_pipe_dump(tmp_path):
    us = tmp_path / "us.txt"
    us.write_text(TEXT.read_text().replace("|", "\x1f"))
    a, b = load_files([TEXT]), load_files([us])
    assert frame_of(a) == frame_of(b) and b.rows_rejected == 0
    # a `|` inside free text is no longer ambiguous with \x1f as the delimiter
    lines = us.read_text().splitlines()
    header = lines[0].split("\x1f")
    row = lines[1].split("\x1f")
    row[header.index("JobName")] = "a|b|c"
    row[header.index("Comment")] = "x|y"
    us.write_text("\n".join([lines[0], "\x1f".join(row), *lines[2:]]) + "\n")
    again = load_files([us])
    assert again.rows_rejected == 0 and len(again.frame) == len(b.frame)


@pytest.mark.parametrize("compress", [False, True])
def test_json_dump_reads_like_the_text_dump(tmp_path, compress):
    path = tmp_path / ("dump.json.gz" if compress else "dump.json")
    data = JSON.read_bytes()
    path.write_bytes(gzip.compress(data) if compress else data)
    js = load_files([path], json_reader=json_dump_records)
    assert frame_of(js) == frame_of(load_files([TEXT]))
    assert (js.rows_read, js.step_rows, js.rows_rejected) == (12, 6, 0)
    # mixed with a text dump in one analysis
    both = load_files([TEXT, path], json_reader=json_dump_records)
    assert both.rows_read == 24


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[1, 2]", "has a `jobs` list; this has none"),
        ('{"jobs": [], "errors": [{"description": "Invalid time specification"}]}',
         "reported 1 error(s): Invalid time specification"),
        ('{"jobs": [{"name": 1}]}', "a job record of an unexpected shape"),
        ('{"jobs": [', "not a sacct --json document"),
    ],
)  # fmt: skip
def test_bad_json_dumps_are_one_line(tmp_path, text, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(SacctParseError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_files([path], json_reader=json_dump_records)
    out = CliRunner().invoke(main, ["analyze", "--sacct-file", str(path)])
    assert out.exit_code == 1 and out.stderr.startswith("slurmgpu: error: ")
    assert out.stderr.count("\n") == 1


def test_analyze_reads_both_forms(tmp_path):
    us = tmp_path / "us.txt"
    us.write_text(TEXT.read_text().replace("|", "\x1f"))

    def totals(path):
        out = CliRunner().invoke(main, ["analyze", "--sacct-file", str(path), "--format", "json"])
        assert out.exit_code == 0, out.output
        return json.loads(out.stdout)["totals"]

    want = totals(TEXT)
    assert totals(us) == want
    got = totals(JSON)
    assert got["gpu_hours_allocated"] == want["gpu_hours_allocated"]
    assert got["jobs"] == want["jobs"]
