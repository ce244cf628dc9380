"""Backfill's plan of one partition: free whole GPUs over time, `avail[i]` from `times[i]` on.

Why this shape: a pass builds it from the running jobs' expected ends (sorted), then asks
"are g GPUs free from now until t" for every job it walks (hundreds in a deep queue) and
makes tens of reservations, each a search from some step and a hold over a window. So the
plan is one buffer `prof` of three rows with room to grow (`TIMES`, `AVAIL`, and `LOW`, the
least of `AVAIL` up to each step) and `meta` = [steps used, steps whose `LOW` is valid]:
the question is a binary search and one look at `LOW`, kept valid lazily (a change at step i
only invalidates `LOW` from i on); a new step shifts one tail, no copy; a full buffer is
replaced by one twice its size, so the functions that may add a step return `prof`. Every
function is compiled (`_jit.njit`) and runs as Python without numba;
`tests/unit/replay/test_profile_fit.py` holds them to a plain recomputation.
"""

from __future__ import annotations

import math

import numpy as np

from slurmgpu.replay._jit import inline, njit

INF = math.inf
TIMES, AVAIL, LOW = range(3)
M, VALID = range(2)


@njit
def build(t, free, ends, gpus):
    """The plan at `t` with `free` GPUs free now and `gpus[k]` more from `ends[k]` on (the
    running jobs' expected ends, sorted; an end before t + 1 counts at t + 1): one step per
    distinct time. `(prof, meta)`."""
    n = len(ends)
    prof = np.empty((3, n + 65))
    times, avail = prof[TIMES], prof[AVAIL]
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
    meta = np.zeros(2, np.int64)
    meta[M] = m
    return prof, meta


@inline
def search(prof, m, at, right):
    """The index where `at` goes in the first `m` times (numpy's searchsorted, left or
    right). (Rows are read as `prof[ROW, i]`, never as views: a view costs a reference
    count.)"""
    lo, hi = 0, m
    while lo < hi:
        mid = (lo + hi) >> 1
        if prof[TIMES, mid] < at or (right and prof[TIMES, mid] == at):
            lo = mid + 1
        else:
            hi = mid
    return lo


@inline
def free_for(prof, meta, until):
    """The GPUs free from now until `until` (the least of every step at or before it)."""
    k = search(prof, meta[M], until, True) - 1
    if k < 0:
        return INF
    i = meta[VALID]
    if i <= k:
        least = prof[LOW, i - 1] if i > 0 else INF
        for j in range(i, k + 1):
            if prof[AVAIL, j] < least:
                least = prof[AVAIL, j]
            prof[LOW, j] = least
        meta[VALID] = k + 1
    return prof[LOW, k]


@inline
def free_until(prof, meta, g, until):
    """`g` GPUs free from now until `until` (every step at or before it)."""
    return free_for(prof, meta, until) >= g


@inline
def _changed(meta, i):
    """The steps from i on changed: their least-so-far is to be worked out again."""
    if i < meta[VALID]:
        meta[VALID] = i


@njit
def step(prof, meta, at):
    """Make `at` a step (its GPUs as just before it): `(prof, index)`."""
    m = meta[M]
    k = search(prof, m, at, False)
    if k < m and prof[TIMES, k] == at:
        return prof, k
    if m == prof.shape[1]:  # full: twice the room
        grown = np.empty((3, 2 * m))
        for r in range(3):  # (a loop: numba's slice assignment costs compile time)
            for j in range(m):
                grown[r, j] = prof[r, j]
        prof = grown
    for j in range(m, k, -1):
        prof[TIMES, j] = prof[TIMES, j - 1]
        prof[AVAIL, j] = prof[AVAIL, j - 1]
    prof[TIMES, k] = at
    if k > 0:
        prof[AVAIL, k] = prof[AVAIL, k - 1]
    meta[M] = m + 1
    _changed(meta, k)
    return prof, k


@njit
def hold(prof, meta, i, g, until):
    """Take `g` GPUs from step `i` until `until`: `prof`."""
    prof, k = step(prof, meta, until)
    for j in range(i, k):
        prof[AVAIL, j] -= g
    _changed(meta, i)
    return prof


@njit
def earliest(prof, meta, g, lim, first):
    """The first step from `first` on where `g` GPUs stay free for `lim` (every step up to its
    time + lim); -1 if none. Only the start of a run of steps with `g` free can be it (a later
    step of the run has less of the run left), and it is when the run's end (the first step
    short of `g`; none: the end of the plan) comes after its time + lim."""
    m = meta[M]
    i = first
    while i < m:
        if prof[AVAIL, i] < g:
            i += 1
            continue
        e = i + 1
        while e < m and prof[AVAIL, e] >= g:
            e += 1
        if e == m or prof[TIMES, e] > prof[TIMES, i] + lim:
            return i
        i = e + 1
    return -1


@njit
def reserve(prof, meta, g, lim, horizon, node_gpus, after):
    """Reserve for a job of `g` GPUs and `lim` seconds at the earliest step from `after` on
    where `g` are free that long; nothing when that is past `horizon` (bf_window):
    `(prof, start)` (start INF: none).

    Slurm's backfill plans whole nodes: a pending job's reservation takes the node(s) it
    would start on out of every later job's plan for its window, whatever GPUs of them it
    leaves idle (slurmctld's `_dump_job_sched` shows 1-GPU jobs reserved one after the other
    on an 8-GPU node). In this pooled profile the reservation holds up to `node_gpus` (its
    whole nodes' GPUs) at each step of the window; not before `after` (when particular nodes
    hold the job: `nodes.node_earliest`)."""
    if after > horizon:
        return prof, INF
    first = 0
    if after > prof[TIMES, 0]:
        prof, first = step(prof, meta, after)
    i = earliest(prof, meta, g, lim, first)
    if i < 0 or prof[TIMES, i] > horizon:
        return prof, INF
    start = prof[TIMES, i]
    prof, k = step(prof, meta, start + lim)
    take = node_gpus if node_gpus > g else g
    for j in range(i, k):
        prof[AVAIL, j] -= prof[AVAIL, j] if prof[AVAIL, j] < take else take
    _changed(meta, i)
    return prof, start
