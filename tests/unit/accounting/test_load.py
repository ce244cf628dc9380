"""The loader on recorded and constructed sacct text: every shape, malformed rows, totals."""

import gzip
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from slurmgpu.accounting.load import Options, load_files, load_text
from slurmgpu.errors import SacctParseError

DATA = Path(__file__).resolve().parents[2] / "data" / "sacct"
MIX = DATA / "synthetic-mix.txt"


def by_id(result):
    f = result.frame
    return {jid: f[f["job_id"] == jid] for jid in f["job_id"].unique()}


def row(result, job_id, i=0):
    f = result.frame
    return f[f["job_id"] == job_id].iloc[i]


@pytest.fixture(scope="module")
def mix():
    return load_files([MIX], options=Options(shards_per_gpu={"gpu": 8}))


def test_mix_reconciles_and_names_every_rejected_line(mix):
    assert mix.rows_read == 26  # every non-blank line after the header
    assert mix.rows_read == mix.rows_analyzed + mix.rows_rejected
    assert mix.rows_analyzed == len(mix.frame) + mix.step_rows
    got = {(r.line, r.reason.split(" '")[0]) for r in mix.rejected}
    assert got == {
        (21, "wrong column count: 21 fields, header has 20 (a"),  # `|`: ambiguous, see below
        (22, "AllocTRES: bad TRES element"),
        (23, "bad Start time"),
        (24, "wrong column count: 9 fields, header has 20"),
        (26, "bad State"),
        (27, "duplicate allocation row (same Cluster, JobIDRaw, Submit, Start): job 1001"),
    }
    assert all(r.file == str(MIX) for r in mix.rejected)


def test_steps_fold_into_their_allocation_and_extern_is_ignored(mix):
    r = row(mix, "1001")
    assert r["gpu_count"] == 2 and r["gpu_hours"] == pytest.approx(2.0)
    # .0 reported Max gpuutil 95 / gpumem 36000M; .extern's zeros never win or count
    assert r["gpu_util_pct"] == 95 and r["gpu_mem_used_mib"] == 36000
    assert mix.step_rows == 6


def test_requeued_runs_are_separate_rows_with_their_own_steps(mix):
    first, second = row(mix, "1004", 0), row(mix, "1004", 1)
    assert (first["state"], second["state"]) == ("PREEMPTED", "COMPLETED")
    assert first["gpu_hours"] == pytest.approx(8 * 1800 / 3600)
    assert second["gpu_hours"] == pytest.approx(8 * 600 / 3600)
    assert (first["gpu_util_pct"], second["gpu_util_pct"]) == (10, 95)  # each run's own step


def test_mig_slice_counts_one_seventh_and_never_reports_util(mix):
    r = row(mix, "1002")
    assert r["gpu_equiv"] == pytest.approx(1 / 7)
    assert r["gpu_hours"] == pytest.approx(2 / 7)
    assert r["mig_profile"] == "1g.10gb"
    assert pd.isna(r["gpu_util_pct"]) and pd.isna(r["gpu_mem_used_mib"])  # step said 50


def test_shard_fraction_from_shards_per_gpu(mix):
    r = row(mix, "1003")
    assert r["gpu_equiv"] == pytest.approx(4 / 8) and r["shard_fraction_known"]


def test_shard_fraction_unknown_is_marked_not_guessed():
    res = load_files([MIX])
    r = row(res, "1003")
    assert pd.isna(r["gpu_equiv"]) and not r["shard_fraction_known"]
    assert r["gpu_hours"] == 0 and r["gpu_job"]


def test_states_arrays_het_pending(mix):
    assert row(mix, "1005")["state"] == "CANCELLED"
    assert row(mix, "1005")["cancelled_by_uid"] == 1000
    assert pd.isna(row(mix, "1005")["start"]) and pd.isna(row(mix, "1005")["wait_s"])
    assert row(mix, "1006_1")["job_id_raw"] == 1008
    assert row(mix, "1006_1")["array_task_id"] == 1
    assert row(mix, "1006_[3-5]")["array_pending_tasks"] == 3
    het0, het1 = row(mix, "1010+0"), row(mix, "1010+1")
    assert het0["het_job_id"] == het1["het_job_id"] == 1010
    assert het0["counts_as_job"] and not het1["counts_as_job"]
    assert het1["partition"] == "cpu" and not het1["gpu_job"]
    assert row(mix, "1012")["state"] == "RUNNING" and pd.isna(row(mix, "1012")["end"])
    assert row(mix, "1012")["gpu_hours"] == pytest.approx(2 * 100 / 3600)


