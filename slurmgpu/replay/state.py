"""The replay's state as flat typed arrays: what `engine.replay` builds from a trace and a model.

Why this shape: the compiled engine (numba, `_jit.py`) works on numpy arrays, not on Python
objects, so each record kind is a struct of arrays in a named tuple:

- `Jobs` (one entry per job): the request and the work, then the live state (state, run id,
  eligibility, where its live queue entry is, its allocation, its expected end);
- `Nodes` (every node of every partition, partitions' nodes contiguous): capacity, free GPUs,
  the jobs on each (a row of `slots`), and what backfill works out from them, kept per node
  with a version number (`ver`) until that node changes;
- `Parts` (one per trace partition, `exists` false where the model lacks it): free whole GPUs,
  nodes by free count (`bucket`), MIG pools (`pool_*`, one per profile, in the model's order)
  and shards, pending counts (of MIG/shard jobs; of 1-GPU jobs the slice rule may move,
  `Jobs.sliceable`, set at submit; by GPU count and, per count, by time limit: a sorted table
  of the limits with counts and a pointer to the shortest), the running jobs, and their expected
  ends sorted (`end_*`, backfill's profile is built from them);
- `Queues`: per (partition, QOS) a FIFO that is a fixed slice of one array of job ids in job
  (= submit) order, with head and tail, and a heap of requeued jobs (a row of three arrays:
  requeue second, job, eligibility);
- `Events`: the event heap, the run log and the loop's own counters;
- `Config`: the scheduler settings and the QOS table, as numbers.

Everything a job or a node points at is an index; nothing is allocated per event. The
compiled code gets each tuple as a struct (`_jit.as_struct`), so that the few arrays that
grow (the heaps, the run log) can be replaced by larger ones; `loop.advance` hands those back.
"""

from __future__ import annotations

import math
from collections import namedtuple
from dataclasses import dataclass

import numpy as np

from slurmgpu.errors import UsageError
from slurmgpu.model.catalog import COMPUTE_SLICES_PER_GPU, model_for_type
from slurmgpu.replay.cluster import ClusterModel
from slurmgpu.replay.jobs import MIG, WHOLE, ReplayTrace

INF = math.inf

# job states (engine.py re-exports them)
FUTURE, PENDING, RUNNING, GRACE, DONE, UNRUNNABLE, CANCELLED = range(7)
# what a running job holds
A_NONE, A_NODES, A_MIG, A_SHARDS = range(4)
# event kinds (ends before kills before eligibility at the same second)
E_END, E_KILL, E_ELIGIBLE, E_KICK, E_CANCEL = range(5)
# PreemptMode of a QOS
M_REQUEUE, M_CANCEL, M_OFF = range(3)
MODES = {"requeue": M_REQUEUE, "cancel": M_CANCEL, "off": M_OFF}
NO_QUEUE = -(1 << 30)  # `where` of a job in no queue (a requeued job before its BeginTime)
# why a job did not run: the reasons `ReplayOutcome.unrunnable_reasons` names
REASONS = (
    "partition not in the cluster model",
    "asks more whole GPUs than its partition has",
    "MIG profile not offered by its partition",
    "more shards than its partition has",
    "preempted and cancelled (PreemptMode=cancel)",
    "cancelled while pending (as recorded)",
)
R_NO_PARTITION, R_TOO_BIG, R_NO_PROFILE, R_NO_SHARDS, R_PREEMPT_CANCEL, R_CANCELLED = range(6)
# Events.count / Events.times slots
C_NEXT, C_PREEMPTIONS, C_DIRTY_ANY, C_REASON_SEQ, C_HEAP, C_RUNS, C_PASSES, C_END_PASS = range(8)
T_NEXT_BF, T_NEXT_MAIN, T_NOW = range(3)

