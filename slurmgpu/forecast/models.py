"""The forecasting models: seasonal-naive (the baseline), a ridge regression and boosted
trees in numpy (the level ridge is in `level.py`; the blend of the four is formed in
`pipeline.py`).

Both forecast `steps` buckets after the end of a history `y` (bucket-averaged demand) and see
nothing after it. `pending` is the queue's part of the same history (the learned model's queue
features). `day`/`week` are their lengths in buckets.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NAIVE = "seasonal-naive"
RIDGE = "ridge"
BOOSTED = "boosted-trees"
LEVEL = "level-ridge"  # forecast/level.py: direct, anchored on the recent level
BLEND = "blend"  # the mean of the four forecasts above
CANDIDATES = (NAIVE, RIDGE, BOOSTED, LEVEL, BLEND)
BLENDED = (NAIVE, RIDGE, BOOSTED, LEVEL)
RIDGE_LAMBDA = 1.0
MAX_TREE_ROWS = 12_000  # the trees fit on at most this many rows, evenly spread


def thin(n: int, most: int = MAX_TREE_ROWS) -> np.ndarray:
    """Row indices for the trees: all of n, or `most` of them evenly spaced (the last row
    kept), so that a month of 1-minute buckets (43k rows) fits in about the time of 12k."""
    if n <= most:
        return np.arange(n)
    return np.unique(np.round(np.linspace(0, n - 1, most)).astype(np.int64))


def seasonal_period(n_history: int, day: int, week: int) -> int:
    """Same hour last week when the history holds a whole week, else yesterday."""
    return week if n_history >= week else day


def seasonal_naive(y: np.ndarray, steps: int, day: int, week: int) -> np.ndarray:
    """y[t] = y[t - period], the last period repeated for horizons longer than one period."""
    period = seasonal_period(len(y), day, week)
    last = y[-period:]
    return np.resize(last, steps).astype(float) if steps else np.zeros(0)


@dataclass(frozen=True)
class Calendar:
    """Calendar positions of a series' buckets: slot of the day and day of the week."""

    slot: np.ndarray  # 0 .. day-1
    weekday: np.ndarray  # 0 = Monday
    index: np.ndarray  # bucket number since the history's start (the trend)


