"""An independent reading of the idle rule (docs/idle.md), and generated series to test it.

`reference_flag` applies the definition literally, candidate by candidate, with no
bisection and no skipping: what `slurmgpu.idle.rule` must agree with. `generate` makes
per-GPU series of a job (busy, idle, gaps, missing GPUs) from a seed.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass


@dataclass
class Dev:
    key: str
    node: str
    gpu: str
    times: list[float]
    util: list[float]
    mig: str | None = None
    profile: str | None = None


def idle_at(devs: list[Dev], t: float, w: float, pct: float, gap: float) -> bool:
    for d in devs:
        inside = [(s, u) for s, u in zip(d.times, d.util, strict=False) if t - w <= s <= t]
        if not inside:
            return False
        if any(u > pct for _, u in inside):
            return False
        points = [t - w] + [s for s, _ in inside] + [t]
        if any(b - a > gap for a, b in itertools.pairwise(points)):
            return False
    return True


def reference_flag(
    devs: list[Dev], start: float, end: float, w: float, pct: float, gap: float
) -> float | None:
    """The first sample time t in [start + w, end] at which the job is idle."""
    times = sorted({s for d in devs for s in d.times if start <= s <= end})
    for t in times:
        if t - start >= w and idle_at(devs, t, w, pct, gap):
            return t
    return None


def generate(seed: int, start: float, hours: float, gpus: int, interval: float = 30.0):
    """A job's series: per GPU, stretches of busy/idle, with jitter, noise, rare gaps."""
    rng = random.Random(seed)
    devs = []
    kind = rng.choice(["idle-from-start", "busy-then-idle", "busy", "flicker", "gappy", "near"])
    idle_from = start + rng.uniform(0.2, 0.6) * hours * 3600
    for g in range(gpus):
        times, util = [], []
        t = start + rng.uniform(0, interval)
        while t <= start + hours * 3600:
            if kind == "idle-from-start":
                u = 0.0
            elif kind == "busy":
                u = rng.uniform(30, 100)
            elif kind == "near":
                u = rng.choice([0.0, 0.5, 1.0, 1.0])  # at the threshold: still idle
            elif kind == "flicker":
                u = 0.0 if rng.random() > 0.002 else 50.0
            else:
                u = rng.uniform(40, 100) if t < idle_from else 0.0
            if kind == "gappy" and rng.random() < 0.01:
                t += rng.uniform(200, 900)  # a missed stretch of scrapes
            times.append(round(t, 3))
            util.append(u)
            t += interval + rng.uniform(-2, 2)
        devs.append(Dev(f"node{seed % 3}/{g}", f"node{seed % 3}", str(g), times, util))
    return kind, devs