def test_tags_timelimits_and_free_text_with_pipe(mix):
    r = row(mix, "1001")
    assert r["kind"] == "finetune" and r["tag_tier"] == "P1" and r["tier"] == "p1"
    assert r["timelimit_s"] == 7200


PIPE_HEADER = "JobIDRaw|Partition|QOS|User|Submit|Start|End|ElapsedRaw|State|AllocTRES|{}"
PIPE_ROW = "7|gpu|p1|u|1764547200|1764547200|1764547260|60|COMPLETED|gres/gpu=1|{}"


def test_pipe_in_the_only_free_text_column_is_repaired():
    text = PIPE_HEADER.format("JobName") + "\n" + PIPE_ROW.format("a|b") + "\n"
    res = load_text(text, name="d.txt")
    assert res.rows_rejected == 0 and row(res, "7")["job_name"] == "a|b"


def test_pipe_with_two_free_text_columns_is_rejected_with_its_line():
    text = PIPE_HEADER.format("AdminComment|JobName") + "\n" + PIPE_ROW.format("|a|b") + "\n"
    res = load_text(text, name="d.txt")
    assert res.rows_rejected == 1 and len(res.frame) == 0
    (r,) = res.rejected
    assert (r.file, r.line) == ("d.txt", 2)
    assert r.reason.startswith("wrong column count: 13 fields, header has 12")
    assert "AdminComment, JobName: ambiguous" in r.reason


def test_policy_tier_mapping():
    res = load_files([MIX], options=Options(tier_for_qos={"p1": "P1", "p2": "P2"}.get))
    assert row(res, "1001")["tier"] == "P1"
    assert row(res, "1010+0")["tier"] == "p0"  # unmapped QOS keeps its name


def test_frame_uses_pyarrow_dtypes(mix):
    for col in ("partition", "gpu_hours", "start", "job_id_raw", "gpu_job"):
        assert isinstance(mix.frame[col].dtype, pd.ArrowDtype), col


def _frame_key(res):
    cols = ["job_id", "job_id_raw", "state", "gpu_hours", "gpu_util_pct", "wait_s", "partition"]
    return res.frame[cols].sort_values(["job_id", "gpu_hours"]).reset_index(drop=True)


@pytest.mark.parametrize("chunk", [1, 50, 333, 1000])
def test_chunk_size_does_not_change_the_result(mix, chunk):
    res = load_files([MIX], options=Options(shards_per_gpu={"gpu": 8}), chunk_bytes=chunk)
    pd.testing.assert_frame_equal(_frame_key(res), _frame_key(mix))
    assert (res.rows_read, res.rows_rejected) == (mix.rows_read, mix.rows_rejected)


def test_gzip_detected_by_magic_bytes(tmp_path, mix):
    path = tmp_path / "dump.txt"  # no .gz suffix on purpose
    path.write_bytes(gzip.compress(MIX.read_bytes()))
    res = load_files([path], options=Options(shards_per_gpu={"gpu": 8}))
    pd.testing.assert_frame_equal(_frame_key(res), _frame_key(mix))


def test_column_order_does_not_matter(tmp_path, mix):
    lines = MIX.read_text().splitlines()
    table = [ln.split("|") for ln in lines]
    width = len(table[0])
    order = list(reversed(range(width)))
    out = []
    for cells in table:
        if len(cells) == width:
            out.append("|".join(cells[i] for i in order))
        else:
            out.append("|".join(cells))  # the malformed / pipe-in-name lines, left as they are
    path = tmp_path / "reversed.txt"
    path.write_text("\n".join(out) + "\n")
    res = load_files([path], options=Options(shards_per_gpu={"gpu": 8}))
    good = _frame_key(mix)
    good = good[good["job_id"] != "1014"].reset_index(drop=True)  # its name had a `|`
    got = _frame_key(res)
    got = got[got["job_id"] != "1014"].reset_index(drop=True)
    pd.testing.assert_frame_equal(got, good)


