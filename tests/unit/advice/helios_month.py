"""A Helios/Philly-shaped month for the calibration and the optimizer, with its "recorded" history.

The shape (Helios, Hu et al. SC'21, and Philly, Jeon et al. ATC'19: most GPU jobs ask for one GPU
and run minutes; a few multi-node jobs run for hours; time limits are the partition's maximum,
far above the elapsed time; some jobs are cancelled, a few while still pending; users submit
sweeps of dozens of jobs in the same minute):

- `burst`: many 1-GPU jobs of seconds to minutes in same-minute bursts (a sweep a user
  submits), some 4- and 8-GPU jobs and a few 2-node (16-GPU) jobs of hours; half idle, short
  recorded waits. The donor the node-move heuristic likes.
- `big`: 8- to 32-GPU jobs of hours, offered more than it holds: a backlog of days. The taker.
- `idle`: a half-idle partition (a quarter allocated) of 1-GPU jobs of an hour and a few
  8-GPU ones: the donor that can give nodes without harm.
- QOS `p0` (priority 1000, a tenth of `big`'s jobs) and `normal` (100).
- Every time limit is 24 h or 72 h, whatever the job ran. 4 % of jobs are cancelled within an
  hour of their submit; those still pending then never start (in the dump: CANCELLED, no
  Start); the others ran to their end.

The "recorded" starts come from `reference_schedule`: a per-node scheduler written here,
independently of the replay engine, the way slurmctld schedules (`sched/backfill` with
`select/cons_tres`): a main pass in priority order that stops at a partition's first job
that does not fit; a backfill pass every `bf_interval` that gives each job it tests, in
priority order, the earliest start on **particular nodes** (a single node with the GPUs free,
or whole idle nodes for a multi-node job) and reserves those whole nodes for its time limit;
a later job starts now only on nodes free of those reservations for its own limit. It is
slow (Python per node) and simple to check, not a model of slurmctld's every detail: it is
the ground the engine's node-blind parts are measured against, not a substitute for a real
slurmctld recording (docs/replay.md "Calibration").
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from slurmgpu.replay.jobs import ReplayJob, ReplayTrace

DAY = 86400.0
PARTS = {"burst": (12, 8), "big": (8, 8), "idle": (8, 8)}  # partition -> (nodes, GPUs each)
QOS_PRIORITY = {"p0": 1000, "normal": 100}


@dataclass
class GenJob:
    job_id: int
    partition: str
    qos: str
    user: str
    submit: float
    duration: float
    limit: float
    gpus: int
    cancel_at: float | None = None  # cancelled at this time if still pending
    start: float | None = None  # the reference scheduler's start


def helios_month(seed: int = 1, days: float = 3.0, burst_load: float = 0.5,
                 big_load: float = 1.3, idle_load: float = 0.25) -> list[GenJob]:  # fmt: skip
    """The jobs (no starts yet), in submit order with job ids in that order."""
    rng = np.random.default_rng(seed)
    span = days * DAY
    jobs: list[GenJob] = []

    def limit() -> float:
        return float(rng.choice([DAY, 3 * DAY], p=[0.7, 0.3]))

    # burst: sweeps of 1-GPU jobs submitted within one minute
    cap = PARTS["burst"][0] * PARTS["burst"][1]
    small_gpu_s = burst_load * 0.55 * cap * span
    while small_gpu_s > 0:
        t0 = float(rng.uniform(0, span))
        user = f"u{int(rng.integers(0, 40))}"
        for _ in range(int(rng.integers(10, 120))):
            d = float(np.clip(rng.lognormal(5.5, 1.1), 10, 4 * 3600))
            jobs.append(GenJob(0, "burst", "normal", user, float(np.floor(t0 + rng.uniform(0, 60))),
                               d, limit(), 1))  # fmt: skip
            small_gpu_s -= d
    # burst: some 4/8-GPU and a few 2-node jobs of hours
    big_gpu_s = burst_load * 0.45 * cap * span
    while big_gpu_s > 0:
        g = int(rng.choice([4, 8, 16], p=[0.5, 0.35, 0.15]))
        d = float(np.clip(rng.lognormal(8.6, 0.8), 600, 20 * 3600))
        jobs.append(GenJob(0, "burst", "normal", f"u{int(rng.integers(0, 40))}",
                           float(np.floor(rng.uniform(0, span))), d, limit(), g))  # fmt: skip
        big_gpu_s -= g * d
    # big: backlogged 8..32-GPU jobs
    cap = PARTS["big"][0] * PARTS["big"][1]
    gpu_s = big_load * cap * span
    while gpu_s > 0:
        g = int(rng.choice([8, 16, 32], p=[0.6, 0.3, 0.1]))
        d = float(np.clip(rng.lognormal(8.8, 0.7), 900, 30 * 3600))
        q = "p0" if rng.random() < 0.1 else "normal"
        jobs.append(GenJob(0, "big", q, f"v{int(rng.integers(0, 20))}",
                           float(np.floor(rng.uniform(0, span))), d, limit(), g))  # fmt: skip
        gpu_s -= g * d
    # idle: a half-idle partition of 1-GPU jobs of an hour or so and a few 8-GPU ones
    cap = PARTS["idle"][0] * PARTS["idle"][1]
    gpu_s = idle_load * cap * span
    while gpu_s > 0:
        g = int(rng.choice([1, 8], p=[0.8, 0.2]))
        d = float(np.clip(rng.lognormal(7.5, 0.8), 120, 12 * 3600))
        jobs.append(GenJob(0, "idle", "normal", f"w{int(rng.integers(0, 10))}",
                           float(np.floor(rng.uniform(0, span))), d, limit(), g))  # fmt: skip
        gpu_s -= g * d
    order = sorted(range(len(jobs)), key=lambda i: (jobs[i].submit, i))
    out = [jobs[i] for i in order]
    for k, j in enumerate(out, 1):
        j.job_id = k
        j.duration = float(np.floor(j.duration))
        if rng.random() < 0.04:  # cancelled while pending, within an hour
            j.cancel_at = j.submit + float(np.floor(rng.uniform(60, 3600)))
    return out


class _Node:
    __slots__ = ("cap", "running")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.running: dict[int, tuple[float, int]] = {}  # job -> (expected end, GPUs)

    def free(self) -> int:
        return self.cap - sum(g for _, g in self.running.values())

    def free_at(self, s: float) -> int:
        return self.cap - sum(g for e, g in self.running.values() if e > s)


def reference_schedule(jobs: list[GenJob], parts: dict[str, tuple[int, int]] = PARTS,
                       bf_interval: float = 30.0, bf_window: float = DAY,
                       depth: int = 60) -> list[GenJob]:  # fmt: skip
    """Fill each job's `start` (None: cancelled while pending, or never started)."""
    for name, (n, per) in parts.items():
        mine = [j for j in jobs if j.partition == name]
        _schedule_partition(mine, [_Node(per) for _ in range(n)], bf_interval, bf_window, depth)
    return jobs


