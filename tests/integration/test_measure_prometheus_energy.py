"""Energy per run from a real Prometheus server (Debian's package), fed by backfilling:
DCGM's total-energy counter (mJ) with a driver reload mid-run, DCGM's power gauge (W),
jobstats' power series (mW) and a MIG instance's share of its GPU's counter.

Each expected figure is the hand computation from the counter samples written here (the
sum of their increases, a reset counting from the value after it) within 1 %: Prometheus'
`increase` also covers the half scrape interval at each end of the run's window.
"""

from __future__ import annotations

import itertools

import pytest

from slurmgpu.measure.prometheus import SCHEMAS, PrometheusSource
from tests.harness.prometheus import PrometheusServer, missing_programs
from tests.integration.test_measure_prometheus import STEP, Series, T, at, run

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slurm_only("host", reason="needs no Slurm daemons (a Prometheus test)"),
]

ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
POWER = "DCGM_FI_DEV_POWER_USAGE"


def samples(start: int, end: int) -> int:
    return len(range(start + STEP // 2, end, STEP))


def gpu0_mj(i: int) -> int:  # 300 W: 9000 J a sample
    return 5_000_000_000 + i * 9_000_000


def gpu1_mj(i: int) -> int:  # 200 W, the driver reloaded before sample 60 (counter from 0)
    return 1_000_000_000 + i * 6_000_000 if i < 60 else (i - 59) * 6_000_000


def hand_energy_j(values: list[int]) -> float:
    """Sum of the counter's increases in joules; after a reset, the value it restarted at."""
    total = 0
    for last, new in itertools.pairwise(values):
        total += new - last if new >= last else new
    return total / 1000


def build() -> Series:
    s = Series()
    dcgm = {"Hostname": "gpu01", "UUID": "GPU-0", "gpu": "0", "hpc_job": "801"}
    s.add(ENERGY, dcgm, T - 7200, T - 3600, gpu0_mj)
    s.add(ENERGY, dcgm | {"gpu": "1", "UUID": "GPU-1"}, T - 7200, T - 3600, gpu1_mj)
    # job 802: DCGM without the counter (an older GPU): power alternating 100/300 W
    power = {"Hostname": "gpu02", "UUID": "GPU-2", "gpu": "2", "hpc_job": "802"}
    s.add(POWER, power, T - 5400, T - 3600, lambda i: 300 if i % 2 else 100)
    # job 803: a MIG 3g.40gb instance; its series carry the GPU's counter (7000 J a sample)
    mig = {"Hostname": "gpu03", "gpu": "3", "GPU_I_ID": "2", "GPU_I_PROFILE": "3g.40gb"}
    s.add(ENERGY, mig | {"hpc_job": "803"}, T - 3600, T - 1800, lambda i: i * 7_000_000)
    # jobstats' exporter: job 901, 250 W in mW
    js = {"cluster": "c1", "instance": "gpu04:9445", "minor_number": "0", "jobid": "901"}
    s.add("nvidia_gpu_power_usage_milliwatts", js, T - 3600, T - 1200, 250_000)
    return s


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    if missing_programs():
        pytest.fail(f"missing {missing_programs()}: run scripts/run-tests as root", pytrace=False)
    server = PrometheusServer(tmp_path_factory.mktemp("prom-energy"), build().text()).up()
    yield server
    server.down()


def test_dcgm_counter_gives_the_runs_energy_across_a_driver_reload(prometheus):
    source = PrometheusSource(prometheus.url)
    [m] = source.measures([run("801", T - 7200, T - 3600, gpus=2)])
    n = samples(T - 7200, T - 3600)
    expected = hand_energy_j([gpu0_mj(i) for i in range(n)])
    expected += hand_energy_j([gpu1_mj(i) for i in range(n)])
    assert m.energy_j == pytest.approx(expected, rel=0.01) and m.energy_j > 0
    assert not m.energy_estimated
    [reset] = [w for w in source.warnings if w.kind == "energy"]
    assert reset.job_ids == ("801",) and "1 time(s)" in reset.message


def test_dcgm_power_gauge_gives_mean_power_times_the_window(prometheus):
    source = PrometheusSource(prometheus.url)
    [m] = source.measures([run("802", T - 5400, T - 3600)])
    assert m.energy_j == pytest.approx(200 * 1800, rel=0.01) and m.energy_estimated


def test_a_mig_instance_is_charged_its_compute_slices_share(prometheus):
    source = PrometheusSource(prometheus.url)
    [m] = source.measures([run("803", T - 3600, T - 1800, gpus=3 / 7)])
    n = samples(T - 3600, T - 1800)
    gpu = hand_energy_j([i * 7_000_000 for i in range(n)])
    assert m.energy_j == pytest.approx(gpu * 3 / 7, rel=0.01) and m.energy_estimated


def test_jobstats_power_series_in_milliwatts(prometheus):
    source = PrometheusSource(prometheus.url, schema=SCHEMAS["jobstats"])
    [m] = source.measures([run("901", T - 3600, T - 1200, cluster="c1")])
    assert m.energy_j == pytest.approx(250 * 2400, rel=0.01) and m.energy_estimated


def test_runs_measured_together_keep_their_own_energy(prometheus):
    runs = [
        run("801", T - 7200, T - 3600, gpus=2),
        run("802", T - 5400, T - 3600),
        run("803", T - 3600, T - 1800, gpus=3 / 7),
    ]
    together = {m.job_id: m.energy_j for m in PrometheusSource(prometheus.url).measures(runs)}
    alone = {r.job_id: PrometheusSource(prometheus.url).measures([r])[0].energy_j for r in runs}
    assert together == alone and at(T).year > 2000