def test_subset_with_elapsed_text_instead_of_elapsedraw():
    text = (
        "JobID|State|Partition|QOS|User|Submit|Start|End|AllocTRES|Elapsed\n"
        "77|COMPLETED|gpu|normal|u|2026-01-01T00:00:00|2026-01-01T00:10:00|"
        "2026-01-02T01:10:00|gres/gpu=4|1-01:00:00\n"
    )
    res = load_text(text)
    r = res.frame.iloc[0]
    assert r["gpu_hours"] == pytest.approx(4 * 25) and r["wait_s"] == 600
    assert r["account"] == "" and r["kind"] == "unknown"


@pytest.mark.parametrize(
    ("drop", "named"),
    [("AllocTRES", "AllocTRES"), ("QOS", "QOS"), ("ElapsedRaw", "ElapsedRaw or Elapsed")],
)
def test_missing_required_column_is_one_line_error(tmp_path, drop, named):
    lines = MIX.read_text().splitlines()
    header = lines[0].split("|")
    keep = [i for i, c in enumerate(header) if c != drop]
    path = tmp_path / "cut.txt"
    path.write_text("\n".join("|".join(ln.split("|")[i] for i in keep) for ln in lines[:3]))
    with pytest.raises(SacctParseError) as err:
        load_files([path])
    msg = str(err.value)
    assert f"required column {named} missing" in msg and "\n" not in msg
    assert str(path) in msg and "line 1" in msg


def test_verbatim_uva_sample_lacks_qos_and_user():
    with pytest.raises(SacctParseError, match="required column QOS missing"):
        load_files([DATA / "uva-18396137-verbatim.txt"])


def test_uva_fixture():
    res = load_files([DATA / "uva-fixture.txt"])
    assert res.rows_rejected == 0 and res.rows_read == 5
    job = row(res, "18396137")
    assert job["gpu_hours"] == pytest.approx(120 / 3600)
    assert job["wait_s"] == 32
    assert job["gpu_util_pct"] == 0  # the batch step really reported gpuutil=0: zero, not unknown
    node_fail, cancelled = row(res, "18583265", 0), row(res, "18583265", 1)
    assert node_fail["state"] == "NODE_FAIL" and node_fail["timelimit_s"] == 36 * 3600
    assert not node_fail["gpu_job"]  # cpu=8,node=1: no GPUs allocated
    assert cancelled["cancelled_by_uid"] == 554635 and pd.isna(cancelled["start"])


def test_xdmod_fixture_with_trailing_fields_and_pending_range():
    res = load_files([DATA / "xdmod-shredder.txt"])
    assert res.rows_rejected == 0 and len(res.frame) == 4
    j = row(res, "4107166")
    assert j["elapsed_s"] == 2 * 86400 + 22 * 3600 + 3 * 60 + 4
    assert j["cancelled_by_uid"] == 102216 and j["cluster"] == "ub-hpc"
    assert row(res, "5692623")["gpu_count"] == 2
    assert row(res, "4103947_[9-11,13,16-20]")["array_pending_tasks"] == 9


def test_parsable_with_trailing_pipe_and_blank_lines():
    text = (
        "JobIDRaw|State|Partition|QOS|User|Submit|Start|End|AllocTRES|ElapsedRaw|AdminComment|\n"
        "\n"
        "5|COMPLETED|gpu|q|u|1764547200|1764547200|1764550800|gres/gpu=1|3600||\n"
        "6|COMPLETED|gpu|q|u|1764547200|1764547200|1764550800|gres/gpu=1|3600|kind=x;tier=P0|\n"
    )
    res = load_text(text)
    assert res.rows_read == 2 and res.blank_lines == 1 and res.rows_rejected == 0
    assert list(res.frame["kind"]) == ["unknown", "x"]
    assert list(res.frame["tag_tier"].fillna("-")) == ["-", "P0"]


def test_too_few_fields_without_free_text_is_rejected():
    text = (
        "JobIDRaw|State|Partition|QOS|User|Submit|Start|End|AllocTRES|ElapsedRaw\n"
        "5|COMPLETED|gpu|q|u|1764547200|1764547200|1764550800|gres/gpu=1|3600|extra\n"
    )
    res = load_text(text, name="dump")
    assert res.rows_rejected == 1 and res.rejected[0].line == 2
    assert res.rejected[0].reason == "wrong column count: 11 fields, header has 10"


