"""The forecast's memory bound (`forecast.budget`) lies above what the computation allocates."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from slurmgpu.forecast import budget
from slurmgpu.forecast.demand import SECOND, DemandSeries
from slurmgpu.forecast.pipeline import forecast_series


@pytest.mark.parametrize(
    ("freq_s", "n", "steps"),
    [(3600, 4000, 24), (300, 6000, 288), (60, 12000, 1440), (86400, 1500, 7)],
    ids=["1h", "5m", "1m", "1d"],
)
def test_the_estimate_lies_above_the_measured_peak(freq_s, n, steps):
    rng = np.random.default_rng(7)
    start = 1_700_000_000 // 86400 * 86400
    times = (np.datetime64(0, "s") + (start + freq_s * np.arange(n)) * SECOND).astype(
        "datetime64[s]"
    )
    y = rng.random(n) * 10 + 5 * np.sin(np.arange(n) * 2 * np.pi * freq_s / 86400)
    series = DemandSeries(times, freq_s, {"gpu": np.maximum(y, 0)}, {"gpu": rng.random(n)})
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        forecast_series(series, steps)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    need = budget.need_bytes(n, steps, 1, freq_s)
    assert peak < need, (peak, need)


def test_refusal_names_the_span_the_freq_and_a_coarser_one_that_fits():
    year = 365 * 86400
    with pytest.raises(Exception, match=r"365 days: at --freq 1m .* use --freq (\w+)") as got:
        budget.check_buckets(year, 60, 7 * 86400, 1)
    coarser = str(got.value).split("use --freq ")[1].split()[0]
    f = next(x for x in budget.FREQS if budget.freq_text(x) == coarser)
    assert budget.need_bytes(year // f + 1, 7 * 86400 // f, 1, f) <= budget.MAX_BYTES
    budget.check_buckets(year, f, 7 * 86400, 1)  # and it is accepted
    # more series need a coarser grid
    with pytest.raises(Exception, match="use --freq"):
        budget.check_buckets(year, f, 7 * 86400, 400)
