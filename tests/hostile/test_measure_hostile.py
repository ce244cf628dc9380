"""Summaries as an attacker writes them (issue #20): malformed `JS1:`/`SG1:` tokens, a gzip
bomb in one AdminComment, negative utilization, a spool holding a huge file or a FIFO.

One bad summary is a typed warning for its source and its run; every other run is still
measured, and `analyze` completes with exit 0.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import time
import zlib
from datetime import datetime

import pytest

from slurmgpu.measure.apply import measure_runs
from slurmgpu.measure.jobstats import JobstatsSource
from slurmgpu.measure.summary import CollectorSource, GpuSummary, JobSummary, encode, write_spool
from slurmgpu.model.measure import JobGpuMeasure, RunRef
from tests.hostile.conftest import ROOT, cli
from tests.unit.measure.jobstats_fixture import gpu_node, jobstats_value

SACCT = ROOT / "tests" / "data" / "sacct" / "synthetic-mix.txt"
START = datetime(2025, 12, 1, 0)


def run(job: str, comment: str = "") -> RunRef:
    return RunRef(job, "c1", START, datetime(2025, 12, 1, 1), "gpu01", 2, comment)


def js1(document: object) -> str:
    raw = json.dumps(document).encode()
    return "JS1:" + base64.b64encode(gzip.compress(raw)).decode()


def bomb(prefix: str, size: int = 256 << 20) -> bytes:
    """gzip of `size` bytes of spaces: about a thousandth of that to store."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = b" " * (1 << 20)
    parts = [packer.compress(b'{"nodes": {}, "pad": "')]
    parts += [packer.compress(block) for _ in range(size >> 20)]
    parts.append(packer.compress(b'"}') + packer.flush())
    return b"".join(parts)


GOOD = jobstats_value({"gpu01": gpu_node({"0": 70, "1": 30}, {"0": 1, "1": 1}, {"0": 2, "1": 2})},
                      3600, 2)  # fmt: skip
