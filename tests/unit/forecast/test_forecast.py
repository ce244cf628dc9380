"""slurmgpu forecast: the demand series by hand, the models on generated series, no leaks,
hostile inputs."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from slurmgpu.forecast import models
from slurmgpu.forecast.demand import DemandSeries, bucket_average
from slurmgpu.forecast.pipeline import backtest_partition, forecast_series, robust_gain, split

HEADER = (
    "JobIDRaw|JobID|Cluster|Partition|QOS|Account|User|State|Submit|Start|End|ElapsedRaw"
    "|AllocTRES|ReqTRES"
)
T0 = 1764547200  # 2025-12-01T00:00:00Z


def _row(jid, part, state, submit, start, end, alloc, req):
    el = (end - start) if isinstance(start, int) and isinstance(end, int) else 0
    return (
        f"{jid}|{jid}|c1|{part}|normal|ml|alice|{state}|{submit}|{start}|{end}|{el}|{alloc}|{req}"
    )


def _tiny(tmp_path):
    h = 3600
    rows = [
        # B runs 00:00-03:00 on 1 GPU
        _row(1, "gpu", "COMPLETED", T0, T0, T0 + 3 * h, "gres/gpu=1", "gres/gpu=1"),
        # A pends 00:30-01:30, then runs 01:30-02:15 on 2 GPUs (straddles buckets)
        _row(
            2,
            "gpu",
            "COMPLETED",
            T0 + h // 2,
            T0 + 3 * h // 2,
            T0 + 9 * h // 4,
            "gres/gpu=2",
            "gres/gpu=2",
        ),
        # C still pending from 02:30, asks for 4 GPUs
        _row(3, "gpu", "PENDING", T0 + 5 * h // 2, "None", "Unknown", "", "gres/gpu=4"),
    ]
    p = tmp_path / "tiny.txt"
    p.write_text("\n".join([HEADER, *rows]) + "\n")
    return p


def test_demand_series_by_hand(tmp_path):
    from datetime import UTC, datetime

    from slurmgpu.accounting import analyze
    from slurmgpu.accounting.options import AnalysisOptions
    from slurmgpu.accounting.window import to64
    from slurmgpu.forecast.demand import demand_series

    opts = AnalysisOptions(files=[_tiny(tmp_path)], now=datetime(2026, 1, 1, tzinfo=UTC))
    result = analyze(opts)
    w = result.document.window
    s = demand_series(result.frame, to64(w.since), to64(w.until), 3600)
    assert [str(t) for t in s.times] == [
        "2025-12-01T00:00:00", "2025-12-01T01:00:00", "2025-12-01T02:00:00"
    ]  # fmt: skip
    # bucket 0: B 1 + A pending half an hour x 2 = 2; bucket 1: B 1 + A pending 0.5 x 2 + A
    # running 0.5 x 2 = 3; bucket 2: B 1 + A running 0.25 x 2 + C pending 0.5 x 4 = 3.5
    np.testing.assert_allclose(s.demand("gpu"), [2.0, 3.0, 3.5])
    np.testing.assert_allclose(s.pending["gpu"], [1.0, 1.0, 2.0])
    np.testing.assert_allclose(s.running["gpu"], [1.0, 2.0, 1.5])


def test_bucket_average_matches_fine_sampling():
    rng = np.random.default_rng(1)
    start = rng.uniform(0, 1000, 200)
    end = start + rng.uniform(0, 300, 200)
    gpus = rng.integers(1, 9, 200).astype(float)
    edges = np.arange(0, 1301, 100.0)
    got = bucket_average(start, end, gpus, edges)
    t = np.arange(0, 1300, 0.01) + 0.005
    level = ((t[:, None] >= start) & (t[:, None] < end)) @ gpus
    want = level.reshape(13, -1).mean(axis=1)
    np.testing.assert_allclose(got, want, atol=0.02)


def _series(values: np.ndarray, pending: np.ndarray | None = None) -> DemandSeries:
    times = np.datetime64("2025-11-03T00:00:00") + np.arange(len(values)) * np.timedelta64(1, "h")
    pend = np.zeros(len(values)) if pending is None else pending
    return DemandSeries(times, 3600, {"gpu": values - pend}, {"gpu": pend})


def _seasonal(weeks: int, trend: float, noise: float, seed: int = 0) -> np.ndarray:
    t = np.arange(weeks * 168, dtype=float)
    hour, day = t % 24, (t // 24) % 7
    daily = 20 * np.sin(2 * np.pi * (hour - 8) / 24)
    weekly = np.where(day >= 5, -25.0, 0.0)
    rng = np.random.default_rng(seed)
    return np.maximum(100 + daily + weekly + trend * t + rng.normal(0, noise, len(t)), 0)


def test_learned_model_beats_seasonal_naive_with_trend_and_noise():
    y = _seasonal(weeks=6, trend=0.05, noise=4.0)
    backtests, forecasts = forecast_series(_series(y), steps=168)
    scores = {s.model: s for s in backtests[0].scores}
    assert scores[models.RIDGE].smape_pct < scores[models.NAIVE].smape_pct
    # a learned model well ahead of seasonal-naive in every fold is picked: the one with the
    # highest recency-weighted gain
    picked = backtests[0].picked
    assert picked != models.NAIVE
    naive = scores[models.NAIVE]
    gains = {m: robust_gain(s, naive) for m, s in scores.items() if m != models.NAIVE}
    assert gains[picked] == max(g for g in gains.values() if g is not None)
    ridge = scores[models.RIDGE]
    assert all(r <= 0.95 * b for r, b in zip(ridge.fold_smape, naive.fold_smape, strict=True))
    points = forecasts[0].points
    assert len(points) == 168
    assert all(p.low <= p.gpus <= p.high for p in points)
    assert points[0].time.isoformat() == "2025-12-15T00:00:00+00:00"


def test_pure_weekly_series_reports_both_models_honestly():
    y = _seasonal(weeks=4, trend=0.0, noise=0.0)
    backtests, _ = forecast_series(_series(y), steps=24)
    scores = {s.model: s for s in backtests[0].scores}
    assert scores[models.NAIVE].smape_pct == pytest.approx(0.0, abs=1e-9)
    assert scores[models.NAIVE].under_forecast_rate == 0.0
    assert scores[models.RIDGE].smape_pct is not None
    best = min(s.smape_pct for s in scores.values())
    assert scores[backtests[0].picked].smape_pct == best


def test_backtest_never_sees_the_held_out_part():
    y = _seasonal(weeks=4, trend=0.02, noise=3.0)
    pend = y * 0.1
    t_s = 1762128000.0 + 3600.0 * np.arange(len(y))
    h = split(len(y), 48)
    _, res = backtest_partition(y, pend, t_s, 3600, 48)
    y2, p2 = y.copy(), pend.copy()
    y2[-h:] += 1000.0  # the future changes wildly
    p2[-h:] += 500.0
    _, res2 = backtest_partition(y2, p2, t_s, 3600, 48)
    for name in res:  # forecasts identical: fold 1's residuals shift exactly by the change,
        # fold 2 (fitted and scored before the held-out part) does not move
        np.testing.assert_allclose(res2[name][:h] - res[name][:h], 1000.0)
        np.testing.assert_allclose(res2[name][h:], res[name][h:])
        assert len(res[name]) == 4 * h


def test_train_until_cuts_the_history(tmp_path):
    """Jobs after --train-until change nothing in the forecast."""
    rows = []
    for d in range(10):
        for hh in range(0, 24, 3):
            s = T0 + d * 86400 + hh * 3600
            rows.append(_row(len(rows) + 1, "gpu", "COMPLETED", s, s, s + 7200, "gres/gpu=2",
                             "gres/gpu=2"))  # fmt: skip
    a = tmp_path / "a.txt"
    a.write_text("\n".join([HEADER, *rows]) + "\n")
    late = T0 + 9 * 86400 + 3600
    b = tmp_path / "b.txt"
    b.write_text("\n".join([HEADER, *rows, _row(999, "gpu", "COMPLETED", late, late,
                 late + 3600, "gres/gpu=64", "gres/gpu=64")]) + "\n")  # fmt: skip
    args = ["--train-until", "2025-12-09T00:00", "--horizon", "1d", "--format", "json"]
    out = [CliRunner().invoke(main, ["forecast", "--sacct-file", str(p), *args]) for p in (a, b)]
    assert all(r.exit_code == 0 for r in out), [r.output for r in out]
    ja, jb = (json.loads(r.output) for r in out)
    assert ja == jb
    assert ja["model"]["train_until"] == "2025-12-09T00:00:00Z"
    assert [set(p) for p in ja["by_partition"]] == [{"partition", "model", "points"}]
    assert set(ja["by_partition"][0]["points"][0]) == {"time", "gpus", "low", "high"}
    assert ja["by_partition"][0]["points"][0]["time"] == "2025-12-09T00:00:00Z"
    assert len(ja["by_partition"][0]["points"]) == 24
    assert set(ja["backtest"]["by_partition"][0]["models"]) == set(models.CANDIDATES)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--horizon", "0"], "--horizon '0'"),
        (["--horizon", "-3d"], "--horizon"),
        (["--freq", "nonsense"], "--freq 'nonsense'"),
        (["--freq", "7m"], "dividing a day"),
        (["--horizon", "400d"], "at most 92d"),
        ([], "too little history"),
    ],
)
def test_hostile_inputs_one_error_line(tmp_path, args, needle):
    r = CliRunner().invoke(main, ["forecast", "--sacct-file", str(_tiny(tmp_path)), *args])
    assert r.exit_code in (1, 2)
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("slurmgpu: error:"), r.output
    assert needle in lines[0]
    assert "Traceback" not in r.output


def test_text_view(tmp_path):
    y = _seasonal(weeks=3, trend=0.0, noise=2.0)
    from slurmgpu.views.forecast import render_forecast

    backtests, forecasts = forecast_series(_series(y), steps=6)
    from datetime import UTC, datetime

    from slurmgpu.forecast.pipeline import Forecast

    t = datetime(2025, 11, 24, tzinfo=UTC)
    text = render_forecast(
        Forecast(3600, 6, t, t, t, 100, 6, tuple(backtests), tuple(forecasts)), "text"
    )
    assert "seasonal-naive" in text and "ridge" in text
    assert text.count("\n  2025-") == 6
