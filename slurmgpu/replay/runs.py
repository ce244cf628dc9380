"""Starting and ending runs: placement of a job, its end, kill, requeue and cancel (compiled).

Why this shape: the main pass, backfill and preemption all start and stop jobs the same way,
so these functions are the one place that changes a job's allocation, the partition's counts
and the run log (`Events.runs_f` start/end/GPU-equivalents, `runs_i` job/partition/
preempted: columns of two arrays that double when full), and pushes the job's next event.
"""

from __future__ import annotations

import math

import numpy as np

from slurmgpu.replay import nodes as nd
from slurmgpu.replay._jit import inline, njit
from slurmgpu.replay.jobs import MIG, SHARD, WHOLE
from slurmgpu.replay.queues import push_event
from slurmgpu.replay.state import (
    A_MIG,
    A_NODES,
    A_NONE,
    A_SHARDS,
    C_DIRTY_ANY,
    C_REASON_SEQ,
    C_RUNS,
    CANCELLED,
    DONE,
    E_ELIGIBLE,
    E_END,
    GRACE,
    M_CANCEL,
    NO_QUEUE,
    PENDING,
    R_CANCELLED,
    R_PREEMPT_CANCEL,
    RUNNING,
)

INF = math.inf


@inline
def count_reason(events, reason):
    """One more job that did not run for `reason` (the reasons keep their first-seen order)."""
    if events.reason_seq[reason] < 0:
        events.reason_seq[reason] = events.count[C_REASON_SEQ]
        events.count[C_REASON_SEQ] += 1
    events.reasons[reason] += 1


@inline
def flag(parts, events, p):
    """Something changed in partition p: its main pass is due, and a backfill pass may help."""
    parts.dirty[p] = True
    parts.changed[p] = True
    events.count[C_DIRTY_ANY] = 1


@inline
def queued(jobs, parts, job, delta):
    """A job enters (+1) or leaves (-1) its partition's pending counts."""
    p = jobs.part[job]
    parts.pending[p] += delta
    if jobs.kind[job] != WHOLE:
        parts.pool_pending[p] += delta
        return
    if jobs.sliceable[job]:
        parts.slice_pending[p] += delta
    s = jobs.size[job]
    parts.size_hist[p, s] += delta
    parts.seen[p, s] = True
    k = jobs.lim[job]
    old = parts.lim_count[k]
    parts.lim_count[k] = old + delta
    b = p * parts.size_hist.shape[1] + s
    if old <= 0 < old + delta and k < parts.lim_min[b]:
        parts.lim_min[b] = k


@inline
def shortest_limit(parts, p, s):
    """The shortest time limit of a pending whole-GPU job of size index s (INF: none)."""
    b = p * parts.size_hist.shape[1] + s
    k, hi = parts.lim_min[b], parts.lim_lo[b + 1]
    while k < hi and parts.lim_count[k] <= 0:
        k += 1
    parts.lim_min[b] = k
    return parts.lim_vals[k] if k < hi else INF


@inline
def has_free(parts, p):
    if parts.free_whole[p] > 0 or parts.sh_free[p] > 0:
        return True
    return parts.pool_free[parts.pool_lo[p] : parts.pool_hi[p]].sum() > 0  # (none < 0)


@njit
def slice_choice(cfg, jobs, parts, job, any_free):
    """Where a 1-GPU job whose measured memory fits a slice may run instead: the MIG profile
    with the least memory that holds need * (1 + headroom), else shards. (A_MIG, pool, 1),
    (A_SHARDS, -1, count), or (A_NONE, -1, 0)."""
    need = jobs.need[job]
    if need != need or need <= 0:  # NaN: not measured
        return A_NONE, -1, 0
    p = jobs.part[job]
    want = need * (1.0 + cfg.headroom)
    best = -1
    for k in range(parts.pool_lo[p], parts.pool_hi[p]):
        mem = parts.pool_mem[k]
        room = parts.pool_free[k] >= 1 if any_free else parts.pool_total[k] >= 1
        if mem >= want and room and (best < 0 or mem < parts.pool_mem[best]):
            best = k
    if best >= 0:
        return A_MIG, best, 1
    per = parts.sh_per[p]
    mem = parts.gpu_mem[p]
    if per and mem == mem:
        count = math.ceil(want / (mem / per))
        free = parts.sh_free[p] if any_free else parts.sh_total[p]
        if count < per and free >= count:
            return A_SHARDS, -1, count
    return A_NONE, -1, 0


