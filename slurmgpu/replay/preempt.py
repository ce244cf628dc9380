"""QOS preemption (Slurm's preempt/qos): which running jobs make room, and signalling them.

Why this shape: preemption is tried only for a partition's blocked top job in the main pass,
so it may look at every running job of the partition, but not at every node once per victim:
the victims are taken out one at a time in Slurm's order, and since no node held the job
before the first, only the nodes of the victims taken so far can hold it after (checked
node by node; all nodes once, when one does, for the best fit).
"""

from __future__ import annotations

import numpy as np

from slurmgpu.replay import nodes as nd
from slurmgpu.replay._jit import inline, njit
from slurmgpu.replay.jobs import MIG, WHOLE
from slurmgpu.replay.queues import push_event
from slurmgpu.replay.runs import kill
from slurmgpu.replay.state import (
    A_MIG,
    A_NODES,
    A_SHARDS,
    C_PREEMPTIONS,
    E_KILL,
    GRACE,
    M_OFF,
    RUNNING,
)


@inline
def may_preempt(cfg, jobs, job):
    """The job's QOS may preempt some QOS."""
    return cfg.preempts[jobs.qos[job]].any()


@inline
def _preemptable(cfg, jobs, job, victim):
    qv = jobs.qos[victim]
    return (
        jobs.state[victim] == RUNNING and cfg.preempts[jobs.qos[job], qv] and cfg.mode[qv] != M_OFF
    )


@njit
def _lexsorted(jobs_, first, second):
    """`jobs_` ordered by (first, second, job id): a merge sort (int, float, int keys)."""
    n = len(jobs_)
    a = np.empty(n, np.int64)  # positions into jobs_/first/second
    b = np.empty(n, np.int64)
    for i in range(n):
        a[i] = i
    width = 1
    while width < n:
        for lo in range(0, n, 2 * width):
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            i, j, k = lo, mid, lo
            while i < mid and j < hi:
                x, y = a[i], a[j]
                later = first[x] > first[y] or (
                    first[x] == first[y]
                    and (second[x] > second[y] or (second[x] == second[y] and jobs_[x] > jobs_[y]))
                )
                if later:
                    b[k] = y
                    j += 1
                else:
                    b[k] = x
                    i += 1
                k += 1
            while i < mid:
                b[k] = a[i]
                i += 1
                k += 1
            while j < hi:
                b[k] = a[j]
                j += 1
                k += 1
        a, b = b, a
        width *= 2
    out = np.empty(n, np.int64)
    for i in range(n):
        out[i] = jobs_[a[i]]
    return out


@njit
def _candidates(cfg, jobs, parts, job, tag, pool):
    """The running jobs of `job`'s partition held as `tag` (A_NODES, A_MIG or A_SHARDS; of
    MIG pool `pool` unless it is -1) that `job` may preempt, in the order they are taken:
    lowest QOS priority first, then the fewest nodes for whole-node jobs (A_NODES) or the
    youngest for slices, then the lowest job id."""
    p = jobs.part[job]
    r0 = parts.run_lo[p]
    cands = np.empty(parts.run_n[p], np.int64)
    first = np.empty(parts.run_n[p], np.int64)
    second = np.empty(parts.run_n[p])
    k = 0
    for i in range(parts.run_n[p]):
        v = parts.run_jobs[r0 + i]
        mine = pool < 0 or jobs.apool[v] == pool
        if jobs.akind[v] == tag and mine and _preemptable(cfg, jobs, job, v):
            cands[k] = v
            first[k] = cfg.qos_priority[jobs.qos[v]]
            # the nodes it holds, or the youngest first
            second[k] = jobs.acount[v] if tag == A_NODES else -jobs.run_start[v]
            k += 1
    return _lexsorted(cands[:k], first[:k], second[:k])


