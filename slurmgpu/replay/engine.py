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
  free-GPU-over-time profile in numpy arrays; reservations of blocked jobs are computed only
  when a later job could start now (the only thing they can change within a pass).
"""

from __future__ import annotations

import array
import bisect
import heapq
import math
from collections import deque
from collections.abc import Iterator
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
        self.requeued: list[list[tuple[float, int]]] = [[] for _ in range(n_qos)]
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
        self.pool_pending = 0  # pending MIG / shard jobs
        self.dirty = False  # something changed: run the main pass
        self.kick_at = INF  # when the scheduler takes the jobs submitted since its last pass
        self.changed = False  # something changed since the last backfill pass
        self.min_limit = 0.0  # the shortest time limit of any of its jobs (backfill's cut)

    def fits_some(self, free: float) -> bool:
        """Whether some pending whole-GPU job asks for at most `free` GPUs."""
        return any(c > 0 and g <= free for g, c in self.size_hist.items())

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
    def _set_free(self, node: int, value: int) -> None:
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
            if tick <= 0 or t >= next_main:
                next_main = INF
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
            heapq.heappush(part.requeued[q], (self.eligible[job], job))
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
        else:  # the grace time is over: the victim is killed
            self._kill(job, t)

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
        22.05), when its `_ELIGIBLE` event puts it in its QOS's requeue heap. Until then its
        old FIFO entry is stale (`where` names no queue): no pass may start it early (one
        did, before: the main pass took it from its FIFO and a partition's pending count went
        wrong, leaving a job never started)."""
        self.state[job] = PENDING
        self.eligible[job] = t + self.cfg.requeue_delay_s
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
        # Slurm keeps an integer priority: equal ones fall back to job id (submit order)
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

    def _live_requeued(self, entry: tuple[float, int], q: int) -> bool:
        elig, job = entry
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
            iters.append(iter([j for _, j in sorted(live)]))
        state = self.state
        heads: list[tuple[tuple[float, int], int, int]] = []
        for k, it in enumerate(iters):
            for job in it:
                if state[job] == PENDING:
                    heads.append(((-self._priority(job, t), job), k, job))
                    break
        heapq.heapify(heads)
        count = 0
        while heads and count < limit:
            _, k, job = heapq.heappop(heads)
            yield job
            count += 1
            for nxt in iters[k]:
                if state[nxt] == PENDING:
                    heapq.heappush(heads, ((-self._priority(nxt, t), nxt), k, nxt))
                    break

    # ----------------------------------------------------------------------- main pass
    def _main_pass(self, part: _Part, t: float) -> None:
        if not part.pending:
            return
        # the heads of the FIFOs in priority order; after a start only that source's next
        # job is looked at (priorities do not change within a pass)
        cand = [((-self._priority(job, t), job), src, job) for src, job in self._heads(part)]
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
                heapq.heapreplace(cand, ((-self._priority(nxt, t), nxt), src, nxt))

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
        order, lowest QOS priority first and then the **oldest** (lowest job id: running
        jobs' priorities are alike and the job list is in id order), are taken out one at a
        time until `job` fits (one node with `g` GPUs free, or enough whole idle nodes for a
        multi-node job); the victims are those taken out that ran on the nodes it gets. None
        when even all of them would not make room."""
        per = part.max_cap
        running = (v for v in part.running if self.alloc[v][0] == "n")
        cands = sorted(
            (v for v in running if self._preemptable(part, job, v)),
            key=lambda v: (self.qos_priority[self.qos_of[v]], v),
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
        delay the expected start of any higher-priority job tested before it."""
        if not part.pool_pending and not part.fits_some(part.free_whole):
            return  # no pending job is small enough for the free GPUs: nothing can start
        cfg = self.cfg
        # the free-GPU profile: now, then each expected end (a job past its limit is expected
        # to end any moment)
        prof = _Profile(t, float(part.free_whole), part.end_times, part.end_gpus)
        blocked: list[int] = []  # tested jobs that cannot start now (reservations owed)
        reserved = 0
        horizon = t + cfg.bf_window_s
        # a later job can start now only if its GPUs stay free for its limit, at least the
        # partition's shortest: once fewer than the smallest pending job's GPUs stay free
        # that long, nothing later in this pass can start and its reservations change
        # nothing (the profile is dropped after the pass); a deep queue stops there
        smallest = min((g for g, c in part.size_hist.items() if c > 0), default=INF)
        # the earliest time particular nodes hold a job of g GPUs, by GPU count (per pass)
        earliest: dict[float, float] = {}
        shortest = t + part.min_limit
        for job in self._in_order(part, t, cfg.bf_max_job_test):
            if self.state[job] != PENDING or self.eligible[job] > t:
                continue
            kind, g = self.kind[job], self.gpus[job]
            if kind != WHOLE or (g == 1 and self._slice_choice(part, job)):
                # slices and shards: start now if free (no reservation model for pools)
                self._try_start(part, job, t)
                continue
            if g > prof.avail[0]:
                blocked.append(job)
                continue
            for b in blocked:
                if reserved < cfg.bf_max_reservations:
                    nodes = self._node_gpus(part, b)
                    bg = self.gpus[b]
                    after = self._node_earliest(part, bg, t, earliest) if bg > 1 else t
                    prof.reserve(bg, self.limit[b], horizon, nodes, after)
                    reserved += 1
            blocked = []
            lim = self.limit[job]
            if prof.free_until(g, t + lim) and self._try_start(part, job, t):
                prof.hold(0, g, t + lim)
                _forget(earliest, self.alloc[job])  # its nodes changed
            elif reserved < cfg.bf_max_reservations:
                after = self._node_earliest(part, g, t, earliest) if g > 1 else t
                prof.reserve(g, lim, horizon, self._node_gpus(part, job), after)
                reserved += 1
            if not (part.pool_pending and part.has_free()) and (
                prof.avail[0] <= 0 or prof.free_for(shortest) < smallest
            ):
                break

    def _node_earliest(self, part: _Part, g: float, t: float, cache: dict) -> float:
        """The earliest time particular nodes hold a job of `g` whole GPUs, from the running
        jobs' expected ends (start + limit) on each node: one node with `g` free, or, for a
        job larger than a node, `ceil(g / node)` whole idle nodes. The pooled profile alone
        would find `g` free GPUs spread over several nodes and reserve too early: every
        backfill pass then holds the partition's free GPUs for a job that cannot start on
        them (calibration, docs/replay.md). `cache` holds, for one pass, the answer per GPU
        count and each node's (expected end, GPUs) list; a start clears it."""
        if g in cache:
            return cache[g]
        per = part.max_cap
        expected = self.expected_end
        best = INF
        if g <= per:
            for node, jobs in enumerate(part.node_jobs):
                free = part.free[node]
                if part.cap[node] < g:
                    continue
                if free >= g:
                    best = t
                    break
                ends = cache.get(("n", node))
                if ends is None:
                    ends = cache[("n", node)] = sorted((expected[v], c) for v, c in jobs.items())
                for e, c in ends:
                    if e >= best:
                        break
                    free += c
                    if free >= g:
                        best = e
                        break
        else:
            need = -(-int(g) // per)
            idle = cache.get("idle")
            if idle is None:  # when each full-size node is idle, soonest first
                idle = cache["idle"] = sorted(
                    max((expected[v] for v in jobs), default=t)
                    for node, jobs in enumerate(part.node_jobs)
                    if part.cap[node] == per
                )
            best = idle[need - 1] if len(idle) >= need else INF
        cache[g] = best = max(best, t)
        return best

    def _node_gpus(self, part: _Part, job: int) -> float:
        """The GPUs of the whole nodes a backfill reservation for `job` takes."""
        per = part.max_cap or 1
        return float(-(-int(self.gpus[job]) // per) * per)


class _Profile:
    """Free whole GPUs over time for one backfill pass: `avail[i]` from `times[i]` on."""

    def __init__(self, t: float, free: float, ends: array.array, gpus: array.array) -> None:
        # frombuffer views are dropped at the end of __init__ (the arrays may grow again)
        end = np.maximum(np.frombuffer(ends, dtype=float), t + 1.0)
        cum = free + np.frombuffer(gpus, dtype=float).cumsum()
        if len(end):  # one step per distinct time: the last cumulative value of a run
            last = np.empty(len(end), dtype=bool)
            last[:-1] = end[1:] != end[:-1]
            last[-1] = True
            end, cum = end[last], cum[last]
        self.times = np.concatenate(([t], end))
        self.avail = np.concatenate(([free], cum))

    def free_until(self, g: float, until: float) -> bool:
        """`g` GPUs free from now until `until` (every step before it)."""
        k = int(self.times.searchsorted(until, "right"))
        return bool(self.avail[:k].min() >= g)

    def free_for(self, until: float) -> float:
        """The GPUs free from now until `until` (the least of every step before it)."""
        return float(self.avail[: int(self.times.searchsorted(until, "right"))].min())

    def _step(self, at: float) -> int:
        """Make `at` a step of the profile (free GPUs there as just before it); its index."""
        k = int(self.times.searchsorted(at))
        if k < len(self.times) and self.times[k] == at:
            return k
        # by hand: np.insert costs ~20x more than these copies at this size
        m = len(self.times)
        times, avail = np.empty(m + 1), np.empty(m + 1)
        times[:k], times[k], times[k + 1 :] = self.times[:k], at, self.times[k:]
        avail[:k], avail[k + 1 :] = self.avail[:k], self.avail[k:]
        avail[k] = self.avail[k - 1] if k > 0 else self.avail[0]
        self.times, self.avail = times, avail
        return k

    def hold(self, i: int, g: float, until: float) -> None:
        """Take `g` GPUs from step i until `until`."""
        k = self._step(until)
        self.avail[i:k] -= g

    def reserve(
        self, g: float, lim: float, horizon: float, node_gpus: float, after: float = -INF
    ) -> None:
        """Reserve for a job of `g` GPUs and `lim` seconds at the earliest step where `g` are
        free that long; nothing when that is past `horizon` (bf_window).

        Slurm's backfill plans whole nodes: a pending job's reservation takes the node(s) it
        would start on out of every later job's plan for its window, whatever GPUs of them it
        leaves idle (slurmctld's `_dump_job_sched` shows 1-GPU jobs reserved one after the
        other on an 8-GPU node). In this pooled profile the reservation holds up to
        `node_gpus` (its whole nodes' GPUs) at each step of the window; not before `after`
        (when particular nodes hold the job: `Replay._node_earliest`)."""
        if after > horizon:
            return
        first = 0
        if after > self.times[0]:
            first = self._step(after)
        times = self.times
        ok = self.avail >= g
        ok[:first] = False
        i = int(ok.argmax())
        if not ok[i]:
            return  # never g free in the plan
        # the earliest step from which g stay free for lim: usually the first one that has g
        # (the profile mostly rises as running jobs end); ndarray methods, not np.* wrappers,
        # because this runs ~a million times in a long replay
        while True:
            if times[i] > horizon:
                return
            stop = int(times.searchsorted(times[i] + lim, "right"))
            window = ok[i:stop]
            if _all(window):
                break
            j = i + int(window.argmin())  # the first step short of g: start after it
            k = int(ok[j:].argmax())
            if not ok[j + k]:
                return
            i = j + k
        k = self._step(times[i] + lim)
        held = self.avail[i:k]
        held -= np.minimum(held, max(node_gpus, g))


def _forget(cache: dict, alloc: tuple | None) -> None:
    """Drop what a start changed from a pass's `_node_earliest` cache: every answer, the
    idle times, and the started job's nodes' lists (a slice start changes no node)."""
    for key in [k for k in cache if not isinstance(k, tuple)]:
        del cache[key]
    if alloc is not None and alloc[0] == "n":
        for node, _ in alloc[1]:
            cache.pop(("n", node), None)


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
