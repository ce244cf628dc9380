"""Why a partition's baseline misses the record: the GPU-time something outside the model held.

A partition is not calibrated (`advice.calibrate`) when its baseline replay waits much less,
or much more, than what sacct recorded. The replay schedules what the dump shows on the
partition's GPUs; whatever else held the cluster (a limit, a reservation, nodes down, jobs
missing from the dump, another partition on the same nodes, priority order) is not in it. This
module infers that from the recorded starts, per partition and hour, on a one-minute grid:

- **unseen GPU-hours**: the record's own occupancy (its runs, GPU-equivalents) leaves
  `free(t)` of the partition's GPUs free; a recorded job that waited (from a minute after its
  submit, `wait_slack_s`, to its recorded start) while its request fitted `free(t)` waited
  *with room*. At each minute, min(free GPUs, GPUs of the jobs waiting with room) is GPU-time
  the model would have given out and the cluster did not: something outside the model held it.
  GPUs are pooled per partition (the record's node placement is not read), so a job that needed
  particular nodes may count as having had room: an upper bound where jobs span nodes.
- **delayed GPU-hours** (the reverse): GPU-time of jobs the record started at least a minute
  before the baseline replay did (request x delay): room the cluster had that the model lacks.

The most likely cause is picked by these rules, in order (`explain_partition`):

1. The replay waits longer than the record (baseline mean wait > recorded):
   `more-capacity` when the record ran more GPUs at once than the model's partition holds;
   else `replay-slower` (node placement, or the model's order; evidence: the delayed GPU-hours).
2. `reservation-or-outage`: the longest block of at least `MIN_BLOCK_HOURS` consecutive hours
   in which nothing started on the partition while jobs waited with room for at least 90 % of
   each hour holds at least `BLOCK_SHARE` of the unseen GPU-hours.
3. `account-limit` / `user-limit` (with owners: the dump's Account and User): at most a third
   of the owners (and at least one other owner with jobs on the partition) hold `LIMIT_SHARE`
   of the GPU-hours waited with room, and each of them was at its own highest recorded running
   count (jobs, or GPUs) for at least `LIMIT_AT_CAP` of the time its jobs waited with room.
   The account is named when its waiting jobs came from several users, else the user.
4. `priority-order`: the unseen GPU-hours are under `PRIORITY_UNSEEN_SHARE` of the GPU-hours
   jobs waited at all (the partition was full while they waited) and the record started jobs
   out of submit order: the waits are who went first (multifactor priority, fairshare).
5. `shared-nodes`: the hourly unseen GPUs follow another partition's recorded busy GPUs
   (correlation >= `SHARED_CORRELATION` over the hours with waiting): the two share nodes
   (the cluster model gives each node to one partition).
6. `unseen-work`: otherwise, jobs waited with room spread over owners and hours: jobs missing
   from the dump, or other work on the partition's nodes.
7. `unknown`: no job waited with room and none was delayed.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from slurmgpu.replay.jobs import ReplayTrace

STEP_S = 60.0  # the occupancy grid
SLOT_S = 600.0  # the inferred load's resolution (`advice.background`)
MIN_BLOCK_HOURS = 2  # a reservation or outage: at least this many hours with no start
BLOCK_SHARE = 0.5  # ... holding at least half of the unseen GPU-hours
LIMIT_SHARE = 0.8  # a limit: a few owners hold 80 % of the GPU-hours waited with room ...
LIMIT_AT_CAP = 0.8  # ... while at their highest running count 80 % of that time
PRIORITY_UNSEEN_SHARE = 0.1  # priority order: under 10 % of the waited GPU-hours had room
SHARED_CORRELATION = 0.7  # shared nodes: hourly unseen GPUs vs another partition's busy GPUs

CAUSES = {
    "more-capacity": "more GPUs than the model holds",
    "replay-slower": "the model has less room than the cluster had",
    "reservation-or-outage": "a reservation or an outage",
    "account-limit": "a per-account limit",
    "user-limit": "a per-user limit",
    "priority-order": "priority or fairshare order",
    "shared-nodes": "nodes shared with another partition",
    "unseen-work": "jobs missing from the dump or other work on the nodes",
    "unknown": "not found",
}


@dataclass(frozen=True)
class JobOwners:
    """Per trace job (in the trace's order): the dump's User and Account ("?" unknown)."""

    user: np.ndarray
    account: np.ndarray


@dataclass(frozen=True)
class HourMiss:
    hour: str  # the hour's start, UTC (`2026-05-03T14:00Z`)
    unseen_gpu_hours: float
    delayed_gpu_hours: float
    starts: int  # recorded starts on the partition in the hour
    waiting_jobs: int  # most recorded jobs waiting at once in the hour

    def to_dict(self) -> dict[str, Any]:
        return {
            "hour": self.hour,
            "unseen_gpu_hours": round(self.unseen_gpu_hours, 3),
            "delayed_gpu_hours": round(self.delayed_gpu_hours, 3),
            "starts": self.starts,
            "waiting_jobs": self.waiting_jobs,
        }


@dataclass(frozen=True)
class Explanation:
    """The most likely reason a partition's baseline misses the record, with its evidence."""

    cause: str  # a key of CAUSES
    evidence: str
    unseen_gpu_hours: float  # recorded jobs waited while the record left room for them
    delayed_gpu_hours: float  # the replay held back jobs the record started
    suspect: str | None  # the account, user, other partition or hours it names
    by_hour: tuple[HourMiss, ...]  # the hours with unseen or delayed GPU-time
    # the GPU-hours a background load must hold for the waits with room to happen (enough
    # of the free GPUs that the smallest request waiting with room does not fit), and that
    # load per `SLOT_S` slot: (slot start in trace seconds, GPUs); `advice.background`
    held_gpu_hours: float = 0.0
    hold: tuple[tuple[float, int], ...] = field(default=(), repr=False, compare=False)

    @property
    def label(self) -> str:
        return CAUSES[self.cause]

    def text(self) -> str:
        return f"{self.label} ({self.cause}): {self.evidence}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "cause": self.cause,
            "label": self.label,
            "evidence": self.evidence,
            "suspect": self.suspect,
            "unseen_gpu_hours": round(self.unseen_gpu_hours, 3),
            "delayed_gpu_hours": round(self.delayed_gpu_hours, 3),
            "held_gpu_hours": round(self.held_gpu_hours, 3),
            "by_hour": [h.to_dict() for h in self.by_hour],
        }