@njit
def whole_victims(cfg, jobs, nodes, parts, job, g):
    """The running jobs a whole-GPU `job` preempts, chosen as slurmctld 22.05 does (seen on
    the multi-node test cluster, docs/replay.md "Fidelity"): the preemptable jobs in order,
    lowest QOS priority first, then the fewest nodes, then the **oldest** (lowest job id),
    are taken out one at a time until `job` fits (one node with `g` GPUs free, or enough
    whole idle nodes for a multi-node job); the victims are those taken out that ran on the
    nodes it gets. Empty when even all of them would not make room.

    The order is slurmctld's (preempt.c `slurm_find_preemptable_jobs` sorts the candidates
    by `_sort_by_prio`: preempt/qos's `_gen_job_prio` is the QOS priority << 16 plus the
    job's node count, ascending; equal ones keep the job list's order, job ids); cons_tres
    then drops candidates in that order until the job fits and keeps those on the nodes it
    picked."""
    p = jobs.part[job]
    per = parts.max_cap[p]
    lo, hi = parts.node_lo[p], parts.node_hi[p]
    cands = _candidates(cfg, jobs, parts, job, A_NODES, -1)
    free = nodes.free[lo:hi].copy()
    need = -(-g // per) if g > per > 0 else 1
    idle = 0
    if g > per:
        for n in range(hi - lo):
            if nodes.cap[lo + n] == per and free[n] == per:
                idle += 1
    chosen = np.zeros(hi - lo, np.bool_)
    for taken in range(len(cands)):
        v = cands[taken]
        base, count = jobs.noff[v], jobs.acount[v]
        found = False
        for i in range(count):
            n = jobs.anodes[base + i] - lo
            was_idle = nodes.cap[lo + n] == per and free[n] == per
            free[n] += nd.node_gpus(int(jobs.gpus[v]), per, i, count)
            if g <= per:
                found = found or (nodes.cap[lo + n] >= g and free[n] >= g)
            elif not was_idle and nodes.cap[lo + n] == per and free[n] == per:
                idle += 1
        if g <= per and found:
            best = -1
            for n in range(hi - lo):
                fits = nodes.cap[lo + n] >= g and free[n] >= g
                if fits and (best < 0 or free[n] < free[best]):
                    best = n
            chosen[best] = True
        elif g > per and idle >= need:
            got = 0  # the nodes idle already first (no victim needed there), then the freed
            for first in (True, False):
                for n in range(hi - lo):
                    idle_now = nodes.cap[lo + n] == per and free[n] == per
                    if got < need and idle_now and (nodes.free[lo + n] == per) == first:
                        chosen[n] = True
                        got += 1
        else:
            continue
        out = np.empty(taken + 1, np.int64)
        m = 0
        for w in cands[: taken + 1]:
            for i in range(jobs.acount[w]):
                if chosen[jobs.anodes[jobs.noff[w] + i] - lo]:
                    out[m] = w
                    m += 1
                    break
        return out[:m]
    return np.empty(0, np.int64)


@njit
def pool_victims(cfg, jobs, parts, job, g):
    """The MIG or shard jobs a slice `job` preempts: lowest QOS first, youngest first (then
    the lowest job id). Empty when even all of them would not make room."""
    p = jobs.part[job]
    kind = jobs.kind[job]
    tag = A_MIG if kind == MIG else A_SHARDS
    pool = jobs.pool[job]
    free = parts.pool_free[pool] if kind == MIG else parts.sh_free[p]
    cands = _candidates(cfg, jobs, parts, job, tag, pool if kind == MIG else -1)
    m = 0
    for v in cands:
        if free >= g:
            break
        m += 1
        free += jobs.acount[v]
    return cands[:m] if free >= g else np.empty(0, np.int64)


@njit
def preempt_for(cfg, jobs, nodes, parts, events, job, t):
    """Slurm's preempt/qos: signal lower-QOS jobs that free room for `job`. Victims with no
    GraceTime are killed at once (True when all were: `job` may start in this pass, as
    slurmctld starts the preemptor in the preemption's second); the others keep their GPUs
    until their grace ends."""
    g = int(jobs.gpus[job])
    if jobs.kind[job] == WHOLE:
        victims = whole_victims(cfg, jobs, nodes, parts, job, g)
    else:
        victims = pool_victims(cfg, jobs, parts, job, g)
    if len(victims) == 0:
        return False
    now = True
    for v in victims:
        jobs.state[v] = GRACE
        jobs.victim_of[v] = job
        jobs.awaiting[job] += 1
        events.count[C_PREEMPTIONS] += 1
        grace = cfg.grace[jobs.qos[v]]
        if grace <= 0:
            kill(cfg, jobs, nodes, parts, events, v, t)
            continue
        now = False
        push_event(events, t + grace, E_KILL, v, jobs.run_id[v])
        if jobs.akind[v] == A_NODES:  # backfill now expects it to end at the kill
            p = jobs.part[v]
            gv = nd.drop_end(parts, p, jobs.expected_end[v], v)
            jobs.expected_end[v] = t + grace
            nd.add_end(parts, p, t + grace, v, gv)
            for i in range(jobs.acount[v]):
                nd.touch(nodes, parts, jobs.anodes[jobs.noff[v] + i])
    return now
