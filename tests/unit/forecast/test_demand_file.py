"""`forecast --demand-file`: the demand series read from a CSV, and `--freq 1m`."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from slurmgpu.forecast import models
from slurmgpu.forecast.demand_file import demand_file_series
from slurmgpu.forecast.pipeline import parse_freq

T0 = 1762128000  # 2025-11-03T00:00:00Z, a Monday


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _write(path, rows, header="time,partition,gpus"):
    path.write_text(header + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return path


def test_buckets_are_sample_means_and_gaps_carry_the_last_value(tmp_path):
    rows = [
        (_iso(T0), "gpu", 2), (_iso(T0 + 30), "gpu", 4),  # bucket 0: mean 3
        (T0 + 60, "gpu", 5),  # epoch seconds; bucket 1
        # bucket 2: no sample -> 5 carried; bucket 3: 7
        ("2025-11-03T01:03:10+01:00", "gpu", 7),  # an offset: 00:03:10Z
        (_iso(T0 + 120), "a100", 1.5),  # a100 starts at bucket 2: 0 before
    ]  # fmt: skip
    got = demand_file_series(_write(tmp_path / "d.csv", rows), 60)
    s = got.series
    assert s.partitions == ["a100", "gpu"] and s.freq_s == 60
    np.testing.assert_allclose(s.demand("gpu"), [3, 5, 5, 7])
    np.testing.assert_allclose(s.demand("a100"), [0, 0, 1.5, 1.5])
    np.testing.assert_allclose(s.pending["gpu"], 0.0)
    assert str(s.times[0]) == "2025-11-03T00:00:00"
    assert any("gpu: 1 of 4 buckets" in n for n in got.notes)


def test_since_and_until_cut_the_samples(tmp_path):
    from datetime import UTC, datetime

    rows = [(T0 + 60 * k, "gpu", k) for k in range(10)]
    since = datetime.fromtimestamp(T0 + 90, UTC)  # rounded up to bucket 2
    until = datetime.fromtimestamp(T0 + 330, UTC)  # rounded down: buckets 2..4
    s = demand_file_series(_write(tmp_path / "d.csv", rows), 60, since, until).series
    np.testing.assert_allclose(s.demand("gpu"), [2, 3, 4])


def _minute_series(days: int) -> np.ndarray:
    t = np.arange(days * 1440)
    hour = (t % 1440) / 60
    rng = np.random.default_rng(3)
    return np.maximum(40 + 15 * np.sin(2 * np.pi * (hour - 9) / 24) + rng.normal(0, 3, len(t)), 0)


def test_cli_demand_file_at_one_minute_json_shape(tmp_path):
    y = _minute_series(15)
    rows = [(T0 + 60 * k, "gpu", round(v, 3)) for k, v in enumerate(y)]
    path = tmp_path / "d.csv"  # columns in another order, one more ignored
    path.write_text("extra,time,partition,gpus\n" + "".join(f"x,{t},{p},{g}\n" for t, p, g in rows))
    args = ["forecast", "--demand-file", str(path), "--freq", "1m", "--horizon", "2h"]
    r = CliRunner().invoke(main, [*args, "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert set(doc) == {"model", "backtest", "by_partition", "notes"}
    assert doc["model"]["freq_s"] == 60 and doc["model"]["horizon_buckets"] == 120
    assert doc["model"]["candidates"] == list(models.CANDIDATES)
    (part,) = doc["by_partition"]
    assert part["partition"] == "gpu" and len(part["points"]) == 120
    assert part["points"][0]["time"] == _iso(T0 + 15 * 86400)
    scores = doc["backtest"]["by_partition"][0]["models"]
    assert all(s["folds"] >= 2 for s in scores.values())


def test_freq_one_minute_is_accepted_and_odd_ones_are_not():
    assert parse_freq("1m") == 60 and parse_freq("5m") == 300
    assert models.short_lag(1440) == 15 and models.short_lag(288) == 1
    for bad in ("7m", "30s", "2d"):
        with pytest.raises(Exception, match="--freq"):
            parse_freq(bad)


def test_one_minute_ridge_uses_block_recursion_and_coarse_slots():
    """At 1 min the shortest lag is 15 buckets, so the forecast runs in blocks of 15 and a
    block's own forecasts never feed themselves; the ridge's slot classes are 15 minutes."""
    y = _minute_series(15)
    t_s = T0 + 60.0 * np.arange(len(y))
    pred = models.ridge(y, np.zeros(len(y)), t_s, 60, 90, 1440, 10080)
    assert pred.shape == (90,) and (pred >= 0).all()
    slot, classes = models.slot_classes(np.arange(1440), 1440)
    assert classes == 96 and slot[14] == 0 and slot[15] == 1 and slot[-1] == 95
    assert len(models.thin(43_200)) == models.MAX_TREE_ROWS and models.thin(100).size == 100