# --------------------------------------------------------------------------- owners
def owners_from_history(
    trace: ReplayTrace,
    sacct_files: Sequence[str | os.PathLike[str]],
    options: Any,
) -> JobOwners | None:
    """The trace's jobs' users and accounts, read again from the dumps (or the store) the
    trace came from (`options`: the `ReplayOptions` that loaded it). None when unreadable."""
    from slurmgpu.replay.from_accounting import load_history

    loaded = load_history(
        sacct_files, timezone=options.timezone, store=options.store, clusters=options.clusters
    )
    return owners_from_frame(trace, loaded.frame)


def owners_from_frame(trace: ReplayTrace, frame: Any) -> JobOwners | None:
    """The trace's jobs' users and accounts from the accounting frame it was built from
    (matched by job id). None when the frame has no user or account column."""
    if not {"job_id", "user", "account"} <= set(frame.columns):
        return None
    users: dict[str, str] = {}
    accounts: dict[str, str] = {}
    for job, user, account in zip(frame["job_id"], frame["user"], frame["account"], strict=True):
        key = str(job)
        users.setdefault(key, str(user) if isinstance(user, str) and user else "?")
        accounts.setdefault(key, str(account) if isinstance(account, str) and account else "?")
    ids = [str(j) for j in trace.job_id]
    return JobOwners(
        user=np.array([users.get(j, "?") for j in ids], dtype=object),
        account=np.array([accounts.get(j, "?") for j in ids], dtype=object),
    )


OwnersSource = JobOwners | Callable[[], "JobOwners | None"] | None


def resolve_owners(owners: OwnersSource) -> JobOwners | None:
    """`owners` itself, or what its loader returns (called only when an explanation needs it)."""
    return owners() if callable(owners) else owners