def test_utilization_unknown_when_no_usage_columns(mix):
    res = load_text(
        "JobIDRaw|State|Partition|QOS|User|Submit|Start|End|AllocTRES|ElapsedRaw\n"
        "5|COMPLETED|gpu|q|u|1764547200|1764547200|1764550800|gres/gpu=1|3600\n"
        "5.batch|COMPLETED||||1764547200|1764547200|1764550800|gres/gpu=1|3600\n"
    )
    assert not res.has_usage and math.isnan(res.frame["gpu_util_pct"].astype(float).iloc[0])
    assert res.step_rows == 1 and res.rows_analyzed == 2


def test_several_files_and_duplicates_across_them(tmp_path):
    a = tmp_path / "a.txt"
    b = tmp_path / "b.txt"
    a.write_text(MIX.read_text())
    b.write_text(MIX.read_text())
    res = load_files([a, b], options=Options(shards_per_gpu={"gpu": 8}))
    once = load_files([a], options=Options(shards_per_gpu={"gpu": 8}))
    assert len(res.frame) == len(once.frame)
    assert res.rows_read == 2 * once.rows_read
    dup_in_b = [r for r in res.rejected if r.file == str(b) and "duplicate" in r.reason]
    assert len(dup_in_b) == len(once.frame) + 1  # b repeats every row of a (+ its own dup)
    assert res.rows_read == res.rows_analyzed + res.rows_rejected


def test_unreadable_file_is_a_parse_error(tmp_path):
    with pytest.raises(SacctParseError, match="cannot read"):
        load_files([tmp_path / "missing.txt"])


def test_empty_file_is_a_parse_error(tmp_path):
    p = tmp_path / "empty.txt"
    p.write_text("\n\n")
    with pytest.raises(SacctParseError, match="no header line"):
        load_files([p])


def test_rejected_list_is_capped_but_counted():
    header = "JobIDRaw|State|Partition|QOS|User|Submit|Start|End|AllocTRES|ElapsedRaw\n"
    bad = "".join(
        f"{i}|COMPLETED|gpu|q|u|x|1764547200|1764547201|gres/gpu=1|1\n" for i in range(150)
    )
    res = load_text(header + bad)
    assert res.rows_rejected == 150 and len(res.rejected) == 100
    assert res.rejected_reasons["bad Submit time"] == 150
    assert np.all(np.diff([r.line for r in res.rejected]) > 0)


def test_live_sub_windows_keep_each_row_once():
    """sacct -S/-E returns every job active in the window; splitting must not double count."""
    from datetime import UTC, datetime, timedelta

    from slurmgpu.accounting.load import load_windows

    lines = MIX.read_text().splitlines()
    header, body = lines[0], lines[1:]
    cols = header.split("|")
    si, ei = cols.index("Start"), cols.index("End")
    base = datetime(2025, 12, 1, tzinfo=UTC)

    def active(line, a, b):
        f = line.split("|")
        if len(f) != len(cols):
            return True  # malformed lines: sacct would print them in every window
        start = int(f[si]) if f[si].isdigit() else None
        end = int(f[ei]) if f[ei].isdigit() else None
        lo, hi = a.timestamp(), b.timestamp()
        if start is None:  # pending / cancelled before start: visible until it ended
            return end is None or end >= lo
        return start < hi and (end is None or end >= lo)

    calls = []

    def fetch(a, b):
        calls.append((a, b))
        return "\n".join([header, *[ln for ln in body if active(ln, a, b)]]) + "\n"

    step = timedelta(minutes=20)
    bounds = [(base + i * step, base + (i + 1) * step) for i in range(9)]
    opts = Options(shards_per_gpu={"gpu": 8})
    split = load_windows(bounds, fetch, options=opts)
    whole = load_files([MIX], options=opts)
    assert len(calls) == 9
    pd.testing.assert_frame_equal(_frame_key(split), _frame_key(whole))
    assert split.rows_overlap > 0
    # malformed lines are printed by every window and rejected in each (documented)
    assert split.rows_read == split.rows_analyzed + split.rows_rejected


def test_crlf_and_missing_final_newline(tmp_path, mix):
    text = MIX.read_text()
    crlf = tmp_path / "crlf.txt"
    crlf.write_bytes(text.replace("\n", "\r\n").encode())
    no_nl = tmp_path / "no-newline.txt"
    no_nl.write_text(text.rstrip("\n"))
    for path in (crlf, no_nl):
        res = load_files([path], options=Options(shards_per_gpu={"gpu": 8}))
        pd.testing.assert_frame_equal(_frame_key(res), _frame_key(mix))
        assert res.rows_read == mix.rows_read