def _place_now(nodes: list[_Node], g: int, blocked: set[int]) -> list[int] | None:
    if g <= nodes[0].cap:
        fits = [(nd.free(), k) for k, nd in enumerate(nodes) if k not in blocked and nd.free() >= g]
        return [min(fits)[1]] if fits else None
    need = -(-g // nodes[0].cap)
    idle = [k for k, nd in enumerate(nodes) if k not in blocked and not nd.running]
    return idle[:need] if len(idle) >= need else None


def _schedule_partition(jobs, nodes, bf_interval, bf_window, depth) -> None:
    events: list[tuple[float, int, int]] = []  # (time, kind 0 end / 1 cancel, job index)
    pending: list[int] = []
    nxt = 0
    alloc: dict[int, list[int]] = {}
    next_bf = 0.0
    changed = False

    def key(i: int) -> tuple:
        return (-QOS_PRIORITY[jobs[i].qos], jobs[i].job_id)

    def start(i: int, where: list[int], t: float) -> None:
        j = jobs[i]
        j.start = t
        alloc[i] = where
        per = nodes[0].cap
        left = j.gpus
        for k in where:
            take = min(left, per)
            nodes[k].running[i] = (t + j.limit, take)
            left -= take
        heapq.heappush(events, (t + j.duration, 0, i))
        pending.remove(i)

    while nxt < len(jobs) or events or pending:
        t = min(jobs[nxt].submit if nxt < len(jobs) else np.inf,
                events[0][0] if events else np.inf,
                next_bf if pending else np.inf)  # fmt: skip
        if t == np.inf:
            break
        while events and events[0][0] <= t:
            _, kind, i = heapq.heappop(events)
            if kind == 0:
                for k in alloc.pop(i):
                    nodes[k].running.pop(i)
            elif jobs[i].start is None and i in pending:
                pending.remove(i)
            changed = True
        while nxt < len(jobs) and jobs[nxt].submit <= t:
            pending.append(nxt)
            if jobs[nxt].cancel_at is not None:
                heapq.heappush(events, (jobs[nxt].cancel_at, 1, nxt))
            nxt += 1
            changed = True
        pending.sort(key=key)
        # main pass: priority order, stop at the first job that does not fit
        for i in list(pending):
            where = _place_now(nodes, jobs[i].gpus, set())
            if where is None:
                break
            start(i, where, t)
        if t >= next_bf:
            if changed and pending:
                _backfill(jobs, nodes, pending, t, bf_window, depth, start)
            changed = False
            next_bf = (np.floor(t / bf_interval) + 1) * bf_interval


def _backfill(jobs, nodes, pending, t, bf_window, depth, start) -> None:
    reserved: list[list[tuple[float, float]]] = [[] for _ in nodes]  # per node (from, to)
    for i in list(pending)[:depth]:
        j = jobs[i]
        lim = j.limit
        cands = sorted({t, *(e for nd in nodes for e, _ in nd.running.values() if e > t),
                        *(b for r in reserved for _, b in r if b > t)})  # fmt: skip
        chosen = None
        for s in cands:
            if s > t + bf_window:
                break

            def ok(k: int, s: float = s, lim: float = lim) -> bool:
                return not any(a < s + lim and s < b for a, b in reserved[k])

            if j.gpus <= nodes[0].cap:
                fits = [(nodes[k].free_at(s), k) for k in range(len(nodes))
                        if ok(k) and nodes[k].free_at(s) >= j.gpus]  # fmt: skip
                if fits:
                    chosen = (s, [min(fits)[1]])
                    break
            else:
                need = -(-j.gpus // nodes[0].cap)
                idle = [
                    k for k in range(len(nodes)) if ok(k) and nodes[k].free_at(s) == nodes[k].cap
                ]
                if len(idle) >= need:
                    chosen = (s, idle[:need])
                    break
        if chosen is None:
            continue
        s, where = chosen
        if s == t:
            start(i, where, t)
        else:
            for k in where:
                reserved[k].append((s, s + lim))


def replay_trace_of(jobs: list[GenJob]) -> ReplayTrace:
    """The jobs as the replay reads them from sacct (`from_accounting`: a job cancelled while
    pending waits until its cancel time), with the reference's starts as recorded."""
    rows = []
    for j in jobs:
        if j.start is None:  # cancelled while pending: replayed as such (from_accounting)
            rows.append(ReplayJob(str(j.job_id), j.partition, j.qos, j.qos, j.submit, j.limit,
                                  j.limit, float(j.gpus), cancel_s=j.cancel_at))  # fmt: skip
            continue
        rows.append(ReplayJob(str(j.job_id), j.partition, j.qos, j.qos, j.submit, j.duration,
                              j.limit, float(j.gpus), recorded_start_s=j.start,
                              recorded_end_s=j.start + j.duration))  # fmt: skip
    return ReplayTrace.from_jobs(rows)


HEADER = ("JobIDRaw|JobID|Cluster|Partition|QOS|Account|User|Submit|Start|End|ElapsedRaw|"
          "TimelimitRaw|State|NNodes|ReqTRES|AllocTRES|NodeList")  # fmt: skip


def sacct_text(jobs: list[GenJob], epoch: int = 1_780_000_000) -> str:
    """The month as `sacct -P` text with Unix-second times (SLURM_TIME_FORMAT=%s)."""
    lines = [HEADER]
    for j in jobs:
        sub = int(epoch + j.submit)
        nodes = max(1, -(-j.gpus // 8))
        req = f"billing={j.gpus},cpu={j.gpus * 4},gres/gpu={j.gpus},mem=16G,node={nodes}"
        limit_min = int(j.limit // 60)
        if j.start is None:
            end = int(epoch + (j.cancel_at or j.submit))
            head = f"{j.job_id}|{j.job_id}|helios|{j.partition}|{j.qos}|lab|{j.user}|{sub}"
            lines.append(f"{head}|Unknown|{end}|0|{limit_min}|CANCELLED by 0|{nodes}|{req}||None")
            continue
        st = int(epoch + j.start)
        en = int(st + j.duration)
        head = f"{j.job_id}|{j.job_id}|helios|{j.partition}|{j.qos}|lab|{j.user}|{sub}|{st}|{en}"
        lines.append(f"{head}|{int(j.duration)}|{limit_min}|COMPLETED|{nodes}|{req}|{req}|n1")
    return "\n".join(lines) + "\n"


def month(seed: int = 1, **kw) -> list[GenJob]:
    """A generated month with its reference starts."""
    return reference_schedule(helios_month(seed, **kw))
