"""Energy per job from the collector: NVML's counter (pynvml double), power where there is no
counter, MIG splits, counter resets and wraps. Every expected figure is computed here from
the counter values the double serves."""

from __future__ import annotations

import base64
import gzip
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from slurmgpu.measure.collector import CollectOptions, collect, epilog
from slurmgpu.measure.collector.energy import (
    EnergyReading,
    Meter,
    counter_increase,
    mig_share,
)
from slurmgpu.measure.summary import PREFIX, CollectorSource, decode
from slurmgpu.model.measure import RunRef
from tests.doubles.gpu_load import COLLECT_HOST, load_h100, load_mig
from tests.doubles.machines import install_double, variant


@pytest.fixture
def nvml(monkeypatch):
    return install_double(monkeypatch)


def options(tmp_path: Path, **kw) -> CollectOptions:
    base = dict(state=tmp_path / "state.json", node="gpu01", cluster="c1", host_root=COLLECT_HOST)
    return CollectOptions(**(base | kw))


def passes(nvml, tmp_path, monkeypatch, name, load, readings, t0=1_800_000_000, step=60):
    """One collector pass per entry of `readings` ({minor: {"total_energy_mj": ...}}), `step`
    seconds apart."""
    for i, per_gpu in enumerate(readings):

        def change(data, per_gpu=per_gpu):
            load(data)
            for gpu in data["gpus"]:
                gpu.update(per_gpu.get(gpu["minor_number"], {}))

        nvml.use_machine(variant(tmp_path, name, change))
        monkeypatch.setattr("slurmgpu.measure.collector.time.time", lambda i=i: t0 + i * step)
        collect(options(tmp_path))


def stored(tmp_path, job, gpus=""):
    spool = tmp_path / "spool"
    env = {"SLURM_JOB_ID": job, "SLURM_JOB_GPUS": gpus}
    assert epilog(options(tmp_path, spool=spool, admin_comment=False), env) == 0
    [path] = [p for p in (spool / "c1").iterdir() if p.name.startswith(f"{job}.")]
    return path, decode(path.read_text().strip())


def measure_of(tmp_path, job):
    run = RunRef(job, "c1", None, None, "gpu01", 3.0)
    source = CollectorSource(tmp_path / "spool")
    [m] = source.measures([run])
    return m, source.warnings


def counters(c0, c1, c5):
    return {0: {"total_energy_mj": c0}, 1: {"total_energy_mj": c1}, 5: {"total_energy_mj": c5}}


def test_job_energy_is_the_counters_growth_with_shared_gpus_split(nvml, tmp_path, monkeypatch):
    # job 4242 has GPU 0 alone, shares GPU 1 with job 4243, holds GPU 5 without a process
    readings = [
        counters(1_000_000, 2_000_000, 500_000),
        counters(43_000_000, 12_000_000, 3_000_000),
        counters(85_000_000, 22_000_000, 5_500_000),
    ]
    passes(nvml, tmp_path, monkeypatch, "dgx-h100", lambda d: load_h100(d, [80, 40]), readings)
    _, summary = stored(tmp_path, "4242", "0,1,5")
    by_minor = {g.minor: g for g in summary.gpus}
    gpu0 = (85_000_000 - 1_000_000) / 1000
    gpu1 = ((12_000_000 - 2_000_000) + (22_000_000 - 12_000_000)) / 1000 / 2  # two jobs on it
    gpu5 = (5_500_000 - 500_000) / 1000
    assert by_minor[0].energy_j == pytest.approx(gpu0, rel=0.01)
    assert not by_minor[0].energy_estimated
    assert by_minor[1].energy_j == pytest.approx(gpu1, rel=0.01) and by_minor[1].energy_estimated
    assert by_minor[5].energy_j == pytest.approx(gpu5, rel=0.01)
    m, warnings = measure_of(tmp_path, "4242")
    assert m.energy_j == pytest.approx(gpu0 + gpu1 + gpu5, rel=0.01)
    assert m.energy_estimated and warnings == []


