"""Pending jobs in priority order, and the heaps (compiled, `_jit.njit`).

Why this shape: with multifactor priority = QOS weight + age weight, the jobs of one QOS that
were never requeued are in priority order already in submit order, so each (partition, QOS)
keeps a FIFO (a fixed slice of job ids, a head and a tail) plus a heap of requeued jobs
(by requeue second, then job), and a partition's priority order (priority, then submit
second, then job id) is a merge of a few heads, never a sort. Entries go stale instead of
being removed (a backfilled job stays in its FIFO until the head passes it; a requeued job's
old entry is skipped by `Jobs.where`). The heaps are binary heaps in arrays that double when
full: the event heap of (time, int) pairs whose int packs (kind, job, run), so that it
orders events as the tuple (time, kind, job, run) would; the requeue heaps as rows of three
2-D arrays (requeue second, job, eligibility).
"""

from __future__ import annotations

import math

import numpy as np

from slurmgpu.replay._jit import inline, njit
from slurmgpu.replay.state import C_HEAP, PENDING

INF = math.inf
_JOB_BITS, _RUN_BITS = 32, 26


# --- heaps of (time, key) pairs in two arrays ---------------------------------------------
@inline
def _less(ta, ka, tb, kb):
    return ta < tb or (ta == tb and ka < kb)


@inline
def sift_up(ht, hk, n, time, key):
    """Put (time, key) into the heap `ht[:n], hk[:n]` (room for one more)."""
    i = n
    while i > 0:
        up = (i - 1) >> 1
        if not _less(time, key, ht[up], hk[up]):
            break
        ht[i] = ht[up]
        hk[i] = hk[up]
        i = up
    ht[i] = time
    hk[i] = key


@inline
def sift_down(ht, hk, n):
    """Drop the least entry of the heap `ht[:n], hk[:n]` (read it first: `ht[0], hk[0]`)."""
    n -= 1
    if n == 0:
        return
    time, key = ht[n], hk[n]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and _less(ht[c + 1], hk[c + 1], ht[c], hk[c]):
            c += 1
        if not _less(ht[c], hk[c], time, key):
            break
        ht[i] = ht[c]
        hk[i] = hk[c]
        i = c
    ht[i] = time
    hk[i] = key


@njit
def push_event(events, time, kind, job, run):
    """Push an event; the heap's arrays double when full (the struct takes the new ones)."""
    n = events.count[C_HEAP]
    if n == len(events.heap_t):
        grown_t = np.empty(2 * n)
        grown_k = np.empty(2 * n, np.int64)
        for i in range(n):
            grown_t[i] = events.heap_t[i]
            grown_k[i] = events.heap_k[i]
        events.heap_t = grown_t
        events.heap_k = grown_k
    sift_up(events.heap_t, events.heap_k, n, time, event_key(kind, job, run))
    events.count[C_HEAP] = n + 1


@njit
def pop_event(events):
    """The earliest event (time, kind, job, run), taken off the heap."""
    time = events.heap_t[0]
    kind, job, run = event_parts(events.heap_k[0])
    sift_down(events.heap_t, events.heap_k, events.count[C_HEAP])
    events.count[C_HEAP] -= 1
    return time, kind, job, run


@inline
def _before_requeued(ra, ja, ea, rb, jb, eb):
    """(rank, job, eligible) a before b."""
    return ra < rb or (ra == rb and (ja < jb or (ja == jb and ea < eb)))


@njit
def push_requeued(queues, b, rank, job, elig):
    """Push (requeue second, job, eligible) on requeue heap `b`; every heap's row doubles
    when one is full."""
    n = queues.rq_n[b]
    if n == queues.rq_r.shape[1]:
        rows = queues.rq_r.shape[0]
        grown_r = np.empty((rows, 2 * n), np.int64)
        grown_j = np.empty((rows, 2 * n), np.int64)
        grown_e = np.empty((rows, 2 * n))
        for r in range(rows):
            for i in range(queues.rq_n[r]):
                grown_r[r, i] = queues.rq_r[r, i]
                grown_j[r, i] = queues.rq_j[r, i]
                grown_e[r, i] = queues.rq_e[r, i]
        queues.rq_r = grown_r
        queues.rq_j = grown_j
        queues.rq_e = grown_e
    hr, hj, he = queues.rq_r, queues.rq_j, queues.rq_e
    i = n
    while i > 0:
        up = (i - 1) >> 1
        if not _before_requeued(rank, job, elig, hr[b, up], hj[b, up], he[b, up]):
            break
        hr[b, i], hj[b, i], he[b, i] = hr[b, up], hj[b, up], he[b, up]
        i = up
    hr[b, i], hj[b, i], he[b, i] = rank, job, elig
    queues.rq_n[b] = n + 1