Config = namedtuple(
    "Config",
    "weight_qos weight_age max_age period bf_interval bf_max_job_test bf_window bf_max_res "
    "backfill requeue_delay tick tick_phase bf_phase submit_delay release_delay headroom "
    "sched_on_end qos_term qos_priority preempts grace mode",
)
Jobs = namedtuple(
    "Jobs",
    "submit duration limit gpus kind part qos need cancel pool size lim fpos noff "
    "state eligible rank start end run_start run_id akind apool acount anodes on_slice awaiting "
    "sliceable "
    "victim_of expected_end where rpos",
)
Nodes = namedtuple("Nodes", "cap free part slot_job slot_gpus ver e_val e_ver idle_of idle_stale")
Parts = namedtuple(
    "Parts",
    "exists node_lo node_hi max_cap full_n free_whole bucket idle_full ver "
    "pool_lo pool_hi pool_free pool_total pool_mem pool_share "
    "sh_free sh_total sh_per gpu_mem min_limit "
    "pending pool_pending slice_pending dirty changed kick_at "
    "sizes size_hist seen lim_lo lim_vals lim_count lim_min "
    "run_lo run_n run_jobs end_lo end_n end_t end_j end_g "
    "idle_lo idle_vals stale_n stale "
    "emin_val emin_ver",
)
Queues = namedtuple("Queues", "fifo fifo_head fifo_tail rq_r rq_j rq_e rq_n")
Events = namedtuple("Events", "heap_t heap_k runs_f runs_i count times reasons reason_seq")


def spread(submit: np.ndarray) -> np.ndarray:
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


def build_config(trace: ReplayTrace, model: ClusterModel, config) -> Config:
    """The settings and the QOS table (QOS by the trace's QOS index)."""
    qos_specs = [model.qos_spec(q) for q in trace.qos_names]
    # Slurm normalizes a QOS's priority by the largest of ALL QOS, used or not
    max_prio = max((q.priority for q in (*qos_specs, *model.qos)), default=0)
    nq = len(qos_specs)
    pos = {q: k for k, q in enumerate(trace.qos_names)}
    preempts = np.zeros((max(nq, 1), max(nq, 1)), dtype=np.bool_)
    for k, q in enumerate(qos_specs):
        for v in q.preempts:
            if v in pos:
                preempts[k, pos[v]] = True
    return Config(
        weight_qos=float(config.priority_weight_qos),
        weight_age=float(config.priority_weight_age),
        max_age=float(config.priority_max_age_s),
        period=float(config.priority_calc_period_s),
        bf_interval=float(config.bf_interval_s),
        bf_max_job_test=int(config.bf_max_job_test),
        bf_window=float(config.bf_window_s),
        bf_max_res=int(config.bf_max_reservations),
        backfill=bool(config.backfill),
        requeue_delay=float(config.requeue_delay_s),
        tick=float(config.sched_tick_s),
        tick_phase=float(config.sched_tick_phase_s),
        bf_phase=float(config.bf_phase_s),
        submit_delay=float(config.submit_sched_delay_s),
        release_delay=float(config.release_delay_s),
        headroom=float(config.slice_headroom),
        sched_on_end=bool(config.sched_on_end),
        qos_term=np.array(
            [
                config.priority_weight_qos * q.priority / max_prio if max_prio > 0 else 0.0
                for q in qos_specs
            ]
            or [0.0],
            dtype=float,
        ),
        qos_priority=np.array([q.priority for q in qos_specs] or [0], dtype=np.int64),
        preempts=preempts,
        grace=np.array([q.grace_s for q in qos_specs] or [0], dtype=float),
        mode=np.array([MODES.get(q.mode, M_REQUEUE) for q in qos_specs] or [0], dtype=np.int64),
    )


def _pools(pm) -> list[list]:
    """A partition's MIG pools, one per profile in the model's order: [free, total, memory
    MiB, compute share of one GPU]."""
    gpu_model = model_for_type(pm.gpu_type or "")
    pools: dict[str, list] = {}
    for pool in pm.slices:
        mem = dict(pool.memory_mib)
        for prof, count in pool.layout:
            entry = pools.setdefault(prof, [0, 0, float(mem.get(prof, 0)), 0.0])
            entry[0] += count * pool.gpus
            entry[1] += count * pool.gpus
            mp = gpu_model.profile(prof) if gpu_model else None
            # the share of one GPU: 1g is 1/7 of an A100/H100, 1/4 of an A30
            entry[3] = mp.gpu_fraction if mp else 1 / COMPUTE_SLICES_PER_GPU
    return [[prof, *v] for prof, v in pools.items()]


@dataclass
class _Layout:
    """The partitions as the model has them, flattened: nodes, MIG pools, shards."""

    exists: np.ndarray
    node_lo: np.ndarray
    node_hi: np.ndarray
    cap: np.ndarray
    node_part: np.ndarray
    max_cap: np.ndarray
    full_n: np.ndarray
    pool_lo: np.ndarray
    pool_hi: np.ndarray
    pools: list[list]  # [profile, free, total, memory MiB, share]
    job_pool: np.ndarray  # per job: its MIG profile's pool in its partition (-1: none)
    sh_total: np.ndarray
    sh_per: np.ndarray
    gpu_mem: np.ndarray
    zero: np.ndarray  # per partition: jobs asking for no GPU (a slot each, no GPU)


