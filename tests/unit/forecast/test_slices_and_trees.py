"""`--by slice`, the boosted trees, the pick's guard, and a forecast as MIG demand."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import numpy as np
import pytest
from click.testing import CliRunner

from slurmgpu.advice.forecast_demand import demand_from_forecast
from slurmgpu.cli import main
from slurmgpu.errors import UsageError
from slurmgpu.forecast import models
from slurmgpu.forecast.demand import DemandSeries, demand_series
from slurmgpu.forecast.pipeline import (
    Forecast,
    PartitionForecast,
    Point,
    Score,
    _run,
    _runs,
    backtest_partition,
    fold_gains,
    forecast_series,
    interval_offsets,
    pick,
    robust_gain,
)
from slurmgpu.forecast.trees import fit_boosted
from slurmgpu.model.catalog import resolve

HEADER = (
    "JobIDRaw|JobID|Cluster|Partition|QOS|Account|User|State|Submit|Start|End|ElapsedRaw"
    "|AllocTRES|ReqTRES"
)
T0 = 1764547200  # 2025-12-01T00:00:00Z
H = 3600


def _row(jid, part, state, submit, start, end, alloc, req):
    el = (end - start) if isinstance(start, int) and isinstance(end, int) else 0
    return (
        f"{jid}|{jid}|c1|{part}|normal|ml|alice|{state}|{submit}|{start}|{end}|{el}|{alloc}|{req}"
    )


def _mixed(tmp_path):
    a100 = "gres/gpu:a100=1,gres/gpu=1"
    rows = [
        _row(1, "gpu", "COMPLETED", T0, T0, T0 + 2 * H, "gres/gpu=2", "gres/gpu=2"),
        _row(2, "gpu", "COMPLETED", T0, T0, T0 + H, "gres/gpu:1g.10gb=2,gres/gpu=2", a100),
        _row(3, "gpu", "COMPLETED", T0, T0 + H, T0 + 2 * H, "gres/gpu:3g.40gb=1,gres/gpu=1", a100),
        _row(4, "gpu", "COMPLETED", T0, T0, T0 + 2 * H, "gres/shard=4", "gres/shard=4"),
        # pending the whole first hour for one 1g slice, then runs in one
        _row(5, "gpu", "COMPLETED", T0, T0 + H, T0 + 2 * H, "gres/gpu:1g.10gb=1,gres/gpu=1", a100),
        # never started: asked for a 3g slice, cancelled after half an hour
        _row(6, "gpu", "CANCELLED by 0", T0, "None", T0 + H // 2, "", "gres/gpu:3g.40gb=1"),
    ]
    p = tmp_path / "mixed.txt"
    p.write_text("\n".join([HEADER, *rows]) + "\n")
    return p


def _series_of(path, by_slice):
    from slurmgpu.accounting import analyze
    from slurmgpu.accounting.options import AnalysisOptions
    from slurmgpu.accounting.window import to64

    opts = AnalysisOptions(
        files=[path], now=datetime(2026, 1, 1, tzinfo=UTC), shards_per_gpu={"*": 8}
    )
    result = analyze(opts)
    w = result.document.window
    return demand_series(result.frame, to64(w.since), to64(w.until), 3600, by_slice)


def test_demand_by_slice_by_hand(tmp_path):
    s = _series_of(_mixed(tmp_path), by_slice=True)
    assert s.partitions == [("gpu", "gpu"), ("gpu", "1g"), ("gpu", "3g"), ("gpu", "shard")]
    np.testing.assert_allclose(s.demand(("gpu", "gpu")), [2.0, 2.0])
    # hour 0: job 2's two 1g slices + job 5 pending one; hour 1: job 5 running in one
    np.testing.assert_allclose(s.demand(("gpu", "1g")), [3 / 7, 1 / 7])
    np.testing.assert_allclose(s.pending[("gpu", "1g")], [1 / 7, 0.0])
    # job 6 pends for a 3g slice half an hour; job 3 pends an hour, then holds one
    np.testing.assert_allclose(s.demand(("gpu", "3g")), [0.5 * 3 / 7 + 3 / 7, 3 / 7])
    np.testing.assert_allclose(s.demand(("gpu", "shard")), [0.5, 0.5])  # 4 of 8 shards
    total = _series_of(_mixed(tmp_path), by_slice=False).demand("gpu")
    np.testing.assert_allclose(sum(s.demand(k) for k in s.partitions), total)


def _seasonal(weeks, trend, noise, weekend_flat=False, seed=0):
    t = np.arange(weeks * 168, dtype=float)
    hour, day = t % 24, (t // 24) % 7
    daily = 20 * np.sin(2 * np.pi * (hour - 8) / 24)
    if weekend_flat:  # the weekend has its own daily shape: no additive model holds it
        daily = np.where(day >= 5, -10 * np.sin(2 * np.pi * (hour - 8) / 24), daily)
    weekly = np.where(day >= 5, -25.0, 0.0)
    rng = np.random.default_rng(seed)
    return np.maximum(100 + daily + weekly + trend * t + rng.normal(0, noise, len(t)), 0)


def _ds(values):
    times = np.datetime64("2025-11-03T00:00:00") + np.arange(len(values)) * np.timedelta64(1, "h")
    return DemandSeries(times, 3600, {"gpu": values}, {"gpu": np.zeros(len(values))})


def test_trees_recover_a_step_function_and_predict_what_they_fitted():
    rng = np.random.default_rng(3)
    x = rng.uniform(0, 1, (600, 3))
    y = np.where(x[:, 0] > 0.5, 10.0, 0.0) + np.where(x[:, 1] > 0.25, 4.0, 0.0)
    model = fit_boosted(x, y, rounds=80)
    assert np.abs(model.predict(x) - y).mean() < 0.5
    assert np.abs(model.predict(np.array([[0.9, 0.9, 0.1], [0.1, 0.1, 0.9]])) - [14, 0]).max() < 1
    with pytest.raises(ValueError, match="too few rows"):
        fit_boosted(x[:5], y[:5])


def test_boosted_trees_learn_a_queue_threshold_the_ridge_cannot():
    """Demand jumps by 40 GPUs a day after the queue held 3..7 GPUs, else not: a band, which
    no linear term in the pending GPUs holds; the trees split on it twice. (Whether the pick
    takes them is the pick's guards' business, tests/unit/forecast/test_pick_guards.py: the
    back-test scores the forecast tapered toward seasonal-naive, and here the trees lose one
    of the four folds by 1% so.)"""
    rng = np.random.default_rng(5)
    n = 5 * 168
    pend = np.repeat(rng.uniform(0, 10, n // 6), 6)
    y = _seasonal(weeks=5, trend=0.0, noise=1.0)
    y[24:] += np.where((pend[:-24] > 3) & (pend[:-24] < 7), 40.0, 0.0)
    t_s = 1762128000.0 + 3600.0 * np.arange(n)
    scores, res = backtest_partition(y, pend, t_s, 3600, 24)
    s = {x.model: x.smape_pct for x in scores}
    assert s[models.BOOSTED] < 0.7 * s[models.RIDGE]
    assert s[models.BOOSTED] < 0.7 * s[models.NAIVE]
    assert set(res) == set(models.CANDIDATES)


def test_boosted_never_sees_the_held_out_part():
    y = _seasonal(weeks=4, trend=0.02, noise=3.0)
    t_s = 1762128000.0 + 3600.0 * np.arange(len(y))
    names = (models.BOOSTED,)
    _, res = backtest_partition(y, y * 0.1, t_s, 3600, 48, names)
    y2 = y.copy()
    y2[-48:] += 1000.0
    _, res2 = backtest_partition(y2, y2 * 0.1, t_s, 3600, 48, names)
    np.testing.assert_allclose(res2[models.BOOSTED][:48] - res[models.BOOSTED][:48], 1000.0)
    np.testing.assert_allclose(res2[models.BOOSTED][48:], res[models.BOOSTED][48:])


def _score(model: str, folds: tuple[float, ...] | None) -> Score:
    if folds is None:
        return Score(model, None, None, "could not run")
    return Score(model, sum(folds) / len(folds), 0.5, folds=len(folds), fold_smape=folds)


@pytest.mark.parametrize(
    ("ridge", "trees", "want"),
    [
        # gains over the baseline (15) per fold, the most recent first
        ((10.0, 12.0, 11.0), (12.0, 13.0, 12.0), models.RIDGE),  # 0.33, 0.2, 0.27
        ((11.0, 12.0, 11.0), (10.0, 11.0, 10.0), models.BOOSTED),
        ((20.0, 21.0, 22.0), (16.0, 16.0, 16.0), models.NAIVE),  # both worse than the baseline
        ((14.0, 14.0, 14.0), None, models.NAIVE),  # 6.7% better: under the 10% margin
        ((12.0, 12.0, 12.0), None, models.RIDGE),  # 20% better every time: no spread
        # far better on average but lost the most recent fold: the baseline stays
        ((15.5, 2.0, 2.0), (16.0, 3.0, 3.0), models.NAIVE),
        # better on average (10.7, 7), but by little in the most recent fold and not at all
        # in another: the folds' spread is as large as the gain
        ((13.0, 4.0, 15.0), (15.0, 3.0, 3.0), models.NAIVE),
        ((10.0,), (9.0,), models.NAIVE),  # one fold is not enough
        (None, None, models.NAIVE),
    ],
)
def test_pick_takes_a_learned_model_only_when_clear_of_the_folds_spread(ridge, trees, want):
    naive = (15.0,) * (len(ridge) if ridge else 3)
    scores = [
        _score(models.NAIVE, naive),
        _score(models.RIDGE, ridge),
        _score(models.BOOSTED, trees),
    ]
    assert pick(scores) == want


def test_robust_gain_weighs_the_recent_folds_most():
    naive = _score(models.NAIVE, (10.0, 10.0, 10.0, 10.0))
    # the same folds' gains in the opposite order: 0.5, 0.4, 0.3, 0.2 and 0.2, 0.3, 0.4, 0.5
    improving = _score(models.RIDGE, (5.0, 6.0, 7.0, 8.0))
    fading = _score(models.BOOSTED, (8.0, 7.0, 6.0, 5.0))
    # weights 8/15, 4/15, 2/15, 1/15: the recent half counts most
    assert robust_gain(improving, naive) == pytest.approx((8 * 0.5 + 4 * 0.4 + 2 * 0.3 + 0.2) / 15)
    assert robust_gain(fading, naive) == pytest.approx((8 * 0.2 + 4 * 0.3 + 2 * 0.4 + 0.5) / 15)
    assert pick([naive, fading, improving]) == models.RIDGE
    assert pick([naive, fading]) == models.BOOSTED  # 0.27, clear of its spread
    np.testing.assert_allclose(fold_gains(improving, naive), [0.5, 0.4, 0.3, 0.2])


def test_fold_gains_where_seasonal_naive_is_exact():
    naive = _score(models.NAIVE, (0.0, 10.0))
    np.testing.assert_allclose(fold_gains(_score(models.RIDGE, (0.0, 5.0)), naive), [0.0, 0.5])
    np.testing.assert_allclose(fold_gains(_score(models.RIDGE, (1.0, 5.0)), naive), [-1.0, 0.5])
    assert fold_gains(_score(models.RIDGE, (1.0, 5.0, 5.0)), naive) is None  # other folds


def test_pick_takes_the_highest_recency_weighted_gain():
    naive = _score(models.NAIVE, (15.0, 15.0, 15.0))
    trees = _score(models.BOOSTED, (9.0, 9.0, 9.0))
    blend = _score(models.BLEND, (12.0, 12.0, 12.0))
    level = _score(models.LEVEL, (6.0, 12.0, 12.0))
    assert pick([naive, trees, blend]) == models.BOOSTED
    assert pick([naive, trees, blend, level]) == models.LEVEL  # 0.6 recent weighs most
    weak = _score(models.BOOSTED, (9.0, 16.0, 9.0))  # lost fold 2: the spread is too large
    assert pick([naive, weak, blend]) == models.BLEND


def test_blend_is_the_mean_of_the_four_forecasts():
    y = _seasonal(weeks=4, trend=0.05, noise=4.0)
    t_s = 1762128000.0 + 3600.0 * np.arange(len(y))
    runs = _runs(models.CANDIDATES, y, y * 0.1, t_s, 3600, 24)
    want = runs[models.NAIVE] + runs[models.RIDGE] + runs[models.BOOSTED] + runs[models.LEVEL]
    np.testing.assert_allclose(runs[models.BLEND], want / 4)
    np.testing.assert_allclose(_run(models.BLEND, y, y * 0.1, t_s, 3600, 24), want / 4)


def test_interval_offsets_add_the_folds_mean_misses():
    # two folds of 4: residuals around their means -1..+1.5, fold means 2 and -3
    fold1 = np.array([1.0, 2.0, 2.5, 2.5])  # mean 2
    fold2 = np.array([-4.0, -3.0, -2.5, -2.5])  # mean -3
    lo, hi = interval_offsets(np.concatenate([fold1, fold2]), 4)
    within = np.concatenate([fold1 - 2.0, fold2 + 3.0])
    assert lo == pytest.approx(np.quantile(within, 0.1) - 3.0)
    assert hi == pytest.approx(np.quantile(within, 0.9) + 2.0)
    # one fold: its mean on both sides
    lo1, hi1 = interval_offsets(fold1, 4)
    assert (lo1, hi1) == pytest.approx((np.quantile(fold1, 0.1), np.quantile(fold1, 0.9)))


def test_forecast_interval_and_under_rate_from_the_backtest():
    y = _seasonal(weeks=5, trend=0.05, noise=4.0)
    backtests, forecasts = forecast_series(_ds(y), steps=24)
    picked = next(s for s in backtests[0].scores if s.model == backtests[0].picked)
    assert 0.0 <= picked.under_forecast_rate <= 1.0
    assert all(p.low <= p.gpus <= p.high for p in forecasts[0].points)
    assert any(p.high > p.low for p in forecasts[0].points)


def _args(tmp_path, *extra):
    rows = []
    for d in range(5):
        for hh in range(0, 24, 2):
            s = T0 + d * 86400 + hh * H
            rows.append(_row(len(rows) + 1, "gpu", "COMPLETED", s, s, s + 3 * H,
                             "gres/gpu:1g.10gb=2,gres/gpu=2", "gres/gpu=1"))  # fmt: skip
            rows.append(_row(len(rows) + 1, "gpu", "COMPLETED", s, s, s + H, "gres/gpu=1",
                             "gres/gpu=1"))  # fmt: skip
    p = tmp_path / "days.txt"
    p.write_text("\n".join([HEADER, *rows]) + "\n")
    return ["forecast", "--sacct-file", str(p), "--train-until", "2025-12-06T00:00",
            "--horizon", "6h", "--format", "json", *extra]  # fmt: skip


def test_cli_by_slice_json_and_by_partition_unchanged(tmp_path):
    r = CliRunner().invoke(main, _args(tmp_path, "--by", "slice"))
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["model"]["by"] == "slice"
    assert [(p["partition"], p["slice"]) for p in doc["by_partition"]] == [
        ("gpu", "gpu"), ("gpu", "1g")
    ]  # fmt: skip
    assert set(doc["model"]["picked"]) == {"gpu:gpu", "gpu:1g"}
    assert [b["slice"] for b in doc["backtest"]["by_partition"]] == ["gpu", "1g"]
    plain = json.loads(CliRunner().invoke(main, _args(tmp_path)).output)
    assert "by" not in plain["model"] and set(plain["model"]["picked"]) == {"gpu"}
    assert [set(p) for p in plain["by_partition"]] == [{"partition", "model", "points"}]


def test_cli_by_slice_text(tmp_path):
    r = CliRunner().invoke(main, _args(tmp_path, "--by", "slice", "--format", "text"))
    assert r.exit_code == 0, r.output
    assert "gpu:1g" in r.output and "gpu:gpu" in r.output


def _forecast(by="slice", series=(("gpu", "1g", [0.3, 0.5]), ("gpu", "3g", [0.9, 0.2]))):
    t = datetime(2025, 12, 1, tzinfo=UTC)
    parts = tuple(
        PartitionForecast(p, models.NAIVE, tuple(Point(t, g, g, g + 0.2) for g in vals), k)
        for p, k, vals in series
    )
    return Forecast(3600, 2, t, t, t, 48, 2, (), parts, (), by)


def test_forecast_peak_as_mig_demand():
    a100 = resolve("A100-SXM4-80GB")
    # 1g: peak 0.5 GPU = 3.5 -> 4 instances; 3g: peak 0.9 GPU = 2.1 -> 3 instances
    d = demand_from_forecast(_forecast(), a100)
    assert d.items == (("1g", 4), ("3g", 3))
    assert "forecast peak" in d.source
    # the interval's top: 0.7 GPU -> 4.9 -> 5; 1.1 GPU -> 2.57 -> 3
    assert demand_from_forecast(_forecast(), a100, use="high").items == (("1g", 5), ("3g", 3))
    # exactly 2 instances of 3g stays 2 (bucket averages are floats)
    exact = _forecast(series=(("gpu", "3g", [6 / 7]),))
    assert demand_from_forecast(exact, a100).items == (("3g", 2),)


def test_forecast_as_mig_demand_hostile_inputs():
    a100 = resolve("A100-SXM4-80GB")
    with pytest.raises(UsageError, match="--by slice"):
        demand_from_forecast(_forecast(by="partition"), a100)
    with pytest.raises(UsageError, match="no MIG profiles"):
        demand_from_forecast(_forecast(), resolve("rtx4090"))
    with pytest.raises(UsageError, match="not in the forecast"):
        demand_from_forecast(_forecast(), a100, ["cpu"])
    whole = demand_from_forecast(_forecast(series=(("gpu", "gpu", [3.0]),)), a100)
    assert whole.items == () and whole.total == 0
    assert any("not in MIG instances" in n for n in whole.notes)
    assert any("no MIG demand" in n for n in whole.notes)
    empty = demand_from_forecast(_forecast(series=()), a100)
    assert empty.items == ()
    a30 = demand_from_forecast(_forecast(series=(("gpu", "3g", [0.5]),)), resolve("a30"))
    assert a30.items == () and "offers no 3g" in a30.notes[0]


def test_backtest_folds_while_every_model_runs_and_half_the_history_is_left():
    y = _seasonal(weeks=4, trend=0.02, noise=2.0)
    t_s = 1762128000.0 + 3600.0 * np.arange(len(y))
    scores, res = backtest_partition(y, y * 0.1, t_s, 3600, 48)
    assert [s.folds for s in scores] == [4] * 5  # 4 weeks: 4 folds of 2 days
    assert all(len(r) == 4 * 48 for r in res.values())
    # 6 weeks, a week held out: folds 3 and 4 would fit on 3 and 2 weeks; past fold 2 a fold
    # is used only while the part before it is at least half the history
    long = _seasonal(weeks=6, trend=0.02, noise=2.0)
    t_l = 1762128000.0 + 3600.0 * np.arange(len(long))
    scores, _ = backtest_partition(long, long * 0.1, t_l, 3600, 168)
    assert [s.folds for s in scores] == [3] * 5
    # 4 days, 24 held out: the learned models fit on fold 1's 3 days but not fold 2's 2 days,
    # so fold 2 is dropped for every model (all are scored on the same buckets)
    short = y[:96]
    scores, res = backtest_partition(short, short * 0.1, t_s[:96], 3600, 24)
    assert [s.folds for s in scores] == [1] * 5
    assert all(len(r) == 24 for r in res.values())


def _no_gpus(tmp_path):
    rows = [_row(1, "cpu", "COMPLETED", T0, T0, T0 + 9 * 86400, "cpu=4", "cpu=4")]
    p = tmp_path / "cpu.txt"
    p.write_text("\n".join([HEADER, *rows]) + "\n")
    return p


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--by", "node"], "--by"),
        (["--by", "slice", "--horizon", "0"], "--horizon '0'"),
        (["--by", "slice"], "no GPU jobs"),
    ],
)
def test_by_slice_hostile_inputs_one_error_line(tmp_path, extra, needle):
    r = CliRunner().invoke(main, ["forecast", "--sacct-file", str(_no_gpus(tmp_path)), *extra])
    assert r.exit_code in (1, 2)
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("slurmgpu: error:"), r.output
    assert needle in lines[0]


def test_by_slice_without_mig_is_whole_gpus_only(tmp_path):
    rows = []
    for d in range(5):
        for hh in range(0, 24, 4):
            s = T0 + d * 86400 + hh * H
            rows.append(_row(len(rows) + 1, "a", "COMPLETED", s, s, s + 2 * H, "gres/gpu=1",
                             "gres/gpu=1"))  # fmt: skip
    p = tmp_path / "whole.txt"
    p.write_text("\n".join([HEADER, *rows]) + "\n")
    args = ["forecast", "--sacct-file", str(p), "--train-until", "2025-12-06T00:00",
            "--horizon", "3h", "--format", "json", "--by", "slice"]  # fmt: skip
    doc = json.loads(CliRunner().invoke(main, args).output)
    assert [(e["partition"], e["slice"]) for e in doc["by_partition"]] == [("a", "gpu")]
    forecast = Forecast(3600, 3, *(datetime(2025, 12, 6, tzinfo=UTC),) * 3, 96, 3, (),
                        tuple(PartitionForecast(e["partition"], e["model"], tuple(
                            Point(datetime(2025, 12, 6, tzinfo=UTC), x["gpus"], x["low"],
                                  x["high"]) for x in e["points"]), e["slice"])
                              for e in doc["by_partition"]), (), "slice")  # fmt: skip
    d = demand_from_forecast(forecast, resolve("A100-SXM4-80GB"))
    assert d.items == () and any("not in MIG instances" in n for n in d.notes)


def test_pending_requests_classed_by_their_fraction():
    from slurmgpu.forecast.demand import fraction_slice

    got = fraction_slice(np.array([0, 1, 2, 1 / 7, 3 / 7, 6 / 7, 0.25, 0.5, 0.3, 1.5]))
    assert got.tolist() == ["gpu", "gpu", "gpu", "1g", "3g", "6g", "1g", "2g", "shard", "gpu"]


def test_forecast_demand_feeds_the_mig_planner():
    from slurmgpu.mig.plan import plan
    from tests.unit.mig.conftest import node_of

    h100 = resolve("h100")
    # 1g peak 1.5 GPUs -> 10.5 -> 11 instances; 3g peak 0.8 GPU -> 1.87 -> 2 instances
    fc = _forecast(series=(("gpu", "1g", [1.0, 1.5]), ("gpu", "3g", [0.8, 0.4])))
    demand = demand_from_forecast(fc, h100)
    assert demand.items == (("1g", 11), ("3g", 2))
    result = plan([node_of("NVIDIA H100 80GB HBM3")], demand)
    assert result.met and dict(result.served) == {"1g": 11, "3g": 2}
    assert result.carved == result.lower_bound == 3  # 11 + 6 = 17 compute slices
