"""The discrete-event replay: Slurm's main scheduler, backfill and QOS preemption on a model.

Why this shape (1M jobs on 8,000 GPUs in ~100 s of one core, benchmarks/README.md):
- Submits are already sorted; only job ends, grace-time kills and requeue eligibility go
  through a heap, so the heap holds the running jobs, not the whole trace.
- Each partition keeps one FIFO per QOS (plus a small heap per QOS for requeued jobs). With
  multifactor priority = QOS weight + age weight, the head of each FIFO is its best job, so
  the priority order of a partition is a k-way merge of a few heads, never a sort.
- Nodes are kept in buckets by free GPU count, so best-fit placement is O(GPUs per node).
- The main pass stops at a partition's first job that cannot start (as Slurm's does); backfill
  runs every `bf_interval` seconds, walks at most `bf_max_job_test` jobs, and keeps its
  free-GPU-over-time profile in numpy arrays; reservations of blocked jobs are made lazily,
  in test order, only before a later job that could start is checked (the only thing they
  can change within a pass), and a pass stops once no pending shape can start. What backfill
  works out from the nodes (when particular nodes hold a job) is kept until a node changes.
"""

from __future__ import annotations

import array
import bisect
import heapq
import math
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from slurmgpu.errors import UsageError
from slurmgpu.model.catalog import COMPUTE_SLICES_PER_GPU, model_for_type
from slurmgpu.replay.cluster import ClusterModel, PartitionModel
from slurmgpu.replay.jobs import MIG, SHARD, WHOLE, ReplayTrace

# job states
FUTURE, PENDING, RUNNING, GRACE, DONE, UNRUNNABLE, CANCELLED = range(7)
# heap event kinds (ends before kills before eligibility at the same second)
_END, _KILL, _ELIGIBLE, _KICK, _CANCEL = 0, 1, 2, 3, 4
CANCELLED_PENDING = "cancelled while pending (as recorded)"
_NO_QUEUE = -(1 << 30)  # `where` of a requeued job before its BeginTime: in no queue
INF = math.inf


@dataclass(frozen=True)
class SchedConfig:
    """The slurm.conf settings the replay honours (Slurm's defaults unless told)."""

    priority_weight_qos: int = 10000
    priority_weight_age: int = 1000
    priority_max_age_s: int = 7 * 86400  # PriorityMaxAge=7-0
    priority_calc_period_s: int = 300  # PriorityCalcPeriod=5 (minutes): age moves in steps
    bf_interval_s: int = 30
    bf_max_job_test: int = 500
    bf_window_s: int = 86400  # bf_window=1440 (minutes)
    # reservations per backfill pass: Slurm reserves for every job it tests (up to
    # bf_max_job_test); past this many, blocked jobs get none (a later job may then start
    # ahead of them). The cost that bounds a long replay: see docs/replay.md.
    bf_max_reservations: int = 500
    backfill: bool = True
    # a requeued job's BeginTime: slurmctld holds it until its killed run's credentials expire,
    # AuthInfo cred_expire (default 120 s) + 1 s (seen on 22.05: sacct's Eligible of the next
    # run is the preemption + 21 s with cred_expire=20); slurm_config reads it
    requeue_delay_s: int = 121
    # slurmctld's main scheduler does not run at each event: submits and job ends only flag
    # it, and its background thread runs it on its next tick, about once a second (seen on
    # 22.05 with batch_sched_delay=0: every "sched: Allocate" line of a 200-job burst falls
    # on a 1 s tick whose phase drifts slowly). 0 runs it at each event instead.
    sched_tick_s: float = 1.0
    # ...but a job's end runs the main scheduler at once: its nodes' EPILOG_COMPLETE RPC
    # (`_slurm_rpc_epilog_complete` in 22.05's proc_req.c) calls `schedule()`, whose agent
    # thread (`_sched_agent`, job_scheduler.c) runs `_schedule()` as soon as
    # `sched_min_interval` (2 us) has passed: the freed GPUs go to the pending jobs within
    # milliseconds, not at the next tick (seen: most backlog starts of the multi-node
    # recordings fall in the second a job ended on that node). SchedulerParameters=defer
    # turns this off (the end only flags the tick, as a submit does). The pass covers every
    # partition that changed (a submit since the last pass included), as schedule() does.
    sched_on_end: bool = True
    # where in the second the main scheduler's tick and the backfill pass fall. Unknowable
    # from sacct (1 s resolution); the two differ so that neither always goes first (seen:
    # the main tick early in the second, backfill drifting through it, bf_interval after the
    # end of its previous pass).
    sched_tick_phase_s: float = 0.0
    bf_phase_s: float = 0.5
    # sacct's Submit has 1 s resolution, but job ids are given in submit order: jobs that
    # share a Submit second are spread evenly over it in that order (a burst of sbatch
    # calls is seen by a pass in the middle of the second only up to where it had got).
    spread_submits: bool = True
    # a fixed delay before a submitted job is first scheduled (0: the next tick or pass)
    submit_sched_delay_s: float = 0.0
    # a job's GPUs return this long after its End: the step's teardown and the completing
    # state (here ~10-60 ms: sleep N runs N + ~0.06 s). Small, but it decides that a job
    # ending on a pass's tick is seen by the following pass, as in slurmctld. Negligible
    # for jobs of minutes or more.
    release_delay_s: float = 0.05
    slice_headroom: float = 0.1  # a whole-GPU job fits a slice if need * 1.1 <= its memory


@dataclass
class RunLog:
    """Every run the replay made (column lists; one entry per start)."""

    job: list[int]
    start: list[float]
    end: list[float]
    equiv: list[float]  # GPUs held (a slice counts its compute share)
    partition: list[int]
    preempted: list[bool]


@dataclass
class ReplayOutcome:
    """Per job: first start, last end, state; plus the runs and preemption totals."""

    start_s: np.ndarray
    end_s: np.ndarray
    state: np.ndarray
    on_slice: np.ndarray  # a whole-GPU job that ran on a MIG slice or shards
    runs: RunLog
    preemptions: int
    unrunnable_reasons: dict[str, int]


