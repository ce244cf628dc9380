"""Prometheus as an attacker runs it (issue #20): wrong shapes, cut-short answers, a server
that drips one byte every half second, an endless body, a malformed URL.

Each answer comes from a real HTTP server on loopback (tests/hostile/prometheus_server.py).
Whatever it sends, the source gives a typed warning and no measure for the runs it could not
measure, within the whole-request deadline; `analyze` and `report` still complete, exit 0.
"""

from __future__ import annotations

import json
import time
from datetime import datetime

import pytest

from slurmgpu.measure.prometheus import PrometheusSource
from slurmgpu.model.measure import RunRef
from tests.hostile.conftest import ROOT, assert_one_error, cli
from tests.hostile.prometheus_server import HostileServer

SACCT = ROOT / "tests" / "data" / "sacct" / "synthetic-mix.txt"
RUN = RunRef("42", "c1", datetime(2025, 12, 1, 0), datetime(2025, 12, 1, 1), "gpu01", 2)


def vector(*results: object) -> bytes:
    return json.dumps(
        {"status": "success", "data": {"resultType": "vector", "result": list(results)}}
    ).encode()


def series(value: object, job: str = "42", gpu: str = "0") -> dict:
    return {"metric": {"hpc_job": job, "gpu": gpu, "Hostname": "gpu01"}, "value": [1, value]}


WRONG_SHAPES = {
    "list": b"[]",
    "string": b'"x"',
    "null": b"null",
    "number": b"3",
    "not json": b"<html>busy</html>",
    "not utf-8": b"\xff\xfe\x00",
    "deep nesting": b"[" * 100_000 + b"]" * 100_000,
    "data a list": b'{"status":"success","data":[]}',
    "result an object": b'{"status":"success","data":{"resultType":"vector","result":{}}}',
    "status error, error a list": b'{"status":"error","errorType":"x","error":[1,2]}',
    "matrix": b'{"status":"success","data":{"resultType":"matrix","result":[]}}',
}


@pytest.mark.parametrize("body", WRONG_SHAPES.values(), ids=WRONG_SHAPES.keys())
def test_an_answer_of_the_wrong_shape_is_a_warning(body):
    with HostileServer(body) as server:
        source = PrometheusSource(server.url, timeout_s=5)
        assert source.measures([RUN]) == []
    kinds = {w.kind for w in source.warnings}
    assert kinds <= {"malformed", "http"} and kinds, source.warnings
    assert all("42" in w.job_ids for w in source.warnings if w.kind != "prometheus-warning")


BAD_ENTRIES = {
    "no metric": {"value": [1, "50"]},
    "metric a list": {"metric": [], "value": [1, "50"]},
    "label not a string": {"metric": {"hpc_job": 42}, "value": [1, "50"]},
    "value abc": series("abc"),
    "value one element": {"metric": {"hpc_job": "42"}, "value": ["50"]},
    "value a number": series(50),
    "value null": series(None),
    "entry a string": "x",
}


@pytest.mark.parametrize("entry", BAD_ENTRIES.values(), ids=BAD_ENTRIES.keys())
def test_a_result_entry_of_the_wrong_shape_is_left_out_and_counted(entry):
    # GPU 0's good series with the bad entry: the good one is measured, the bad one counted
    with HostileServer(vector(series("50", gpu="0"), entry)) as server:
        source = PrometheusSource(server.url, timeout_s=5)
        [measure] = source.measures([RUN])
    assert measure.util_mean_pct == 50.0 and measure.gpus_measured == 1
    assert any(w.kind == "malformed" for w in source.warnings), source.warnings


def test_negative_and_non_finite_utilization_is_not_averaged_in():
    body = vector(series("-80", gpu="0"), series("60", gpu="1"), series("+Inf", gpu="2"))
    with HostileServer(body) as server:
        source = PrometheusSource(server.url, timeout_s=5)
        [measure] = source.measures([RUN])
    assert measure.util_mean_pct == 60.0  # not (-80 + 60) / 2
    # the server gives the same answer to every query: each metric's negatives are named
    negative = [w for w in source.warnings if w.kind == "invalid"]
    assert any("negative DCGM_FI_DEV_GPU_UTIL" in w.message for w in negative), negative
    assert all(w.job_ids == ("42",) for w in negative)


def test_negative_or_non_finite_energy_never_becomes_energy():
    """Every query (the energy counter's increase, its resets, the power) gets the same
    hostile answer: a GPU whose energy is negative or infinite has none, so the run has none
    (never a negative or a partial sum)."""
    body = vector(series("-5000", gpu="0"), series("60", gpu="1"), series("+Inf", gpu="2"))
    with HostileServer(body) as server:
        source = PrometheusSource(server.url, timeout_s=5)
        [measure] = source.measures([RUN])
    assert measure.energy_j is None
    named = " ".join(w.message for w in source.warnings if w.kind == "invalid")
    assert "negative DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" in named


def test_an_answer_cut_short_is_a_warning():
    with HostileServer("cut-short") as server:
        source = PrometheusSource(server.url, timeout_s=5)
        assert source.measures([RUN]) == []
    [warning] = source.warnings
    assert warning.kind == "http" and "cut short" in warning.message


@pytest.mark.parametrize("mode", ["drip-body", "drip-headers"])
def test_a_server_dripping_one_byte_every_half_second_is_cut_at_the_deadline(mode):
    with HostileServer(mode) as server:
        source = PrometheusSource(server.url, timeout_s=1.5)
        started = time.monotonic()
        assert source.measures([RUN]) == []
        took = time.monotonic() - started
    assert took < 4, took  # one request, 1.5 s whole (before: a 0.5 s read never timed out)
    assert [w.kind for w in source.warnings] == ["timeout"]


@pytest.mark.parametrize("mode", ["huge-declared", "huge-chunked"])
def test_a_3_gb_answer_is_cut_at_the_size_limit(mode):
    with HostileServer(mode) as server:
        source = PrometheusSource(server.url, timeout_s=20, max_bytes=4 << 20)
        started = time.monotonic()
        assert source.measures([RUN]) == []
        took = time.monotonic() - started
        sent = server.sent
    assert [w.kind for w in source.warnings] == ["too-large"]
    assert took < 10 and sent < 64 << 20, (took, sent)  # not the 3 GB


@pytest.mark.parametrize("command", ["analyze", "report"])
def test_analyze_and_report_finish_past_a_dripping_server(command):
    """The issue's hang: `--prometheus-timeout 2` held analyze/report past 60 s."""
    with HostileServer("drip-body") as server:
        started = time.monotonic()
        run = cli(command, "--sacct-file", SACCT, "--prometheus", server.url,
                  "--prometheus-timeout", "2", "--format", "json")  # fmt: skip
        took = time.monotonic() - started
    assert run.code == 0, run.stderr
    assert took < 3 * 2 + 10, took  # three failed requests in a row, then the rest skipped
    assert "timeout" in run.stderr or "timeout" in run.stdout


def test_analyze_completes_past_a_3_gb_answer():
    with HostileServer("huge-declared") as server:
        run = cli("analyze", "--sacct-file", SACCT, "--prometheus", server.url, "--format", "json")
    assert run.code == 0, run.stderr
    assert "too-large" in run.stderr or "too-large" in run.stdout


URLS = ["http://[::1", "http://[::1]:x/", "http://host:99999", "http://", "ftp://host"]


@pytest.mark.parametrize("url", URLS)
def test_a_malformed_url_is_one_usage_line(url):
    assert_one_error(cli("analyze", "--sacct-file", SACCT, "--prometheus", url), 2, says=url)
