"""The level ridge (forecast/level.py): anchored on the recent level, direct over the horizon,
its penalty chosen on the history only."""

from __future__ import annotations

import numpy as np
import pytest

from slurmgpu.forecast import level, models
from slurmgpu.forecast.level import level_ridge
from slurmgpu.forecast.pipeline import _run, backtest_partition, smape_pct

T0 = 1762128000.0  # 2025-11-03T00:00:00Z, a Monday


def _times(n: int, freq: int) -> np.ndarray:
    return T0 + freq * np.arange(n, dtype=float)


def _daily(days: int, freq: int = 3600, amp: float = 10.0, noise: float = 0.0, seed: int = 0):
    per_day = 86400 // freq
    t = np.arange(days * per_day, dtype=float)
    rng = np.random.default_rng(seed)
    shape = amp * np.sin(2 * np.pi * (t % per_day) / per_day)
    return np.maximum(50.0 + shape + rng.normal(0, noise, len(t)), 0.0)


def _fit(y, freq=3600, steps=24, pending=None):
    day, week = 86400 // freq, 7 * 86400 // freq
    pend = np.zeros(len(y)) if pending is None else pending
    return level_ridge(y, pend, _times(len(y), freq), freq, steps, day, week)


def test_a_constant_is_forecast_exactly():
    y = np.full(21 * 24, 37.5)
    np.testing.assert_allclose(_fit(y, steps=48), 37.5)


def test_a_level_shift_is_carried_over_at_once():
    """Three weeks of a daily shape, then the level jumps by 30 GPUs two days before the end:
    the level ridge forecasts the new level; seasonal-naive (last week) and the recursive
    ridge (fitted mostly on the old level) stay far below it."""
    y = _daily(21, noise=1.0)
    y[-48:] += 30.0
    t_s = _times(len(y), 3600)
    truth = _daily(22, noise=0.0)[-24:] + 30.0
    got = _fit(y)
    naive = _run(models.NAIVE, y, np.zeros(len(y)), t_s, 3600, 24)
    assert abs(got.mean() - truth.mean()) < 4.0
    assert smape_pct(truth, got) < 0.5 * smape_pct(truth, naive)


def test_the_daily_shape_is_learned_relative_to_the_level():
    y = _daily(21, amp=20.0, noise=0.5)
    truth = _daily(22, amp=20.0)[-24:]
    got = _fit(y)
    assert smape_pct(truth, got) < 5.0
    assert np.corrcoef(truth, got)[0, 1] > 0.95


def test_one_minute_buckets_anchor_on_the_last_15_minutes():
    """At 1-minute buckets the level is the mean of the last 15 buckets, not the last one:
    on a series of levels that hold for hours, a level reached 15 minutes ago is forecast
    to hold, one odd last minute does not move it."""
    rng = np.random.default_rng(3)
    steps = np.repeat(rng.integers(10, 80, 4 * 4), 360).astype(float)  # 6-hour levels
    y = steps + rng.normal(0, 0.3, len(steps))
    y[-15:] = 60.0  # a new level 15 minutes ago
    y[-1] = 0.0  # one odd minute
    got = _fit(y, freq=60, steps=30)
    assert got[0] == pytest.approx(np.mean(y[-15:]), abs=3.0)
    assert (got > 45.0).all()  # half an hour later still near it (the last day's mean: 36)


def test_same_history_same_forecast_and_nothing_after_it_is_read():
    y = _daily(15, noise=3.0, seed=4)
    a = _fit(y)
    b = _fit(y.copy())
    np.testing.assert_array_equal(a, b)  # the pairs are drawn with a fixed seed
    y2 = np.concatenate([y, np.full(48, 1e6)])  # a future the model is not given
    np.testing.assert_array_equal(_fit(y2[: len(y)]), a)


def test_forecasts_are_never_below_zero_and_too_short_a_history_is_an_error():
    y = np.maximum(_daily(9, amp=60.0, noise=5.0) - 55.0, 0.0)
    assert (_fit(y) >= 0).all()
    with pytest.raises(ValueError, match="too little history"):
        _fit(_daily(2))  # under a day's features plus two days of pairs


def test_penalty_is_chosen_from_the_grid_on_the_history():
    """A noisy series with no shape takes a stronger penalty (toward the level itself) than
    a clean daily shape."""
    rng = np.random.default_rng(7)
    day, week = 24, 168
    chosen = []
    for y in (30.0 + rng.normal(0, 6.0, 21 * 24), _daily(21, amp=20.0, noise=0.5)):
        s = level._Series(y, np.zeros(len(y)), _times(len(y), 3600), 3600, 24, day, week)
        x, target, t = level._pairs(s, 24, week)
        chosen.append(level._choose_penalty(s, x, target, t, 24, week))
    assert all(p in level.LAMBDA_GRID for p in chosen)
    assert chosen[0] > chosen[1]


def test_level_ridge_is_a_candidate_of_the_backtest():
    y = _daily(21, noise=2.0)
    scores, res = backtest_partition(y, np.zeros(len(y)), _times(len(y), 3600), 3600, 24)
    s = {x.model: x for x in scores}
    assert models.LEVEL in s and s[models.LEVEL].folds == s[models.NAIVE].folds
    assert len(res[models.LEVEL]) == 24 * s[models.LEVEL].folds
