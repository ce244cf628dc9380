"""Hostile accounting input: every case is one clear `slurmgpu: error:` line or a row rejected
with file:line:reason, never a traceback, `Aborted!`, a merged user or a runaway allocation.

Lines are shaped as `sacct -a -D -P` prints them (epoch times, as with SLURM_TIME_FORMAT=%s).
"""

from __future__ import annotations

import gzip
import json

import pytest
from click.testing import CliRunner

from slurmgpu.cli import main

HEADER = "JobIDRaw|JobID|Partition|QOS|User|Submit|Start|End|ElapsedRaw|State|AllocTRES"
T0 = 1764547200  # 2025-12-01T00:00:00Z


def line(raw, user="alice", start=T0, end=T0 + 3600, state="COMPLETED", jobid=None):
    el = end - start if isinstance(end, int) and isinstance(start, int) else 0
    return (
        f"{raw}|{jobid or raw}|gpu|normal|{user}|{T0}|{start}|{end}|{el}|{state}|"
        "billing=1,cpu=1,gres/gpu=1,node=1"
    )


def dump(tmp_path, lines, *, raw: bytes | None = None, name="dump.txt"):
    path = tmp_path / name
    if raw is not None:
        path.write_bytes(raw)
    else:
        path.write_text(HEADER + "\n" + "\n".join(lines) + "\n", encoding="utf-8")
    return path


def analyze(*args):
    return CliRunner().invoke(main, ["analyze", "--format", "json", *map(str, args)])


def one_error_line(result, code):
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output and "Aborted!" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("slurmgpu: error: "), result.stderr
    return lines[0]


def rejected(doc):
    return {r["line"]: r["reason"] for r in doc["rejected"]}


def test_latin1_names_stay_distinct(tmp_path):
    body = (
        (HEADER + "\n").encode()
        + b"\n".join(
            [
                line(1, user="m\xfcller").encode("latin-1"),  # müller in Latin-1
                line(2, user="m\xf6ller").encode("latin-1"),  # möller in Latin-1
                line(3, user="jos\u00e9").encode("utf-8"),  # real UTF-8 stays UTF-8
            ]
        )
        + b"\n"
    )
    r = analyze("--sacct-file", dump(tmp_path, [], raw=body))
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    users = {e["user"] for e in doc["by_user"]}
    assert users == {"müller", "möller", "josé"}  # never merged into m\ufffdller
    assert doc["totals"]["rows_latin1_decoded"] == 2
    assert doc["totals"]["rows_rejected"] == 0


def test_pipe_in_jobname_with_two_free_text_columns_is_rejected_with_its_line(tmp_path):
    path = tmp_path / "d.txt"
    path.write_text(
        HEADER + "|AdminComment|JobName\n"
        + line(1) + "||train|v2\n"  # `|` in JobName: 14 fields for 13 columns
        + line(2) + "||ok\n"
    )  # fmt: skip
    doc = json.loads(analyze("--sacct-file", path).stdout)
    assert doc["totals"]["rows_rejected"] == 1 and doc["totals"]["jobs"] == 1
    (r,) = doc["rejected"]
    assert r["file"] == str(path) and r["line"] == 2
    assert "14 fields, header has 13" in r["reason"] and "ambiguous" in r["reason"]


def test_year_9999_is_rejected_and_does_not_stretch_the_window(tmp_path):
    path = dump(tmp_path, [line(1), line(2, end="9999-12-31T23:59:59")])
    doc = json.loads(analyze("--sacct-file", path).stdout)
    assert rejected(doc) == {3: "End time '9999-12-31T23:59:59' outside 1970..2200"}
    assert doc["window"]["until"] == "2025-12-01T01:00:01Z"
    assert doc["totals"]["gpu_hours_allocated"] == pytest.approx(1.0)


def test_twenty_digit_job_id_is_rejected(tmp_path):
    path = dump(tmp_path, [line(1), line("12345678901234567890")])
    doc = json.loads(analyze("--sacct-file", path).stdout)
    assert rejected(doc) == {3: "job id beyond Slurm's 32-bit range (at most 4294967295)"}
    assert doc["totals"]["rows_read"] == 2 and doc["totals"]["rows_analyzed"] == 1


def test_huge_relative_since_is_one_usage_error(tmp_path):
    path = dump(tmp_path, [line(1)])
    msg = one_error_line(analyze("--sacct-file", path, "--since", "99999999d"), 2)
    assert "--since '99999999d'" in msg and "before 1970" in msg


def test_truncated_gzip_is_one_error_line_not_aborted(tmp_path):
    whole = gzip.compress((HEADER + "\n" + "\n".join(line(i) for i in range(1, 2000))).encode())
    path = dump(tmp_path, [], raw=whole[: len(whole) // 2], name="cut.sacct.gz")
    msg = one_error_line(analyze("--sacct-file", path), 1)
    assert "cut.sacct.gz: gzip data is truncated or corrupt" in msg


def test_corrupt_gzip_is_one_error_line(tmp_path):
    whole = bytearray(gzip.compress((HEADER + "\n" + line(1) + "\n").encode()))
    whole[20:30] = b"\x00" * 10  # damage the deflate stream
    path = dump(tmp_path, [], raw=bytes(whole), name="bad.gz")
    msg = one_error_line(analyze("--sacct-file", path), 1)
    assert "bad.gz: gzip data is truncated or corrupt" in msg


def test_huge_array_range_is_rejected_without_expanding_it(tmp_path):
    pending = f"1|1_[0-300000000]|gpu|normal|alice|{T0}|Unknown|Unknown|0|PENDING|"
    path = dump(tmp_path, [line(2), pending])
    doc = json.loads(analyze("--sacct-file", path).stdout)
    reason = rejected(doc)[3]
    assert reason.startswith("array task range [0-300000000] goes beyond Slurm's largest")


def test_report_has_chunk_hours(tmp_path):
    path = dump(tmp_path, [line(1)])
    r = CliRunner().invoke(
        main, ["report", "--sacct-file", str(path), "--format", "json", "--chunk-hours", "6"]
    )
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["totals"]["jobs"] == 1
    bad = CliRunner().invoke(main, ["report", "--sacct-file", str(path), "--chunk-hours", "0"])
    assert bad.exit_code == 2 and "--chunk-hours" in bad.stderr


def test_unknown_slurm_version_text_is_a_usage_error(tmp_path):
    path = dump(tmp_path, [line(1)])
    msg = one_error_line(analyze("--sacct-file", path, "--slurm-version", "latest"), 2)
    assert "Slurm version 'latest'" in msg


def test_bad_gpu_memory_value_is_a_usage_error(tmp_path):
    path = dump(tmp_path, [line(1)])
    msg = one_error_line(analyze("--sacct-file", path, "--gpu-memory", "t4=lots"), 2)
    assert "--gpu-memory t4=lots" in msg


def test_live_sacct_bytes_that_are_not_utf8_keep_names_distinct():
    # what sources.sacct.sacct_text returns when sacct prints Latin-1 bytes
    # (subprocess output decoded with errors="surrogateescape")
    from datetime import UTC, datetime

    from slurmgpu.accounting.load import load_windows

    raw = HEADER + "\n" + line(1, user="m\xfcller") + "\n" + line(2, user="m\xf6ller") + "\n"
    text = raw.encode("latin-1").decode("utf-8", "surrogateescape")
    t = datetime(2025, 12, 1, tzinfo=UTC)
    res = load_windows([(t, t)], lambda a, b: text, name="sacct")
    assert sorted(res.frame["user"].astype(str)) == ["möller", "müller"]
    assert res.latin1_lines == 2