def test_a_driver_reload_mid_job_counts_the_energy_since_it_and_warns(nvml, tmp_path, monkeypatch):
    gpu0 = [50_000_000, 90_000_000, 4_000_000, 20_000_000]  # reloaded before the third pass
    readings = [{0: {"total_energy_mj": c}} for c in gpu0]
    passes(nvml, tmp_path, monkeypatch, "dgx-h100", lambda d: load_h100(d, [80]), readings)
    _, summary = stored(tmp_path, "4242", "0")
    [g0] = [g for g in summary.gpus if g.minor == 0]
    expected = ((90_000_000 - 50_000_000) + 4_000_000 + (20_000_000 - 4_000_000)) / 1000
    assert g0.energy_j == pytest.approx(expected, rel=0.01) and g0.energy_j >= 0
    assert any("went down 1 time" in w for w in summary.energy_warnings)
    _, warnings = measure_of(tmp_path, "4242")
    assert [w.kind for w in warnings] == ["energy"] and warnings[0].job_ids == ("4242",)


def test_power_is_integrated_where_there_is_no_counter(nvml, tmp_path, monkeypatch):
    # a GPU without the counter (before Volta): the trapezoid of its power readings
    readings = [{0: {"energy": "unsupported", "power_mw": p}} for p in (100_000, 200_000, 300_000)]
    passes(nvml, tmp_path, monkeypatch, "dgx-h100", lambda d: load_h100(d, [80]), readings)
    _, summary = stored(tmp_path, "4242", "0")
    [g0] = [g for g in summary.gpus if g.minor == 0]
    assert g0.energy_j == pytest.approx((150 * 60 + 250 * 60), rel=0.01)
    assert g0.energy_estimated and summary.energy_warnings == ()


def test_power_samples_far_apart_add_nothing_and_warn(nvml, tmp_path, monkeypatch):
    readings = [{0: {"energy": "unsupported", "power_mw": 100_000}}] * 3
    passes(
        nvml, tmp_path, monkeypatch, "dgx-h100", lambda d: load_h100(d, [80]), readings, step=900
    )
    _, summary = stored(tmp_path, "4242", "0")
    [g0] = [g for g in summary.gpus if g.minor == 0]
    assert g0.energy_j == 0.0  # never invented over a 15-minute hole
    assert any("2 gap(s)" in w for w in summary.energy_warnings)


def test_mig_instances_get_their_gpus_energy_by_compute_slices(nvml, tmp_path, monkeypatch):
    readings = [
        {1: {"total_energy_mj": 1_000_000}, 2: {"total_energy_mj": 1_000_000}},
        {1: {"total_energy_mj": 8_000_000}, 2: {"total_energy_mj": 1_700_000}},
    ]
    passes(nvml, tmp_path, monkeypatch, "dgx-a100-mig", load_mig, readings)
    _, summary = stored(tmp_path, "4250")
    got = [(g.minor, g.profile, g.energy_j, g.energy_estimated) for g in summary.gpus]
    # GPU 1 drew 7000 J: each 3g instance is charged 3/7; GPU 2 drew 700 J: 1g is 1/7
    assert got == [
        (1, "3g.20gb", pytest.approx(3000.0), True),
        (1, "3g.20gb", pytest.approx(3000.0), True),
        (2, "1g.10gb", pytest.approx(100.0), True),
    ]


def test_a_gpu_without_energy_leaves_the_job_unmeasured(nvml, tmp_path, monkeypatch):
    readings = [{0: {"energy": "unsupported", "name": "unknown GPU"}}] * 2
    passes(nvml, tmp_path, monkeypatch, "dgx-h100", lambda d: load_h100(d, [80]), readings)
    _, summary = stored(tmp_path, "4242", "0")
    # GPU 0 gives neither counter nor power; GPU 1 (shared, counter standing still) gives 0
    assert {g.minor: g.energy_j for g in summary.gpus} == {0: None, 1: 0.0}
    m, _ = measure_of(tmp_path, "4242")
    assert m.energy_j is None and m.util_mean_pct == 40  # GPU 1 idled: (80 + 0) / 2


