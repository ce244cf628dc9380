"""The level ridge: a direct ridge regression anchored on the demand's recent level.

The recursive models (`models.py`) fit one step ahead and feed their own forecasts back; over
a day of 1-minute buckets that compounds into a pull toward the level the whole history had,
and a level that moved (a new team, a finished project) is forecast wrong for the whole
horizon. This model forecasts each bucket of the horizon directly from what is known at its
origin, as a change from the recent level:

    y[o - 1 + h]  =  L(o) + x(o, h) . beta        (h = 1 .. steps)

`L(o)` is the mean of the `short_lag(day)` buckets before the origin `o` (15 minutes at
1-minute buckets, the last bucket from 5 minutes up). `x(o, h)` holds, relative to `L(o)`:
the same slot yesterday (or the last day before the origin), the same slot last week (with
two weeks of history), the last day's and the last week's mean; each times `r = min(h /
day, 1)` and `sqrt(r)` (how far ahead: none of it counts at h = 0); the pending GPUs' recent
level the same way; and the change of the slot of the day between the origin and the target
(one-hot differences, 15-minute classes below 5-minute buckets). No intercept: shrinking
`beta` to 0 gives the recent level itself, so a level shift is carried over at once, and the
fit only adds the daily shape, the pull back to the day's or week's mean and the weekly
pattern as far as the history supports them.

It is fitted on `MAX_PAIRS` (origin, horizon) pairs drawn from the history (a fixed seed:
the same history gives the same forecast) by ridge regression without intercept on
standardized columns; the ridge penalty is chosen per series from `LAMBDA_GRID` (times the
number of pairs) by the sMAPE of the forecasts from two origins one horizon and two horizons
before the history's end, fitted on the pairs whose target lies before each origin (the
history only, like everything else here). numpy only.
"""

from __future__ import annotations

import numpy as np

from slurmgpu.forecast.models import calendar, short_lag, slot_classes

MAX_PAIRS = 20_000
LAMBDA_GRID = (0.01, 0.1, 0.3, 1.0, 3.0, 10.0)  # x the number of pairs
SEED = 12345


def _mean_before(cs: np.ndarray, end: np.ndarray, width: int) -> np.ndarray:
    """Mean of y[end - width .. end - 1] (fewer at the series' start) from cs = [0, cumsum]."""
    lo = np.maximum(end - width, 0)
    return (cs[end] - cs[lo]) / np.maximum(end - lo, 1)