class _Part:
    """One partition's live state: node buckets, slice/shard pools, per-QOS queues."""

    def __init__(self, index: int, model: PartitionModel, n_qos: int) -> None:
        self.index = index
        self.name = model.name
        self.cap = list(model.nodes)
        self.free = list(model.nodes)
        self.max_cap = max(self.cap, default=0)
        self.buckets: list[set[int]] = [set() for _ in range(self.max_cap + 1)]
        for n, c in enumerate(self.cap):
            self.buckets[c].add(n)
        self.free_whole = sum(self.cap)
        # per node: its whole-GPU jobs -> the GPUs each holds there
        self.node_jobs: list[dict[int, int]] = [{} for _ in self.cap]
        # what backfill's `Replay._node_earliest` works out from the nodes' jobs, kept until
        # a node changes: per GPU count g, per node, the soonest expected time that node has
        # g GPUs free (-INF: now, INF: never) and the nodes changed since; the times
        # full-size nodes are expected idle
        self.earliest: dict[int, np.ndarray] = {}
        self.earliest_stale: dict[int, set[int]] = {}
        self.earliest_min: dict[int, float] = {}  # the least of each, while none is stale
        full = [n for n, c in enumerate(self.cap) if c == self.max_cap]
        self.idle_at: list[float] = [-INF] * len(full)  # sorted
        self.idle_of: list[float | None] = [-INF if c == self.max_cap else None for c in self.cap]
        self.idle_stale: set[int] = set()  # full-size nodes whose idle time changed
        # MIG instances per profile: [free, total, memory MiB, compute share]
        gpu_model = model_for_type(model.gpu_type or "")
        self.pools: dict[str, list[float]] = {}
        for pool in model.slices:
            mem = dict(pool.memory_mib)
            for prof, count in pool.layout:
                entry = self.pools.setdefault(prof, [0, 0, float(mem.get(prof, 0)), 0.0])
                entry[0] += count * pool.gpus
                entry[1] += count * pool.gpus
                mp = gpu_model.profile(prof) if gpu_model else None
                # the share of one GPU: 1g is 1/7 of an A100/H100, 1/4 of an A30
                entry[3] = mp.gpu_fraction if mp else 1 / COMPUTE_SLICES_PER_GPU
        # shards: [free, total, per GPU]; a shard's memory is the GPU's / per GPU
        shard_total = sum(p.gpus * p.per_gpu for p in model.shards)
        per_gpu = max((p.per_gpu for p in model.shards), default=0)
        self.shards = [shard_total, shard_total, per_gpu]
        self.gpu_memory_mib = model.gpu_memory_mib or float("nan")
        self.queues: list[deque[int]] = [deque() for _ in range(n_qos)]
        # per QOS, the requeued jobs that are eligible again: (requeue second, job, eligible)
        self.requeued: list[list[tuple[int, int, float]]] = [[] for _ in range(n_qos)]
        self.running: set[int] = set()
        # whole-GPU jobs by expected end (start + time limit; a victim's kill time), sorted
        # for backfill: keys (end, job) with the ends and GPU counts in parallel lists, so
        # that backfill turns them into numpy arrays without a Python loop
        self.end_keys: list[tuple[float, int]] = []
        # (typed arrays: backfill reads them as numpy without a copy of Python floats)
        self.end_times = array.array("d")
        self.end_gpus = array.array("d")
        self.pending = 0
        self.size_hist: dict[float, int] = {}  # pending whole-GPU jobs by GPU count
        # pending whole-GPU jobs by GPU count, then time limit: counts, and a heap of the
        # limits (entries whose count fell to 0 are dropped lazily)
        self.limit_counts: dict[float, dict[float, int]] = {}
        self.limit_heaps: dict[float, list[float]] = {}
        self.pool_pending = 0  # pending MIG / shard jobs
        self.dirty = False  # something changed: run the main pass
        self.kick_at = INF  # when the scheduler takes the jobs submitted since its last pass
        self.changed = False  # something changed since the last backfill pass
        self.min_limit = 0.0  # the shortest time limit of any of its jobs (backfill's cut)

    def fits_some(self, free: float) -> bool:
        """Whether some pending whole-GPU job asks for at most `free` GPUs."""
        return any(c > 0 and g <= free for g, c in self.size_hist.items())

    def count_limit(self, g: float, lim: float, delta: int) -> None:
        counts = self.limit_counts.setdefault(g, {})
        old = counts.get(lim, 0)
        counts[lim] = old + delta
        if old <= 0 < old + delta:
            heapq.heappush(self.limit_heaps.setdefault(g, []), lim)

    def shortest_limits(self) -> dict[float, float]:
        """GPU count -> the shortest time limit of a pending whole-GPU job of that count."""
        out = {}
        for g, heap in self.limit_heaps.items():
            counts = self.limit_counts[g]
            while heap and counts[heap[0]] <= 0:
                heapq.heappop(heap)
            if heap:
                out[g] = heap[0]
        return out

    def has_free(self) -> bool:
        pools = any(p[0] > 0 for p in self.pools.values())
        return self.free_whole > 0 or self.shards[0] > 0 or pools

    def add_end(self, end: float, job: int, gpus: int) -> None:
        k = bisect.bisect_left(self.end_keys, (end, job))
        self.end_keys.insert(k, (end, job))
        self.end_times.insert(k, end)
        self.end_gpus.insert(k, gpus)

    def drop_end(self, end: float, job: int) -> int:
        k = bisect.bisect_left(self.end_keys, (end, job))
        del self.end_keys[k], self.end_times[k]
        return int(self.end_gpus.pop(k))

    # whole-GPU placement ---------------------------------------------------------------
    def touch(self, node: int) -> None:
        """A node's jobs or their expected ends changed: drop what was worked out from them."""
        for stale in self.earliest_stale.values():
            stale.add(node)
        if self.cap[node] == self.max_cap:
            self.idle_stale.add(node)

    def _set_free(self, node: int, value: int) -> None:
        self.touch(node)
        self.buckets[self.free[node]].discard(node)
        self.free_whole += value - self.free[node]
        self.free[node] = value
        self.buckets[value].add(node)

    def place_whole(self, gpus: int) -> list[tuple[int, int]] | None:
        """Best fit: the node with the fewest free GPUs that still holds the job; a job larger
        than a node takes whole idle nodes."""
        if gpus > self.free_whole:
            return None
        if gpus <= self.max_cap:
            for free in range(gpus, self.max_cap + 1):
                bucket = self.buckets[free]
                if bucket:
                    node = min(bucket)
                    return [(node, gpus)]
            return None
        per = self.max_cap
        need = -(-gpus // per)
        idle = sorted(n for n in self.buckets[per] if self.cap[n] == per)
        if len(idle) < need:
            return None
        out, left = [], gpus
        for n in idle[:need]:
            take = min(per, left)
            out.append((n, take))
            left -= take
        return out

    def can_place(self, gpus: int) -> bool:
        """Whether `place_whole(gpus)` would find nodes now (without choosing them)."""
        if gpus > self.free_whole:
            return False
        per, buckets = self.max_cap, self.buckets
        if gpus <= per:
            return any(buckets[free] for free in range(gpus, per + 1))
        cap = self.cap
        return sum(1 for n in buckets[per] if cap[n] == per) >= -(-gpus // per)

    def take(self, alloc: list[tuple[int, int]], job: int) -> None:
        for node, g in alloc:
            self._set_free(node, self.free[node] - g)
            self.node_jobs[node][job] = g

    def give(self, alloc: list[tuple[int, int]], job: int) -> None:
        for node, g in alloc:
            self._set_free(node, self.free[node] + g)
            self.node_jobs[node].pop(job, None)


class Replay:
    """One replay of a trace on a cluster model. `run()` returns a ReplayOutcome."""

    def __init__(self, trace: ReplayTrace, model: ClusterModel, config: SchedConfig) -> None:
        self.t = trace
        self.cfg = config
        self.model = model
        n = len(trace)
        qos_specs = [model.qos_spec(q) for q in trace.qos_names]
        # Slurm normalizes a QOS's priority by the largest of ALL QOS, used or not
        max_prio = max((q.priority for q in (*qos_specs, *model.qos)), default=0)
        self.qos_term = [
            config.priority_weight_qos * q.priority / max_prio if max_prio > 0 else 0.0
            for q in qos_specs
        ]
        qos_pos = {q: k for k, q in enumerate(trace.qos_names)}
        self.qos_priority = [q.priority for q in qos_specs]
        self.preempts = [
            frozenset(qos_pos[v] for v in q.preempts if v in qos_pos) for q in qos_specs
        ]
        self.grace = [q.grace_s for q in qos_specs]
        self.mode = [q.mode for q in qos_specs]
        self.parts: list[_Part | None] = []
        for k, name in enumerate(trace.partitions):
            try:
                pm = model.partition(name)
            except UsageError:  # a partition the model lacks: its jobs cannot run
                self.parts.append(None)
                continue
            self.parts.append(_Part(k, pm, len(trace.qos_names)))
        limits = trace.timelimit_s
        for k, part in enumerate(self.parts):
            mine = limits[trace.partition == k]
            if part is not None and len(mine):
                part.min_limit = float(mine.min())
        # hot per-job data as Python lists (numpy scalar access is ~10x slower per item)
        self.submit = (
            _spread(trace.submit_s).tolist() if config.spread_submits else trace.submit_s.tolist()
        )
        self.duration = trace.duration_s.tolist()
        self.limit = trace.timelimit_s.tolist()
        self.gpus = trace.gpus.tolist()
        self.kind = trace.kind.tolist()
        self.part_of = trace.partition.tolist()
        self.qos_of = trace.qos.tolist()
        self.need_mib = trace.need_mib.tolist()
        # when a job was cancelled while pending in the recorded history (INF: never)
        cancel = trace.cancel_s
        self.cancel = (
            np.where(np.isfinite(cancel), cancel, INF).tolist() if cancel is not None else None
        )
        self.profile = [trace.profiles[p] if p >= 0 else "" for p in trace.mig_profile.tolist()]
        self.state = [FUTURE] * n
        self.eligible = list(self.submit)
        # equal priorities are ordered by submit time (whole seconds), then job id, as
        # slurmctld's `sort_job_queue2` (job_scheduler.c) orders them; a requeued job's
        # submit time is its requeue (`_job_requeue_op`, job_mgr.c: `submit_time = now`),
        # so it queues behind the jobs of its priority submitted before it was preempted
        self.rank = np.floor(trace.submit_s).astype(np.int64).tolist()
        self.start = [INF] * n
        self.end = [INF] * n
        self.run_start = [0.0] * n
        self.run_id = [0] * n
        self.alloc: list[tuple | None] = [None] * n
        self.on_slice = [False] * n
        self.awaiting = [0] * n  # victims still in grace for this preemptor
        self.victim_of = [-1] * n
        self.expected_end = [INF] * n  # what backfill assumes of a running whole-GPU job
        # the queue a pending job's live entry is in (q: FIFO of QOS q, -1-q: requeue heap);
        # entries left behind by a backfilled or requeued job are skipped lazily
        self.where = [0] * n
        self.heap: list[tuple[float, int, int, int]] = []
        self.runs = RunLog([], [], [], [], [], [])
        self.preemptions = 0
        self.unrunnable: dict[str, int] = {}
        self.dirty_any = False  # some partition's main pass is due
        self.end_pass = False  # a job ended: the main pass runs now (epilog complete)

    # ----------------------------------------------------------------------- main loop
    def run(self) -> ReplayOutcome:
        submit, n = self.submit, len(self.submit)
        heap = self.heap
        nxt = 0
        parts = [p for p in self.parts if p is not None]
        bf, bf_phase = self.cfg.bf_interval_s, self.cfg.bf_phase_s
        tick, tick_phase = self.cfg.sched_tick_s, self.cfg.sched_tick_phase_s
        backfill = self.cfg.backfill
        next_bf = next_main = INF
        while True:
            t_sub = submit[nxt] if nxt < n else INF
            t_evt = heap[0][0] if heap else INF
            t = min(t_sub, t_evt, next_bf, next_main)
            if t == INF:
                break
            while heap and heap[0][0] <= t:
                _, kind, job, run = heapq.heappop(heap)
                self._event(kind, job, run, t)
            while nxt < n and submit[nxt] <= t:
                self._submit(nxt)
                nxt += 1
            if tick <= 0 or t >= next_main or self.end_pass:
                if t >= next_main:
                    next_main = INF
                self.end_pass = False
                self.dirty_any = False
                for part in parts:
                    if part.dirty:
                        part.dirty = False
                        self._main_pass(part, t)
            if backfill and t >= next_bf:
                for part in parts:
                    if part.pending and part.changed and part.has_free():
                        part.changed = False
                        self._backfill(part, t)
            if tick > 0 and next_main == INF and self.dirty_any:
                # the next tick strictly after t: an event on a tick is seen by the next one
                next_main = _next_tick(t, tick, tick_phase)
            if backfill and (next_bf <= t or next_bf == INF):
                next_bf = _next_tick(t, bf, bf_phase) if any(p.pending for p in parts) else INF
        return self._outcome()

    def _outcome(self) -> ReplayOutcome:
        return ReplayOutcome(
            start_s=np.array(self.start, dtype=float),
            end_s=np.array(self.end, dtype=float),
            state=np.array(self.state, dtype=np.int8),
            on_slice=np.array(self.on_slice, dtype=bool),
            runs=self.runs,
            preemptions=self.preemptions,
            unrunnable_reasons=dict(self.unrunnable),
        )

    # ----------------------------------------------------------------------- events
    def _event(self, kind: int, job: int, run: int, t: float) -> None:
        if kind == _KICK:  # the scheduler's pass after submits (job = partition index)
            part = self.parts[job]
            part.dirty = part.changed = True
            self.dirty_any = True
            part.kick_at = INF
            return
        if kind == _CANCEL:
            self._cancel(job, t)
            return
        if run != self.run_id[job]:
            return  # a stale event of an earlier run
        if kind == _ELIGIBLE:
            part = self.parts[self.part_of[job]]
            q = self.qos_of[job]
            heapq.heappush(part.requeued[q], (self.rank[job], job, self.eligible[job]))
            self.where[job] = -1 - q
            self._queued(part, job, +1)
            part.dirty = part.changed = True
            self.dirty_any = True
            return
        st = self.state[job]
        if st not in (RUNNING, GRACE):
            return
        if kind == _END:
            end = self.run_start[job] + self.duration[job]  # the job's own end (sacct's End)
            self._stop(job, end, preempted=False)
            self.state[job] = DONE
            self.end[job] = end
            self.end_pass = self.cfg.sched_on_end
        else:  # the grace time is over: the victim is killed (its epilog runs the pass too)
            self._kill(job, t)
            self.end_pass = self.cfg.sched_on_end

    def _kill(self, job: int, t: float) -> None:
        """A preempted job's run ends: cancelled or requeued, as its QOS's PreemptMode says."""
        self._stop(job, t, preempted=True)
        if self.mode[self.qos_of[job]] == "cancel":
            self.state[job] = CANCELLED
            self.end[job] = t
            self._count("preempted and cancelled (PreemptMode=cancel)")
        else:
            self._requeue(job, t)

    def _requeue(self, job: int, t: float) -> None:
        """A preempted job back in the queue (PreemptMode=REQUEUE): pending, but eligible only
        `requeue_delay_s` later (slurmctld's BeginTime: AuthInfo cred_expire + 1 s, seen on
        22.05), when its `_ELIGIBLE` event puts it in its QOS's requeue heap. Its submit time
        becomes the requeue's second (`self.rank`; job_mgr.c `_job_requeue_op` sets
        `submit_time = now`), so among equal priorities it queues behind the jobs submitted
        before it was preempted (seen in all five multi-node recordings: a rerun started after
        an older pending job of its QOS in 99.8 % of such pairs). Until then its old FIFO
        entry is stale (`where` names no queue): no pass may start it early (one did, before:
        the main pass took it from its FIFO and a partition's pending count went wrong,
        leaving a job never started)."""
        self.state[job] = PENDING
        self.eligible[job] = t + self.cfg.requeue_delay_s
        self.rank[job] = math.floor(t)
        self.where[job] = _NO_QUEUE
        self.run_id[job] += 1
        heapq.heappush(self.heap, (self.eligible[job], _ELIGIBLE, job, self.run_id[job]))

    def _cancel(self, job: int, t: float) -> None:
        """The recorded scancel of a job that never started: still pending here, it leaves
        the queue; started (the replay was quicker than the record), it is ended now."""
        st = self.state[job]
        if st == PENDING:
            part = self.parts[self.part_of[job]]
            # a requeued job waiting for its BeginTime is not in the queue's counts yet
            if not (self.run_id[job] > 0 and self.eligible[job] > t):
                self._queued(part, job, -1)
            self.state[job] = CANCELLED
            self.end[job] = t
            self.run_id[job] += 1  # a pending eligibility event is stale now
            part.changed = part.dirty = True
            self.dirty_any = True
            self._count(CANCELLED_PENDING)
        elif st in (RUNNING, GRACE):
            self._stop(job, t, preempted=False)
            self.state[job] = DONE
            self.end[job] = t
            self.run_id[job] += 1  # its end event is stale now

    def _queued(self, part: _Part, job: int, delta: int) -> None:
        part.pending += delta
        if self.kind[job] == WHOLE:
            g = self.gpus[job]
            part.size_hist[g] = part.size_hist.get(g, 0) + delta
            part.count_limit(g, self.limit[job], delta)
        else:
            part.pool_pending += delta

    def _count(self, reason: str) -> None:
        self.unrunnable[reason] = self.unrunnable.get(reason, 0) + 1

    def _submit(self, job: int) -> None:
        part = self.parts[self.part_of[job]]
        if part is None:
            self.state[job] = UNRUNNABLE
            self._count("partition not in the cluster model")
            return
        reason = self._never_fits(part, job)
        if reason:
            self.state[job] = UNRUNNABLE
            self._count(reason)
            return
        self.state[job] = PENDING
        if self.cancel is not None and self.cancel[job] < INF:
            heapq.heappush(self.heap, (self.cancel[job], _CANCEL, job, 0))
        q = self.qos_of[job]
        part.queues[q].append(job)
        self.where[job] = q
        self._queued(part, job, +1)
        part.changed = True
        if self.cfg.submit_sched_delay_s <= 0:
            part.dirty = True
            self.dirty_any = True
        elif part.kick_at == INF:
            part.kick_at = self.submit[job] + self.cfg.submit_sched_delay_s
            heapq.heappush(self.heap, (part.kick_at, _KICK, part.index, 0))

    def _never_fits(self, part: _Part, job: int) -> str | None:
        kind, g = self.kind[job], self.gpus[job]
        if kind == WHOLE:
            if g <= part.max_cap or (
                part.max_cap and sum(1 for c in part.cap if c == part.max_cap) * part.max_cap >= g
            ):
                return None
            if g == 1 and self._slice_choice(part, job, any_free=False):
                return None
            return "asks more whole GPUs than its partition has"
        if kind == MIG:
            pool = part.pools.get(self.profile[job])
            return None if pool and pool[1] >= g else "MIG profile not offered by its partition"
        return None if part.shards[1] >= g else "more shards than its partition has"

    # ----------------------------------------------------------------------- priority order
    def _priority(self, job: int, t: float) -> float:
        cfg = self.cfg
        period = cfg.priority_calc_period_s
        now = math.floor(t / period) * period if period > 1 else t
        age = min(max(now - self.eligible[job], 0.0) / cfg.priority_max_age_s, 1.0)
        # Slurm keeps an integer priority: equal ones fall back to submit time, then job id
        # (`self.rank`: the order keys are (-priority, rank, job))
        return math.floor(self.qos_term[self.qos_of[job]] + cfg.priority_weight_age * age)

    def _heads(self, part: _Part) -> list[tuple[int, int]]:
        """(source, job) heads of each FIFO and requeue heap, dropping stale entries."""
        heads = []
        state, where = self.state, self.where
        for q, dq in enumerate(part.queues):
            while dq and (state[dq[0]] != PENDING or where[dq[0]] != q):
                dq.popleft()
            if dq:
                heads.append((q, dq[0]))
            rq = part.requeued[q]
            while rq and not self._live_requeued(rq[0], q):
                heapq.heappop(rq)
            if rq:
                heads.append((-1 - q, rq[0][1]))
        return heads

    def _live_fifo(self, dq: deque[int], q: int) -> Iterator[int]:
        """The FIFO's jobs whose live entry it holds (not copied: no submit during a pass)."""
        where = self.where
        return (j for j in dq if where[j] == q)

    def _live_requeued(self, entry: tuple[int, int, float], q: int) -> bool:
        _, job, elig = entry
        return (
            self.state[job] == PENDING and self.where[job] == -1 - q and self.eligible[job] == elig
        )

    def _pop(self, part: _Part, src: int) -> None:
        if src >= 0:
            part.queues[src].popleft()
        else:
            heapq.heappop(part.requeued[-1 - src])

    def _in_order(self, part: _Part, t: float, limit: int) -> Iterator[int]:
        """Up to `limit` pending jobs of the partition, highest priority first (no removal)."""
        iters: list[Iterator[int]] = []
        for q, dq in enumerate(part.queues):
            iters.append(self._live_fifo(dq, q))
            live = [e for e in part.requeued[q] if self._live_requeued(e, q)]
            iters.append(iter([j for _, j, _ in sorted(live)]))
        state, prio, rank = self.state, self._priority_at(t), self.rank
        heads: list[tuple[tuple[float, int, int], int, int]] = []
        for k, it in enumerate(iters):
            for job in it:
                if state[job] == PENDING:
                    heads.append(((-prio(job), rank[job], job), k, job))
                    break
        if not heads:
            return
        heapq.heapify(heads)
        item = heapq.heappop(heads)
        for _ in range(limit):
            k, job = item[1], item[2]
            yield job
            for nxt in iters[k]:  # its source's next job, or the best other head
                if state[nxt] == PENDING:
                    item = heapq.heappushpop(heads, ((-prio(nxt), rank[nxt], nxt), k, nxt))
                    break
            else:
                if not heads:
                    return
                item = heapq.heappop(heads)

    def _priority_at(self, t: float):
        """`_priority(job, t)` as a function of the job, for many jobs at one time."""
        cfg = self.cfg
        period = cfg.priority_calc_period_s
        now = math.floor(t / period) * period if period > 1 else t
        weight, max_age = cfg.priority_weight_age, cfg.priority_max_age_s
        qos_term, qos_of, eligible, floor = self.qos_term, self.qos_of, self.eligible, math.floor

        def priority(job: int) -> float:
            age = min(max(now - eligible[job], 0.0) / max_age, 1.0)
            return floor(qos_term[qos_of[job]] + weight * age)

        return priority

    # ----------------------------------------------------------------------- main pass
    def _main_pass(self, part: _Part, t: float) -> None:
        if not part.pending:
            return
        # the heads of the FIFOs in priority order; after a start only that source's next
        # job is looked at (priorities do not change within a pass)
        rank = self.rank
        cand = [
            ((-self._priority(job, t), rank[job], job), src, job) for src, job in self._heads(part)
        ]
        heapq.heapify(cand)
        while cand:
            _, src, job = cand[0]
            if not self._try_start(part, job, t) and not (
                self.preempts[self.qos_of[job]]
                and not self.awaiting[job]
                and self._preempt_for(part, job, t)
                and self._try_start(part, job, t)
            ):
                return
            self._pop(part, src)
            nxt = self._source_head(part, src)
            if nxt < 0:
                heapq.heappop(cand)
            else:
                heapq.heapreplace(cand, ((-self._priority(nxt, t), rank[nxt], nxt), src, nxt))

    def _source_head(self, part: _Part, src: int) -> int:
        """The live head of one FIFO (src = QOS) or requeue heap (-1 - QOS); -1 if none."""
        if src >= 0:
            dq, state, where = part.queues[src], self.state, self.where
            while dq and (state[dq[0]] != PENDING or where[dq[0]] != src):
                dq.popleft()
            return dq[0] if dq else -1
        rq, q = part.requeued[-1 - src], -1 - src
        while rq and not self._live_requeued(rq[0], q):
            heapq.heappop(rq)
        return rq[0][1] if rq else -1

    def _slice_choice(self, part: _Part, job: int, any_free: bool = True) -> tuple | None:
        """Where a 1-GPU job whose measured memory fits a slice may run instead: the MIG
        profile with the least memory that holds need * (1 + headroom), else shards."""
        need = self.need_mib[job]
        if need != need or need <= 0:  # NaN: not measured
            return None
        want = need * (1.0 + self.cfg.slice_headroom)
        best = None
        for prof, (free, total, mem, _) in part.pools.items():
            room = free >= 1 if any_free else total >= 1
            if mem >= want and room and (best is None or mem < best[2]):
                best = ("m", prof, mem)
        if best:
            return ("m", best[1], 1)
        free, total, per = part.shards
        if per and part.gpu_memory_mib == part.gpu_memory_mib:
            count = math.ceil(want / (part.gpu_memory_mib / per))
            if count < per and (free >= count if any_free else total >= count):
                return ("s", count)
        return None

    def _try_start(self, part: _Part, job: int, t: float) -> bool:
        kind, g = self.kind[job], self.gpus[job]
        alloc: tuple | None = None
        if kind == WHOLE:
            if g == 1 and (choice := self._slice_choice(part, job)):
                alloc = choice
                self.on_slice[job] = True
            else:
                nodes = part.place_whole(int(g))
                if nodes is None:
                    return False
                alloc = ("n", nodes)
        elif kind == MIG:
            pool = part.pools.get(self.profile[job])
            if pool is None or pool[0] < g:
                return False
            alloc = ("m", self.profile[job], int(g))
        elif kind == SHARD:
            if part.shards[0] < g:
                return False
            alloc = ("s", int(g))
        self._take(part, job, alloc)
        self.state[job] = RUNNING
        if self.start[job] == INF:
            self.start[job] = t
        self.run_start[job] = t
        self._queued(part, job, -1)
        part.running.add(job)
        if alloc[0] == "n":
            self.expected_end[job] = t + self.limit[job]
            part.add_end(t + self.limit[job], job, int(g))
        done = t + self.duration[job] + self.cfg.release_delay_s
        heapq.heappush(self.heap, (done, _END, job, self.run_id[job]))
        return True

    def _take(self, part: _Part, job: int, alloc: tuple) -> None:
        self.alloc[job] = alloc
        if alloc[0] == "n":
            part.take(alloc[1], job)
        elif alloc[0] == "m":
            part.pools[alloc[1]][0] -= alloc[2]
        else:
            part.shards[0] -= alloc[1]

    def _equiv(self, part: _Part, alloc: tuple) -> float:
        if alloc[0] == "n":
            return float(sum(g for _, g in alloc[1]))
        if alloc[0] == "m":
            return alloc[2] * part.pools[alloc[1]][3]
        return alloc[1] / part.shards[2]

    def _stop(self, job: int, t: float, preempted: bool) -> None:
        part = self.parts[self.part_of[job]]
        alloc = self.alloc[job]
        if alloc[0] == "n":
            part.give(alloc[1], job)
        elif alloc[0] == "m":
            part.pools[alloc[1]][0] += alloc[2]
        else:
            part.shards[0] += alloc[1]
        part.running.discard(job)
        if alloc[0] == "n":
            part.drop_end(self.expected_end[job], job)
        runs = self.runs
        runs.job.append(job)
        runs.start.append(self.run_start[job])
        runs.end.append(t)
        runs.equiv.append(self._equiv(part, alloc))
        runs.partition.append(part.index)
        runs.preempted.append(preempted)
        self.alloc[job] = None
        part.dirty = part.changed = True
        self.dirty_any = True
        boss = self.victim_of[job]
        if boss >= 0:
            self.awaiting[boss] -= 1
            self.victim_of[job] = -1

    # ----------------------------------------------------------------------- preemption
    def _preemptable(self, part: _Part, job: int, victim: int) -> bool:
        qv = self.qos_of[victim]
        return (
            self.state[victim] == RUNNING
            and qv in self.preempts[self.qos_of[job]]
            and self.mode[qv] != "off"
        )

    def _preempt_for(self, part: _Part, job: int, t: float) -> bool:
        """Slurm's preempt/qos: signal lower-QOS jobs that free room for `job`. Victims with
        no GraceTime are killed at once (True when all were: `job` may start in this pass, as
        slurmctld starts the preemptor in the preemption's second); the others keep their
        GPUs until their grace ends."""
        kind, g = self.kind[job], int(self.gpus[job])
        if kind == WHOLE:
            victims = self._whole_victims(part, job, g)
        else:
            victims = self._pool_victims(part, job, g)
        if not victims:
            return False
        now = True
        for v in victims:
            self.state[v] = GRACE
            self.victim_of[v] = job
            self.awaiting[job] += 1
            self.preemptions += 1
            grace = self.grace[self.qos_of[v]]
            if grace <= 0:
                self._kill(v, t)
                continue
            now = False
            heapq.heappush(self.heap, (t + grace, _KILL, v, self.run_id[v]))
            if self.alloc[v][0] == "n":  # backfill now expects it to end at the kill
                gv = part.drop_end(self.expected_end[v], v)
                self.expected_end[v] = t + grace
                part.add_end(t + grace, v, gv)
                for node, _ in self.alloc[v][1]:
                    part.touch(node)
        return now

    def _pool_victims(self, part: _Part, job: int, g: int) -> list[int] | None:
        """The MIG or shard jobs a slice `job` preempts: lowest QOS first, youngest first."""
        kind = self.kind[job]
        order = lambda v: (self.qos_priority[self.qos_of[v]], -self.run_start[v])  # noqa: E731
        tag = "m" if kind == MIG else "s"
        free = part.pools[self.profile[job]][0] if kind == MIG else part.shards[0]
        chosen = []
        cands = [
            v
            for v in part.running
            if self.alloc[v][0] == tag
            and (kind == SHARD or self.alloc[v][1] == self.profile[job])
            and self._preemptable(part, job, v)
        ]
        for v in sorted(cands, key=order):
            if free >= g:
                break
            chosen.append(v)
            free += self.alloc[v][-1]
        return chosen if free >= g else None

    def _whole_victims(self, part: _Part, job: int, g: int) -> list[int] | None:
        """The running jobs a whole-GPU `job` preempts, chosen as slurmctld 22.05 does (seen on
        the multi-node test cluster, docs/replay.md "Fidelity"): the preemptable jobs in
        order, lowest QOS priority first, then the fewest nodes, then the **oldest** (lowest
        job id), are taken out one at a time until `job` fits (one node with `g` GPUs free,
        or enough whole idle nodes for a multi-node job); the victims are those taken out
        that ran on the nodes it gets. None when even all of them would not make room.

        The order is slurmctld's (preempt.c `slurm_find_preemptable_jobs` sorts the
        candidates by `_sort_by_prio`: preempt/qos's `_gen_job_prio` is the QOS priority
        << 16 plus the job's node count, ascending; equal ones keep the job list's order,
        job ids); cons_tres then drops candidates in that order until the job fits and
        keeps those on the nodes it picked."""
        per = part.max_cap
        running = (v for v in part.running if self.alloc[v][0] == "n")
        alloc, qos_priority, qos_of = self.alloc, self.qos_priority, self.qos_of
        cands = sorted(
            (v for v in running if self._preemptable(part, job, v)),
            key=lambda v: (qos_priority[qos_of[v]], len(alloc[v][1]), v),
        )
        free = list(part.free)
        taken: list[int] = []
        for v in cands:
            taken.append(v)
            for node, c in self.alloc[v][1]:
                free[node] += c
            if g <= per:
                fits = [n for n in range(len(free)) if part.cap[n] >= g and free[n] >= g]
                nodes = {min(fits, key=lambda n: (free[n], n))} if fits else set()
            else:
                idle = [n for n in range(len(free)) if part.cap[n] == per and free[n] == per]
                # nodes idle already first (no victim needed there), then the freed ones
                idle.sort(key=lambda n: (part.free[n] != per, n))
                need = -(-g // per)
                nodes = set(idle[:need]) if len(idle) >= need else set()
            if nodes:
                return [w for w in taken if any(n in nodes for n, _ in self.alloc[w][1])]
        return None

    # ----------------------------------------------------------------------- backfill
    def _backfill(self, part: _Part, t: float) -> None:
        """Slurm's backfill on whole GPUs: start a lower-priority job now only if it does not
        delay the expected start of any higher-priority job tested before it.

        The reservations of tested jobs that cannot start (`owed`) are made, in test order,
        only before a job that could start is checked: they change nothing else in a pass
        (the profile is dropped after it) and the profile only loses GPUs as a pass goes on.
        So a job no start is possible for, even on the profile so far, costs no reservation:
        too big for the free GPUs now, no more than `failed` allows, or short of GPUs in its
        window already. In a partition with slices or shards (where a 1-GPU job may start on
        a slice whatever the profile) every reservation is made at once, as before."""
        if not part.pool_pending and not part.fits_some(part.free_whole):
            return  # no pending job is small enough for the free GPUs: nothing can start
        prof = _Profile(t, float(part.free_whole), part.end_times, part.end_gpus)
        lazy = not part.pools and not part.shards[1]
        bp = _Pass(part, prof, t, t + self.cfg.bf_window_s, part.shortest_limits() if lazy else {})
        for job in self._in_order(part, t, self.cfg.bf_max_job_test):
            if self.state[job] != PENDING or self.eligible[job] > t:
                continue
            kind, g = self.kind[job], self.gpus[job]
            if kind != WHOLE or (g == 1 and not lazy and self._slice_choice(part, job)):
                # slices and shards: start now if free (no reservation model for pools; a
                # partition without them has no slice for a 1-GPU job either)
                self._try_start(part, job, t)
                continue
            lim = self.limit[job]
            if lazy and bp.hopeless(g, lim):
                bp.owed.append(job)  # cannot start: its reservation can wait
                if bp.news and bp.nothing_fits():
                    break
                continue
            if g > prof.avail[0]:
                bp.owed.append(job)
                continue
            if not self._pay(bp, g if lazy else 0, lim):
                bp.fail(g, lim)  # the reservations before it leave it no room
                bp.owed.append(job)
                continue
            if prof.free_until(g, t + lim) and self._try_start(part, job, t):
                prof.hold(0, g, t + lim)
            else:
                bp.fail(g, lim)
                bp.owed.append(job)
                if not lazy:
                    self._pay(bp)
            if lazy:
                if bp.nothing_fits():
                    break
            elif not (part.pool_pending and part.has_free()) and (
                prof.avail[0] <= 0 or prof.free_for(t + part.min_limit) < bp.smallest
            ):
                break

    def _pay(self, bp: _Pass, g: float = 0, lim: float = 0.0) -> bool:
        """Make the owed reservations of a backfill pass, in test order, up to
        bf_max_reservations (past it, blocked jobs get none). Given a job's `g` GPUs and
        `lim`, stop as soon as they leave it no room (False); the rest stay owed."""
        cap, part, prof, t = self.cfg.bf_max_reservations, bp.part, bp.prof, bp.t
        owed, per = bp.owed, bp.part.max_cap or 1
        while owed:
            if bp.reserved >= cap:
                owed.clear()
                break
            b = owed.popleft()
            bg = self.gpus[b]
            after = self._node_earliest(part, bg, t) if bg > 1 else t
            nodes = float(-(-int(bg) // per) * per)  # the GPUs of the whole nodes it takes
            start = prof.reserve(bg, self.limit[b], bp.horizon, nodes, after)
            bp.reserved += 1
            # a reservation from after the job's window leaves the window as it was
            if g and owed and start <= t + lim and not prof.free_until(g, t + lim):
                return False
        return True

    def _node_earliest(self, part: _Part, g: float, t: float) -> float:
        """The earliest time particular nodes hold a job of `g` whole GPUs, from the running
        jobs' expected ends (start + limit) on each node: one node with `g` free, or, for a
        job larger than a node, `ceil(g / node)` whole idle nodes. The pooled profile alone
        would find `g` free GPUs spread over several nodes and reserve too early: every
        backfill pass then holds the partition's free GPUs for a job that cannot start on
        them (calibration, docs/replay.md). The answers are kept by the partition until one
        of its nodes changes (`_Part.touch`), each node's own until that node does."""
        per = part.max_cap
        if g <= per:
            gi = int(g)
            best = part.earliest_min.get(gi) if not part.earliest_stale.get(gi, True) else None
            if best is None:
                best = part.earliest_min[gi] = float(self._earliest_on_one_node(part, gi).min())
        else:
            need = -(-int(g) // per)
            idle = self._idle_times(part)
            best = idle[need - 1] if len(idle) >= need else INF
        return max(best, t)

    def _idle_times(self, part: _Part) -> list[float]:
        """When each full-size node is expected idle (its jobs' last expected end; -INF: idle
        now), soonest first; the nodes changed since the last call are re-sorted in."""
        idle, at, expected = part.idle_at, part.idle_of, self.expected_end
        for node in part.idle_stale:
            old = at[node]
            if old is not None:
                del idle[bisect.bisect_left(idle, old)]
            at[node] = new = max((expected[v] for v in part.node_jobs[node]), default=-INF)
            bisect.insort(idle, new)
        part.idle_stale.clear()
        return idle

    def _earliest_on_one_node(self, part: _Part, g: int) -> np.ndarray:
        """Per node, the soonest expected time it has `g` GPUs free (-INF: now; INF: never,
        or a node too small); the nodes changed since the last call are worked out again."""
        at = part.earliest.get(g)
        if at is None:
            at = part.earliest[g] = np.empty(len(part.cap))
            stale: Iterable[int] = range(len(part.cap))
            part.earliest_stale[g] = set()
        else:
            stale = part.earliest_stale[g]
        expected, cap, free_of = self.expected_end, part.cap, part.free
        for node in stale:
            free, e = free_of[node], INF
            if cap[node] < g:
                pass
            elif free >= g:
                e = -INF
            else:
                for end, c in sorted((expected[v], c) for v, c in part.node_jobs[node].items()):
                    free += c
                    if free >= g:
                        e = end
                        break
            at[node] = e
        part.earliest_stale[g] = set()
        return at


class _Pass:
    """One backfill pass's bookkeeping: owed reservations, what failed, node-earliest cache."""

    def __init__(
        self, part: _Part, prof: _Profile, t: float, horizon: float, shortest: dict
    ) -> None:
        self.part, self.prof, self.t, self.horizon = part, prof, t, horizon
        # GPU count -> the shortest limit of a pending whole-GPU job of that count
        self.shortest: dict[float, float] = shortest
        self.owed: deque[int] = deque()  # tested jobs not started: reservations not made yet
        self.reserved = 0
        # GPU count -> the shortest limit of a job of at most as many GPUs that did not
        # start: a later job of at least as many GPUs and limit cannot start either (its
        # GPUs are not free now, or not on any node, or not for its limit; all only shrink)
        self.failed: dict[float, float] = {}
        self.news = False  # `failed` changed since `nothing_fits` last looked
        self.smallest = min((g for g, c in part.size_hist.items() if c > 0), default=INF)

    def fail(self, g: float, lim: float) -> None:
        failed = self.failed
        for size in (*self.part.size_hist, g):
            if size >= g and lim < failed.get(size, INF):
                failed[size] = lim
                self.news = True

    def hopeless(self, g: float, lim: float) -> bool:
        """No start is possible for a job of `g` GPUs and limit `lim` at this point."""
        if lim >= self.failed.get(g, INF):
            return True
        prof = self.prof
        if g > prof.avail[0] or not self.part.can_place(int(g)):
            self.fail(g, 0.0)  # not free now, or on no node: for any limit
            return True
        if not prof.free_until(g, self.t + lim):
            self.fail(g, lim)
            return True
        return False

    def nothing_fits(self) -> bool:
        """No pending job of any GPU count can start: its count's shortest limit failed, or
        it does not fit the profile so far (nothing later in the pass can start)."""
        self.news = False
        prof, t, failed = self.prof, self.t, self.failed
        return all(
            lim >= failed.get(g, INF) or prof.free_for(t + lim) < g
            for g, lim in self.shortest.items()
        )


class _Profile:
    """Free whole GPUs over time for one backfill pass: `avail[i]` from `times[i]` on.

    `times` and `avail` are views of the first `len` entries of two buffers with room to
    grow, so that a new step is one shift of each tail, not a copy of the whole profile."""

    def __init__(self, t: float, free: float, ends: array.array, gpus: array.array) -> None:
        # frombuffer views are dropped at the end of __init__ (the arrays may grow again)
        end = np.maximum(np.frombuffer(ends, dtype=float), t + 1.0)
        cum = free + np.frombuffer(gpus, dtype=float).cumsum()
        if len(end):  # one step per distinct time: the last cumulative value of a run
            last = np.empty(len(end), dtype=bool)
            last[:-1] = end[1:] != end[:-1]
            last[-1] = True
            end, cum = end[last], cum[last]
        m = len(end) + 1
        room = m + 64
        self._times, self._avail = np.empty(room), np.empty(room)
        self._times[0], self._avail[0] = t, free
        self._times[1:m], self._avail[1:m] = end, cum
        self.times, self.avail = self._times[:m], self._avail[:m]

    def free_until(self, g: float, until: float) -> bool:
        """`g` GPUs free from now until `until` (every step before it)."""
        k = int(self.times.searchsorted(until, "right"))
        return bool(self.avail[:k].min() >= g)

    def free_for(self, until: float) -> float:
        """The GPUs free from now until `until` (the least of every step before it)."""
        return float(self.avail[: int(self.times.searchsorted(until, "right"))].min())

    def _step(self, at: float) -> int:
        """Make `at` a step of the profile (free GPUs there as just before it); its index."""
        times = self.times
        k = int(times.searchsorted(at))
        m = len(times)
        if k < m and times[k] == at:
            return k
        if m == len(self._times):  # full: twice the room
            grown_t, grown_a = np.empty(2 * m), np.empty(2 * m)
            grown_t[:m], grown_a[:m] = self._times, self._avail
            self._times, self._avail = grown_t, grown_a
        bt, ba = self._times, self._avail
        bt[k + 1 : m + 1] = bt[k:m]  # overlapping: numpy copies through a buffer
        ba[k + 1 : m + 1] = ba[k:m]
        bt[k] = at
        ba[k] = ba[k - 1] if k > 0 else ba[0]
        self.times, self.avail = bt[: m + 1], ba[: m + 1]
        return k

    def hold(self, i: int, g: float, until: float) -> None:
        """Take `g` GPUs from step i until `until`."""
        k = self._step(until)
        self.avail[i:k] -= g

    def reserve(
        self, g: float, lim: float, horizon: float, node_gpus: float, after: float = -INF
    ) -> float:
        """Reserve for a job of `g` GPUs and `lim` seconds at the earliest step where `g` are
        free that long; nothing when that is past `horizon` (bf_window). The reservation's
        start (INF: none).

        Slurm's backfill plans whole nodes: a pending job's reservation takes the node(s) it
        would start on out of every later job's plan for its window, whatever GPUs of them it
        leaves idle (slurmctld's `_dump_job_sched` shows 1-GPU jobs reserved one after the
        other on an 8-GPU node). In this pooled profile the reservation holds up to
        `node_gpus` (its whole nodes' GPUs) at each step of the window; not before `after`
        (when particular nodes hold the job: `Replay._node_earliest`)."""
        if after > horizon:
            return INF
        first = self._step(after) if after > self.times[0] else 0
        i = self._earliest(g, lim, first)
        if i < 0 or self.times[i] > horizon:
            return INF
        start = float(self.times[i])
        k = self._step(start + lim)
        held = self.avail[i:k]
        held -= np.minimum(held, max(node_gpus, g))
        return start

    def _earliest(self, g: float, lim: float, first: int) -> int:
        """The first step from `first` on where `g` GPUs stay free for `lim` (every step up
        to its time + lim); -1 if none. Only the start of a run of steps with `g` free can
        be it (a later step of the run has less of the run left), and it is when the run's
        end (the first step short of `g`; none: INF) comes after its time + lim."""
        times = self.times
        ok = self.avail[first:] >= g
        # usually the first run: the profile mostly rises as running jobs end (ndarray
        # methods, not np.* wrappers: this runs ~a million times in a long replay)
        i = int(ok.argmax())
        if not ok[i]:
            return -1
        i += first
        stop = int(times.searchsorted(times[i] + lim, "right"))
        window = ok[i - first : stop - first]
        if _all(window):
            return i
        # the other runs at once: their starts and ends (change points, alternating)
        edge = (ok[1:] != ok[:-1]).nonzero()[0]
        edge = edge[1:] if ok[0] else edge[2:]  # less the first run (tried above), its end
        starts, ends = edge[0::2], edge[1::2]
        n = len(ends)
        if n:  # (edges are one short of their steps: + 1 below)
            tt = times[first + 1 :]
            good = tt[ends] > tt[starts[:n]] + lim
            k = int(good.argmax())
            if good[k]:
                return first + 1 + int(starts[k])
        # the last run, if it lasts to the end of the plan
        return first + 1 + int(starts[n]) if len(starts) > n else -1


_all = np.logical_and.reduce  # ndarray.all() without its Python-level wrapper


def _next_tick(t: float, period: float, phase: float) -> float:
    """The first time phase + k * period strictly after t (robust to float rounding)."""
    nxt = (math.floor((t - phase) / period) + 1) * period + phase
    while nxt <= t:
        nxt += period
    return nxt


def _spread(submit: np.ndarray) -> np.ndarray:
    """Whole-second submits (sacct's) spread over their second in the trace's (job id)
    order: the k-th of m jobs submitted in second S at S + k/m. Other times are kept."""
    out = np.array(submit, dtype=float)
    whole = np.isfinite(out) & (out == np.floor(out))
    if not len(out) or not whole.any():
        return out
    # position of each job within its run of equal submits (the trace is sorted by submit)
    new_run = np.ones(len(out), dtype=bool)
    new_run[1:] = out[1:] != out[:-1]
    starts = np.flatnonzero(new_run)
    lengths = np.diff(np.append(starts, len(out)))
    pos = np.arange(len(out)) - np.repeat(starts, lengths)
    size = np.repeat(lengths, lengths)
    return np.where(whole, out + pos / size, out)


def replay(trace: ReplayTrace, model: ClusterModel, config: SchedConfig | None = None):
    """Replay `trace` on `model`; the ReplayOutcome."""
    return Replay(trace, model, config or SchedConfig()).run()
