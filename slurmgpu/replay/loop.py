"""The discrete-event loop: submits, events, the main scheduler's tick and backfill's passes.

Why this shape (compiled, `_jit.njit`; the entry point `run` is cached on disk):
- Submits are already sorted; only job ends, grace-time kills, requeue eligibility, recorded
  cancels and delayed submits go through the event heap, so it holds the running jobs, not
  the whole trace.
- As in slurmctld, a submit or a requeue only flags the partition: the main pass runs on
  the next tick of the scheduler (`sched_tick_s`), backfill every `bf_interval_s`, each at
  its own phase in the second; a job's end or kill runs the main pass at once
  (`sched_on_end`: slurmctld's epilog-complete RPC calls schedule()). When the main pass
  runs is decided in one place, `_main_due`.
- The main pass takes a partition's pending jobs in priority order (a merge of the heads of
  its FIFOs and requeue heaps) until the first that cannot start, after trying preemption
  for it (Slurm's "partition blocked" rule).
- `run` stops after `steps` loop turns when asked (the tests look at the state between
  turns) and resumes where it stopped: every loop variable lives in `Events`.
"""

from __future__ import annotations

import math

import numpy as np

from slurmgpu.replay import nodes as nd
from slurmgpu.replay._jit import as_struct, cached, inline, njit
from slurmgpu.replay.backfill import backfill
from slurmgpu.replay.jobs import MIG, WHOLE
from slurmgpu.replay.preempt import may_preempt, preempt_for
from slurmgpu.replay.queues import (
    best_source,
    pop_event,
    pop_source,
    priority,
    push_event,
    push_requeued,
    source_head,
)
from slurmgpu.replay.runs import (
    A_NONE,
    cancel,
    count_reason,
    flag,
    has_free,
    kill,
    queued,
    slice_choice,
    stop,
    try_start,
)
from slurmgpu.replay.state import (
    C_DIRTY_ANY,
    C_END_PASS,
    C_HEAP,
    C_NEXT,
    C_PASSES,
    DONE,
    E_CANCEL,
    E_ELIGIBLE,
    E_END,
    E_KICK,
    GRACE,
    PENDING,
    R_NO_PARTITION,
    R_NO_PROFILE,
    R_NO_SHARDS,
    R_TOO_BIG,
    RUNNING,
    T_NEXT_BF,
    T_NEXT_MAIN,
    T_NOW,
    UNRUNNABLE,
    Config,
    Events,
    Jobs,
    Nodes,
    Parts,
    Queues,
)

INF = math.inf


@inline
def next_tick(t, period, phase):
    """The first time phase + k * period strictly after t (robust to float rounding)."""
    nxt = (math.floor((t - phase) / period) + 1) * period + phase
    while nxt <= t:
        nxt += period
    return nxt


@njit
def _never_fits(cfg, jobs, parts, job):
    """Why the job can never run in its partition (a reason index), or -1."""
    p = jobs.part[job]
    kind, g = jobs.kind[job], jobs.gpus[job]
    if kind == WHOLE:
        per = parts.max_cap[p]
        if g <= per or (per and parts.full_n[p] * per >= g):
            return -1
        if g == 1 and slice_choice(cfg, jobs, parts, job, False)[0] != A_NONE:
            return -1
        return R_TOO_BIG
    if kind == MIG:
        pool = jobs.pool[job]
        return -1 if pool >= 0 and parts.pool_total[pool] >= g else R_NO_PROFILE
    return -1 if parts.sh_total[p] >= g else R_NO_SHARDS


@njit
def _submit(cfg, jobs, parts, queues, events, job):
    p = jobs.part[job]
    nq = queues.fifo_head.shape[0] // parts.exists.shape[0]
    q = jobs.qos[job]
    queues.fifo_tail[p * nq + q] = jobs.fpos[job] + 1
    if not parts.exists[p]:
        jobs.state[job] = UNRUNNABLE
        count_reason(events, R_NO_PARTITION)
        return
    reason = _never_fits(cfg, jobs, parts, job)
    if reason >= 0:
        jobs.state[job] = UNRUNNABLE
        count_reason(events, reason)
        return
    jobs.state[job] = PENDING
    if jobs.kind[job] == WHOLE and jobs.gpus[job] == 1:  # the slice rule may move it
        jobs.sliceable[job] = slice_choice(cfg, jobs, parts, job, False)[0] != A_NONE
    if jobs.cancel[job] < INF:
        push_event(events, jobs.cancel[job], E_CANCEL, job, 0)
    jobs.where[job] = q
    queued(jobs, parts, job, 1)
    parts.changed[p] = True
    if cfg.submit_delay <= 0:
        parts.dirty[p] = True
        events.count[C_DIRTY_ANY] = 1
    elif parts.kick_at[p] == INF:
        parts.kick_at[p] = jobs.submit[job] + cfg.submit_delay
        push_event(events, parts.kick_at[p], E_KICK, p, 0)