# --------------------------------------------------------------------------- the grid
@dataclass
class _Grid:
    g0: float  # trace seconds of the grid's first step (a whole UTC hour)
    n: int
    epoch_s: int

    def idx(self, t: np.ndarray) -> np.ndarray:
        return np.clip(np.floor((np.asarray(t, float) - self.g0) / STEP_S), 0, self.n).astype(
            np.int64
        )

    def level(self, start: np.ndarray, end: np.ndarray, weight: np.ndarray) -> np.ndarray:
        """Per step: the sum of `weight` over the intervals [start, end) covering it."""
        d = np.zeros(self.n + 1)
        np.add.at(d, self.idx(start), weight)
        np.add.at(d, self.idx(end), -weight)
        return np.cumsum(d)[: self.n]

    def hours(self) -> int:
        return int(np.ceil(self.n * STEP_S / 3600))

    def per_hour(self, values: np.ndarray, how: str = "sum") -> np.ndarray:
        per = int(3600 / STEP_S)
        padded = np.zeros(self.hours() * per)
        padded[: self.n] = values
        shaped = padded.reshape(-1, per)
        return shaped.sum(axis=1) if how == "sum" else shaped.max(axis=1)

    def hour_label(self, h: int) -> str:
        t = self.epoch_s + self.g0 + h * 3600
        return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:00Z")


def _grid(trace: ReplayTrace, base_start: np.ndarray) -> _Grid:
    times = [trace.submit_s, trace.recorded_start_s, trace.recorded_end_s, base_start]
    if trace.cancel_s is not None:
        times.append(trace.cancel_s)
    finite = np.concatenate([t[np.isfinite(t)] for t in times])
    lo, hi = float(finite.min()), float(finite.max())
    g0 = np.floor((trace.epoch_s + lo) / 3600) * 3600 - trace.epoch_s
    return _Grid(float(g0), int(np.ceil((hi - g0) / STEP_S)) + 1, trace.epoch_s)


def _request(trace: ReplayTrace) -> np.ndarray:
    return np.where(np.isfinite(trace.gpu_equiv), trace.gpu_equiv, trace.gpus)


def _busy(trace: ReplayTrace, grid: _Grid, k: int) -> np.ndarray:
    """The record's busy GPUs (GPU-equivalents) of partition `k` per step."""
    rec = trace.recorded_runs
    if rec is None:
        ok = (trace.partition == k) & np.isfinite(trace.recorded_start_s)
        ok &= np.isfinite(trace.recorded_end_s)
        return grid.level(trace.recorded_start_s[ok], trace.recorded_end_s[ok], _request(trace)[ok])
    ok = (rec.partition == k) & np.isfinite(rec.start_s) & np.isfinite(rec.end_s)
    return grid.level(rec.start_s[ok], rec.end_s[ok], rec.equiv[ok])


def _classes(req: np.ndarray) -> np.ndarray:
    """Request sizes to test room for (at most 48: larger sets rounded up to quantiles)."""
    sizes = np.unique(req)
    if len(sizes) <= 48:
        return sizes
    return np.unique(np.quantile(req, np.linspace(0, 1, 48), method="higher"))


