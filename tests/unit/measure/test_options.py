"""The analyze/report measure options and the sources they build; Prometheus request shapes."""

from datetime import datetime

import click
import pytest
from click.testing import CliRunner

from slurmgpu.errors import UsageError
from slurmgpu.measure.options import (
    MeasureOptions,
    build_measure_sources,
    measure_options,
    parse_header,
)
from slurmgpu.measure.prometheus import PrometheusSource, schema
from slurmgpu.model.measure import RunRef


@click.command()
@measure_options
def probe(**kwargs):
    opts = MeasureOptions.from_kwargs(kwargs)
    assert kwargs == {}  # every measure option was taken
    sources = build_measure_sources(opts)
    click.echo(" ".join(s.name for s in sources))
    for s in sources:
        if isinstance(s, PrometheusSource):
            click.echo(f"{s.schema.job_label} {s.schema.util_metrics[0][0]} {s.headers}")


def test_defaults_read_admin_comment_only():
    out = CliRunner().invoke(probe, [])
    assert out.exit_code == 0 and out.output.strip() == "collector jobstats"


def test_prometheus_options_reach_the_source(tmp_path):
    args = ["--prometheus", "http://prom:9090", "--prometheus-schema", "jobstats",
            "--prometheus-header", "Authorization: Bearer abc", "--prometheus-job-label",
            "slurm_job", "--prometheus-util-metric", "gpu_busy", "--measure-spool",
            str(tmp_path), "--no-jobstats"]  # fmt: skip
    out = CliRunner().invoke(probe, args)
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[0] == "collector prometheus"
    assert lines[1] == "slurm_job gpu_busy [('Authorization', 'Bearer abc')]"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--prometheus", "prom:9090"], "expected an http(s):// URL"),
        (["--prometheus", "http://p", "--prometheus-header", "NoColon"], "Name: value"),
        (["--measure-spool", "/nonexistent/spool"], "not a directory"),
    ],
)
def test_bad_values_are_usage_errors(args, message):
    out = CliRunner().invoke(probe, args)
    assert isinstance(out.exception, UsageError) and message in str(out.exception)


def test_header_parsing_refuses_injection():
    assert parse_header("X-Scope-OrgID: tenant1") == ("X-Scope-OrgID", "tenant1")
    with pytest.raises(UsageError):
        parse_header("X: a\r\nEvil: b")
    with pytest.raises(UsageError):
        parse_header("Bad Name: v")


def run(job, start, end, gpus=1.0, cluster="c1"):
    return RunRef(job, cluster, datetime(2026, 1, 1, *start), datetime(2026, 1, 1, *end), "n", gpus)


def test_one_request_evaluates_each_run_over_its_own_window():
    source = PrometheusSource("http://p", schema=schema("jobstats"), batch_size=10)
    runs = [run("7", (10, 0), (11, 0)), run("8", (9, 0), (9, 30)), run("9", (9, 0), (9, 1), 0)]
    windows = [w for r in runs if (w := source._window(r)) is not None]
    assert [w.run.job_id for w in windows] == ["7", "8"]  # job 9 has no GPU: not asked
    [batch] = source._batches(windows)
    at = max(w.end_epoch for w in batch)
    expr = source._expr("avg_over_time", "nvidia_gpu_duty_cycle", batch, at)
    assert expr == (
        'avg_over_time(nvidia_gpu_duty_cycle{jobid="8",cluster="c1"}[1800s] offset 5400s)'
        ' or avg_over_time(nvidia_gpu_duty_cycle{jobid="7",cluster="c1"}[3600s])'
    )


def test_runs_of_one_job_never_share_a_request():
    source = PrometheusSource("http://p", batch_size=10)
    runs = [run("5", (h, 0), (h, 30)) for h in range(6)] + [run("6", (1, 0), (2, 0))]
    batches = source._batches([source._window(r) for r in runs])
    assert len(batches) == 6
    for batch in batches:
        ids = [w.run.job_id for w in batch]
        assert len(ids) == len(set(ids))
