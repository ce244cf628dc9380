"""kWh in the text, HTML and Prometheus reports and in `slurmgpu job`'s text."""

from __future__ import annotations

import pytest

from slurmgpu.accounting import AnalysisOptions, analyze
from slurmgpu.idle.job import JobReport, JobUse
from slurmgpu.sources.policy_file import parse_policy
from slurmgpu.views.job import render_job
from slurmgpu.views.report import render_report
from slurmgpu.views.report.prom import check_prom_text
from slurmgpu.views.report.tables import fmt_kwh
from tests.unit.accounting.test_energy import POLICY, dump, row
from tests.unit.views.test_promtool import promtool


@pytest.fixture
def doc(tmp_path):
    rows = [
        row(1, "a100", 0, 3600, 1, 18_000_000, usage="gres/gpuutil=80,gres/gpumem=1000M"),
        row(2, "h100", 0, 3600, 2, 3_600_000, usage="gres/gpuutil=0,gres/gpumem=100M"),
    ]
    policy = parse_policy(POLICY + 'pue = 1.5\nprice_per_kwh = 0.3\ncurrency = "EUR"\n')
    opts = AnalysisOptions(files=[dump(tmp_path, rows)], capacity={"gpu": 8}, energy=policy.energy)
    return analyze(opts).document


def test_text_report_shows_kwh_idle_and_cost(doc):
    text = render_report(doc, "text")
    e = doc.energy
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("GPU energy "))
    assert line.endswith(f"{fmt_kwh(e.kwh)} measured on 100.0% of GPU-hours")
    assert f"{fmt_kwh(e.kwh_idle)} (the idle rule" in text
    cost = doc.energy_cost.cost
    assert f"{fmt_kwh(e.kwh * 1.5)} at PUE 1.5; {cost:,.2f} EUR" in text
    assert "GPU energy by partition" in text and "a100" in text


def test_html_report_shows_kwh(doc):
    html = render_report(doc, "html")
    assert f"{fmt_kwh(doc.energy.kwh)} measured" in html


def test_prometheus_report_has_energy_in_joules(doc):
    text = render_report(doc, "prom")
    check_prom_text(text)
    assert f"slurmgpu_gpu_energy_joules {int(doc.energy.kwh * 3.6e6)}" in text
    assert 'slurmgpu_partition_gpu_energy_joules{partition="h100"} 3600000' in text
    assert 'slurmgpu_gpu_energy_cost{currency="EUR"}' in text
    assert promtool(text) == ""


def test_a_report_without_energy_says_not_measured(tmp_path):
    opts = AnalysisOptions(files=[dump(tmp_path, [row(1, "p", 0, 3600, 1, 0)])])
    text = render_report(analyze(opts).document, "text")
    assert "GPU energy  not measured" in text or "not measured (no collector" in text


def test_job_text_shows_its_kwh():
    use = JobUse("7", "u", "RUNNING", "gpu", "P2", "2025-12-01T00:00:00Z", None, 600, 3600, 1.0,
                 1, "1 GPU(s) on gpu01", (), 50.0, None, None, (), 0.0, (),
                 energy_kwh=0.05, energy_estimated=True)  # fmt: skip
    text = render_job(JobReport((use,)), "text")
    assert "GPU energy 0.050 kWh (an estimate" in text