BAD_JS1 = {
    "gpus not a number": js1({"nodes": {}, "gpus": "x"}),
    "gpus huge float": js1({"nodes": {}, "gpus": 1e400}),
    "total_time a list": js1({"nodes": {}, "total_time": [1]}),
    "util NaN": js1({"nodes": {"n": {"gpu_utilization": {"0": float("nan")}}}}),
    "util a string": js1({"nodes": {"n": {"gpu_utilization": {"0": "50"}}}}),
    "util a bool": js1({"nodes": {"n": {"gpu_utilization": {"0": True}}}}),
    "memory negative": js1({"nodes": {"n": {"gpu_used_memory": {"0": -5}}}}),
    "nested deeply": "JS1:" + base64.b64encode(gzip.compress(b"[" * 200_000)).decode(),
    "cut short": GOOD[: len(GOOD) // 2 // 4 * 4],
    "not gzip": "JS1:" + base64.b64encode(b"hello world!").decode(),
    "gzip bomb": "JS1:" + base64.b64encode(bomb("JS1")).decode(),
}


@pytest.mark.parametrize("token", BAD_JS1.values(), ids=BAD_JS1.keys())
def test_a_malformed_js1_token_is_a_warning_and_the_other_runs_are_measured(token):
    source = JobstatsSource()
    started = time.monotonic()
    measures = source.measures([run("1", token), run("2", GOOD)])
    assert time.monotonic() - started < 5
    assert [m.job_id for m in measures] == ["2"] and measures[0].util_mean_pct == 50.0
    [warning] = source.warnings
    assert warning.kind == "undecodable" and warning.job_ids == ("1",)


def test_a_gzip_bomb_is_refused_at_the_decompressed_size_limit():
    source = JobstatsSource()
    source.measures([run("1", BAD_JS1["gzip bomb"])])
    assert "gzip bomb" in source.warnings[0].message


def test_negative_js1_utilization_is_left_out_with_a_warning():
    token = jobstats_value({"gpu01": gpu_node({"0": -90, "1": 40}, {}, {})}, 3600, 2)
    source = JobstatsSource()
    [measure] = source.measures([run("1", token)])
    assert measure.util_mean_pct == 40.0  # not (-90 + 40) / 2
    assert [w.kind for w in source.warnings] == ["invalid"]


def summary(job: str, util: float | None = 50.0) -> JobSummary:
    gpu = GpuSummary(0, None, None, "GPU-x", 81559.0, 100.0, util, 10, 10)
    return JobSummary(job, "c1", "gpu01", int(START.timestamp()) + 60, 0, 10, (gpu,))


def sg1(document: object) -> str:
    packed = gzip.compress(json.dumps(document).encode())
    return "SG1:" + base64.b32encode(packed).decode().rstrip("=")


def sg1_doc(**gpu_changes: object) -> dict:
    doc = json.loads(summary("1").to_json())
    doc["gpus"][0].update(gpu_changes)
    return doc


BAD_SG1 = {
    "minor huge float": sg1(sg1_doc(minor=1e400)),
    "util negative": sg1(sg1_doc(util_mean_pct=-3.0)),
    "memory NaN": sg1(sg1_doc(mem_max_mib=float("nan"))),
    "gpus a map": sg1({**sg1_doc(), "gpus": {"a": 1}}),
    "gpus strings": sg1({**sg1_doc(), "gpus": ["xy"]}),
    "nested deeply": "SG1:" + base64.b32encode(gzip.compress(b"[" * 200_000)).decode(),
    "gzip bomb": "SG1:" + base64.b32encode(bomb("SG1")).decode().rstrip("="),
}


@pytest.mark.parametrize("token", BAD_SG1.values(), ids=BAD_SG1.keys())
def test_a_malformed_sg1_token_is_a_warning_and_the_other_runs_are_measured(token):
    source = CollectorSource()
    measures = source.measures([run("1", token), run("2", encode(summary("2")))])
    assert [m.job_id for m in measures] == ["2"]
    assert [w.kind for w in source.warnings] == ["undecodable"]
    assert source.warnings[0].job_ids == ("1",)


def test_a_spool_with_a_huge_file_a_fifo_and_garbage_still_gives_the_good_summary(tmp_path):
    spool = tmp_path / "spool"
    write_spool(spool, summary("2"))
    directory = spool / "c1"
    with open(directory / "1.gpu01.1.sg1", "wb") as f:  # sparse: 3 GB, no disk used
        f.truncate(3 << 30)
    os.mkfifo(directory / "3.gpu01.1.sg1")
    (directory / "4.gpu01.1.sg1").write_bytes(b"\xff\xfe garbage")
    (directory / "5.gpu01.1.sg1").mkdir()
    source = CollectorSource(spool)
    started = time.monotonic()
    measures = source.measures([run(j) for j in ("1", "2", "3", "4", "5")])
    assert time.monotonic() - started < 5
    assert [m.job_id for m in measures] == ["2"]
    named = sorted(j for w in source.warnings for j in w.job_ids)
    assert named == ["1", "3", "4", "5"], source.warnings


class Broken:
    """A source (a plugin, a future reader) that hands back numbers that cannot be true."""

    name = "broken"

    def __init__(self) -> None:
        self.warnings: list = []

    def measures(self, runs):
        return [JobGpuMeasure(r.job_id, "broken", 1, v, -1.0, float("inf"), "c1", r.start)
                for r, v in zip(runs, (-40.0, float("nan"), 60.0), strict=False)]  # fmt: skip


def test_no_source_averages_a_negative_or_nan_utilization_in():
    result = measure_runs([run("1"), run("2"), run("3")], [Broken()])
    utils = sorted((k[1], m.util_mean_pct) for k, m in result.by_run.items())
    assert utils == [("1", None), ("2", None), ("3", 60.0)]
    assert all(m.mem_used_max_mib is None and m.gpu_memory_mib is None
               for m in result.by_run.values())  # fmt: skip
    assert {w.kind for w in result.warnings} == {"invalid"} and len(result.warnings) == 3


def test_analyze_completes_with_a_gzip_bomb_in_one_admin_comment(tmp_path):
    lines = SACCT.read_text().splitlines()
    header = lines[0].split("|")
    col = header.index("AdminComment")
    fields = lines[1].split("|")
    fields[col] = BAD_JS1["gzip bomb"]
    dump = tmp_path / "bomb.txt"
    dump.write_text("\n".join([lines[0], "|".join(fields), *lines[2:]]) + "\n")
    started = time.monotonic()
    done = cli("analyze", "--sacct-file", dump, "--format", "json")
    assert done.code == 0, done.stderr
    assert time.monotonic() - started < 60
    doc = json.loads(done.stdout)
    clean = json.loads(cli("analyze", "--sacct-file", SACCT, "--format", "json").stdout)
    assert doc["totals"]["jobs"] == clean["totals"]["jobs"]  # no job dropped
    assert "gzip bomb" in done.stdout + done.stderr


def _utils(doc: object):
    """Every utilization figure anywhere in an analysis document."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            if "util" in key and isinstance(value, int | float) and not isinstance(value, bool):
                yield key, value
            else:
                yield from _utils(value)
    elif isinstance(doc, list):
        for value in doc:
            yield from _utils(value)


def test_exit_0_means_utilization_within_0_100_and_every_job_counted(tmp_path):
    """The hostile suite's property for analyze: hostile measures in, right answers out."""
    lines = SACCT.read_text().splitlines()
    col = lines[0].split("|").index("AdminComment")
    hostile = [
        jobstats_value({"gpu01": gpu_node({"0": -500, "1": 40}, {}, {})}, 3600, 2),
        jobstats_value({"gpu01": gpu_node({"0": 900, "1": 100}, {}, {})}, 3600, 2),
        BAD_JS1["util NaN"],
        BAD_SG1["util negative"],
    ]
    rows, k = [lines[0]], 0
    for line in lines[1:]:
        fields = line.split("|")
        if "." not in fields[0] and k < len(hostile):  # allocation rows only
            fields[col] = hostile[k]
            k += 1
        rows.append("|".join(fields))
    dump = tmp_path / "hostile.txt"
    dump.write_text("\n".join(rows) + "\n")
    done = cli("analyze", "--sacct-file", dump, "--format", "json")
    assert done.code == 0, done.stderr
    doc = json.loads(done.stdout)
    figures = list(_utils(doc))
    assert figures and all(0 <= v <= 100 for _, v in figures), figures
    clean = json.loads(cli("analyze", "--sacct-file", SACCT, "--format", "json").stdout)
    assert doc["totals"]["jobs"] == clean["totals"]["jobs"]
    assert doc["totals"]["gpu_hours_allocated"] == clean["totals"]["gpu_hours_allocated"]