def calendar(times_s: np.ndarray, freq_s: int, origin_s: float) -> Calendar:
    days = np.floor(times_s / 86400.0)
    slot = ((times_s - days * 86400.0) // freq_s).astype(int)
    weekday = ((days.astype(np.int64) + 3) % 7).astype(int)  # 1970-01-01 was a Thursday
    return Calendar(slot, weekday, (times_s - origin_s) / freq_s)


FINE_DAY = 288  # buckets a day at 5 min: finer series use the coarser defaults below


def short_lag(day: int) -> int:
    """The shortest demand lag: 1 bucket down to 5-minute buckets; finer (1-4 min) about 15
    minutes of buckets, so that the recursive forecast runs in blocks of that many buckets
    (a 7-day horizon at 1 min is 672 steps, not 10080) and the lag is not one minute's
    noise."""
    return 1 if day <= FINE_DAY else max(1, day // 96)


def _lags(day: int, week: int, n: int) -> tuple[int, ...]:
    """The short lag, 1 day, and 1 week when the history holds two weeks (a week of rows to
    fit)."""
    short = short_lag(day)
    return (short, day, week) if n >= 2 * week else (short, day)


def slot_classes(slot: np.ndarray, day: int) -> tuple[np.ndarray, int]:
    """The ridge's slot-of-day classes: every slot down to 5-minute buckets, else 15-minute
    groups (96 a day), so that a 1-minute series has 95 one-hot columns, not 1439."""
    if day <= FINE_DAY:
        return slot, day
    return slot * 96 // day, 96


def _design(cal: Calendar, day: int, lags: list[np.ndarray], queue: list[np.ndarray]) -> np.ndarray:
    cols = [cal.index[:, None]]
    slot, classes = slot_classes(cal.slot, day)
    if classes > 1:
        cols.append(np.eye(classes)[slot][:, 1:])
    cols.append(np.eye(7)[cal.weekday][:, 1:])
    cols.extend(x[:, None] for x in lags)
    cols.extend(x[:, None] for x in queue)
    return np.hstack(cols)


def _lag_cols(arr: np.ndarray, lo: int, hi: int, lags: tuple[int, ...]) -> list:
    """The demand lags of buckets lo..hi-1 from `arr`."""
    return [arr[lo - k : hi - k] for k in lags]


def _recurse(ext: np.ndarray, n: int, steps: int, block: int, predict) -> np.ndarray:
    """Fill ext[n:n+steps] in blocks of `block` buckets (the shortest lag, so a block's lags
    lie before it): `predict(h, b)` gives buckets n+h .. n+h+b-1 from ext so far. Never
    below 0."""
    for h in range(0, steps, block):
        b = min(block, steps - h)
        ext[n + h : n + h + b] = np.maximum(predict(h, b), 0.0)
    return ext[n:]


def _cal_rows(cal: Calendar, lo: int, hi: int) -> Calendar:
    return Calendar(cal.slot[lo:hi], cal.weekday[lo:hi], cal.index[lo:hi])


@dataclass(frozen=True)
class RidgeFit:
    beta: np.ndarray
    mean: np.ndarray
    scale: np.ndarray
    intercept: float


def _fit(x: np.ndarray, y: np.ndarray) -> RidgeFit:
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    z = (x - mean) / scale
    yc = y - y.mean()
    a = z.T @ z + RIDGE_LAMBDA * np.eye(z.shape[1])
    beta = np.linalg.solve(a, z.T @ yc)
    return RidgeFit(beta, mean, scale, float(y.mean()))


def ridge(
    y: np.ndarray,
    pending: np.ndarray,
    times_s: np.ndarray,
    freq_s: int,
    steps: int,
    day: int,
    week: int,
) -> np.ndarray:
    """Ridge regression on calendar (trend, slot of day, day of week one-hot), lags of the
    demand (1 bucket, 1 day, 1 week) and queue features (pending GPUs 1 day and 1 week back),
    fitted on the history and run recursively: a lag inside the horizon is the model's own
    forecast, pending GPUs inside the horizon are their seasonal-naive continuation."""
    return _ridge_in_and_out(y, pending, times_s, freq_s, steps, day, week)[1]


def _ridge_in_and_out(
    y: np.ndarray,
    pending: np.ndarray,
    times_s: np.ndarray,
    freq_s: int,
    steps: int,
    day: int,
    week: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The ridge's fitted values on the training rows (from the largest lag on) and its
    recursive forecast of `steps` buckets."""
    n = len(y)
    lags = _lags(day, week, n)
    first = max(lags)
    if n - first < 2 * day:
        raise ValueError("too little history for the learned model")
    cal = calendar(times_s, freq_s, float(times_s[0]))
    rows = np.arange(first, n)
    lag_cols = _lag_cols(y, first, n, lags)
    queue_lags = list(lags[1:])  # pending GPUs 1 day (and 1 week) back
    queue_cols = [pending[rows - k] for k in queue_lags]
    x = _design(_cal_rows(cal, first, n), day, lag_cols, queue_cols)
    fit = _fit(x, y[rows])
    fitted = ((x - fit.mean) / fit.scale) @ fit.beta + fit.intercept
    fcal = calendar(times_s[-1] + freq_s * np.arange(1, steps + 1), freq_s, float(times_s[0]))
    ext = np.concatenate([y.astype(float), np.zeros(steps)])
    pend = np.concatenate([pending.astype(float), seasonal_naive(pending, steps, day, week)])

    def predict(h: int, b: int) -> np.ndarray:
        t = n + h
        row = _design(
            _cal_rows(fcal, h, h + b),
            day,
            _lag_cols(ext, t, t + b, lags),
            [pend[t - k : t - k + b] for k in queue_lags],
        )
        return ((row - fit.mean) / fit.scale) @ fit.beta + fit.intercept

    return fitted, _recurse(ext, n, steps, min(lags), predict)


def _tree_design(
    cal: Calendar, lags: list[np.ndarray], queue: list[np.ndarray], base: np.ndarray
) -> np.ndarray:
    cols = [cal.slot, cal.weekday, cal.weekday >= 5, *lags, *queue, base]
    return np.column_stack([np.asarray(c, dtype=float) for c in cols])


def boosted(
    y: np.ndarray,
    pending: np.ndarray,
    times_s: np.ndarray,
    freq_s: int,
    steps: int,
    day: int,
    week: int,
) -> np.ndarray:
    """Gradient-boosted trees (`trees.py`: 150 trees of depth 3, rate 0.1) on the slot of the
    day, the day of the week, weekend, the demand lags, the pending lags, and the ridge's own
    prediction as a feature (trees cannot extrapolate a trend; the ridge's line carries it
    into the split points). They learn what the additive ridge cannot: a weekend's daily
    shape unlike a weekday's, a level that moved, bursts that follow a queue. Recursive over
    the horizon like the ridge (its lags are the trees' own forecasts, the ridge feature is the
    ridge's forecast). Trained on y directly: measured better than boosting the ridge's
    residuals on the generated scenarios (benchmarks/forecast_accuracy.py)."""
    from slurmgpu.forecast.trees import fit_boosted

    n = len(y)
    lags = _lags(day, week, n)
    first = max(lags)
    if n - first < 2 * day:
        raise ValueError("too little history for the learned model")
    base_in, base_out = _ridge_in_and_out(y, pending, times_s, freq_s, steps, day, week)
    cal = calendar(times_s, freq_s, float(times_s[0]))
    rows = np.arange(first, n)
    queue_lags = list(lags[1:])  # pending GPUs 1 day (and 1 week) back
    x = _tree_design(
        _cal_rows(cal, first, n),
        _lag_cols(y, first, n, lags),
        [pending[rows - k] for k in queue_lags],
        base_in,
    )
    keep = thin(len(rows))
    model = fit_boosted(x[keep], y[rows][keep])
    fcal = calendar(times_s[-1] + freq_s * np.arange(1, steps + 1), freq_s, float(times_s[0]))
    ext = np.concatenate([y.astype(float), np.zeros(steps)])
    pend = np.concatenate([pending.astype(float), seasonal_naive(pending, steps, day, week)])

    def predict(h: int, b: int) -> np.ndarray:
        t = n + h
        row = _tree_design(
            _cal_rows(fcal, h, h + b),
            _lag_cols(ext, t, t + b, lags),
            [pend[t - k : t - k + b] for k in queue_lags],
            base_out[h : h + b],
        )
        return model.predict(row)

    return _recurse(ext, n, steps, min(lags), predict)
