"""Slurm's backfill pass on whole GPUs (compiled): start a lower-priority job now only if it
does not delay the expected start of any higher-priority job tested before it.

Why this shape: a pass walks up to bf_max_job_test jobs in priority order (`queues`), on a
profile of free GPUs over time built from the running jobs' expected ends (`profile`). The
reservations of tested jobs that cannot start (`owed`) are made, in test order, only before a
job that could start is checked: they change nothing else in a pass (the profile is dropped
after it) and the profile only loses GPUs as a pass goes on. So a job no start is possible
for, even on the profile so far, costs no reservation: too big for the free GPUs now, no more
than `failed` allows, or short of GPUs in its window already; and a pass stops once no pending
shape can start. In a partition with slices or shards (where a 1-GPU job may start on a slice
whatever the profile) every reservation is made at once. The pass's own bookkeeping lives in
a few small arrays: per GPU count (`Parts.sizes` index) the shortest limit pending at its
start (`shortest`) and the shortest limit that failed (`failed`: a later job of at least as
many GPUs and limit cannot start either), and `flags` (owed head and tail, reservations made,
whether `failed` changed since `nothing_fits` looked).
"""

from __future__ import annotations

import math

import numpy as np

from slurmgpu.replay import nodes as nd
from slurmgpu.replay import profile as pf
from slurmgpu.replay._jit import inline, njit
from slurmgpu.replay.jobs import WHOLE
from slurmgpu.replay.queues import advance, best_source, start_order
from slurmgpu.replay.runs import has_free, shortest_limit, slice_choice, try_start
from slurmgpu.replay.state import A_NONE, PENDING

INF = math.inf
_OWED_HEAD, _OWED_TAIL, _RESERVED, _NEWS = range(4)


@inline
def fits_some(parts, p, free):
    """Whether some pending whole-GPU job asks for at most `free` GPUs."""
    for s in range(parts.size_hist.shape[1]):
        if parts.size_hist[p, s] > 0 and parts.sizes[s] <= free:
            return True
    return False


@inline
def _fail(parts, p, failed, flags, s, g, lim):
    """A job of `g` GPUs (size index s) and limit `lim` cannot start: nor can any later job
    of at least as many GPUs and as long a limit."""
    seen, sizes = parts.seen, parts.sizes
    for k in range(len(failed)):
        if (seen[p, k] or k == s) and sizes[k] >= g and lim < failed[k]:
            failed[k] = lim
            flags[_NEWS] = 1


@inline
def _nothing_fits(parts, shortest, failed, flags, prof, meta, t):
    """No pending job of any GPU count can start: its count's shortest limit failed, or it
    does not fit the profile so far (nothing later in the pass can start)."""
    flags[_NEWS] = 0
    sizes = parts.sizes
    for s in range(len(shortest)):
        lim = shortest[s]
        if lim == INF or lim >= failed[s]:
            continue
        if pf.free_for(prof, meta, t + lim) >= sizes[s]:
            return False
    return True