def _layout(trace: ReplayTrace, model: ClusterModel) -> _Layout:
    nparts, n = len(trace.partitions), len(trace)
    part, kind = trace.partition.astype(np.int64), trace.kind.astype(np.int64)
    ints = lambda: np.zeros(nparts, np.int64)  # noqa: E731
    out = _Layout(
        exists=np.zeros(nparts, np.bool_), node_lo=ints(), node_hi=ints(),
        cap=np.zeros(0, np.int64), node_part=np.zeros(0, np.int64), max_cap=ints(),
        full_n=ints(), pool_lo=ints(), pool_hi=ints(), pools=[],
        job_pool=np.full(n, -1, np.int64), sh_total=ints(), sh_per=ints(),
        gpu_mem=np.full(nparts, np.nan),
        zero=np.bincount(part[trace.gpus.astype(np.int64) < 1], minlength=nparts)[:nparts],
    )  # fmt: skip
    caps: list[int] = []
    node_part: list[int] = []
    for k, name in enumerate(trace.partitions):
        out.node_lo[k], out.pool_lo[k] = len(caps), len(out.pools)
        try:
            pm = model.partition(name)
        except UsageError:  # a partition the model lacks: its jobs cannot run
            pm = None
        if pm is not None:
            out.exists[k] = True
            caps += [int(c) for c in pm.nodes]
            node_part += [k] * len(pm.nodes)
            out.max_cap[k] = max(pm.nodes, default=0)
            full = sum(1 for c in pm.nodes if c == out.max_cap[k])
            out.full_n[k] = full if out.max_cap[k] else 0
            rows = _pools(pm)
            mine = np.flatnonzero((part == k) & (kind == MIG))
            names = [trace.profiles[p] if p >= 0 else "" for p in trace.mig_profile[mine]]
            where = {row[0]: len(out.pools) + i for i, row in enumerate(rows)}
            out.job_pool[mine] = [where.get(name, -1) for name in names]
            out.pools += rows
            out.sh_total[k] = sum(p.gpus * p.per_gpu for p in pm.shards)
            out.sh_per[k] = max((p.per_gpu for p in pm.shards), default=0)
            out.gpu_mem[k] = pm.gpu_memory_mib or np.nan
        out.node_hi[k], out.pool_hi[k] = len(caps), len(out.pools)
    out.cap = np.array(caps, dtype=np.int64)
    out.node_part = np.array(node_part, dtype=np.int64)
    return out


def _nodes(lay: _Layout) -> Nodes:
    nnodes, gmax = max(len(lay.cap), 1), int(max(lay.max_cap.max(initial=0), 1))
    full = np.zeros(len(lay.cap), np.bool_)
    for k in range(len(lay.exists)):
        lo, hi = lay.node_lo[k], lay.node_hi[k]
        full[lo:hi] = lay.cap[lo:hi] == lay.max_cap[k]
    slots = gmax + int(lay.zero.max(initial=0))  # a job takes at least a GPU, or a slot
    return Nodes(
        cap=lay.cap,
        free=lay.cap.copy(),
        part=lay.node_part,
        slot_job=np.full((nnodes, slots), -1, np.int64),
        slot_gpus=np.zeros((nnodes, slots), np.int64),
        ver=np.zeros(nnodes, np.int64),
        e_val=np.zeros((gmax, nnodes)),
        e_ver=np.full((gmax, nnodes), -1, np.int64),
        idle_of=np.where(full, -INF, np.nan) if len(lay.cap) else np.zeros(1),
        idle_stale=np.zeros(nnodes, np.bool_),
    )


def _limit_table(trace: ReplayTrace) -> tuple[np.ndarray, ...]:
    """The whole-GPU jobs' sizes (sorted GPU counts), each job's size index, and per
    (partition, size) the sorted distinct time limits: (sizes, size, lim, lim_lo, lim_vals)
    with `lim` a job's index into `lim_vals` and `lim_lo` each table's start."""
    n, nparts = len(trace), len(trace.partitions)
    gpus, whole = trace.gpus.astype(float), trace.kind == WHOLE
    sizes = np.unique(gpus[whole]) if whole.any() else np.zeros(0)
    nsz = max(len(sizes), 1)
    size = np.full(n, -1, np.int64)
    size[whole] = np.searchsorted(sizes, gpus[whole])
    lim = np.full(n, -1, np.int64)
    lim_lo = np.zeros(nparts * nsz + 1, np.int64)
    lim_vals = np.zeros(0)
    if whole.any():
        w = np.flatnonzero(whole)
        group = trace.partition.astype(np.int64)[w] * nsz + size[w]
        uniq, inverse = np.unique(np.stack([group.astype(float), trace.timelimit_s[w]]),
                                  axis=1, return_inverse=True)  # fmt: skip
        lim[w] = inverse.reshape(-1)
        lim_vals = uniq[1].copy()
        lim_lo[1:] = np.cumsum(np.bincount(uniq[0].astype(np.int64), minlength=nparts * nsz))
    return sizes, size, lim, lim_lo, lim_vals