# --------------------------------------------------------------------------- explain
def explain_partition(
    trace: ReplayTrace,
    base_start: np.ndarray,
    name: str,
    gpus: Mapping[str, float],
    owners: JobOwners | None = None,
    wait_slack_s: float = 60.0,
    grid: _Grid | None = None,
) -> Explanation:
    """The unseen and delayed GPU-time of partition `name` per hour, and its likely cause
    (the rules of this module's docstring). `base_start`: the baseline replay's start per job
    (inf: not started); `gpus`: the model's GPUs per partition."""
    grid = grid or _grid(trace, base_start)
    k = trace.partitions.index(name)
    cap = float(gpus.get(name, 0))
    busy = _busy(trace, grid, k)
    free = np.maximum(cap - busy, 0.0)
    mine = trace.partition == k
    req = _request(trace)
    rec_start = trace.recorded_start_s
    cancel = trace.cancel_s if trace.cancel_s is not None else np.full(len(trace), np.nan)
    until = np.where(np.isfinite(rec_start), rec_start, cancel)
    ws = trace.submit_s + wait_slack_s
    waited = mine & np.isfinite(until) & (until > ws)
    jobs = np.flatnonzero(waited)
    s_idx, e_idx = grid.idx(ws[jobs]), grid.idx(until[jobs])
    # room per job size, the waiting-with-room demand per step, each job's room-steps
    fit_demand = np.zeros(grid.n)
    room_steps = np.zeros(len(jobs))
    sizes = _classes(req[jobs]) if len(jobs) else np.array([])
    cls = np.searchsorted(sizes, req[jobs]) if len(jobs) else np.array([], int)
    min_fit = np.full(grid.n, np.inf)  # the smallest request waiting with room
    for c, size in enumerate(sizes):
        room = free >= size - 1e-9
        of = cls == c
        level = grid.level(ws[jobs][of], until[jobs][of], req[jobs][of])
        fit_demand += room * level
        min_fit = np.where(np.isinf(min_fit) & room & (level > 1e-9), size, min_fit)
        counts = np.concatenate([[0], np.cumsum(room)])
        room_steps[of] = counts[e_idx[of]] - counts[s_idx[of]]
    unseen = np.minimum(free, fit_demand)
    # the load that explains the waits: enough of the free GPUs that the smallest request
    # waiting with room no longer fits (`advice.background` holds it, `--inferred-load`)
    fits = np.isfinite(min_fit)
    hold = np.zeros(grid.n)
    hold[fits] = np.minimum(np.floor(free[fits] - min_fit[fits] + 1e-9) + 1, np.ceil(free[fits]))
    step_h = STEP_S / 3600
    unseen_h = grid.per_hour(unseen) * step_h
    room_frac = grid.per_hour(unseen > 1e-9) / (3600 / STEP_S)
    waiting_now = grid.level(ws[jobs], until[jobs], np.ones(len(jobs)))
    waiting_h = grid.per_hour(waiting_now, "max").round().astype(int)
    started = mine & np.isfinite(rec_start)
    starts_h = np.bincount(grid.idx(rec_start[started]) // int(3600 / STEP_S),
                           minlength=grid.hours())[: grid.hours()]  # fmt: skip
    # the reverse: jobs the replay started later than the record
    late = mine & np.isfinite(rec_start) & np.isfinite(base_start)
    late &= base_start - rec_start > wait_slack_s
    delayed = grid.level(rec_start[late], base_start[late], req[late])
    delayed_h = grid.per_hour(delayed) * step_h
    by_hour = tuple(
        HourMiss(grid.hour_label(h), float(unseen_h[h]), float(delayed_h[h]), int(starts_h[h]),
                 int(waiting_h[h]))
        for h in range(grid.hours())
        if unseen_h[h] > 1e-6 or delayed_h[h] > 1e-6
    )  # fmt: skip
    total_unseen, total_delayed = float(unseen_h.sum()), float(delayed_h.sum())
    per_slot = int(SLOT_S / STEP_S)
    slots = np.zeros(-(-grid.n // per_slot) * per_slot)
    slots[: grid.n] = hold
    slot_gpus = np.floor(slots.reshape(-1, per_slot).mean(axis=1) + 0.5).astype(int)
    held = tuple((grid.g0 + i * SLOT_S, int(g)) for i, g in enumerate(slot_gpus) if g > 0)
    facts = _Facts(
        trace, grid, name, k, cap, busy, free, jobs, req, until, ws, room_steps, unseen_h,
        room_frac, starts_h, waiting_h, total_unseen, total_delayed, owners,
    )  # fmt: skip
    cause, evidence, suspect = _cause(facts, base_start)
    return Explanation(
        cause, evidence, total_unseen, total_delayed, suspect, by_hour,
        held_gpu_hours=float(hold.sum() * step_h), hold=held,
    )  # fmt: skip


@dataclass
class _Facts:
    trace: ReplayTrace
    grid: _Grid
    name: str
    k: int
    cap: float
    busy: np.ndarray
    free: np.ndarray
    jobs: np.ndarray  # indices of the jobs that waited
    req: np.ndarray
    until: np.ndarray
    ws: np.ndarray
    room_steps: np.ndarray  # per waiting job
    unseen_h: np.ndarray
    room_frac: np.ndarray
    starts_h: np.ndarray
    waiting_h: np.ndarray
    unseen: float
    delayed: float
    owners: JobOwners | None


def _cause(f: _Facts, base_start: np.ndarray) -> tuple[str, str, str | None]:
    t = f.trace
    mine = t.partition == f.k
    rec_wait = (t.recorded_start_s - t.submit_s)[mine]
    rec_wait = rec_wait[np.isfinite(rec_wait)]
    base_wait = (base_start - t.submit_s)[mine]
    base_wait = base_wait[np.isfinite(base_wait)]
    rec_mean = float(rec_wait.mean()) if len(rec_wait) else 0.0
    base_mean = float(base_wait.mean()) if len(base_wait) else 0.0
    if base_mean > rec_mean:
        return _replay_slower(f)
    if f.unseen <= 1e-6 and not len(f.jobs):
        return "unknown", "no recorded job waited on the partition", None
    block = _block(f)
    if block is not None:
        return block
    limit = _limit(f)
    if limit is not None:
        return limit
    waited_gpu_h = float((f.req[f.jobs] * (f.until[f.jobs] - f.ws[f.jobs])).sum() / 3600)
    if f.unseen < PRIORITY_UNSEEN_SHARE * waited_gpu_h:
        return _priority(f, waited_gpu_h)
    shared = _shared(f)
    if shared is not None:
        return shared
    return _unseen_work(f)


def _replay_slower(f: _Facts) -> tuple[str, str, str | None]:
    peak = float(f.busy.max()) if len(f.busy) else 0.0
    if peak > f.cap + 1e-6:
        when = f.grid.hour_label(int(np.argmax(f.busy)) // int(3600 / STEP_S))
        return (
            "more-capacity",
            f"the record ran up to {peak:,.0f} GPUs at once on {f.name} (hour {when}), the "
            f"model holds {f.cap:,.0f}: the partition had more GPUs than the model (give its "
            f"real size with --capacity or --inventory); the replay delays "
            f"{f.delayed:,.1f} GPU-hours of jobs the record started",
            None,
        )
    return (
        "replay-slower",
        f"the replay delays {f.delayed:,.1f} GPU-hours of jobs the record started sooner, "
        f"while the record never ran more than {peak:,.0f} of the model's {f.cap:,.0f} GPUs: "
        "the cluster had room the model does not (node placement: try --gpus-per-node or "
        "--inventory; or jobs ended sooner than their recorded run)",
        None,
    )


def _block(f: _Facts) -> tuple[str, str, str] | None:
    quiet = (f.starts_h == 0) & (f.room_frac >= 0.9)
    best, run_start, best_span = 0, 0, (0, 0)
    for h, q in enumerate(np.append(quiet, False)):
        if q and (h == 0 or not quiet[h - 1]):
            run_start = h
        if not q and h > 0 and quiet[h - 1] and h - run_start > best:
            best, best_span = h - run_start, (run_start, h)
    if best < MIN_BLOCK_HOURS:
        return None
    h0, h1 = best_span
    held = float(f.unseen_h[h0:h1].sum())
    if held < BLOCK_SHARE * f.unseen:
        return None
    per = int(3600 / STEP_S)
    free_mean = float(f.free[h0 * per : min(h1 * per, f.grid.n)].mean())
    waiting = int(f.waiting_h[h0:h1].max())
    span = f"{f.grid.hour_label(h0)} to {f.grid.hour_label(h1)}"
    return (
        "reservation-or-outage",
        f"from {span} ({best} h) nothing started on {f.name} while up to {waiting} jobs waited "
        f"and {free_mean:,.1f} of its {f.cap:,.0f} GPUs were free on average: {held:,.1f} of "
        f"the {f.unseen:,.1f} unseen GPU-hours (a reservation or nodes down then: sacctmgr "
        "show event, scontrol show reservation)",
        span,
    )


def _limit(f: _Facts) -> tuple[str, str, str] | None:
    if f.owners is None or not len(f.jobs):
        return None
    found = {}
    for dim in ("account", "user"):
        found[dim] = _limit_by(f, dim, getattr(f.owners, dim))
    acc, usr = found["account"], found["user"]
    if acc is not None and (acc[3] > 1 or usr is None):
        return acc[:3]
    if usr is not None:
        return usr[:3]
    return None


def _limit_by(f: _Facts, dim: str, who: np.ndarray) -> tuple[str, str, str, int] | None:
    t = f.trace
    mine = np.flatnonzero(t.partition == f.k)
    owners_all = sorted(set(who[mine]))
    room_gpu_h = f.req[f.jobs] * f.room_steps * STEP_S / 3600
    total = float(room_gpu_h.sum())
    if total <= 1e-9 or len(owners_all) < 2:
        return None
    held: dict[str, float] = {}
    for o, g in zip(who[f.jobs], room_gpu_h, strict=True):
        held[o] = held.get(o, 0.0) + float(g)
    ranked = sorted(held.items(), key=lambda x: -x[1])
    top, acc = [], 0.0
    for o, g in ranked:
        if acc >= LIMIT_SHARE * total:
            break
        top.append(o)
        acc += g
    if len(top) > max(1, len(owners_all) // 3):
        return None
    caps = []
    for o in top:
        cap = _at_cap(f, who, o)
        if cap is None or cap[2] < LIMIT_AT_CAP:
            return None
        caps.append((o, *cap))
    o, jobs_cap, gpus_cap, at_cap, by = caps[0]
    others = total - acc
    users = len(set(f.owners.user[f.jobs][who[f.jobs] == o])) if f.owners is not None else 0
    what = "jobs" if by == "jobs" else "GPUs"
    names = ", ".join(top)
    kind = "per-account (QOS GrpTRES/GrpJobs, association MaxJobs)" if dim == "account" else (
        "per-user (QOS MaxJobsPerUser/MaxTRESPerUser)")  # fmt: skip
    return (
        f"{dim}-limit",
        f"{dim} {names} held {acc / total:.0%} of the GPU-hours waited with room on {f.name} "
        f"({acc:,.1f} of {total:,.1f}); {o} never ran more than {jobs_cap} jobs ({gpus_cap:,.0f} "
        f"GPUs) at once there and was at that many {what} {at_cap:.0%} of the time its jobs "
        f"waited with room, while the other {len(owners_all) - len(top)} {dim}s' jobs waited "
        f"with room {others:,.1f} GPU-hours: a {kind} limit would hold them (sacctmgr show "
        "assoc, sacctmgr show qos)",
        names,
        users,
    )


def _at_cap(f: _Facts, who: np.ndarray, o: str) -> tuple[int, float, float, str] | None:
    """(its most jobs running at once, its most GPUs, the share of its waiting-with-room
    steps at that count (jobs or GPUs, whichever is higher), which)."""
    t = f.trace
    g = f.grid
    mine = (t.partition == f.k) & (who == o)
    ran = mine & np.isfinite(t.recorded_start_s) & np.isfinite(t.recorded_end_s)
    running = g.level(t.recorded_start_s[ran], t.recorded_end_s[ran], np.ones(int(ran.sum())))
    running_gpus = g.level(t.recorded_start_s[ran], t.recorded_end_s[ran], f.req[ran])
    jobs_cap, gpus_cap = float(running.max(initial=0)), float(running_gpus.max(initial=0))
    if jobs_cap < 1:
        return None
    theirs = who[f.jobs] == o
    idx = f.jobs[theirs]
    if not len(idx):
        return None
    smallest = float(f.req[idx].min())
    waiting = g.level(f.ws[idx], f.until[idx], np.ones(len(idx))) > 0.5
    with_room = waiting & (f.free >= smallest - 1e-9)
    n = int(with_room.sum())
    if not n:
        return None
    by_jobs = float((running[with_room] >= jobs_cap - 1e-9).sum() / n)
    by_gpus = float((running_gpus[with_room] >= gpus_cap - 1e-9).sum() / n)
    if by_jobs >= by_gpus:
        return round(jobs_cap), gpus_cap, by_jobs, "jobs"
    return round(jobs_cap), gpus_cap, by_gpus, "gpus"


def _priority(f: _Facts, waited_gpu_h: float) -> tuple[str, str, None]:
    t = f.trace
    mine = np.flatnonzero((t.partition == f.k) & np.isfinite(t.recorded_start_s))
    order = mine[np.argsort(t.submit_s[mine], kind="stable")]
    starts = t.recorded_start_s[order]
    later_min = np.minimum.accumulate(starts[::-1])[::-1]  # earliest start of later submits
    overtaken = np.zeros(len(order), bool)
    overtaken[:-1] = later_min[1:] < starts[:-1] - 1e-9
    share = float(overtaken.mean()) if len(order) else 0.0
    busy_mean = float(f.busy.mean()) if len(f.busy) else 0.0
    return (
        "priority-order",
        f"jobs on {f.name} waited {waited_gpu_h:,.1f} GPU-hours, only {f.unseen:,.1f} of them "
        f"with free GPUs (the record kept {busy_mean:,.1f} of {f.cap:,.0f} GPUs busy on "
        f"average); {share:.0%} of its jobs were overtaken by a job submitted later: who went "
        "first is what differs (multifactor priority, fairshare: sshare, sprio)",
        None,
    )


def _shared(f: _Facts) -> tuple[str, str, str] | None:
    t = f.trace
    hours = f.waiting_h > 0
    if hours.sum() < 3 or f.unseen_h[hours].std() <= 1e-9:
        return None
    best = None
    for j, other in enumerate(t.partitions):
        if j == f.k:
            continue
        theirs = f.grid.per_hour(_busy(t, f.grid, j)) * STEP_S / 3600
        if theirs[hours].std() <= 1e-9:
            continue
        r = float(np.corrcoef(f.unseen_h[hours], theirs[hours])[0, 1])
        if r >= SHARED_CORRELATION and (best is None or r > best[0]):
            best = (r, other)
    if best is None:
        return None
    r, other = best
    return (
        "shared-nodes",
        f"the unseen GPUs of {f.name} per hour follow {other}'s busy GPUs (correlation "
        f"{r:.2f} over {int(hours.sum())} hours with waiting jobs; {f.unseen:,.1f} unseen "
        f"GPU-hours): the two partitions likely share nodes (scontrol show partition), which "
        "the model does not hold",
        other,
    )


def _unseen_work(f: _Facts) -> tuple[str, str, None]:
    hours = f.waiting_h > 0
    with_unseen = f.unseen_h > 1e-6
    median = float(np.median(f.unseen_h[with_unseen])) if with_unseen.any() else 0.0
    spread = ""
    if f.owners is not None and len(f.jobs):
        accounts = f.owners.account[f.jobs]
        users = set(f.owners.user[f.jobs])
        room = f.req[f.jobs] * f.room_steps
        top = max(sorted(set(accounts)), key=lambda a: float(room[accounts == a].sum()))
        share = float(room[accounts == top].sum() / room.sum()) if room.sum() > 0 else 0.0
        spread = (f", spread over {len(set(accounts))} accounts and {len(users)} users "
                  f"(the largest, {top}, {share:.0%})")  # fmt: skip
    return (
        "unseen-work",
        f"jobs on {f.name} waited with free GPUs in {int(with_unseen.sum())} of "
        f"{int(hours.sum())} hours with waiting jobs, {median:,.1f} GPUs unseen in the median "
        f"such hour (of {f.cap:,.0f}; {f.unseen:,.1f} GPU-hours in all){spread}: jobs missing "
        "from the dump, or other work on the partition's nodes, held about that much",
        None,
    )


def explain(
    trace: ReplayTrace,
    base_start: np.ndarray,
    names: Sequence[str],
    gpus: Mapping[str, float],
    owners: JobOwners | None = None,
    wait_slack_s: float = 60.0,
) -> dict[str, Explanation]:
    """{partition: its Explanation} for each of `names`."""
    if not names or not len(trace):
        return {}
    grid = _grid(trace, base_start)
    return {
        n: explain_partition(trace, base_start, n, gpus, owners, wait_slack_s, grid)
        for n in names
        if n in trace.partitions
    }
