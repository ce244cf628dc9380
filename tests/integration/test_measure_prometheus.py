"""PrometheusSource against a real Prometheus server (Debian's package), fed by backfilling.

The series imitate what the DCGM exporter (with `--hpc-job-mapping-dir`, label `hpc_job`) and
jobstats' GPU exporter (label `jobid`, `cluster`) export; every expected number below is
computed from the samples written here, so a wrong window, a wrong offset or a mixed-up job
shows up as a wrong number.
"""

from __future__ import annotations

import socket
import time
from collections import defaultdict
from datetime import UTC, datetime

import pytest

from slurmgpu.measure.options import MeasureOptions, build_measure_sources
from slurmgpu.measure.prometheus import SCHEMAS, PrometheusSource
from slurmgpu.model.measure import RunRef
from tests.harness.prometheus import PrometheusServer, missing_programs

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slurm_only("host", reason="needs no Slurm daemons (a Prometheus test)"),
]

STEP = 30  # seconds between samples, like a 30 s scrape
T = int(time.time()) // 3600 * 3600  # a round hour in the past hour
H100_MIB = 81559


def at(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, UTC).replace(tzinfo=None)


class Series:
    """OpenMetrics text for promtool: families in one block each, samples in time order."""

    def __init__(self) -> None:
        self.families: dict[str, list[str]] = defaultdict(list)

    def add(self, metric: str, labels: dict[str, str], start: int, end: int, value) -> None:
        text = ",".join(f'{k}="{v}"' for k, v in labels.items())
        for i, t in enumerate(range(start + STEP // 2, end, STEP)):
            v = value(i) if callable(value) else value
            self.families[metric].append(f"{metric}{{{text}}} {v} {t}")

    def text(self) -> str:
        out = []
        for metric, lines in self.families.items():
            out.append(f"# TYPE {metric} gauge")
            out.extend(lines)
        return "\n".join(out) + "\n# EOF\n"


def dcgm_gpu(s: Series, job: str, gpu: str, start: int, end: int, util, used, host="gpu01"):
    labels = {"gpu": gpu, "UUID": f"GPU-{gpu}", "Hostname": host, "hpc_job": job}
    s.add("DCGM_FI_DEV_GPU_UTIL", labels, start, end, util)
    s.add("DCGM_FI_DEV_FB_USED", labels, start, end, used)
    free = (lambda i: H100_MIB - used(i)) if callable(used) else H100_MIB - used
    s.add("DCGM_FI_DEV_FB_FREE", labels, start, end, free)


def build_series() -> Series:
    s = Series()
    # job 501, first run (requeued later): 100 % on GPU 0
    dcgm_gpu(s, "501", "0", T - 14400, T - 12600, 100, 3000)
    # job 501, second run: GPU 0 at 80 %, GPU 1 alternating 20/40 (mean 30), memory rising
    dcgm_gpu(s, "501", "0", T - 7200, T - 3600, 80, lambda i: 10000 + i * 100)
    dcgm_gpu(s, "501", "1", T - 7200, T - 3600, lambda i: 20 if i % 2 else 40, 2000)
    # job 503 on a MIG instance: no DCGM_FI_DEV_GPU_UTIL, engine-active ratio 0.25
    mig = {"gpu": "2", "GPU_I_ID": "1", "GPU_I_PROFILE": "3g.40gb", "Hostname": "gpu01"}
    mig["hpc_job"] = "503"
    s.add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", mig, T - 5400, T - 1800, 0.25)
    s.add("DCGM_FI_DEV_FB_USED", mig, T - 5400, T - 1800, 5000)
    s.add("DCGM_FI_DEV_FB_FREE", mig, T - 5400, T - 1800, 35000)
    # job 504 holds 4 GPUs but only two export series
    dcgm_gpu(s, "504", "4", T - 3000, T - 600, 50, 100, host="gpu02")
    dcgm_gpu(s, "504", "5", T - 3000, T - 600, 70, 100, host="gpu02")
    # jobstats' exporter: job 601 on two clusters with the same job id
    for cluster, util in (("c1", 55), ("c2", 5)):
        labels = {"cluster": cluster, "instance": "gpu03:9445", "minor_number": "3"}
        labels["jobid"] = "601"
        s.add("nvidia_gpu_duty_cycle", labels, T - 3600, T - 1200, util)
        s.add("nvidia_gpu_memory_used_bytes", labels, T - 3600, T - 1200, 2 * 2**30)
        s.add("nvidia_gpu_memory_total_bytes", labels, T - 3600, T - 1200, 80 * 2**30)
    # `slurmgpu collect --textfile` scraped: job 701 on a whole GPU and a MIG instance
    for gpu, gi, util in (("0", "", 40), ("1", "2", None)):
        labels = {"node": "gpu04", "gpu": gpu, "gpu_instance": gi, "jobid": "701", "user": "a"}
        if util is not None:
            s.add("slurmgpu_gpu_utilization_percent", labels, T - 1800, T - 600, util)
        s.add("slurmgpu_gpu_memory_used_bytes", labels, T - 1800, T - 600, 3 * 2**30)
        s.add("slurmgpu_gpu_memory_total_bytes", labels, T - 1800, T - 600, 20 * 2**30)
    return s


def run(job: str, start: int, end: int, gpus: float = 1, cluster: str = "c1") -> RunRef:
    return RunRef(job, cluster, at(start), at(end), "gpu01", gpus)


DCGM_RUNS = [
    run("501", T - 14400, T - 12600),
    run("501", T - 7200, T - 3600, gpus=2),
    run("503", T - 5400, T - 1800, gpus=3 / 7),
    run("504", T - 3000, T - 600, gpus=4),
    run("505", T - 3000, T - 600),  # nothing exported for it
]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    if missing_programs():
        pytest.fail(f"missing {missing_programs()}: run scripts/run-tests as root", pytrace=False)
    server = PrometheusServer(tmp_path_factory.mktemp("prom"), build_series().text()).up()
    yield server
    server.down()


def by_key(measures):
    return {(m.job_id, m.start): m for m in measures}


def test_dcgm_series_give_each_run_its_own_window(prometheus):
    source = PrometheusSource(prometheus.url)
    got = by_key(source.measures(DCGM_RUNS))
    first = got[("501", at(T - 14400))]
    assert (first.util_mean_pct, first.mem_used_max_mib, first.gpus_measured) == (100, 3000, 1)
    second = got[("501", at(T - 7200))]
    assert second.gpus_measured == 2 and second.util_mean_pct == pytest.approx((80 + 30) / 2)
    assert second.mem_used_max_mib == 10000 + 119 * 100  # 120 samples in the hour
    assert second.gpu_memory_mib == H100_MIB and second.source == "prometheus"
    mig = got[("503", at(T - 5400))]
    assert (mig.util_mean_pct, mig.mem_used_max_mib, mig.gpu_memory_mib) == (25, 5000, 40000)
    assert got[("504", at(T - 3000))].util_mean_pct == 60
    assert ("505", at(T - 3000)) not in got and source.unmeasured == ["505"]
    [partial] = source.warnings
    assert partial.kind == "partial" and partial.job_ids == ("504",) and "2 of 4" in str(partial)


def test_batches_of_two_answer_the_same(prometheus):
    whole = PrometheusSource(prometheus.url)
    small = PrometheusSource(prometheus.url, batch_size=2)
    assert by_key(small.measures(DCGM_RUNS)) == by_key(whole.measures(DCGM_RUNS))
    # 8 queries per batch (2 utilization metrics, memory used, used + free, the energy
    # counter's increase and resets, the power gauge); the two runs of job 501 never share
    # a request: 2 batches of up to 40 runs, 3 batches of up to 2
    dcgm = SCHEMAS["dcgm"]
    per_batch = len(dcgm.util_metrics) + 1 + len(dcgm.mem_total_metrics)
    per_batch += 2 * (dcgm.energy_counter is not None) + (dcgm.power_gauge is not None)
    assert (whole.requests, small.requests) == (2 * per_batch, 3 * per_batch)


def test_jobstats_exporter_series_with_the_cluster_label(prometheus):
    source = PrometheusSource(prometheus.url, schema=SCHEMAS["jobstats"])
    runs = [
        run("601", T - 3600, T - 1200, cluster="c1"),
        run("601", T - 3600, T - 1200, cluster="c3"),
    ]
    [m] = source.measures(runs)
    assert (m.cluster, m.util_mean_pct, m.mem_used_max_mib, m.gpu_memory_mib) == (
        "c1",
        55,
        2048,
        81920,
    )


def test_options_build_a_working_source(prometheus):
    opts = MeasureOptions(prometheus=prometheus.url, prometheus_schema="jobstats")
    sources = build_measure_sources(opts)
    assert [s.name for s in sources] == ["collector", "jobstats", "prometheus"]
    [m] = sources[-1].measures([run("601", T - 3600, T - 1200, cluster="c2")])
    assert m.util_mean_pct == 5


def test_auth_header_and_refusals_are_reported(tmp_path):
    server = PrometheusServer(tmp_path, build_series().text(), basic_auth=("slurmgpu", "pw"))
    with server:
        refused = PrometheusSource(server.url)
        assert refused.measures(DCGM_RUNS[:3]) == []
        # two batches (job 501 twice): both refused, every run named
        assert [w.kind for w in refused.warnings] == ["http", "http"]
        assert "401" in refused.warnings[0].message
        assert sorted(j for w in refused.warnings for j in w.job_ids) == ["501", "501", "503"]
        allowed = PrometheusSource(server.url, headers=[server.auth_header()])
        assert len(allowed.measures(DCGM_RUNS[:3])) == 3 and allowed.warnings == []


def test_a_silent_server_times_out_and_every_run_is_named():
    with socket.socket() as silent:  # accepts connections (backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        source = PrometheusSource(url, timeout_s=0.5, batch_size=1)
        assert source.measures(DCGM_RUNS) == []
    # three timeouts, then the rest is not asked (a dead server must not cost 0.5 s per run)
    assert [w.kind for w in source.warnings] == ["timeout"] * 3 + ["skipped"] * 2
    named = sorted(j for w in source.warnings for j in w.job_ids)
    assert named == sorted(r.job_id for r in DCGM_RUNS)


def test_the_collectors_textfile_passes_promtool(monkeypatch, tmp_path):
    """Prometheus' own parser and linter accept what `slurmgpu collect` writes (MIG machine,
    a job on three instances, a node name that needs escaping)."""
    import subprocess

    from slurmgpu.measure.collector import CollectOptions, collect
    from tests.doubles.gpu_load import COLLECT_HOST as HOST
    from tests.doubles.gpu_load import load_mig
    from tests.doubles.machines import install_double, variant

    install_double(monkeypatch).use_machine(variant(tmp_path, "dgx-a100-mig", load_mig))
    textfile = tmp_path / "slurmgpu.prom"
    options = CollectOptions(tmp_path / "s.json", 'gpu"01', host_root=HOST, textfile=textfile)
    collect(options)
    text = textfile.read_text()
    assert 'jobid="4250",user="bob"' in text
    check = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert check.returncode == 0 and not check.stdout.strip(), check.stdout + check.stderr


def test_the_collectors_own_series_scraped_by_prometheus(prometheus):
    source = PrometheusSource(prometheus.url, schema=SCHEMAS["slurmgpu"])
    [m] = source.measures([run("701", T - 1800, T - 600, gpus=2)])
    # the MIG instance has memory but no utilization: the mean is over the whole GPU only
    assert (m.gpus_measured, m.util_mean_pct, m.mem_used_max_mib, m.gpu_memory_mib) == (
        2,
        40,
        3072,
        20480,
    )