def _parts(trace: ReplayTrace, lay: _Layout, table: tuple[np.ndarray, ...]) -> Parts:
    nparts = len(trace.partitions)
    sizes, _, _, lim_lo, lim_vals = table
    nsz, gmax = max(len(sizes), 1), int(max(lay.max_cap.max(initial=0), 1))
    bucket = np.zeros((nparts, gmax + 1), np.int64)
    min_limit = np.zeros(nparts)
    for k in range(nparts):
        for c in lay.cap[lay.node_lo[k] : lay.node_hi[k]]:
            bucket[k, c] += 1
        mine = trace.timelimit_s[trace.partition == k]
        if lay.exists[k] and len(mine):
            min_limit[k] = float(mine.min())
    pool_total = np.array([r[2] for r in lay.pools], dtype=np.int64)
    whole_gpus = np.array([lay.cap[lay.node_lo[k] : lay.node_hi[k]].sum() for k in range(nparts)])
    pooled = np.array([pool_total[lay.pool_lo[k] : lay.pool_hi[k]].sum() for k in range(nparts)])
    # room for every job that can run at once: it takes a GPU, an instance or a shard
    run_lo = np.concatenate([[0], np.cumsum(whole_gpus + lay.sh_total + pooled + lay.zero + 1)])
    end_lo = np.concatenate([[0], np.cumsum(whole_gpus + lay.zero + 1)]).astype(np.int64)
    idle_lo = np.concatenate([[0], np.cumsum(lay.full_n)]).astype(np.int64)
    return Parts(
        exists=lay.exists, node_lo=lay.node_lo, node_hi=lay.node_hi, max_cap=lay.max_cap,
        full_n=lay.full_n, free_whole=whole_gpus.astype(np.int64), bucket=bucket,
        idle_full=lay.full_n.copy(), ver=np.zeros(nparts, np.int64),
        pool_lo=lay.pool_lo, pool_hi=lay.pool_hi, pool_free=pool_total.copy(),
        pool_total=pool_total, pool_mem=np.array([r[3] for r in lay.pools], dtype=float),
        pool_share=np.array([r[4] for r in lay.pools], dtype=float),
        sh_free=lay.sh_total.copy(), sh_total=lay.sh_total, sh_per=lay.sh_per,
        gpu_mem=lay.gpu_mem, min_limit=min_limit,
        pending=np.zeros(nparts, np.int64), pool_pending=np.zeros(nparts, np.int64),
        slice_pending=np.zeros(nparts, np.int64),
        dirty=np.zeros(nparts, np.bool_), changed=np.zeros(nparts, np.bool_),
        kick_at=np.full(nparts, INF),
        sizes=sizes if len(sizes) else np.zeros(1),
        size_hist=np.zeros((nparts, nsz), np.int64), seen=np.zeros((nparts, nsz), np.bool_),
        lim_lo=lim_lo, lim_vals=lim_vals, lim_count=np.zeros(len(lim_vals), np.int64),
        lim_min=lim_lo[1:].copy(),  # none pending: past the end of its table
        run_lo=run_lo.astype(np.int64), run_n=np.zeros(nparts, np.int64),
        run_jobs=np.zeros(int(run_lo[-1]), np.int64),
        end_lo=end_lo, end_n=np.zeros(nparts, np.int64), end_t=np.zeros(end_lo[-1]),
        end_j=np.zeros(end_lo[-1], np.int64), end_g=np.zeros(end_lo[-1]),
        idle_lo=idle_lo, idle_vals=np.full(max(int(idle_lo[-1]), 1), -INF),
        stale_n=np.zeros(nparts, np.int64), stale=np.zeros(max(int(idle_lo[-1]), 1), np.int64),
        emin_val=np.zeros((nparts, gmax)), emin_ver=np.full((nparts, gmax), -1, np.int64),
    )  # fmt: skip


