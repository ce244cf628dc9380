"""The idle rule on per-device sample series (pure; docs/idle.md "The rule").

A job is idle at time t when t - start >= W and, on every device it holds, every sample in
[t - W, t] is <= util_pct (with `memory_held_mib`: and every memory sample in it >= that).
The data must cover the window, or "idle" is not known: each device needs a sample in the
window, and no stretch of [t - W, t] longer than `max_gap_s` may be without one (between
two samples, or from either edge to the nearest sample). Candidate times t are the sample
times of the job's devices; `flagged_at` is the first of them at which the job is idle.

Every check is a bisection into per-device arrays, and a failed check says how far the next
candidate can be, so a run is scanned in about one pass.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from slurmgpu.model.measure import DeviceSeries
from slurmgpu.model.policy import IdleRule


@dataclass(frozen=True)
class Verdict:
    """What the rule says about one run.

    `flagged_at`: first time the job is idle for the whole window (None: never);
    `warnings`: per warning window, the first time of the idle stretch that leads to the flag
    (or, unflagged, to the run's last sample) at which that shorter window holds;
    `stretches`: the idle stretches (start, end) of at least the shortest window;
    `undecided`: why the rule could not be applied (no series, fewer devices than GPUs).
    """

    flagged_at: float | None
    warnings: tuple[float | None, ...]
    stretches: tuple[tuple[float, float], ...] = ()
    undecided: str = ""
    devices: int = 0


class _Device:
    """One device's arrays: sample times, times of samples that are not idle, big gaps."""

    def __init__(self, d: DeviceSeries, rule: IdleRule, max_gap_s: float) -> None:
        self.times = list(d.times)
        busy = [t for t, u in zip(d.times, d.util_pct, strict=True) if u > rule.util_pct]
        if rule.memory_held_mib is not None:
            held = rule.memory_held_mib
            busy += [t for t, m in zip(d.mem_times, d.mem_used_mib, strict=True) if m < held]
        self.busy = sorted(busy)
        self.gap = max_gap_s
        pairs = zip(self.times, self.times[1:], strict=False)
        gaps = [(a, b) for a, b in pairs if b - a > max_gap_s]
        self.gap_start = [a for a, _ in gaps]
        self.gap_end = [b for _, b in gaps]

    def check(self, t: float, w: float) -> tuple[bool, float, bool]:
        """(idle over [t-w, t], the bound the next candidate must pass, strictly?)."""
        lo, hi = bisect_left(self.times, t - w), bisect_right(self.times, t) - 1
        if hi < lo:  # no sample in the window: wait for this device's next sample
            return False, self.times[lo] if lo < len(self.times) else math.inf, False
        j = bisect_right(self.busy, t) - 1
        if j >= 0 and self.busy[j] >= t - w:  # a busy sample in the window
            return False, self.busy[j] + w, True
        if self.times[lo] - (t - w) > self.gap:  # the window starts long before a sample
            return False, self.times[lo] + w - self.gap, False
        if t - self.times[hi] > self.gap:  # the window ends long after the last sample
            return False, self.times[hi + 1] if hi + 1 < len(self.times) else math.inf, False
        k = bisect_right(self.gap_end, t) - 1
        if k >= 0 and self.gap_start[k] >= t - w:  # a hole inside the window
            return False, self.gap_start[k] + w, True
        return True, t, False


def _idle(devices: list[_Device], t: float, w: float) -> tuple[bool, float, bool]:
    bound, strict, ok = t, False, True
    for d in devices:
        idle, b, s = d.check(t, w)
        if not idle:
            ok = False
            if b > bound or (b == bound and s):
                bound, strict = b, s
    return ok, bound, strict


def first_idle(devices: list[_Device], times: list[float], w: float, t_min: float) -> int | None:
    """Index into `times` of the first candidate >= t_min at which the job is idle over w."""
    i = bisect_left(times, t_min)
    while i < len(times):
        ok, bound, strict = _idle(devices, times[i], w)
        if ok:
            return i
        nxt = bisect_right(times, bound) if strict else bisect_left(times, bound)
        i = max(i + 1, nxt)
    return None


def evaluate(
    series: Sequence[DeviceSeries],
    *,
    start: float,
    end: float,
    rule: IdleRule,
    max_gap_s: float,
    gpus_held: int,
) -> Verdict:
    """Apply `rule` to a run's device series over [start, end] (epoch seconds)."""
    if not series or not any(d.times for d in series):
        return Verdict(None, (), undecided="no samples")
    if len(series) < gpus_held:
        return Verdict(
            None, (), undecided=f"series for {len(series)} of {gpus_held} GPUs", devices=len(series)
        )
    devices = [_Device(d, rule, max_gap_s) for d in series]
    times = sorted({t for d in series for t in d.times if start <= t <= end})
    w = rule.window_s
    flag = first_idle(devices, times, w, start + w)
    # the warnings belong to the stretch ending at the flag (or at the run's last sample)
    last = flag if flag is not None else len(times) - 1
    warnings = tuple(
        _stretch_start(devices, times, last, wm * 60.0, start) for wm in rule.warn_after_min
    )
    shortest = min([w, *(wm * 60.0 for wm in rule.warn_after_min)])
    stretches = idle_stretches(devices, times, shortest, start)
    return Verdict(
        times[flag] if flag is not None else None, warnings, stretches, devices=len(series)
    )


def _stretch_start(
    devices: list[_Device], times: list[float], last: int, w: float, start: float
) -> float | None:
    """The first candidate t such that every candidate from t to times[last] is idle over w."""
    if last < 0 or times[last] < start + w or not _idle(devices, times[last], w)[0]:
        return None
    j = last
    while j > 0 and times[j - 1] >= start + w and _idle(devices, times[j - 1], w)[0]:
        j -= 1
    return times[j]


def idle_stretches(
    devices: list[_Device], times: list[float], w: float, start: float
) -> tuple[tuple[float, float], ...]:
    """Maximal runs of candidates idle over w, as (first idle time - w, last idle time)."""
    out: list[tuple[float, float]] = []
    i = 0
    while True:
        found = first_idle(devices, times[i:], w, start + w) if i < len(times) else None
        if found is None:
            return tuple(out)
        j = i + found
        k = j
        while k + 1 < len(times) and _idle(devices, times[k + 1], w)[0]:
            k += 1
        out.append((times[j] - w, times[k]))
        i = k + 1


def idle_at(
    series: Sequence[DeviceSeries], t: float, rule: IdleRule, max_gap_s: float, w_min: float
) -> bool:
    """Whether the devices are idle over the `w_min` minutes ending at t (live mode)."""
    if not series:
        return False
    return _idle([_Device(d, rule, max_gap_s) for d in series], t, w_min * 60.0)[0]
