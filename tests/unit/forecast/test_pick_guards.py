"""The guards that make a learned pick surer (docs/forecast.md, "the pick"): a learned
forecast tapered toward seasonal-naive with the lead time, every back-test fold won, and
seasonal-naive kept for a series idle a good part of its last week."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from slurmgpu.forecast import models
from slurmgpu.forecast import pipeline as pl
from slurmgpu.forecast.demand import DemandSeries
from slurmgpu.forecast.pipeline import Score, pick, smape_pct


def _seasonal(weeks: int, trend: float, noise: float = 2.0, seed: int = 0) -> np.ndarray:
    t = np.arange(weeks * 168, dtype=float)
    hour, day = t % 24, (t // 24) % 7
    daily = 20 * np.sin(2 * np.pi * (hour - 8) / 24) + np.where(day >= 5, -25.0, 0.0)
    rng = np.random.default_rng(seed)
    return np.maximum(100 + daily + trend * t + rng.normal(0, noise, len(t)), 0)


def _ds(values: np.ndarray) -> DemandSeries:
    times = np.datetime64("2025-11-03T00:00:00") + np.arange(len(values)) * np.timedelta64(1, "h")
    return DemandSeries(times, 3600, {"gpu": values}, {"gpu": np.zeros(len(values))})


def _score(model: str, folds: tuple[float, ...]) -> Score:
    return Score(model, sum(folds) / len(folds), 0.5, folds=len(folds), fold_smape=folds)


def test_learned_share_falls_to_the_day_share_then_to_the_week_share():
    share = pl.learned_share(200, 24)
    assert share[0] == 1.0  # the next bucket: the learned model's alone
    assert share[23] == pytest.approx(pl.DAY_SHARE)  # one day ahead
    # linear in between: half way at 12.5 buckets ahead
    np.testing.assert_allclose(share[:24], 1.0 + (pl.DAY_SHARE - 1.0) * np.arange(24) / 23)
    # linear from DAY_SHARE at one day to WEEK_SHARE at seven days: half way at four days
    assert share[95] == pytest.approx(pl.DAY_SHARE + (pl.WEEK_SHARE - pl.DAY_SHARE) * 0.5)
    np.testing.assert_allclose(share[167:], pl.WEEK_SHARE)
    assert np.all(np.diff(share) <= 0)
    assert 0.0 <= pl.WEEK_SHARE < pl.DAY_SHARE < 1.0
    pred, naive = np.full(200, 10.0), np.full(200, 4.0)
    np.testing.assert_allclose(pl.tapered(pred, naive, 24), 4.0 + 6.0 * share)
    # a horizon of a day or less: tapered the same way over the hours it has
    np.testing.assert_allclose(pl.tapered(pred[:24], naive[:24], 24), 4.0 + 6.0 * share[:24])
    np.testing.assert_allclose(pl.tapered(pred[:6], naive[:6], 24), 4.0 + 6.0 * share[:6])


def test_a_learned_pick_forecasts_the_tapered_model_and_is_scored_so():
    y = _seasonal(weeks=6, trend=0.2)
    t_s = 1762128000.0 + 3600.0 * np.arange(len(y))
    backtests, forecasts = pl.forecast_series(_ds(y), steps=168)
    best = backtests[0].picked
    assert best != models.NAIVE  # a trend seasonal-naive repeats a week late
    raw = pl._run(best, y, np.zeros(len(y)), t_s, 3600, 168)
    naive = pl._run(models.NAIVE, y, np.zeros(len(y)), t_s, 3600, 168)
    want = pl.tapered(raw, naive, 24)
    got = np.array([p.gpus for p in forecasts[0].points])
    np.testing.assert_allclose(got, want, atol=1e-4)
    assert not np.allclose(got[24:], raw[24:])  # the days after the first are not the model's
    # the back-test scores the same tapered forecast: fold 1 by hand
    scores, _ = pl.backtest_partition(y, np.zeros(len(y)), t_s, 3600, 168)
    h = pl.split(len(y), 168)
    cut = len(y) - h
    fold = pl._run(best, y[:cut], np.zeros(cut), t_s[:cut], 3600, h)
    fold_naive = pl._run(models.NAIVE, y[:cut], np.zeros(cut), t_s[:cut], 3600, h)
    s = next(s for s in scores if s.model == best)
    assert s.fold_smape[0] == pytest.approx(smape_pct(y[cut:], pl.tapered(fold, fold_naive, 24)))


def test_a_one_day_horizon_is_tapered_within_the_day():
    y = _seasonal(weeks=4, trend=0.2)
    t_s = 1762128000.0 + 3600.0 * np.arange(len(y))
    runs = pl._runs(models.CANDIDATES, y, np.zeros(len(y)), t_s, 3600, 24)
    tapered = pl._runs(models.CANDIDATES, y, np.zeros(len(y)), t_s, 3600, 24, taper=True)
    naive = runs[models.NAIVE]
    np.testing.assert_array_equal(tapered[models.NAIVE], naive)
    for m in models.CANDIDATES:
        if m == models.NAIVE:
            continue
        np.testing.assert_allclose(tapered[m], pl.tapered(runs[m], naive, 24))
        assert tapered[m][0] == pytest.approx(runs[m][0])  # the next hour: the model's own
        # a day ahead: DAY_SHARE of the way from seasonal-naive to the model
        want = naive[-1] + pl.DAY_SHARE * (runs[m][-1] - naive[-1])
        assert tapered[m][-1] == pytest.approx(want)


def test_pick_needs_every_fold_won():
    naive = _score(models.NAIVE, (10.0, 10.0, 10.0, 10.0))
    # gains 0.5, 0.5, 0.5 and -0.1 in the oldest fold: far ahead on the recent folds (the
    # former rule, which read only the most recent fold, took it), but it lost a fold
    lost_one = _score(models.RIDGE, (5.0, 5.0, 5.0, 11.0))
    assert pick([naive, lost_one]) == models.NAIVE
    assert pl.robust_gain(lost_one, naive) is None
    # the same with a tie in that fold: every fold won or tied, the pick is the model
    tied = _score(models.RIDGE, (5.0, 5.0, 5.0, 10.0))
    assert pick([naive, tied]) == models.RIDGE


def test_idle_share_counts_the_last_week():
    y = np.ones(14 * 24)
    y[-7 * 24 : -7 * 24 + 100] = 0.0  # 100 of the last week's 168 buckets at 0
    y[:50] = 0.0  # before the last week: not counted
    assert pl.idle_share(y, 24) == pytest.approx(100 / 168)
    assert pl.idle_share(np.zeros(30), 24) == 1.0  # shorter than a week: all of it


@pytest.mark.parametrize("idle_hours, kept", [(6, False), (8, True)])
def test_a_series_idle_a_third_of_its_last_week_keeps_seasonal_naive(monkeypatch, idle_hours, kept):
    # IDLE_SHARE is 0.3: 8 idle hours a day (33%) keep seasonal-naive, 6 (25%) do not
    monkeypatch.setattr(pl, "pick", lambda scores: models.RIDGE)
    y = _seasonal(weeks=2, trend=0.0)
    y[-168:][np.arange(168) % 24 < idle_hours] = 0.0
    (b,), (f,) = pl.forecast_series(_ds(y), steps=24)
    assert b.kept_idle is kept
    assert f.model == (models.NAIVE if kept else models.RIDGE)


def test_a_mostly_idle_series_keeps_seasonal_naive(monkeypatch):
    # whatever the back-test says (here: a learned model always wins it)
    monkeypatch.setattr(pl, "pick", lambda scores: models.RIDGE)
    busy = _seasonal(weeks=2, trend=0.0)
    idle = busy.copy()
    idle[-168:][np.arange(168) % 24 < 13] = 0.0  # 13 of 24 hours at 0 in the last week
    (b_busy,), (f_busy,) = pl.forecast_series(_ds(busy), steps=24)
    (b_idle,), (f_idle,) = pl.forecast_series(_ds(idle), steps=24)
    assert b_busy.picked == f_busy.model == models.RIDGE and not b_busy.kept_idle
    assert b_idle.picked == models.NAIVE and b_idle.kept_idle
    assert b_idle.idle == pytest.approx(13 / 24)
    assert f_idle.model == models.NAIVE
    # seasonal-naive's forecast: last week's idle hours are exact zeros
    np.testing.assert_allclose([p.gpus for p in f_idle.points], np.round(idle[-168:-144], 4))


def test_the_idle_guard_is_a_note_in_the_json(tmp_path):
    rows = ["time,partition,gpus"]
    t0 = 1762128000  # 2025-11-03T00:00:00Z
    y = _seasonal(weeks=2, trend=0.0)
    for i, v in enumerate(y):
        idle = i >= len(y) - 168 and i % 24 < 13
        rows.append(f"{t0 + 3600 * i},quiet,{0.0 if idle else v:.3f}")
        rows.append(f"{t0 + 3600 * i},busy,{v:.3f}")
    path = tmp_path / "demand.csv"
    path.write_text("\n".join(rows) + "\n")
    out = CliRunner().invoke(
        main, ["forecast", "--demand-file", str(path), "--horizon", "1d", "--format", "json"]
    )
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["model"]["picked"]["quiet"] == models.NAIVE
    notes = [n for n in doc["notes"] if n.startswith("quiet:")]
    assert notes and "54% of the last week's buckets" in notes[0]
    assert not [n for n in doc["notes"] if n.startswith("busy:")]