@njit
def _pay(cfg, jobs, nodes, parts, p, t, horizon, owed, flags, prof, meta, g, lim):
    """Make the owed reservations of a pass, in test order, up to bf_max_reservations (past
    it, blocked jobs get none). Given a job's `g` GPUs and `lim`, stop as soon as they leave
    it no room (False); the rest stay owed. `(ok, prof)`."""
    per = parts.max_cap[p] if parts.max_cap[p] else 1
    while flags[_OWED_HEAD] < flags[_OWED_TAIL]:
        if flags[_RESERVED] >= cfg.bf_max_res:
            flags[_OWED_HEAD] = flags[_OWED_TAIL]
            break
        b = owed[flags[_OWED_HEAD]]
        flags[_OWED_HEAD] += 1
        bg = jobs.gpus[b]
        after = nd.node_earliest(jobs, nodes, parts, p, bg, t) if bg > 1 else t
        whole = float(-(-int(bg) // per) * per)  # the GPUs of the whole nodes it takes
        prof, start = pf.reserve(prof, meta, bg, jobs.limit[b], horizon, whole, after)
        flags[_RESERVED] += 1
        # a reservation from after the job's window leaves the window as it was
        more = flags[_OWED_HEAD] < flags[_OWED_TAIL]
        if g and more and start <= t + lim and not pf.free_until(prof, meta, g, t + lim):
            return False, prof
    return True, prof


@inline
def _pass_start(parts, p, lazy):
    """Per size index, the shortest limit pending (lazy passes only; INF: none) and the
    smallest GPU count pending, as the pass starts."""
    nsz = parts.size_hist.shape[1]
    shortest = np.full(nsz, INF)
    smallest = INF
    for s in range(nsz):
        if lazy:
            shortest[s] = shortest_limit(parts, p, s)
        if parts.size_hist[p, s] > 0 and parts.sizes[s] < smallest:
            smallest = parts.sizes[s]
    return shortest, smallest


@njit
def backfill(cfg, jobs, nodes, parts, queues, events, p, t):
    """One backfill pass of partition `p` at `t`."""
    if not parts.pool_pending[p] and not fits_some(parts, p, parts.free_whole[p]):
        return  # no pending job is small enough for the free GPUs: nothing can start
    lo, hi = parts.end_lo[p], parts.end_lo[p] + parts.end_n[p]
    prof, meta = pf.build(t, float(parts.free_whole[p]), parts.end_t[lo:hi], parts.end_g[lo:hi])
    lazy = parts.pool_hi[p] == parts.pool_lo[p] and parts.sh_total[p] == 0
    horizon = t + cfg.bf_window
    shortest, smallest = _pass_start(parts, p, lazy)
    failed = np.full(len(shortest), INF)
    owed = np.empty(max(cfg.bf_max_job_test, 0) + 1, np.int64)
    flags = np.zeros(4, np.int64)
    nq = queues.fifo_head.shape[0] // parts.exists.shape[0]
    pos, stop, head, prio, aux = start_order(cfg, jobs, queues, nq, p, t)
    # the jobs' columns, once (each load of a struct's field costs a reference count)
    state, eligible, gpus, kind = jobs.state, jobs.eligible, jobs.gpus, jobs.kind
    limit, size, rank = jobs.limit, jobs.size, jobs.rank
    prev = -1
    for _ in range(cfg.bf_max_job_test):
        if prev >= 0:
            advance(cfg, jobs, queues, aux, pos, stop, head, prio, prev, p * nq, t)
        src = best_source(head, prio, rank)
        if src < 0:
            break
        prev = src
        job = head[src]
        if state[job] != PENDING or eligible[job] > t:
            continue
        g, lim, s = gpus[job], limit[job], size[job]
        if kind[job] != WHOLE or (
            g == 1 and not lazy and slice_choice(cfg, jobs, parts, job, True)[0] != A_NONE
        ):
            # slices and shards: start now if free (no reservation model for pools; a
            # partition without them has no slice for a 1-GPU job either)
            try_start(cfg, jobs, nodes, parts, events, job, t)
            continue
        if lazy:  # hopeless: no start is possible for it at this point
            hopeless = lim >= failed[s]
            if not hopeless and (g > prof[pf.AVAIL, 0] or not nd.can_place(parts, p, int(g))):
                _fail(parts, p, failed, flags, s, g, 0.0)  # not free now, or on no node
                hopeless = True
            if not hopeless and not pf.free_until(prof, meta, g, t + lim):
                _fail(parts, p, failed, flags, s, g, lim)
                hopeless = True
            if hopeless:
                owed[flags[_OWED_TAIL]] = job  # cannot start: its reservation can wait
                flags[_OWED_TAIL] += 1
                if flags[_NEWS] and _nothing_fits(parts, shortest, failed, flags, prof, meta, t):
                    break
                continue
        if g > prof[pf.AVAIL, 0]:
            owed[flags[_OWED_TAIL]] = job
            flags[_OWED_TAIL] += 1
            continue
        ok, prof = _pay(cfg, jobs, nodes, parts, p, t, horizon, owed, flags, prof, meta,
                        g if lazy else 0.0, lim)  # fmt: skip
        if not ok:
            _fail(parts, p, failed, flags, s, g, lim)  # the reservations before it: no room
            owed[flags[_OWED_TAIL]] = job
            flags[_OWED_TAIL] += 1
            continue
        if pf.free_until(prof, meta, g, t + lim) and try_start(
            cfg, jobs, nodes, parts, events, job, t
        ):
            prof = pf.hold(prof, meta, 0, g, t + lim)
        else:
            _fail(parts, p, failed, flags, s, g, lim)
            owed[flags[_OWED_TAIL]] = job
            flags[_OWED_TAIL] += 1
            if not lazy:
                ok, prof = _pay(cfg, jobs, nodes, parts, p, t, horizon, owed, flags, prof,
                                meta, 0.0, 0.0)  # fmt: skip
        if lazy:
            if _nothing_fits(parts, shortest, failed, flags, prof, meta, t):
                break
        elif not (parts.pool_pending[p] and has_free(parts, p)) and (
            prof[pf.AVAIL, 0] <= 0 or pf.free_for(prof, meta, t + parts.min_limit[p]) < smallest
        ):
            break
