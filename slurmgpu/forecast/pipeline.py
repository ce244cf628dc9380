"""`forecast()`: history -> demand series -> back-test the models -> pick -> forecast.

The history ends at `train_until` (default: the analysis window's end); nothing after it is
read into the series (or the demand is read from a `--demand-file`). The back-test is a
rolling origin of up to four folds of `min(horizon, history / 4)` buckets at the history's
end: each model is fitted and run from the part before a fold only and scored on it (sMAPE,
under-forecast rate; the mean over the folds). Per series (a partition, or a partition's
slice size) seasonal-naive is kept unless a learned model won every fold and its
recency-weighted gain over it, less the folds' spread, is at least `MARGIN` (`pick`,
`robust_gain`), and kept for a series idle a good part of its last week (`idle_share`). A
learned pick's forecast is tapered toward seasonal-naive's with the lead time: the model's
for the next bucket, half way one day ahead, seasonal-naive's at seven days
(`learned_share`, `tapered`; the back-test scores it so). The interval is the picked
model's back-test residual quantiles (10% / 90% within a fold, plus the folds' smallest and
largest mean miss) around its forecast (`interval_offsets`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from slurmgpu.errors import UsageError
from slurmgpu.forecast import budget, models
from slurmgpu.forecast.demand import DemandSeries, demand_series

_DURATION = re.compile(r"(?P<n>[0-9]{1,9})(?P<unit>m|min|h|d|w)")  # ASCII digits only
_UNIT_S = {"m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
MAX_HORIZON_S = 92 * 86400
LOW_Q, HIGH_Q = 0.10, 0.90


def parse_duration(text: str, option: str) -> int:
    """`1h`, `30m`, `7d`, `2w` -> seconds (> 0); UsageError naming the option otherwise."""
    m = _DURATION.fullmatch(text)
    seconds = int(m.group("n")) * _UNIT_S[m.group("unit")] if m else 0
    if seconds <= 0:
        raise UsageError(f"{option} {text!r}: use a positive duration such as 30m, 1h, 1d, 7d")
    return seconds


def parse_freq(text: str) -> int:
    seconds = parse_duration(text, "--freq")
    if seconds < 60 or seconds > 86400 or 86400 % seconds:
        raise UsageError(f"--freq {text!r}: use 1m..1d dividing a day evenly (1m, 15m, 1h, 1d)")
    return seconds


def parse_horizon(text: str, freq_s: int) -> int:
    """`--horizon` -> a number of buckets (at least one)."""
    seconds = parse_duration(text, "--horizon")
    if seconds > MAX_HORIZON_S:
        raise UsageError(f"--horizon {text!r}: at most 92d")
    return -(-seconds // freq_s)


@dataclass(frozen=True)
class Point:
    time: datetime
    gpus: float
    low: float
    high: float


@dataclass(frozen=True)
class Score:
    model: str
    smape_pct: float | None
    under_forecast_rate: float | None
    note: str | None = None
    folds: int = 0  # back-test folds it was scored on (0: it could not run)
    fold_smape: tuple[float, ...] = ()  # per fold, the most recent first (not in the JSON)


@dataclass(frozen=True)
class PartitionBacktest:
    partition: str
    picked: str
    scores: tuple[Score, ...]
    slice: str | None = None  # `--by slice`: gpu, 1g..7g, shard
    idle: float = 0.0  # share of the last week's buckets at 0 (`idle_share`)

    @property
    def kept_idle(self) -> bool:
        """Seasonal-naive kept because the series was idle most of the last week."""
        return self.idle >= IDLE_SHARE


@dataclass(frozen=True)
class PartitionForecast:
    partition: str
    model: str
    points: tuple[Point, ...]
    slice: str | None = None

    @property
    def label(self) -> str:
        return self.partition if self.slice is None else f"{self.partition}:{self.slice}"

    def peak(self, field: str = "gpus") -> float:
        """The largest point of the horizon (`gpus`, or `high` for the interval's top)."""
        return max((getattr(p, field) for p in self.points), default=0.0)


@dataclass(frozen=True)
class Forecast:
    freq_s: int
    horizon_buckets: int
    history_from: datetime
    train_until: datetime
    held_out_from: datetime
    train_buckets: int
    test_buckets: int
    backtest: tuple[PartitionBacktest, ...]
    by_partition: tuple[PartitionForecast, ...]
    notes: tuple[str, ...] = field(default=())
    by: str = "partition"
    # what the CLI also says on stderr (`slurmgpu: warning:`): demand the series left out
    warnings: tuple[str, ...] = field(default=())

    def slices(self, partition: str | None = None) -> tuple[PartitionForecast, ...]:
        """The per-slice forecasts (`by == "slice"`), of one partition or of all."""
        return tuple(
            p
            for p in self.by_partition
            if p.slice is not None and (partition is None or p.partition == partition)
        )

    def to_json(self) -> dict[str, Any]:
        iso = _iso
        return {
            "model": {
                "candidates": list(models.CANDIDATES),
                "picked": {_label(b): b.picked for b in self.backtest},
                **({} if self.by == "partition" else {"by": self.by}),
                "freq_s": self.freq_s,
                "horizon_buckets": self.horizon_buckets,
                "history_from": iso(self.history_from),
                "train_until": iso(self.train_until),
            },
            "backtest": {
                "held_out_from": iso(self.held_out_from),
                "train_buckets": self.train_buckets,
                "test_buckets": self.test_buckets,
                "by_partition": [
                    {
                        "partition": b.partition,
                        **({} if b.slice is None else {"slice": b.slice}),
                        "picked": b.picked,
                        "models": {
                            s.model: {
                                "smape_pct": s.smape_pct,
                                "under_forecast_rate": s.under_forecast_rate,
                                "note": s.note,
                                "folds": s.folds,
                            }
                            for s in b.scores
                        },
                    }
                    for b in self.backtest
                ],
            },
            "by_partition": [
                {
                    "partition": p.partition,
                    **({} if p.slice is None else {"slice": p.slice}),
                    "model": p.model,
                    "points": [
                        {"time": iso(x.time), "gpus": x.gpus, "low": x.low, "high": x.high}
                        for x in p.points
                    ],
                }
                for p in self.by_partition
            ],
            "notes": list(self.notes),
        }


def _label(b: PartitionBacktest) -> str:
    return b.partition if b.slice is None else f"{b.partition}:{b.slice}"


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _dt(t_s: float) -> datetime:
    return datetime.fromtimestamp(float(t_s), UTC)


def smape_pct(actual: np.ndarray, pred: np.ndarray) -> float:
    """Symmetric MAPE in percent; a bucket where both are 0 counts as exact."""
    den = np.abs(actual) + np.abs(pred)
    err = np.where(den > 0, 2.0 * np.abs(pred - actual) / np.where(den > 0, den, 1.0), 0.0)
    return float(100.0 * err.mean())


def under_rate(actual: np.ndarray, pred: np.ndarray) -> float:
    """Share of buckets forecast below what came (a forecast that would leave jobs waiting)."""
    return float((pred < actual - 1e-9).mean())


def _run(name: str, y: np.ndarray, pend: np.ndarray, t_s: np.ndarray, freq_s: int, steps: int):
    day, week = 86400 // freq_s, 7 * 86400 // freq_s
    if name == models.NAIVE:
        return models.seasonal_naive(y, steps, day, week)
    if name == models.BOOSTED:
        return models.boosted(y, pend, t_s, freq_s, steps, day, week)
    if name == models.LEVEL:
        from slurmgpu.forecast.level import level_ridge

        return level_ridge(y, pend, t_s, freq_s, steps, day, week)
    if name == models.BLEND:
        return np.mean([_run(m, y, pend, t_s, freq_s, steps) for m in models.BLENDED], axis=0)
    return models.ridge(y, pend, t_s, freq_s, steps, day, week)


def _runs(
    names, y, pend, t_s, freq_s: int, steps: int, taper: bool = False
) -> dict[str, np.ndarray | str]:
    """Each model's forecast, or the reason it could not run; the blend from the others'
    forecasts (not fitted again). `taper`: the learned forecasts as a learned pick forecasts
    (`tapered`: toward seasonal-naive with the lead time), what the back-test scores."""
    out: dict[str, np.ndarray | str] = {}
    for name in (m for m in names if m != models.BLEND):
        try:
            out[name] = _run(name, y, pend, t_s, freq_s, steps)
        except ValueError as exc:
            out[name] = str(exc)
    if models.BLEND in names:
        parts = [out.get(m) for m in models.BLENDED]
        ready = all(isinstance(p, np.ndarray) for p in parts)
        out[models.BLEND] = np.mean(parts, axis=0) if ready else "a blended model could not run"
    naive = out.get(models.NAIVE)
    if taper and isinstance(naive, np.ndarray):
        day = 86400 // freq_s
        for name, pred in out.items():
            if name != models.NAIVE and isinstance(pred, np.ndarray):
                out[name] = tapered(pred, naive, day)
    return out


DAY_SHARE = 0.5  # a learned pick's share of its forecast one day ahead (1 the first bucket)
WEEK_SHARE = 0.0  # ... and 7 days ahead


def learned_share(steps: int, day: int) -> np.ndarray:
    """Per bucket ahead (1 .. steps), the learned model's share of a learned pick's forecast,
    the rest being seasonal-naive's: 1 for the first bucket, falling linearly to DAY_SHARE
    at one day ahead, then to WEEK_SHARE at 7 days, WEEK_SHARE after. A learned model's edge
    is the level it carries from the last hours, which seasonal-naive repeats a week late;
    the further ahead, the likelier the demand has gone back to last week's pattern, where
    seasonal-naive's copy is exact. On the real series (docs/forecast.md) a learned pick at
    full weight through the day lost about one held-out day in five to seasonal-naive (the
    level went back); half weight by the day's end kept most of the gain and made every
    partition's picked days together better than seasonal-naive."""
    h = np.arange(1, steps + 1, dtype=float)
    first = np.clip((h - 1.0) / max(day - 1, 1), 0.0, 1.0)
    later = np.clip((h - day) / (6.0 * day), 0.0, 1.0)
    return np.where(
        h <= day,
        1.0 + (DAY_SHARE - 1.0) * first,
        DAY_SHARE + (WEEK_SHARE - DAY_SHARE) * later,
    )


def tapered(pred: np.ndarray, naive: np.ndarray, day: int) -> np.ndarray:
    """A learned forecast as a learned pick forecasts: seasonal-naive plus the learned
    model's share (`learned_share`) of the difference."""
    return naive + learned_share(len(pred), day) * (pred - naive)


def split(n: int, steps: int) -> int:
    """Buckets held out at the history's end for the back-test."""
    return max(1, min(steps, n // 4))


FOLDS = 4  # rolling back-test folds at most (fewer when the history is short)
MIN_FOLDS = 2  # a learned model is picked only when scored on at least this many
MARGIN = 0.10  # ... when its recency-weighted gain over seasonal-naive, less one standard
Z = 1.0  # error (times Z), is at least MARGIN
DECAY = 0.5  # fold k (k = 1 the most recent) weighs DECAY ** (k - 1) in that mean


def _fold(
    names: tuple[str, ...], y, pend, t_s, freq_s: int, cut: int, h: int
) -> dict[str, tuple[float, float, np.ndarray] | str]:
    """Each model fitted on y[:cut], scored on y[cut:cut+h]: (sMAPE, under rate, residuals),
    or the reason it could not run."""
    out: dict[str, tuple[float, float, np.ndarray] | str] = {}
    actual = y[cut : cut + h]
    for name, pred in _runs(names, y[:cut], pend[:cut], t_s[:cut], freq_s, h, True).items():
        if isinstance(pred, str):
            out[name] = pred
        else:
            out[name] = (smape_pct(actual, pred), under_rate(actual, pred), actual - pred)
    return out


def backtest_partition(
    y: np.ndarray,
    pend: np.ndarray,
    t_s: np.ndarray,
    freq_s: int,
    steps: int,
    names: tuple[str, ...] = models.CANDIDATES,
) -> tuple[list[Score], dict[str, np.ndarray]]:
    """Rolling origin: fold 1 fits on y[:n-h] and scores y[n-h:]; fold k fits on y[:n-kh] and
    scores the h buckets after, when the history holds a day before it, every model that ran
    on fold 1 runs there too and (k > 2) at least half the history lies before it. A model's
    score is its mean over the folds; its residuals (actual - forecast) are fold 1's, then
    fold 2's, ..."""
    n = len(y)
    h = split(n, steps)
    day = 86400 // freq_s
    folds = [_fold(names, y, pend, t_s, freq_s, n - h, h)]
    for k in range(2, FOLDS + 1):
        if n - k * h < day or (k > 2 and n - k * h < n // 2):
            break
        more = _fold(names, y, pend, t_s, freq_s, n - k * h, h)
        if any(isinstance(more[m], str) for m in names if not isinstance(folds[0][m], str)):
            break
        folds.append(more)
    scores, residuals = [], {}
    for name in names:
        ran = [f[name] for f in folds if not isinstance(f[name], str)]
        if not ran:
            scores.append(Score(name, None, None, str(folds[0][name])))
            continue
        smape = float(np.mean([r[0] for r in ran]))
        under = float(np.mean([r[1] for r in ran]))
        per_fold = tuple(float(r[0]) for r in ran)
        scores.append(Score(name, smape, under, folds=len(ran), fold_smape=per_fold))
        residuals[name] = np.concatenate([r[2] for r in ran])
    return scores, residuals


def pick(scores: list[Score]) -> str:
    """Seasonal-naive unless a learned model beat it robustly (`robust_gain`: every fold
    won, the recency-weighted gain clear of the folds' spread); among those the one with the
    highest recency-weighted gain. A learned model that could not run, or whose gain is not
    clear, keeps the baseline (which always runs)."""
    naive = next(s for s in scores if s.model == models.NAIVE)
    best, best_gain = models.NAIVE, -np.inf
    for s in scores:
        if s.model == models.NAIVE:
            continue
        gain = robust_gain(s, naive)
        if gain is not None and gain > best_gain:
            best, best_gain = s.model, gain
    return best


def fold_gains(s: Score, naive: Score) -> np.ndarray | None:
    """Per fold (the most recent first) 1 - sMAPE / seasonal-naive's sMAPE, on the same
    folds; None when the model was not scored on the baseline's folds. A fold where
    seasonal-naive is exact counts 0 for an exact model, -1 otherwise."""
    if s.smape_pct is None or naive.smape_pct is None or s.folds != naive.folds:
        return None
    if len(s.fold_smape) != len(naive.fold_smape) or not s.fold_smape:
        return None
    a, b = np.asarray(s.fold_smape), np.asarray(naive.fold_smape)
    return np.where(b > 0, 1.0 - a / np.where(b > 0, b, 1.0), np.where(a > 0, -1.0, 0.0))


def robust_gain(s: Score, naive: Score) -> float | None:
    """The model's recency-weighted mean gain over seasonal-naive when it counts as a robust
    win, else None. Fold k (k = 1 the most recent) weighs DECAY ** (k - 1): a level shift
    shows in the recent folds first. A win needs at least MIN_FOLDS folds, a gain of at
    least 0 in every fold (a model that lost a fold to seasonal-naive may lose the next
    horizon), and the weighted mean gain less Z weighted standard errors (the folds'
    spread: an honest margin, not a fixed one) at least MARGIN."""
    g = fold_gains(s, naive)
    if g is None or len(g) < MIN_FOLDS or g.min() < 0:
        return None
    w = DECAY ** np.arange(len(g))
    w /= w.sum()
    mean = float(w @ g)
    sum_w2 = float(w @ w)
    spread = float(np.sqrt(w @ (g - mean) ** 2 / (1.0 - sum_w2)))
    stderr = spread * np.sqrt(sum_w2)  # spread / sqrt(effective number of folds)
    return mean if mean - Z * stderr >= MARGIN else None


IDLE_SHARE = 0.3  # a series at 0 in at least this share of its last week keeps seasonal-naive


def idle_share(y: np.ndarray, day: int) -> float:
    """The share of the last week's buckets (the whole history if shorter) with no demand. A
    series idle a good part of the time (IDLE_SHARE) keeps seasonal-naive whatever the
    back-test says: its copy of last week's idle buckets is exact, and a learned forecast of
    a fraction of a GPU where none came costs sMAPE 200% in each such bucket (the near-idle
    real partitions where a learned pick lost, one of them idle 46% of its last week,
    docs/forecast.md)."""
    last = y[-7 * day :]
    return float(np.mean(last <= 0)) if len(last) else 0.0


def interval_offsets(residuals: np.ndarray, fold_len: int) -> tuple[float, float]:
    """What the interval adds to the forecast, from the back-test residuals (actual -
    forecast; folds of `fold_len` buckets one after the other): the 10% and 90% quantiles
    of the residuals within each fold (around that fold's mean), plus the smallest and the
    largest fold mean. A fold mean is the level the model missed on that fold; the next
    horizon can miss by as much, which quantiles over the pooled residuals understate
    (measured on the tune series: 0.66-0.75 of held-out buckets inside a nominal 80%
    interval that way, 0.76-0.83 this way; docs/forecast.md)."""
    folds = residuals.reshape(-1, fold_len)
    shift = folds.mean(axis=1)
    within = (folds - shift[:, None]).ravel()
    lo = float(np.quantile(within, LOW_Q)) + float(shift.min())
    hi = float(np.quantile(within, HIGH_Q)) + float(shift.max())
    return lo, hi


def forecast_series(
    series: DemandSeries, steps: int
) -> tuple[list[PartitionBacktest], list[PartitionForecast]]:
    freq_s = series.freq_s
    day = 86400 // freq_s
    n = len(series.times)
    if n - split(n, steps) < day:
        raise UsageError(
            f"too little history: {n} buckets of {freq_s}s before --train-until; the forecast "
            f"needs at least one day ({day} buckets) before the back-test's held-out part "
            "(give a longer history, a larger --freq or a shorter --horizon)"
        )
    t_s = (series.times - np.datetime64(0, "s")) / np.timedelta64(1, "s")
    t_s = t_s.astype(float)
    future = t_s[-1] + freq_s * np.arange(1, steps + 1)
    backtests, forecasts = [], []
    for key in series.partitions:
        part, size = (key, None) if isinstance(key, str) else key
        y, pend = series.demand(key), series.pending[key]
        scores, residuals = backtest_partition(y, pend, t_s, freq_s, steps)
        idle = idle_share(y, day)
        best = models.NAIVE if idle >= IDLE_SHARE else pick(scores)
        backtests.append(PartitionBacktest(part, best, tuple(scores), size, idle))
        pred = _run(best, y, pend, t_s, freq_s, steps)
        if best != models.NAIVE:
            pred = tapered(pred, _run(models.NAIVE, y, pend, t_s, freq_s, steps), day)
        lo_q, hi_q = interval_offsets(residuals[best], split(n, steps))
        points = tuple(
            Point(
                _dt(ts),
                round(float(g), 4),
                round(float(min(max(g + lo_q, 0.0), g)), 4),
                round(float(max(g + hi_q, g)), 4),
            )
            for ts, g in zip(future, pred, strict=True)
        )
        forecasts.append(PartitionForecast(part, best, points, size))
    return backtests, forecasts


@dataclass(frozen=True)
class ForecastOptions:
    analysis: Any  # accounting.AnalysisOptions (its until is the history's end)
    freq: str = "1h"
    horizon: str = "7d"
    by: str = "partition"  # or "slice"
    # the demand series given directly (forecast/demand_file.py) instead of the accounting;
    # then only `analysis.since` / `analysis.until` are used
    demand_file: str | None = None
    # by slice: {partition: MIG-capable GpuModel}; whole 1-GPU runs there count as the slice
    # their measured memory needs (forecast.demand.need_slices; autopilot's MIG pass)
    need_models: Mapping[str, Any] | None = None


def _history(
    options: ForecastOptions, freq_s: int, horizon_s: int
) -> tuple[DemandSeries, list[str]]:
    """The demand series: from the demand file, or from the accounting read like `analyze`;
    a span too long for `freq_s` (`budget.check_buckets`) refused before it is allocated."""
    if options.demand_file is not None:
        from slurmgpu.forecast.demand_file import demand_file_series

        if options.analysis.files or options.analysis.store:
            raise UsageError("--demand-file: give it instead of --sacct-file / --store")
        if options.by != "partition":
            raise UsageError("--by slice: a --demand-file has no slices; use --by partition")
        got = demand_file_series(
            options.demand_file,
            freq_s,
            options.analysis.since,
            options.analysis.until,
            horizon_s=horizon_s,
        )
        return got.series, list(got.notes)
    from slurmgpu.accounting import analyze
    from slurmgpu.accounting.window import to64

    result = analyze(options.analysis)
    since, until = result.document.window.since, result.document.window.until
    by_slice = options.by == "slice"
    series = demand_series(
        result.frame,
        to64(since),
        to64(until),
        freq_s,
        by_slice,
        options.need_models,
        check=lambda buckets, n: budget.check_buckets(buckets * freq_s, freq_s, horizon_s, n),
    )
    unknown = shard_runs_uncounted(result.frame)
    if not series.partitions:
        if unknown:
            raise UsageError(
                "no GPU demand in the history: "
                + "; ".join(_shard_warning(p, k) for p, k in unknown.items())
            )
        raise UsageError("no GPU jobs in the history: nothing to forecast")
    return series, [_shard_warning(p, k) for p, k in unknown.items()]


SHARD_NOTE = "gres/shard runs not counted"


def _shard_warning(partition: str, runs: int) -> str:
    return (
        f"{partition}: {runs} {SHARD_NOTE} (shards per GPU unknown, their demand would be 0): "
        f"give --shards-per-gpu {partition}=N (the Count of shards per GPU in gres.conf)"
    )


def shard_runs_uncounted(frame: Any) -> dict[str, int]:
    """{partition: runs} of gres/shard runs whose GPU share is unknown (no shards per GPU
    for their partition, neither given nor read from the cluster): they hold no GPUs in the
    demand series, so a shard partition would drop out of the forecast without a word."""
    if "shard_fraction_known" not in frame or not len(frame):
        return {}
    known = frame["shard_fraction_known"].to_numpy(dtype=bool, na_value=True)
    equiv = frame["gpu_equiv"].to_numpy(dtype=float, na_value=np.nan)
    lost = ~known & np.isnan(equiv)
    if not lost.any():
        return {}
    parts = frame["partition"].to_numpy(dtype=object, na_value="")[lost]
    names, counts = np.unique(parts.astype(str), return_counts=True)
    return {str(n): int(k) for n, k in zip(names, counts, strict=True)}


def forecast(options: ForecastOptions) -> Forecast:
    """Read the history (the accounting like `analyze` does, or a demand file), then
    forecast demand per partition."""
    freq_s = parse_freq(options.freq)
    steps = parse_horizon(options.horizon, freq_s)
    if options.by not in ("partition", "slice"):
        raise UsageError(f"--by {options.by!r}: use partition or slice")
    series, notes = _history(options, freq_s, parse_duration(options.horizon, "--horizon"))
    backtests, forecasts = forecast_series(series, steps)
    for b in backtests:
        if b.kept_idle:
            notes.append(
                f"{_label(b)}: no demand in {100 * b.idle:.0f}% of the last week's buckets: "
                "seasonal-naive kept (its idle buckets are exact)"
            )
    n = len(series.times)
    h = split(n, steps)
    t0 = series.times[0]
    start_s = float((t0 - np.datetime64(0, "s")) / np.timedelta64(1, "s"))
    week = 7 * 86400 // freq_s
    if n - h < week:
        notes.append(
            "history shorter than a week before the held-out part: seasonal-naive repeats "
            "yesterday, not last week"
        )
    if n - h < 2 * week:
        notes.append(
            "history shorter than two weeks before the held-out part: the learned model has "
            "no 1-week lag"
        )
    return Forecast(
        warnings=tuple(n for n in notes if SHARD_NOTE in n),
        freq_s=freq_s,
        horizon_buckets=steps,
        history_from=_dt(start_s),
        train_until=_dt(start_s + n * freq_s),
        held_out_from=_dt(start_s + (n - h) * freq_s),
        train_buckets=n - h,
        test_buckets=h,
        backtest=tuple(backtests),
        by_partition=tuple(forecasts),
        notes=tuple(notes),
        by=options.by,
    )