@njit
def _pop_requeued(queues, b):
    hr, hj, he = queues.rq_r, queues.rq_j, queues.rq_e
    n = queues.rq_n[b] - 1
    queues.rq_n[b] = n
    if n == 0:
        return
    rank, job, elig = hr[b, n], hj[b, n], he[b, n]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and _before_requeued(hr[b, c + 1], hj[b, c + 1], he[b, c + 1],
                                          hr[b, c], hj[b, c], he[b, c]):  # fmt: skip
            c += 1
        if not _before_requeued(hr[b, c], hj[b, c], he[b, c], rank, job, elig):
            break
        hr[b, i], hj[b, i], he[b, i] = hr[b, c], hj[b, c], he[b, c]
        i = c
    hr[b, i], hj[b, i], he[b, i] = rank, job, elig


@inline
def event_key(kind, job, run):
    """(kind, job, run) as one int that sorts as the tuple does."""
    return (kind << (_JOB_BITS + _RUN_BITS)) | (job << _RUN_BITS) | run


@inline
def event_parts(key):
    run = key & ((1 << _RUN_BITS) - 1)
    job = (key >> _RUN_BITS) & ((1 << _JOB_BITS) - 1)
    return key >> (_JOB_BITS + _RUN_BITS), job, run


# --- priority ------------------------------------------------------------------------------
@inline
def priority(cfg, jobs, job, t):
    """Slurm's multifactor priority (QOS + age, age in PriorityCalcPeriod steps), an integer
    as Slurm keeps it: equal ones fall back to job id (submit order)."""
    period = cfg.period
    now = math.floor(t / period) * period if period > 1 else t
    age = now - jobs.eligible[job]
    if age < 0.0:
        age = 0.0
    age = age / cfg.max_age
    if age > 1.0:
        age = 1.0
    return math.floor(cfg.qos_term[jobs.qos[job]] + cfg.weight_age * age)


@inline
def before(prio_a, rank_a, job_a, prio_b, rank_b, job_b):
    """Job a comes before job b: higher priority, then the earlier submit second (`rank`: a
    requeued job's is its requeue, as slurmctld's `sort_job_queue2` orders them), then the
    lower job id."""
    return prio_a > prio_b or (
        prio_a == prio_b and (rank_a < rank_b or (rank_a == rank_b and job_a < job_b))
    )


# --- the sources of one partition: FIFO of QOS q (src = q), requeue heap (src = -1 - q) ----
@inline
def _live_requeued(jobs, t_elig, job, q):
    return jobs.state[job] == PENDING and jobs.where[job] == -1 - q and jobs.eligible[job] == t_elig


@njit
def source_head(jobs, queues, nq, p, src):
    """The live head of one FIFO or requeue heap, dropping stale entries; -1 if none."""
    if src >= 0:
        b = p * nq + src
        head, tail = queues.fifo_head[b], queues.fifo_tail[b]
        fifo, state, where = queues.fifo, jobs.state, jobs.where  # (a struct field per load)
        while head < tail:
            j = fifo[head]
            if state[j] == PENDING and where[j] == src:
                break
            head += 1
        queues.fifo_head[b] = head
        return fifo[head] if head < tail else -1
    q = -1 - src
    b = p * nq + q
    while queues.rq_n[b] > 0:
        elig, job = queues.rq_e[b, 0], queues.rq_j[b, 0]
        if _live_requeued(jobs, elig, job, q):
            return job
        _pop_requeued(queues, b)
    return -1


@inline
def pop_source(queues, nq, p, src):
    """Take the head of a source (it just started)."""
    if src >= 0:
        queues.fifo_head[p * nq + src] += 1
    else:
        _pop_requeued(queues, p * nq - 1 - src)