class _Series:
    """The history and what every feature row reads from it."""

    def __init__(self, y, pending, times_s, freq_s: int, steps: int, day: int, week: int):
        self.y = np.asarray(y, dtype=float)
        self.n = len(self.y)
        self.day, self.week = day, week
        self.width = short_lag(day)
        self.has_week = self.n >= 2 * week
        times = np.concatenate([times_s, times_s[-1] + freq_s * np.arange(1, steps + 1)])
        cal = calendar(times, freq_s, float(times_s[0]))
        self.slot, self.classes = slot_classes(cal.slot, day)
        self.cs = np.concatenate([[0.0], np.cumsum(self.y)])
        self.pcs = np.concatenate([[0.0], np.cumsum(np.asarray(pending, dtype=float))])

    def rows(self, o: np.ndarray, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Features of (origin o, horizon h) pairs (target t = o + h - 1, history y[:o]) and
        each pair's level L(o)."""
        day, week = self.day, self.week
        t = o + h - 1
        level = _mean_before(self.cs, o, self.width)
        r = np.minimum(h / day, 1.0)
        q = np.sqrt(r)
        base = [
            self.y[t - day * np.ceil(h / day).astype(int)] - level,  # same slot, last day
            _mean_before(self.cs, o, day) - level,
            _mean_before(self.cs, o, week if self.has_week else day) - level,
            _mean_before(self.pcs, o, self.width),
        ]
        if self.has_week:
            base.append(self.y[t - week * np.ceil(h / week).astype(int)] - level)
        cols = [r[:, None], q[:, None]]
        for f in base:
            cols += [(f * r)[:, None], (f * q)[:, None]]
        if self.classes > 1:
            eye = np.eye(self.classes)
            cols.append((eye[self.slot[t]] - eye[self.slot[o - 1]])[:, 1:])
        return np.hstack(cols), level


def _solve(z: np.ndarray, target: np.ndarray, penalties) -> list[np.ndarray]:
    """Ridge coefficients (no intercept) for each penalty, from one eigendecomposition."""
    values, vectors = np.linalg.eigh(z.T @ z)
    proj = vectors.T @ (z.T @ target)
    return [vectors @ (proj / (values + p)) for p in penalties]


def _scale(x: np.ndarray) -> np.ndarray:
    s = np.sqrt((x**2).mean(axis=0))
    return np.where(s > 0, s, 1.0)


def _smape(actual: np.ndarray, pred: np.ndarray) -> float:
    """As pipeline.smape_pct, as a fraction (pipeline imports this module)."""
    den = np.abs(actual) + np.abs(pred)
    err = np.where(den > 0, 2 * np.abs(pred - actual) / np.where(den > 0, den, 1), 0)
    return float(err.mean())


def level_ridge(
    y: np.ndarray,
    pending: np.ndarray,
    times_s: np.ndarray,
    freq_s: int,
    steps: int,
    day: int,
    week: int,
) -> np.ndarray:
    """The forecast of `steps` buckets after the history (never below 0); ValueError when
    the history holds less than two days after the features' first day (or week)."""
    s = _Series(y, pending, times_s, freq_s, steps, day, week)
    need = week if s.has_week else day
    if s.n - need < 2 * day:
        raise ValueError("too little history for the learned model")
    x, target, t = _pairs(s, steps, need)
    penalty = _choose_penalty(s, x, target, t, steps, need)
    scale = _scale(x)
    beta = _solve(x / scale, target, [penalty * len(target)])[0]
    xf, lf = s.rows(np.full(steps, s.n), np.arange(1, steps + 1))
    return np.maximum(lf + (xf / scale) @ beta, 0.0)


def _pairs(s: _Series, steps: int, need: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`MAX_PAIRS` (origin, horizon) pairs drawn with a fixed seed: origins from `need` on,
    horizons 1 .. steps (at most to the history's end). Their features, targets (the change
    from the level) and target buckets."""
    rng = np.random.default_rng(SEED)
    o = rng.integers(need, s.n, MAX_PAIRS)
    h = np.minimum(1 + (rng.random(MAX_PAIRS) * np.minimum(steps, s.n - o)).astype(int), s.n - o)
    x, level = s.rows(o, h)
    return x, s.y[o + h - 1] - level, o + h - 1


def _choose_penalty(s: _Series, x, target, t, steps: int, need: int) -> float:
    """The grid's penalty whose forecasts from the origins n - steps and n - 2 steps (fitted
    on the pairs whose target lies before the origin) have the lowest mean sMAPE; 1 when the
    history is too short for either."""
    errors = np.zeros(len(LAMBDA_GRID))
    used = 0
    for k in (1, 2):
        origin = s.n - k * steps
        fit = t < origin
        if origin - need < 2 * s.day or fit.sum() < 10 * x.shape[1]:
            break
        scale = _scale(x[fit])
        betas = _solve(x[fit] / scale, target[fit], [c * int(fit.sum()) for c in LAMBDA_GRID])
        xv, lv = s.rows(np.full(steps, origin), np.arange(1, steps + 1))
        actual = s.y[origin : origin + steps]
        for i, beta in enumerate(betas):
            errors[i] += _smape(actual, np.maximum(lv + (xv / scale) @ beta, 0.0))
        used += 1
    return float(LAMBDA_GRID[int(np.argmin(errors))]) if used else 1.0