def test_counter_wrap_and_reset_are_told_apart():
    top = float(2**32)
    assert counter_increase(top - 50, 30, top) == (80, "wrap")
    assert counter_increase(1_000, 200, top) == (200, "reset")
    assert counter_increase(1_000, 1_500, top) == (500, None)
    meter = Meter()
    for t, c in ((0, top - 100), (60, 400), (120, 900)):
        meter.advance(t, EnergyReading(c, None, top))
    assert meter.total_j == 1000 and meter.wraps == 1 and meter.resets == 0


def test_mig_share_rule():
    assert mig_share("3g.40gb") == pytest.approx(3 / 7)
    assert mig_share("7g.80gb") == 1.0 and mig_share("1g.10gb+me") == pytest.approx(1 / 7)
    assert mig_share(None) is None and mig_share("weird") is None


def test_a_summary_written_before_energy_still_reads():
    old = {
        "v": 1, "job": "42", "cluster": "c1", "node": "gpu01", "first": 1733220000,
        "last": 1733223600, "samples": 120,
        "gpus": [{"minor": 0, "gi": None, "profile": None, "uuid": "GPU-x",
                  "mem_total_mib": 81559, "mem_max_mib": 20480.0, "util_mean_pct": 61.5,
                  "util_samples": 120, "samples": 120}],
    }  # fmt: skip
    packed = gzip.compress(json.dumps(old).encode(), mtime=0)
    token = PREFIX + base64.b32encode(packed).decode().rstrip("=")
    s = decode(token)
    assert s.gpus[0].energy_j is None and s.energy_warnings == ()
    run = RunRef("42", "c1", datetime.fromtimestamp(1733220000, UTC).replace(tzinfo=None), None,
                 "gpu01", 1.0, admin_comment=token)  # fmt: skip
    [m] = CollectorSource().measures([run])
    assert m.energy_j is None and m.util_mean_pct == 61.5


def test_a_negative_energy_in_a_summary_is_refused():
    with pytest.raises(ValueError, match="energy"):
        from slurmgpu.measure.summary import JobSummary

        JobSummary.from_json(
            json.dumps(
                {
                    "v": 1,
                    "job": "1",
                    "node": "n",
                    "first": 0,
                    "last": 1,
                    "samples": 1,
                    "gpus": [{"minor": 0, "mem_total_mib": 1, "mem_max_mib": 1, "energy_j": -5.0}],
                }
            )
        )


def test_a_state_file_with_keys_this_version_does_not_know_still_loads(tmp_path):
    from slurmgpu.measure.collector.state import load_state

    gpu = {"minor": 0, "gi": None, "profile": None, "uuid": "GPU-0", "mem_total_mib": 80.0,
           "energy_j": 5.0, "from_a_later_version": 1}  # fmt: skip
    job = {"user": "u", "first": 1, "last": 2, "samples": 1, "gpus": {"0": gpu}}
    meter = {"total_j": 9.0, "t": 2, "source": "counter", "later": True}
    text = json.dumps({"v": 1, "jobs": {"7": job}, "whole_gpus": {"0": 80}, "meters": {"0": meter}})
    (tmp_path / "state.json").write_text(text)
    state = load_state(tmp_path / "state.json")
    assert state.jobs["7"].gpus["0"].energy_j == 5.0 and state.meters["0"].total_j == 9.0


def test_a_mig_job_is_not_charged_the_interval_before_it_was_seen(nvml, tmp_path, monkeypatch):
    # the meters run before the job: its first pass starts its figure, as on a whole GPU
    mj = [{1: {"total_energy_mj": 1_000_000 + i * 7_000_000}} for i in range(3)]
    passes(nvml, tmp_path, monkeypatch, "dgx-a100-mig", lambda d: None, mj[:1])
    passes(nvml, tmp_path, monkeypatch, "dgx-a100-mig", load_mig, mj[1:], t0=1_800_000_060)
    _, summary = stored(tmp_path, "4250")
    on_gpu1 = [g.energy_j for g in summary.gpus if g.minor == 1]
    assert on_gpu1 == [pytest.approx(3000.0), pytest.approx(3000.0)]  # one interval, 3/7 each
