"""The replay engine's public face: `replay(trace, model, config) -> ReplayOutcome`.

Slurm's main scheduler, backfill and QOS preemption on a model of the cluster, as a
discrete-event loop. The engine itself is compiled (numba, the `analysis` extra) from plain
functions over flat arrays, one module per concern: `state` (the layout, built here from the
trace and the model), `queues` (priority order), `profile` (backfill's plan), `nodes`
(placement), `runs` (starts and ends), `preempt`, `backfill` and `loop` (the event loop).
Without numba the same functions run as Python (same schedules, much slower;
`engine_warnings` says so). Why each is shaped as it is: their docstrings;
benchmarks/README.md has the speed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from slurmgpu.replay.cluster import ClusterModel, from_capacity
from slurmgpu.replay.jobs import ReplayJob, ReplayTrace
from slurmgpu.replay.state import (
    C_PREEMPTIONS,
    C_RUNS,
    CANCELLED,
    DONE,
    FUTURE,
    GRACE,
    INF,
    PENDING,
    R_CANCELLED,
    REASONS,
    RUNNING,
    UNRUNNABLE,
    spread,
)

__all__ = [
    "CANCELLED",
    "CANCELLED_PENDING",
    "DONE",
    "FUTURE",
    "GRACE",
    "INF",
    "PENDING",
    "RUNNING",
    "UNRUNNABLE",
    "EngineCompile",
    "ReplayOutcome",
    "RunLog",
    "SchedConfig",
    "compile_ahead",
    "engine_warnings",
    "replay",
]

CANCELLED_PENDING = REASONS[R_CANCELLED]


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


def engine_warnings() -> tuple[str, ...]:
    """What a caller should tell the user about the engine itself: one line when it runs as
    plain Python because numba did not import; none when compiled, or when the compile is
    turned off on purpose (`NUMBA_DISABLE_JIT=1`)."""
    from slurmgpu.replay import _jit

    if _jit.COMPILED or _jit.DISABLED:
        return ()
    why = f" ({_jit.WHY_NOT})" if _jit.WHY_NOT else ""
    return (
        "replay runs without its compiled engine (numba is not available"
        f"{why}): same results, much slower; pip install 'slurmgpu[analysis]'",
    )


_WARM = False


def warm_up() -> float:
    """Compile the engine, or load it from numba's cache, now (once per process; a forked
    process inherits it): the CPU seconds it took. `replay` calls it; a caller that forks
    workers calls it first so that each does not do it again."""
    global _WARM
    if _WARM:
        return 0.0
    from slurmgpu.replay import _jit
    from slurmgpu.replay.loop import advance
    from slurmgpu.replay.state import build

    began = time.process_time()
    trace = ReplayTrace.from_jobs([ReplayJob("1", "p", "q", "t", 0.0, 60.0, 120.0, 1.0)])
    if _jit.COMPILED:
        with _jit.compile_lock():  # a one-job replay: the argument types of every replay
            advance(build(trace, from_capacity({"p": 8}), SchedConfig()))
    _WARM = True
    return time.process_time() - began


@dataclass(frozen=True)
class EngineCompile:
    """What `compile_ahead` did: whether the engine is compiled at all (numba), whether this
    process compiled it (else it loaded it), and the directory it saved it in or loaded it
    from (None: not compiled, or compiled and not saved: another process held the lock)."""

    compiled: bool
    now: bool
    cache: str | None
    seconds: float


def compile_ahead() -> EngineCompile:
    """`replay --compile-only`: compile the engine into this install's cache now (or find it
    there), so that no later replay pays for it (`_jit.cache_dirs`). A UsageError, before
    any compile, when this user may write none of the install's cache directories."""
    from slurmgpu.errors import UsageError
    from slurmgpu.replay import _jit

    if _jit.COMPILED and _jit.dirs().write is None:  # said before, not after, the compile
        tried = ", ".join(map(str, _jit.dirs().read))
        raise UsageError(
            f"--compile-only: this user may write no cache directory for this install "
            f"({tried}): run it as the install's owner"
        )
    began = time.monotonic()
    warm_up()
    seconds = time.monotonic() - began
    if not _jit.COMPILED:
        return EngineCompile(False, False, None, seconds)
    now = _jit.compiled_here()
    where = _jit.saved_in() if now else _jit.loaded_from()
    return EngineCompile(True, now, None if where is None else str(where), seconds)


def _spread(submit: np.ndarray) -> np.ndarray:
    """(`state.spread`, under its old name)"""
    return spread(submit)


def replay(trace: ReplayTrace, model: ClusterModel, config: SchedConfig | None = None):
    """Replay `trace` on `model`; the ReplayOutcome."""
    from slurmgpu.replay.loop import advance
    from slurmgpu.replay.state import build

    warm_up()
    _, state = advance(build(trace, model, config or SchedConfig()))
    return outcome(state)


def outcome(state: tuple) -> ReplayOutcome:
    """The ReplayOutcome of a finished replay's state (`state.build`'s tuple)."""
    jobs, events = state[1], state[5]
    k = int(events.count[C_RUNS])
    f, i = events.runs_f, events.runs_i
    order = np.argsort(events.reason_seq, kind="stable")
    reasons = {REASONS[r]: int(events.reasons[r]) for r in order if events.reason_seq[r] >= 0}
    return ReplayOutcome(
        start_s=jobs.start.astype(float),
        end_s=jobs.end.astype(float),
        state=jobs.state.astype(np.int8),
        on_slice=jobs.on_slice.astype(bool),
        runs=RunLog(
            job=i[0, :k].tolist(),
            start=f[0, :k].tolist(),
            end=f[1, :k].tolist(),
            equiv=f[2, :k].tolist(),
            partition=i[1, :k].tolist(),
            preempted=i[2, :k].astype(bool).tolist(),
        ),
        preemptions=int(events.count[C_PREEMPTIONS]),
        unrunnable_reasons=reasons,
    )