@njit
def try_start(cfg, jobs, nodes, parts, events, job, t):
    """Start `job` now if its partition holds it; whether it started."""
    p = jobs.part[job]
    kind, g = jobs.kind[job], jobs.gpus[job]
    akind, pool, count = A_NONE, -1, 0
    if kind == WHOLE:
        if g == 1:
            akind, pool, count = slice_choice(cfg, jobs, parts, job, True)
        if akind != A_NONE:
            jobs.on_slice[job] = True
        else:
            base = jobs.noff[job]
            count = nd.place(nodes, parts, p, int(g), jobs.anodes[base : jobs.noff[job + 1]])
            if count == 0:
                return False
            akind = A_NODES
    elif kind == MIG:
        pool = jobs.pool[job]
        if pool < 0 or parts.pool_free[pool] < g:
            return False
        akind, count = A_MIG, int(g)
    elif kind == SHARD:
        if parts.sh_free[p] < g:
            return False
        akind, count = A_SHARDS, int(g)
    else:
        return False
    jobs.akind[job] = akind
    jobs.apool[job] = pool
    jobs.acount[job] = count
    if akind == A_NODES:
        nd.take(jobs, nodes, parts, job, count)
    elif akind == A_MIG:
        parts.pool_free[pool] -= count
    else:
        parts.sh_free[p] -= count
    jobs.state[job] = RUNNING
    if jobs.start[job] == INF:
        jobs.start[job] = t
    jobs.run_start[job] = t
    queued(jobs, parts, job, -1)
    nd.add_running(jobs, parts, p, job)
    if akind == A_NODES:
        jobs.expected_end[job] = t + jobs.limit[job]
        nd.add_end(parts, p, t + jobs.limit[job], job, float(int(g)))
    done = t + jobs.duration[job] + cfg.release_delay
    push_event(events, done, E_END, job, jobs.run_id[job])
    return True


@njit
def _log_run(events, job, start, end, equiv, p, preempted):
    n = events.count[C_RUNS]
    if n == events.runs_f.shape[1]:  # full: twice the room (the struct takes the new arrays)
        grown_f = np.empty((3, 2 * n))
        grown_i = np.empty((3, 2 * n), np.int64)
        for r in range(3):
            for k in range(n):
                grown_f[r, k] = events.runs_f[r, k]
                grown_i[r, k] = events.runs_i[r, k]
        events.runs_f = grown_f
        events.runs_i = grown_i
    f, i = events.runs_f, events.runs_i
    f[0, n], f[1, n], f[2, n] = start, end, equiv
    i[0, n], i[1, n], i[2, n] = job, p, 1 if preempted else 0
    events.count[C_RUNS] = n + 1


@njit
def stop(jobs, nodes, parts, events, job, t, preempted):
    """A run ends at `t`: its GPUs return, the run is logged, its preemptor waits one less."""
    p = jobs.part[job]
    akind = jobs.akind[job]
    count = jobs.acount[job]
    if akind == A_NODES:
        nd.give(jobs, nodes, parts, job)
        equiv = float(int(jobs.gpus[job]))
    elif akind == A_MIG:
        parts.pool_free[jobs.apool[job]] += count
        equiv = count * parts.pool_share[jobs.apool[job]]
    else:
        parts.sh_free[p] += count
        equiv = count / parts.sh_per[p]
    nd.drop_running(jobs, parts, p, job)
    if akind == A_NODES:
        nd.drop_end(parts, p, jobs.expected_end[job], job)
    _log_run(events, job, jobs.run_start[job], t, equiv, p, preempted)
    jobs.akind[job] = A_NONE
    flag(parts, events, p)
    boss = jobs.victim_of[job]
    if boss >= 0:
        jobs.awaiting[boss] -= 1
        jobs.victim_of[job] = -1


@njit
def requeue(cfg, jobs, events, job, t):
    """A preempted job back in the queue (PreemptMode=REQUEUE): pending, but eligible only
    `requeue_delay_s` later (slurmctld's BeginTime: AuthInfo cred_expire + 1 s, seen on
    22.05), when its eligibility event puts it in its QOS's requeue heap. Its submit time
    becomes the requeue's second (`Jobs.rank`; job_mgr.c `_job_requeue_op` sets `submit_time
    = now`), so among equal priorities it queues behind the jobs submitted before it was
    preempted (seen in all five multi-node recordings). Until then its old FIFO entry is
    stale (`where` names no queue): no pass may start it early."""
    jobs.state[job] = PENDING
    jobs.eligible[job] = t + cfg.requeue_delay
    jobs.rank[job] = math.floor(t)
    jobs.where[job] = NO_QUEUE
    jobs.run_id[job] += 1
    push_event(events, jobs.eligible[job], E_ELIGIBLE, job, jobs.run_id[job])


@njit
def kill(cfg, jobs, nodes, parts, events, job, t):
    """A preempted job's run ends: cancelled or requeued, as its QOS's PreemptMode says."""
    stop(jobs, nodes, parts, events, job, t, True)
    if cfg.mode[jobs.qos[job]] == M_CANCEL:
        jobs.state[job] = CANCELLED
        jobs.end[job] = t
        count_reason(events, R_PREEMPT_CANCEL)
    else:
        requeue(cfg, jobs, events, job, t)


@njit
def cancel(jobs, nodes, parts, events, job, t):
    """The recorded scancel of a job that never started: still pending here, it leaves the
    queue; started (the replay was quicker than the record), it is ended now."""
    st = jobs.state[job]
    if st == PENDING:
        p = jobs.part[job]
        # a requeued job waiting for its BeginTime is not in the queue's counts yet
        if not (jobs.run_id[job] > 0 and jobs.eligible[job] > t):
            queued(jobs, parts, job, -1)
        jobs.state[job] = CANCELLED
        jobs.end[job] = t
        jobs.run_id[job] += 1  # a pending eligibility event is stale now
        flag(parts, events, p)
        count_reason(events, R_CANCELLED)
    elif st in (RUNNING, GRACE):
        stop(jobs, nodes, parts, events, job, t, False)
        jobs.state[job] = DONE
        jobs.end[job] = t
        jobs.run_id[job] += 1  # its end event is stale now
