"""Forecast accuracy on generated job streams: sMAPE per model and scenario (docs/forecast.md).

Not a speed benchmark: it measures what the back-test picks and by how much, on demand series
made from simulated jobs rather than from a formula. Each scenario draws jobs (Poisson
arrivals whose rate follows the hour of the day and the day of the week, lognormal run times,
1/2/4/8 GPUs), schedules them first-in first-out on a partition of `capacity` GPUs (running +
pending = demand, as `slurmgpu forecast` measures it), and buckets the result exactly
(`demand.bucket_average`, 1 h). Scenarios add a trend, bursts (job arrays), a level shift, a
weekend with its own daily shape, a small partition, a full (queue-bound) partition.

    python benchmarks/forecast_accuracy.py [--seeds 3] [--weeks 6] [--horizon 168]
"""

from __future__ import annotations

import argparse
import heapq
import json

import numpy as np

from slurmgpu.forecast import models
from slurmgpu.forecast.demand import bucket_average
from slurmgpu.forecast.pipeline import _run, backtest_partition, pick, smape_pct, under_rate

H = 3600.0
T0 = 1762128000.0  # 2025-11-03T00:00:00Z, a Monday

SCENARIOS = {
    "steady": {},
    "trend": {"trend": 0.6},
    "bursts": {"bursts_per_week": 3.0},
    "level-shift": {"shift": 1.7},
    "weekend-shape": {"weekend_flat": True},
    "small": {"rate": 0.6},
    "queue-bound": {"capacity": 48},
    "everything": {"trend": 0.4, "bursts_per_week": 2.0, "shift": 1.4, "weekend_flat": True},
}


def _rate(t_h: np.ndarray, cfg: dict, weeks: int, shift_at: float) -> np.ndarray:
    hour, day = t_h % 24, (t_h // 24) % 7
    weekend = day >= 5
    daily = 1.0 + 0.8 * np.sin(2 * np.pi * (hour - 9) / 24)
    if cfg.get("weekend_flat"):
        daily = np.where(weekend, 0.7 + 0.2 * np.sin(2 * np.pi * (hour - 15) / 24), daily)
    level = np.where(weekend, 0.55, 1.0) * cfg.get("rate", 6.0)
    trend = 1.0 + cfg.get("trend", 0.0) * t_h / (weeks * 168)
    shift = np.where(t_h >= shift_at, cfg.get("shift", 1.0), 1.0)
    return np.maximum(level * daily * trend * shift, 0.0)


def jobs(cfg: dict, weeks: int, rng: np.random.Generator):
    """(submit, duration, gpus) of the scenario's jobs, seconds."""
    hours = np.arange(weeks * 168, dtype=float)
    shift_at = float(rng.integers(14, weeks * 7 - 8)) * 24 + 10  # never in the held-out week
    counts = rng.poisson(_rate(hours, cfg, weeks, shift_at))
    submit = np.repeat(hours, counts) * H + rng.uniform(0, H, counts.sum())
    bursts = rng.poisson(cfg.get("bursts_per_week", 0.0) * weeks)
    for at in rng.uniform(0, weeks * 168 * H, bursts):
        size = int(rng.integers(16, 64))
        submit = np.concatenate([submit, at + rng.uniform(0, 600, size)])
    n = len(submit)
    duration = np.minimum(np.exp(rng.normal(np.log(2.5 * H), 0.9, n)), 48 * H)
    gpus = rng.choice([1, 2, 4, 8], n, p=[0.55, 0.25, 0.12, 0.08]).astype(float)
    order = np.argsort(submit)
    return submit[order], duration[order], gpus[order]


def fifo(submit, duration, gpus, capacity: float):
    """Start times on `capacity` GPUs, first in first out (a job waits for the ones before)."""
    start = np.empty_like(submit)
    running: list[tuple[float, float]] = []  # (end, gpus)
    used, clock = 0.0, 0.0
    for i in range(len(submit)):
        clock = max(clock, submit[i])
        g = min(gpus[i], capacity)
        while running and (running[0][0] <= clock or used + g > capacity):
            end, freed = heapq.heappop(running)
            clock, used = max(clock, end), used - freed
        start[i] = clock
        heapq.heappush(running, (clock + duration[i], g))
        used += g
    return start


def series(cfg: dict, weeks: int, seed: int):
    rng = np.random.default_rng(seed)
    submit, duration, gpus = jobs(cfg, weeks, rng)
    start = fifo(submit, duration, gpus, cfg.get("capacity", 1e9))
    edges = T0 + H * np.arange(weeks * 168 + 1)
    s, st, e = T0 + submit, T0 + start, T0 + start + duration
    running = bucket_average(st, e, gpus, edges)
    pending = bucket_average(s, st, gpus, edges)
    return running + pending, pending, edges[:-1]


def evaluate(scenario: str, cfg: dict, seed: int, args) -> dict:
    """Pick by the back-test on the history before the last `horizon` buckets, then score
    every model on those buckets, which neither the fit nor the pick saw."""
    names = (models.NAIVE, models.RIDGE, models.BOOSTED)
    y, pend, t_s = series(cfg, args.weeks + 1, 1000 + seed)
    h = args.horizon
    cut = len(y) - h
    scores, _ = backtest_partition(y[:cut], pend[:cut], t_s[:cut], 3600, h, names)
    picked = pick(scores)
    test = {}
    for m in names:
        pred = _run(m, y[:cut], pend[:cut], t_s[:cut], 3600, h)
        test[m] = (smape_pct(y[cut:], pred), under_rate(y[cut:], pred))
    back = {s.model: s.smape_pct for s in scores}
    cells = "  ".join(f"{back[m]:6.2f} {test[m][0]:6.2f}" for m in names)
    print(f"{scenario:<14} {seed}  {cells}  picked {picked}", flush=True)
    return {"scenario": scenario, "seed": seed, "backtest_smape": back,
            "test_smape": {m: v[0] for m, v in test.items()},
            "test_under": {m: v[1] for m, v in test.items()}, "picked": picked}  # fmt: skip


def summarize(table: list[dict], names) -> None:
    for m in names[1:]:
        gains = [1 - r["test_smape"][m] / r["test_smape"][models.NAIVE] for r in table]
        print(f"{m}: mean held-out sMAPE gain over seasonal-naive {100 * np.mean(gains):.1f}%")
    won = [r for r in table if r["picked"] != models.NAIVE]
    gains = [1 - r["test_smape"][r["picked"]] / r["test_smape"][models.NAIVE] for r in won]
    worse = sum(g < 0 for g in gains)
    print(f"picked a learned model on {len(won)}/{len(table)}; held-out gain there mean "
          f"{100 * np.mean(gains) if gains else 0:.1f}%, worse than naive on {worse}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--weeks", type=int, default=6)
    ap.add_argument("--horizon", type=int, default=168)
    args = ap.parse_args()
    names = (models.NAIVE, models.RIDGE, models.BOOSTED)
    table = []
    for scenario, cfg in SCENARIOS.items():
        for seed in range(args.seeds):
            table.append(evaluate(scenario, cfg, seed, args))
    summarize(table, names)
    with open("benchmarks/out/forecast_accuracy.json", "w") as fh:
        json.dump(table, fh, indent=1)


if __name__ == "__main__":
    main()