@njit
def _event(cfg, jobs, nodes, parts, queues, events, kind, job, run, t):
    if kind == E_KICK:  # the scheduler's pass after submits (job = partition index)
        flag(parts, events, job)
        parts.kick_at[job] = INF
        return
    if kind == E_CANCEL:
        cancel(jobs, nodes, parts, events, job, t)
        return
    if run != jobs.run_id[job]:
        return  # a stale event of an earlier run
    p = jobs.part[job]
    if kind == E_ELIGIBLE:
        nq = queues.fifo_head.shape[0] // parts.exists.shape[0]
        q = jobs.qos[job]
        push_requeued(queues, p * nq + q, jobs.rank[job], job, jobs.eligible[job])
        jobs.where[job] = -1 - q
        queued(jobs, parts, job, 1)
        flag(parts, events, p)
        return
    st = jobs.state[job]
    if st != RUNNING and st != GRACE:
        return
    if kind == E_END:
        end = jobs.run_start[job] + jobs.duration[job]  # the job's own end (sacct's End)
        stop(jobs, nodes, parts, events, job, end, False)
        jobs.state[job] = DONE
        jobs.end[job] = end
    else:  # the grace time is over: the victim is killed (its epilog runs the pass too)
        kill(cfg, jobs, nodes, parts, events, job, t)
    if cfg.sched_on_end:
        events.count[C_END_PASS] = 1


@njit
def _main_pass(cfg, jobs, nodes, parts, queues, events, p, t):
    """Each pending job in priority order starts until the first that cannot (after trying
    preemption for it): the heads of the FIFOs and requeue heaps, after a start only that
    source's next job is looked at (priorities do not change within a pass)."""
    if not parts.pending[p]:
        return
    nq = queues.fifo_head.shape[0] // parts.exists.shape[0]
    ns = 2 * nq
    head = np.empty(ns, np.int64)
    prio = np.zeros(ns, np.int64)
    for s in range(ns):
        head[s] = source_head(jobs, queues, nq, p, s - nq)
        if head[s] >= 0:
            prio[s] = priority(cfg, jobs, head[s], t)
    while True:
        best = best_source(head, prio, jobs.rank)
        if best < 0:
            return
        job = head[best]
        if not try_start(cfg, jobs, nodes, parts, events, job, t) and not (
            may_preempt(cfg, jobs, job)
            and not jobs.awaiting[job]
            and preempt_for(cfg, jobs, nodes, parts, events, job, t)
            and try_start(cfg, jobs, nodes, parts, events, job, t)
        ):
            return
        pop_source(queues, nq, p, best - nq)
        head[best] = source_head(jobs, queues, nq, p, best - nq)
        if head[best] >= 0:
            prio[best] = priority(cfg, jobs, head[best], t)


@inline
def _main_due(cfg, events, t):
    """Whether the main scheduler runs at `t`: on its tick (a submit, an end or a requeue
    flags it for the next one), at every event when there is no tick, and at once after a
    job's end or kill (`sched_on_end`: slurmctld's epilog-complete RPC calls schedule())."""
    return cfg.tick <= 0 or t >= events.times[T_NEXT_MAIN] or events.count[C_END_PASS] != 0


@inline
def _any_pending(parts):
    return parts.pending.sum() > 0  # (counts are never below 0)