ISO_HEADER = "JobIDRaw|JobID|Partition|QOS|User|Submit|Start|End|ElapsedRaw|State|AllocTRES"


def iso_row(raw, submit, start, end, state="COMPLETED", elapsed=3600):
    return f"{raw}|{raw}|gpu|normal|u|{submit}|{start}|{end}|{elapsed}|{state}|gres/gpu=1,node=1"


def test_unknown_state_and_impossible_orders_are_rejected_with_reasons():
    text = "\n".join([
        ISO_HEADER,
        iso_row(1, "2026-11-01T08:00:00", "2026-11-01T09:00:00", "2026-11-01T10:00:00"),
        iso_row(2, "2026-11-01T08:00:00", "2026-11-01T09:00:00", "2026-11-01T10:00:00",
                state="HALF_DONE"),
        iso_row(3, "2026-11-01T08:00:00", "2026-11-01T09:00:00", "2026-11-01T08:30:00"),
        iso_row(4, "2026-11-01T08:00:00", "2026-11-01T07:00:00", "2026-11-01T10:00:00"),
    ]) + "\n"  # fmt: skip
    res = load_text(text, name="nov.txt")
    got = {r.line: r.reason for r in res.rejected}
    assert got == {
        3: "unknown job state 'HALF_DONE'",
        4: "End 2026-11-01T08:30:00 is before Start 2026-11-01T09:00:00",
        5: "Start 2026-11-01T07:00:00 is before Submit 2026-11-01T08:00:00",
    }
    assert len(res.frame) == 1 and res.rows_read == 4


def test_local_times_at_dst_changes_are_rejected_never_zero_gpu_hours():
    # Europe/Berlin: 2026-03-29 02:00-03:00 does not exist; 2026-10-25 02:00-03:00 repeats
    text = "\n".join([
        ISO_HEADER,
        iso_row(1, "2026-03-29T01:00:00", "2026-03-29T02:30:00", "2026-03-29T04:00:00"),
        iso_row(2, "2026-10-25T01:00:00", "2026-10-25T02:30:00", "2026-10-25T04:00:00"),
        iso_row(3, "2026-10-25T04:00:00", "2026-10-25T04:00:00", "2026-10-25T05:00:00"),
    ]) + "\n"  # fmt: skip
    res = load_text(text, name="dst.txt", options=Options(timezone="Europe/Berlin"))
    got = {r.line: r.reason for r in res.rejected}
    assert got[2] == (
        "Start time '2026-03-29T02:30:00' does not exist in Europe/Berlin (DST change)"
    )
    assert got[3].startswith("Start time '2026-10-25T02:30:00' occurs twice in Europe/Berlin")
    assert len(res.frame) == 1
    assert res.frame["gpu_hours"].iloc[0] == pytest.approx(1.0)  # 04:00 -> 05:00 CET


def test_a_state_only_a_started_job_has_needs_a_start(tmp_path):
    dump = tmp_path / "d.txt"
    dump.write_text(
        "JobIDRaw|JobID|Cluster|Partition|QOS|Account|User|Submit|Start|End|ElapsedRaw|"
        "TimelimitRaw|State|AllocTRES|ReqTRES|NodeList|JobName\n"
        "1|1|c|gpu|p1|a|u|2026-01-01T00:00:00|Unknown|2026-01-01T01:00:00|3600|120|COMPLETED|"
        "cpu=1,gres/gpu=1|cpu=1,gres/gpu=1|n1|j\n"
        "2|2|c|gpu|p1|a|u|2026-01-01T00:00:00|None|2026-01-01T01:00:00|0|120|CANCELLED by 0|"
        "|cpu=1,gres/gpu=1|None assigned|j\n"
    )
    got = load_files([dump])
    assert [(r.line, r.reason) for r in got.rejected] == [
        (2, "State COMPLETED for 3600 s but no Start time ('Unknown')")
    ]
    assert got.rows_analyzed == 1  # the job cancelled while pending is fine


def test_duplicate_rows_are_counted_under_one_reason(mix):
    assert (
        mix.rejected_reasons["duplicate allocation row (same Cluster, JobIDRaw, Submit, Start)"]
        == 1
    )