def _queues(trace: ReplayTrace) -> tuple[Queues, np.ndarray]:
    """The FIFOs (the jobs of each (partition, QOS) in job order) and each job's place."""
    n, nparts, nq = len(trace), len(trace.partitions), max(len(trace.qos_names), 1)
    key = trace.partition.astype(np.int64) * nq + trace.qos.astype(np.int64)
    order = np.argsort(key, kind="stable")
    fifo_lo = np.concatenate([[0], np.cumsum(np.bincount(key, minlength=nparts * nq))])
    fpos = np.empty(n, np.int64)
    fpos[order] = np.arange(n)
    heaps = max(nparts * nq, 1)
    queues = Queues(
        fifo=order.astype(np.int64),
        fifo_head=fifo_lo[:-1].astype(np.int64),
        fifo_tail=fifo_lo[:-1].astype(np.int64),
        rq_r=np.empty((heaps, 4), np.int64),
        rq_j=np.empty((heaps, 4), np.int64),
        rq_e=np.empty((heaps, 4)),
        rq_n=np.zeros(heaps, np.int64),
    )
    return queues, fpos


def _jobs(trace, config, lay: _Layout, table: tuple[np.ndarray, ...], fpos) -> Jobs:
    n = len(trace)
    part, gpus = trace.partition.astype(np.int64), trace.gpus.astype(float)
    whole = trace.kind == WHOLE
    # the nodes of each job's allocation: a fixed slice per job, one node or as many whole
    # nodes as it takes
    per = lay.max_cap[part] if n else np.zeros(0, np.int64)
    many = whole & (gpus.astype(np.int64) > per) & (per > 0)
    need = np.where(many, -(-gpus.astype(np.int64) // np.maximum(per, 1)), 1)
    noff = np.concatenate([[0], np.cumsum(need)]).astype(np.int64)
    submit = spread(trace.submit_s) if config.spread_submits else trace.submit_s.astype(float)
    cancel = trace.cancel_s if trace.cancel_s is not None else np.full(n, INF)
    return Jobs(
        submit=submit.astype(float), duration=trace.duration_s.astype(float),
        limit=trace.timelimit_s.astype(float), gpus=gpus, kind=trace.kind.astype(np.int64),
        part=part, qos=trace.qos.astype(np.int64), need=trace.need_mib.astype(float),
        cancel=np.where(np.isfinite(cancel), cancel, INF).astype(float),
        pool=lay.job_pool, size=table[1], lim=table[2], fpos=fpos, noff=noff,
        state=np.full(n, FUTURE, np.int64), eligible=submit.astype(float),
        # equal priorities go by submit second, then job id (a requeue sets it anew)
        rank=np.floor(trace.submit_s).astype(np.int64),
        start=np.full(n, INF), end=np.full(n, INF), run_start=np.zeros(n),
        run_id=np.zeros(n, np.int64), akind=np.zeros(n, np.int64),
        apool=np.full(n, -1, np.int64), acount=np.zeros(n, np.int64),
        anodes=np.zeros(max(int(noff[-1]), 1), np.int64), on_slice=np.zeros(n, np.bool_),
        sliceable=np.zeros(n, np.bool_),
        awaiting=np.zeros(n, np.int64), victim_of=np.full(n, -1, np.int64),
        expected_end=np.full(n, INF), where=np.full(n, NO_QUEUE, np.int64),
        rpos=np.full(n, -1, np.int64),
    )  # fmt: skip


def _events(n: int) -> Events:
    return Events(
        heap_t=np.empty(1024),
        heap_k=np.empty(1024, np.int64),
        runs_f=np.empty((3, n + 1024)),
        runs_i=np.empty((3, n + 1024), np.int64),
        count=np.zeros(8, np.int64),
        times=np.full(3, INF),
        reasons=np.zeros(len(REASONS), np.int64),
        reason_seq=np.full(len(REASONS), -1, np.int64),
    )


def build(trace: ReplayTrace, model: ClusterModel, config) -> tuple:
    """(Config, Jobs, Nodes, Parts, Queues, Events) for one replay of `trace` on `model`."""
    lay = _layout(trace, model)
    table = _limit_table(trace)
    queues, fpos = _queues(trace)
    return (build_config(trace, model, config), _jobs(trace, config, lay, table, fpos),
            _nodes(lay), _parts(trace, lay, table), queues, _events(len(trace)))  # fmt: skip
