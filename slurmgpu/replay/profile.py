"""Backfill's plan of one partition: free whole GPUs over time, `avail[i]` from `times[i]` on.

Why this shape: a pass builds it from the running jobs' expected ends (sorted), then makes
tens of reservations on it, each a search from some step and a hold over a window; so the
profile is two float buffers with room to grow and a length `m` (a new step shifts one tail,
no copy), passed and returned as `(times, avail, m)` because a full buffer is replaced by
one twice its size. Every function is compiled (`_jit.njit`) and runs as Python without
numba; `tests/unit/replay/test_profile_fit.py` holds them to a plain recomputation.
"""

from __future__ import annotations

import math

import numpy as np

from slurmgpu.replay._jit import njit

INF = math.inf


@njit
def build(t, free, ends, gpus):
    """The profile at `t` with `free` GPUs free now and `gpus[k]` more from `ends[k]` on (the
    running jobs' expected ends, sorted; an end before t + 1 counts at t + 1): one step per
    distinct time."""
    n = len(ends)
    room = n + 65
    times = np.empty(room)
    avail = np.empty(room)
    times[0] = t
    avail[0] = free
    m = 1
    floor = t + 1.0
    total = 0.0
    for k in range(n):
        e = ends[k] if ends[k] > floor else floor
        total += gpus[k]
        if k + 1 < n:
            nxt = ends[k + 1] if ends[k + 1] > floor else floor
            if nxt == e:
                continue  # not the last of its time: the step takes the run's sum
        times[m] = e
        avail[m] = free + total
        m += 1
    return times, avail, m


@njit
def search(times, m, at, right):
    """The index where `at` goes in `times[:m]` (numpy's searchsorted, left or right)."""
    lo, hi = 0, m
    while lo < hi:
        mid = (lo + hi) >> 1
        if times[mid] < at or (right and times[mid] == at):
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit
def free_until(times, avail, m, g, until):
    """`g` GPUs free from now until `until` (every step at or before it)."""
    for i in range(m):
        if times[i] > until:
            break
        if avail[i] < g:
            return False
    return True


@njit
def free_for(times, avail, m, until):
    """The GPUs free from now until `until` (the least of every step at or before it)."""
    least = avail[0]
    for i in range(1, m):
        if times[i] > until:
            break
        if avail[i] < least:
            least = avail[i]
    return least


@njit
def step(times, avail, m, at):
    """Make `at` a step (its GPUs as just before it): `(times, avail, m, index)`."""
    k = search(times, m, at, False)
    if k < m and times[k] == at:
        return times, avail, m, k
    if m == len(times):  # full: twice the room
        grown_t = np.empty(2 * m)
        grown_a = np.empty(2 * m)
        for j in range(m):  # (a loop: numba's slice assignment costs compile time)
            grown_t[j] = times[j]
            grown_a[j] = avail[j]
        times, avail = grown_t, grown_a
    for j in range(m, k, -1):
        times[j] = times[j - 1]
        avail[j] = avail[j - 1]
    times[k] = at
    if k > 0:
        avail[k] = avail[k - 1]
    return times, avail, m + 1, k


@njit
def hold(times, avail, m, i, g, until):
    """Take `g` GPUs from step `i` until `until`: `(times, avail, m)`."""
    times, avail, m, k = step(times, avail, m, until)
    for j in range(i, k):
        avail[j] -= g
    return times, avail, m


@njit
def earliest(times, avail, m, g, lim, first):
    """The first step from `first` on where `g` GPUs stay free for `lim` (every step up to its
    time + lim); -1 if none. Only the start of a run of steps with `g` free can be it (a later
    step of the run has less of the run left), and it is when the run's end (the first step
    short of `g`; none: the end of the plan) comes after its time + lim."""
    i = first
    while i < m:
        if avail[i] < g:
            i += 1
            continue
        e = i + 1
        while e < m and avail[e] >= g:
            e += 1
        if e == m or times[e] > times[i] + lim:
            return i
        i = e + 1
    return -1


@njit
def reserve(times, avail, m, g, lim, horizon, node_gpus, after):
    """Reserve for a job of `g` GPUs and `lim` seconds at the earliest step from `after` on
    where `g` are free that long; nothing when that is past `horizon` (bf_window):
    `(times, avail, m, start)` (start INF: none).

    Slurm's backfill plans whole nodes: a pending job's reservation takes the node(s) it
    would start on out of every later job's plan for its window, whatever GPUs of them it
    leaves idle (slurmctld's `_dump_job_sched` shows 1-GPU jobs reserved one after the other
    on an 8-GPU node). In this pooled profile the reservation holds up to `node_gpus` (its
    whole nodes' GPUs) at each step of the window; not before `after` (when particular nodes
    hold the job: `nodes.node_earliest`)."""
    if after > horizon:
        return times, avail, m, INF
    first = 0
    if after > times[0]:
        times, avail, m, first = step(times, avail, m, after)
    i = earliest(times, avail, m, g, lim, first)
    if i < 0 or times[i] > horizon:
        return times, avail, m, INF
    start = times[i]
    times, avail, m, k = step(times, avail, m, start + lim)
    take = node_gpus if node_gpus > g else g
    for j in range(i, k):
        avail[j] -= avail[j] if avail[j] < take else take
    return times, avail, m, start