# --- up to `limit` pending jobs in priority order, without removing them (backfill) -------
@inline
def _entry_before(queues, b, i, k):
    """Entry i of requeue heap b comes before entry k (rank, job, eligible)."""
    return _before_requeued(queues.rq_r[b, i], queues.rq_j[b, i], queues.rq_e[b, i],
                            queues.rq_r[b, k], queues.rq_j[b, k], queues.rq_e[b, k])  # fmt: skip


@njit
def _aux_push(queues, b, aux, lo, n, idx):
    """Push entry index `idx` of requeue heap b on the walk's own heap `aux[lo:lo + n]`."""
    i = n
    while i > 0:
        up = (i - 1) >> 1
        if not _entry_before(queues, b, idx, aux[lo + up]):
            break
        aux[lo + i] = aux[lo + up]
        i = up
    aux[lo + i] = idx
    return n + 1


@njit
def _aux_pop(queues, b, aux, lo, n):
    """Drop the least of `aux[lo:lo + n]`."""
    n -= 1
    last = aux[lo + n]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and _entry_before(queues, b, aux[lo + c + 1], aux[lo + c]):
            c += 1
        if not _entry_before(queues, b, aux[lo + c], last):
            break
        aux[lo + i] = aux[lo + c]
        i = c
    if n > 0:
        aux[lo + i] = last
    return n


@njit
def start_order(cfg, jobs, queues, nq, p, t):
    """The cursors of a priority-order walk of partition `p` at `t`: per source, position
    and end (a FIFO: its slice; requeued jobs: where its walk heap starts in `aux` and its
    size) and head (job, priority).

    The requeued jobs of a QOS are walked in the order of their heap's entries without
    sorting them: the walk keeps its own small heap of the entries next in order (the root
    first, then each taken entry's two children), so a pass that looks at k of them costs
    O(k log k), whatever the heap holds (a deep queue's requeued jobs can be thousands)."""
    ns = 2 * nq
    pos = np.zeros(ns, np.int64)
    stop = np.zeros(ns, np.int64)
    head = np.full(ns, -1, np.int64)
    prio = np.zeros(ns, np.int64)
    total = 0
    for q in range(nq):
        total += queues.rq_n[p * nq + q]
    aux = np.empty(total, np.int64)
    lo = 0
    for q in range(nq):
        b = p * nq + q
        pos[2 * q] = queues.fifo_head[b]
        stop[2 * q] = queues.fifo_tail[b]
        pos[2 * q + 1] = lo
        if queues.rq_n[b] > 0:
            aux[lo] = 0  # the heap's root
            stop[2 * q + 1] = 1
        lo += queues.rq_n[b]
    for s in range(ns):
        advance(cfg, jobs, queues, aux, pos, stop, head, prio, s, p * nq, t)
    return pos, stop, head, prio, aux


@inline
def advance(cfg, jobs, queues, aux, pos, stop, head, prio, s, base, t):
    """Move source `s` to its next pending job (FIFO: whose live entry it holds; requeued:
    a live entry). `base`: the partition's first queue index (partition x QOS count)."""
    q = s >> 1
    head[s] = -1
    state = jobs.state  # (each load of a struct's field costs a reference count)
    if s & 1:
        b = base + q
        n, lo, size = stop[s], pos[s], queues.rq_n[b]
        while n > 0:
            i = aux[lo]
            n = _aux_pop(queues, b, aux, lo, n)
            for c in (2 * i + 1, 2 * i + 2):
                if c < size:
                    n = _aux_push(queues, b, aux, lo, n, c)
            job = queues.rq_j[b, i]
            if _live_requeued(jobs, queues.rq_e[b, i], job, q):
                head[s] = job
                break
        stop[s] = n
    else:
        at, end = pos[s], stop[s]
        fifo, where = queues.fifo, jobs.where
        while at < end:
            j = fifo[at]
            at += 1
            if where[j] == q and state[j] == PENDING:
                head[s] = j
                break
        pos[s] = at
    if head[s] >= 0:
        prio[s] = priority(cfg, jobs, head[s], t)


@inline
def best_source(head, prio, rank):
    """The source whose head comes first (`rank`: the jobs' submit seconds); -1 when all
    are empty."""
    best = -1
    for s in range(len(head)):
        if head[s] < 0:
            continue
        if best < 0 or before(prio[s], rank[head[s]], head[s], prio[best], rank[head[best]],
                              head[best]):  # fmt: skip
            best = s
    return best
