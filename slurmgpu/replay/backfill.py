"""Slurm's backfill pass on whole GPUs (compiled): start a lower-priority job now only if it
does not delay the expected start of any higher-priority job tested before it.

Why this shape: a pass walks up to bf_max_job_test jobs in priority order (`queues`), on a
profile of free GPUs over time built from the running jobs' expected ends (`profile`). The
reservations of tested jobs that cannot start (`owed`) are made, in test order, only before a
job that could start is checked: they change nothing else in a pass (the profile is dropped
after it) and the profile only loses GPUs as a pass goes on. So a job no start is possible
for, even on the profile so far, costs no reservation: too big for the free GPUs now, no more
than `failed` allows, or short of GPUs in its window already; and a pass stops once no pending
shape can start. A partition with slices or shards (where a MIG, shard or slice-rule job may
start whatever the profile) pays its owed reservations lazily too, before any start, and checks
as it pays where the pass stops there (`_eager_stop`, after each whole-GPU job it tried, on the
plan with the reservations before it: that stop cuts off later slice starts); until a slice
start is due, nothing needs it (issue 38: making every reservation at once cost ~500 per pass
in a deep queue, a 1M-job carved replay did not finish in 600 s). The pass's own bookkeeping
lives in a few small arrays: per GPU count (`Parts.sizes` index) the shortest limit pending at its
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
from slurmgpu.replay.jobs import SHARD, WHOLE
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


@inline
def _eager_stop(parts, p, prof, meta, t, smallest):
    """Where the pass of a partition with slices or shards stops after a whole-GPU job it
    tried (its reservations made): no MIG/shard job pending with room left, and no whole GPU
    free now or too few for the smallest pending job over the shortest limit."""
    return not (parts.pool_pending[p] and has_free(parts, p)) and (
        prof[pf.AVAIL, 0] <= 0 or pf.free_for(prof, meta, t + parts.min_limit[p]) < smallest
    )


@inline
def _slices_possible(parts, p):
    """Whether a job later in the pass may still start on a MIG instance or shards: some
    pending job may take one (a MIG or shard job, or a 1-GPU job the slice rule may move) and
    some instance or shard is free. (False: only whole-GPU starts are left.)"""
    if not (parts.pool_pending[p] or parts.slice_pending[p]):
        return False
    free = parts.sh_free[p]
    for k in range(parts.pool_lo[p], parts.pool_hi[p]):
        free += parts.pool_free[k]  # (none below 0)
    return free > 0


@njit
def _pay(cfg, jobs, nodes, parts, p, t, horizon, owed, flags, prof, meta, g, lim, pooled,
         smallest):  # fmt: skip
    """Make the owed reservations of a pass, in test order, up to bf_max_reservations (past
    it, blocked jobs get none). Given a job's `g` GPUs and `lim`, stop as soon as they leave
    it no room; the rest stay owed. `(status, prof)`: 1 all made, 0 stopped for `g`, 2 (a
    partition with slices or shards, `pooled`) the pass stops here.

    Why `pooled` checks as it pays: in such a partition the pass stops after a whole-GPU job
    it tried, once `_eager_stop` holds on the plan with every reservation before it made;
    that stop cuts off the slice starts later in the pass. A job it tried is one whose GPUs
    did not exceed those free now when its turn came (free now is what the reservations
    before it left at the plan's first step: a reservation that starts now is one of a job
    that fitted the plan now, so paying in test order gives that count as it was then). So,
    paying in test order, each owed job is checked as it would have been right after its own
    reservation, and nothing that happened in the pass after it (only jobs that could not
    start, which change nothing) alters the check."""
    per = parts.max_cap[p] if parts.max_cap[p] else 1
    while flags[_OWED_HEAD] < flags[_OWED_TAIL]:
        b = owed[flags[_OWED_HEAD]]
        bg = jobs.gpus[b]
        tried = pooled and bg <= prof[pf.AVAIL, 0]
        if flags[_RESERVED] >= cfg.bf_max_res:
            if not pooled:
                flags[_OWED_HEAD] = flags[_OWED_TAIL]
                break
            flags[_OWED_HEAD] += 1  # no reservation: the plan stays as it is
            if tried and _eager_stop(parts, p, prof, meta, t, smallest):
                return 2, prof
            continue
        flags[_OWED_HEAD] += 1
        after = nd.node_earliest(jobs, nodes, parts, p, bg, t) if bg > 1 else t
        whole = float(-(-int(bg) // per) * per)  # the GPUs of the whole nodes it takes
        prof, start = pf.reserve(prof, meta, bg, jobs.limit[b], horizon, whole, after)
        flags[_RESERVED] += 1
        if tried and _eager_stop(parts, p, prof, meta, t, smallest):
            return 2, prof
        # a reservation from after the job's window leaves the window as it was
        more = flags[_OWED_HEAD] < flags[_OWED_TAIL]
        if g and more and start <= t + lim and not pf.free_until(prof, meta, g, t + lim):
            return 0, prof
    return 1, prof


@inline
def _pass_start(parts, p):
    """Per size index, the shortest limit pending (INF: none) and the smallest GPU count
    pending, as the pass starts."""
    nsz = parts.size_hist.shape[1]
    shortest = np.full(nsz, INF)
    smallest = INF
    for s in range(nsz):
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
    pooled = parts.pool_hi[p] != parts.pool_lo[p] or parts.sh_total[p] != 0
    horizon = t + cfg.bf_window
    shortest, smallest = _pass_start(parts, p)
    failed = np.full(len(shortest), INF)
    owed = np.empty(max(cfg.bf_max_job_test, 0) + 1, np.int64)
    flags = np.zeros(4, np.int64)
    nq = queues.fifo_head.shape[0] // parts.exists.shape[0]
    pos, stop, head, prio, aux = start_order(cfg, jobs, queues, nq, p, t)
    # the jobs' columns, once (each load of a struct's field costs a reference count)
    state, eligible, gpus, kind = jobs.state, jobs.eligible, jobs.gpus, jobs.kind
    limit, size, rank, sliceable = jobs.limit, jobs.size, jobs.rank, jobs.sliceable
    fifo, where, qos, qos_term = queues.fifo, jobs.where, jobs.qos, cfg.qos_term
    weight_age, max_age = cfg.weight_age, cfg.max_age
    now = math.floor(t / cfg.period) * cfg.period if cfg.period > 1 else t
    prev = -1
    for _ in range(cfg.bf_max_job_test):
        if prev >= 0 and prev & 1:  # a requeue heap
            advance(cfg, jobs, queues, aux, pos, stop, head, prio, prev, p * nq, t)
        elif prev >= 0:  # a FIFO: `queues.advance` with the columns read once
            nxt = _next_in_fifo(fifo, where, state, pos, stop, head, prev)
            if nxt >= 0:
                prio[prev] = _priority(qos_term, weight_age, max_age, now, eligible, qos, nxt)
        src = best_source(head, prio, rank)
        if src < 0:
            break
        prev = src
        job = head[src]
        if state[job] != PENDING or eligible[job] > t:
            continue
        g, lim, s = gpus[job], limit[job], size[job]
        if kind[job] != WHOLE or (
            g == 1 and sliceable[job] and slice_choice(cfg, jobs, parts, job, True)[0] != A_NONE
        ):
            ok, prof = _start_on_slice(cfg, jobs, nodes, parts, events, p, t, horizon, owed,
                                       flags, prof, meta, pooled, smallest, job, g)  # fmt: skip
            if ok == 2:
                break
            continue
        if _hopeless(parts, p, failed, flags, prof, meta, s, g, lim, t):
            _owe(owed, flags, job)  # cannot start: its reservation can wait
            if (
                flags[_NEWS]
                and _nothing_fits(parts, shortest, failed, flags, prof, meta, t)
                and not (pooled and _slices_possible(parts, p))
            ):
                break
            continue
        ok, prof = _pay(cfg, jobs, nodes, parts, p, t, horizon, owed, flags, prof, meta, g, lim,
                        pooled, smallest)  # fmt: skip
        if ok == 2:
            break
        if ok == 0:
            _fail(parts, p, failed, flags, s, g, lim)  # the reservations before it: no room
            _owe(owed, flags, job)
            continue
        if pf.free_until(prof, meta, g, t + lim) and try_start(
            cfg, jobs, nodes, parts, events, job, t
        ):
            prof = pf.hold(prof, meta, 0, g, t + lim)
            if pooled and _eager_stop(parts, p, prof, meta, t, smallest):
                break
        else:
            _fail(parts, p, failed, flags, s, g, lim)
            _owe(owed, flags, job)
        if _nothing_fits(parts, shortest, failed, flags, prof, meta, t) and not (
            pooled and _slices_possible(parts, p)
        ):
            break


@inline
def _next_in_fifo(fifo, where, state, pos, stop, head, prev):
    """`queues.advance` for FIFO `prev` (its queue `prev >> 1`) over columns read once: the
    next job still pending in that queue, or -1; its position and head updated."""
    q, at, end, nxt = prev >> 1, pos[prev], stop[prev], -1
    while at < end:
        j = fifo[at]
        at += 1
        if where[j] == q and state[j] == PENDING:
            nxt = j
            break
    pos[prev] = at
    head[prev] = nxt
    return nxt


@inline
def _hopeless(parts, p, failed, flags, prof, meta, s, g, lim, t):
    """No start is possible at this point for a job of size class `s` (`g` GPUs, limit `lim`):
    one as long failed before, or it is not free now, fits no node, or is not free for its
    limit (a failure recorded for the later jobs of its class)."""
    if lim >= failed[s]:
        return True
    if g > prof[pf.AVAIL, 0] or not nd.can_place(parts, p, int(g)):
        _fail(parts, p, failed, flags, s, g, 0.0)  # not free now, or on no node
        return True
    if not pf.free_until(prof, meta, g, t + lim):
        _fail(parts, p, failed, flags, s, g, lim)
        return True
    return False


@inline
def _owe(owed, flags, job):
    """`job` cannot start now: its reservation is owed, made when a later start needs it."""
    owed[flags[_OWED_TAIL]] = job
    flags[_OWED_TAIL] += 1


@inline
def _start_on_slice(cfg, jobs, nodes, parts, events, p, t, horizon, owed, flags, prof, meta,
                    pooled, smallest, job, g):  # fmt: skip
    """A slice or shard job: started now if free (no reservation model for pools; a partition
    without them has no slice for a 1-GPU job either), the owed reservations paid first,
    which may show that the pass had stopped before it (2: stop the pass)."""
    if not pooled:
        try_start(cfg, jobs, nodes, parts, events, job, t)
        return 1, prof
    if not _pool_room(parts, jobs, job, g):
        return 1, prof
    ok, prof = _pay(cfg, jobs, nodes, parts, p, t, horizon, owed, flags, prof, meta, 0.0, 0.0,
                    pooled, smallest)  # fmt: skip
    if ok == 2:
        return 2, prof
    try_start(cfg, jobs, nodes, parts, events, job, t)
    return 1, prof


@inline
def _priority(qos_term, weight_age, max_age, now, eligible, qos, job):
    """`queues.priority` from columns read once per pass (`now`: t in PriorityCalcPeriod
    steps), the same arithmetic."""
    age = now - eligible[job]
    if age < 0.0:
        age = 0.0
    age = age / max_age
    if age > 1.0:
        age = 1.0
    return math.floor(qos_term[qos[job]] + weight_age * age)


@inline
def _pool_room(parts, jobs, job, g):
    """Whether `try_start` would start this MIG, shard or slice-rule job now."""
    k = jobs.kind[job]
    if k == WHOLE:
        return True  # the slice rule found a free instance or shards for it
    if k == SHARD:
        return parts.sh_free[jobs.part[job]] >= g
    pool = jobs.pool[job]
    return pool >= 0 and parts.pool_free[pool] >= g