@njit
def _run(cfg, jobs, nodes, parts, queues, events, steps):
    """The loop, from where it stopped; True when it ran out of work (False: `steps` turns
    done, call again)."""
    submit = jobs.submit
    n = len(submit)
    nparts = len(parts.exists)
    bf, bf_phase = cfg.bf_interval, cfg.bf_phase
    tick, tick_phase = cfg.tick, cfg.tick_phase
    count, times = events.count, events.times
    turn = 0
    while steps <= 0 or turn < steps:
        turn += 1
        nxt = count[C_NEXT]
        t_sub = submit[nxt] if nxt < n else INF
        t_evt = events.heap_t[0] if count[C_HEAP] else INF
        t = min(t_sub, t_evt, times[T_NEXT_BF], times[T_NEXT_MAIN])
        if t == INF:
            return True
        times[T_NOW] = t
        while count[C_HEAP] and events.heap_t[0] <= t:
            _, kind, job, run = pop_event(events)
            _event(cfg, jobs, nodes, parts, queues, events, kind, job, run, t)
        while count[C_NEXT] < n and submit[count[C_NEXT]] <= t:
            _submit(cfg, jobs, parts, queues, events, count[C_NEXT])
            count[C_NEXT] += 1
        if _main_due(cfg, events, t):  # every partition flagged since the last pass
            if t >= times[T_NEXT_MAIN]:
                times[T_NEXT_MAIN] = INF
            count[C_END_PASS] = 0
            count[C_DIRTY_ANY] = 0
            for p in range(nparts):
                if parts.exists[p] and parts.dirty[p]:
                    parts.dirty[p] = False
                    _main_pass(cfg, jobs, nodes, parts, queues, events, p, t)
        if cfg.backfill and t >= times[T_NEXT_BF]:
            for p in range(nparts):
                if parts.exists[p] and parts.pending[p] and parts.changed[p] and has_free(parts, p):
                    parts.changed[p] = False
                    count[C_PASSES] += 1
                    backfill(cfg, jobs, nodes, parts, queues, events, p, t)
        if tick > 0 and times[T_NEXT_MAIN] == INF and count[C_DIRTY_ANY]:
            # the next tick strictly after t: an event on a tick is seen by the next one
            times[T_NEXT_MAIN] = next_tick(t, tick, tick_phase)
        if cfg.backfill and (times[T_NEXT_BF] <= t or times[T_NEXT_BF] == INF):
            times[T_NEXT_BF] = next_tick(t, bf, bf_phase) if _any_pending(parts) else INF
    return False


_CONFIG, _JOBS, _NODES = as_struct(Config), as_struct(Jobs), as_struct(Nodes)
_PARTS, _QUEUES, _EVENTS = as_struct(Parts), as_struct(Queues), as_struct(Events)


def _entry(digest):
    def run(cfg, jobs, nodes, parts, queues, events, steps):
        """The compiled replay from where it stopped (`steps` <= 0: to its end): whether it
        ended, and the arrays that grew (`advance` puts them back in the tuples)."""
        if digest == 0:  # never: the digest is in numba's cache key (`_jit.cached`)
            steps = 0
        q, e = _QUEUES(queues), _EVENTS(events)
        done = _run(_CONFIG(cfg), _JOBS(jobs), _NODES(nodes), _PARTS(parts), q, e, steps)
        return done, e.heap_t, e.heap_k, e.runs_f, e.runs_i, q.rq_r, q.rq_j, q.rq_e

    return run


run = cached(_entry)


def _probe_entry(digest):
    def probe(cfg, jobs, nodes, parts, queues, events, p, t):
        """What backfill works out in partition `p` at `t` for a job of g = 1 ... 2 x node
        whole GPUs (row g - 1): whether some node holds it now, the nodes `place` chooses
        (-1: none), when particular nodes hold it. For the tests, which check them against
        a recomputation."""
        n, ps, js = _NODES(nodes), _PARTS(parts), _JOBS(jobs)
        most = 2 * ps.max_cap[p]
        fits = np.zeros(most, np.bool_)
        chosen = np.full((most, most), -1, np.int64)
        at = np.zeros(most)
        for g in range(1, most + 1):
            fits[g - 1] = nd.can_place(ps, p, g)
            nd.place(n, ps, p, g, chosen[g - 1])
            at[g - 1] = nd.node_earliest(js, n, ps, p, float(g), t) if digest else t
        return fits, chosen, at

    return probe


probe = cached(_probe_entry)


def advance(state: tuple, steps: int = 0) -> tuple[bool, tuple]:
    """Run the replay of `state` (`state.build`'s tuple) for `steps` loop turns (0: to its
    end): whether it ended, and the state to go on from."""
    cfg, jobs, nodes, parts, queues, events = state
    done, heap_t, heap_k, runs_f, runs_i, rq_r, rq_j, rq_e = run(*state, steps)
    queues = queues._replace(rq_r=rq_r, rq_j=rq_j, rq_e=rq_e)
    events = events._replace(heap_t=heap_t, heap_k=heap_k, runs_f=runs_f, runs_i=runs_i)
    return bool(done), (cfg, jobs, nodes, parts, queues, events)
