"""`analyze`'s energy block: Slurm's ConsumedEnergyRaw (and the `energy` TRES), measured
energy over it, the idle rule, coverage, the window clip, and the policy's money and CO2.
Every expected number is computed here from the rows written."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from slurmgpu.accounting import AnalysisOptions, analyze
from slurmgpu.accounting.energy import IDLE_POWER_RATIO, idle_share
from slurmgpu.errors import PolicyError
from slurmgpu.model.measure import JobGpuMeasure
from slurmgpu.sources.policy_file import parse_policy

B = 1764547200  # 2025-12-01T00:00:00Z
POLICY = 'default_tier = "P2"\n[tiers.P2]\npriority = 100\n[energy]\n'
HEADER = (
    "JobIDRaw|JobID|Partition|QOS|Account|User|Submit|Start|End|ElapsedRaw|TimelimitRaw|State|"
    "AllocTRES|TRESUsageInMax|TRESUsageInTot|ConsumedEnergyRaw"
)


def row(raw, part, start, end, gpus, energy, usage="", tot=""):
    alloc = f"billing=1,cpu=4,gres/gpu={gpus},mem=8G,node=1"
    head = f"{raw}|{raw}|{part}|normal|acct|u|{B}|{B + start}|{B + end}|{end - start}|600|"
    lines = [f"{head}COMPLETED|{alloc}||{tot}|{energy}"]
    if usage:
        lines.append(
            f"{raw}.batch|{raw}.batch||||u|{B + start}|{B + start}|{B + end}|{end - start}||"
            f"COMPLETED|{alloc}|{usage}||"
        )
    return lines


def dump(tmp_path, rows, name="energy.txt"):
    path = tmp_path / name
    path.write_text(HEADER + "\n" + "\n".join(x for r in rows for x in r) + "\n")
    return path


def analyzed(path, **kw):
    opts = AnalysisOptions(files=[path], capacity={"gpu": 16}, **kw)
    return analyze(opts).to_json()


def test_consumed_energy_raw_gives_kwh_coverage_and_idle(tmp_path):
    rows = [
        # 1 GPU for an hour at 80 %: 1.8 MJ = 0.5 kWh
        row(1, "a100", 0, 3600, 1, 1_800_000, usage="gres/gpuutil=80,gres/gpumem=1000M"),
        # 2 GPUs for an hour, idle (0 %): 0.36 MJ = 0.1 kWh, all idle
        row(2, "a100", 0, 3600, 2, 360_000, usage="gres/gpuutil=0,gres/gpumem=100M"),
        # no energy plugin: sacct prints 0 (not recorded)
        row(3, "h100", 0, 3600, 1, 0),
        # the energy TRES in TRESUsageInTot where ConsumedEnergyRaw is empty: 0.2 kWh
        row(4, "h100", 0, 3600, 1, "", tot="cpu=00:10:00,energy=720000,mem=1G"),
    ]
    doc = analyzed(dump(tmp_path, rows))
    e = doc["energy"]
    assert e["kwh"] == pytest.approx(0.5 + 0.1 + 0.2)
    assert e["coverage"] == pytest.approx(4 / 5)  # 5 GPU-hours, job 3's one unmeasured
    busy_idle = (0.2 * IDLE_POWER_RATIO) / (0.2 * IDLE_POWER_RATIO + 0.8)
    assert e["kwh_idle"] == pytest.approx(0.5 * busy_idle + 0.1)
    # used GPU-hours of runs with energy and utilization: 0.8 + 0 -> 0.6 kWh over 0.8 h
    assert e["kwh_per_used_gpu_hour"] == pytest.approx((0.5 + 0.1) / 0.8)
    parts = {p["partition"]: p for p in e["by_partition"]}
    assert parts["a100"]["kwh"] == pytest.approx(0.6) and parts["h100"]["kwh"] == pytest.approx(0.2)
    assert parts["a100"]["kwh_idle"] == pytest.approx(0.5 * busy_idle + 0.1)
    assert list(e) == ["kwh", "kwh_idle", "kwh_per_used_gpu_hour", "coverage", "by_partition"]
    assert doc["energy_cost"] is None
    json.dumps(doc, allow_nan=False)


def test_no_val_and_garbage_are_not_energy(tmp_path):
    rows = [
        row(1, "p", 0, 3600, 1, 18446744073709551614),  # NO_VAL64
        row(2, "p", 0, 3600, 1, "n/a"),
        row(3, "p", 0, 3600, 1, -5),
    ]
    e = analyzed(dump(tmp_path, rows))["energy"]
    assert (e["kwh"], e["coverage"], e["kwh_per_used_gpu_hour"]) == (0.0, 0.0, None)


def test_energy_is_clipped_to_the_window_like_gpu_hours(tmp_path):
    rows = [row(1, "p", 0, 7200, 1, 7_200_000)]  # 2 h, 2 kWh
    since = datetime.fromtimestamp(B + 3600, UTC)
    doc = analyzed(dump(tmp_path, rows), since=since, until=since + timedelta(hours=5))
    assert doc["energy"]["kwh"] == pytest.approx(1.0)


def test_a_measured_energy_wins_over_slurms(tmp_path):
    class Source:
        name = "collector"
        warnings = ()

        def measures(self, runs):
            return [JobGpuMeasure(r.job_id, "collector", 1, 50.0, None, None, energy_j=3.6e6)
                    for r in runs]  # fmt: skip

    rows = [row(1, "p", 0, 3600, 1, 1_800_000)]
    e = analyzed(dump(tmp_path, rows), measure_sources=[Source()])["energy"]
    assert e["kwh"] == pytest.approx(1.0)


def test_policy_energy_table_turns_kwh_into_money_and_co2(tmp_path):
    policy = parse_policy(
        POLICY + 'pue = 1.25\nprice_per_kwh = 0.2\ncurrency = "EUR"\ngco2_per_kwh = 400\n'
    )
    assert policy.energy is not None
    rows = [row(1, "p", 0, 3600, 2, 36_000_000)]  # 10 kWh, 2 GPUs at 0 % -> all idle
    doc = analyzed(dump(tmp_path, rows), energy=policy.energy)
    cost = doc["energy_cost"]
    assert cost["facility_kwh"] == pytest.approx(12.5)
    assert cost["cost"] == pytest.approx(12.5 * 0.2) and cost["currency"] == "EUR"
    assert cost["co2_kg"] == pytest.approx(12.5 * 0.4)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("pue = 0.5", "out of range"),
        ("price_per_kwh = -1", "out of range"),
        ("gco2_per_kwh = 1e9", "out of range"),
        ('currency = "a b"', "currency"),
        ("watts = 3", "watts"),
    ],
)
def test_policy_energy_table_bounds(body, message):
    with pytest.raises(PolicyError, match=message):
        parse_policy(POLICY + body + "\n")


def test_idle_share_rule():
    import numpy as np

    got = idle_share(np.array([0.0, 1.0, 50.0, 100.0, np.nan]), 1.0)
    r = IDLE_POWER_RATIO
    assert got.tolist()[:4] == pytest.approx([1.0, 1.0, 0.5 * r / (0.5 * r + 0.5), 0.0])
    assert got[4] == 0.0  # unknown utilization: not idle


def test_the_store_keeps_slurms_energy(tmp_path):
    from slurmgpu.accounting import store

    rows = [row(1, "a100", 0, 3600, 1, 1_800_000), row(2, "a100", 0, 3600, 1, 0)]
    path = dump(tmp_path, rows)
    store.ingest(tmp_path / "s", [path])
    stored = analyze(AnalysisOptions(store=tmp_path / "s", capacity={"gpu": 16})).to_json()
    assert stored["energy"] == analyzed(path)["energy"]
    assert stored["energy"]["kwh"] == pytest.approx(0.5) and stored["energy"]["coverage"] == 0.5


def test_the_monthly_trend_has_each_months_kwh(tmp_path):
    from slurmgpu.accounting.trend import ALL, trend
    from slurmgpu.views.report.trend import render_trend

    # B is 2025-12-01: a run in December, one in January (31 days on)
    jan = 31 * 86400
    rows = [
        row(1, "a100", 0, 3600, 1, 1_800_000),
        row(2, "a100", jan, jan + 3600, 1, 3_600_000),
        row(3, "h100", jan, jan + 3600, 1, 0),
    ]
    doc = trend(AnalysisOptions(files=[dump(tmp_path, rows)]))
    got = {(r.month, r.partition): r.energy_kwh for r in doc.rows}
    assert got[("2025-12", ALL)] == pytest.approx(0.5)
    assert got[("2026-01", ALL)] == pytest.approx(1.0)
    assert got[("2026-01", "a100")] == pytest.approx(1.0) and got[("2026-01", "h100")] is None
    prom = render_trend(doc, "prom")
    assert 'slurmgpu_trend_gpu_energy_joules{month="2026-01",partition="*"} 3600000' in prom
    assert "GPU kWh" in render_trend(doc, "text")


def test_the_example_policys_energy_block_parses_when_uncommented():
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "etc" / "slurmgpu.toml").read_text()
    keys = r"^# (\[energy\]|pue|price_per_kwh|currency|gco2_per_kwh)"
    energy = parse_policy(re.sub(keys, r"\1", text, flags=re.MULTILINE)).energy
    assert energy is not None and energy.pue == 1.3 and energy.currency == "EUR"


def test_sacct_json_steps_energy_tres_is_the_runs_energy():
    from slurmgpu.accounting.load import load_records
    from slurmgpu.sources.sacct import json_records

    def step(name, joules):
        energy = {"type": "energy", "name": "", "id": 3, "count": joules}  # as 22.05-25.11
        return {"step": {"id": f"9.{name}", "name": name}, "state": "COMPLETED",
                "time": {"start": B, "end": B + 3600, "elapsed": 3600},
                "tres": {"allocated": [], "requested": {"max": [], "average": [energy],
                                                        "total": [energy]}}}  # fmt: skip

    job = {
        "job_id": 9, "partition": "gpu", "qos": "n", "user": "u", "state": "COMPLETED",
        "time": {"submission": B, "start": B, "end": B + 3600, "elapsed": 3600},
        "tres": {"allocated": [{"type": "gres", "name": "gpu", "count": 1}]},
        "steps": [step("batch", 1_000_000), step("0", 800_000), step("extern", 0)],
    }  # fmt: skip
    recs = list(json_records({"jobs": [job]}))
    assert recs[0]["ConsumedEnergyRaw"] == "1800000"
    frame = load_records(recs, name="json").frame
    assert frame["energy_j"].iloc[0] == 1_800_000
    nothing = dict(job, steps=[step("batch", 0)])  # no energy plugin: 0, not recorded
    frame = load_records(list(json_records({"jobs": [nothing]})), name="json").frame
    assert frame["energy_j"].isna().all()
