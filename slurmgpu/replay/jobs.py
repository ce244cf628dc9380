"""The replay's input: jobs as typed records (`ReplayJob`) held column-wise (`ReplayTrace`).

A million jobs as a million dataclass instances would cost ~300 bytes each and slow every pass,
so the trace keeps one numpy array per field; `trace.job(i)` and `ReplayTrace.from_jobs` convert
between the two views. Times are seconds since the trace's `epoch_s` (Unix seconds).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

# what a job asks for
WHOLE, MIG, SHARD = 0, 1, 2
KIND_NAMES = ("whole", "mig", "shard")


@dataclass(frozen=True)
class ReplayJob:
    """One job to replay: its request, its work, and (where known) what really happened."""

    job_id: str
    partition: str
    qos: str
    tier: str
    submit_s: float
    duration_s: float  # the run that finished (the work to redo in the replay)
    timelimit_s: float  # the job's Timelimit; its duration where unlimited
    gpus: float  # whole GPUs (kind whole), instances (mig) or shards (shard)
    kind: int = WHOLE
    mig_profile: str = ""
    need_gpu: float = float("nan")  # measured share of one GPU (gpumem / GPU memory)
    need_mib: float = float("nan")  # measured GPU memory (MiB), when known
    gpu_equiv: float = float("nan")  # GPUs the request stands for (a slice < 1)
    recorded_start_s: float = float("nan")
    recorded_end_s: float = float("nan")
    recorded_preemptions: int = 0
    # the job was cancelled while pending at this time (sacct: CANCELLED, no Start): in the
    # replay it waits in the queue until then and is cancelled if it has not started (NaN: no)
    cancel_s: float = float("nan")


@dataclass(frozen=True)
class RecordedRuns:
    """What really ran, one entry per run: times since the trace epoch, GPUs held."""

    start_s: np.ndarray
    end_s: np.ndarray
    equiv: np.ndarray
    partition: np.ndarray  # index into the trace's `partitions`
    preempted: np.ndarray  # bool: the run was ended by preemption
    job: np.ndarray | None = None  # index of the run's job in the trace (-1: unknown)


@dataclass
class ReplayTrace:
    """Jobs column-wise, sorted by submit time, plus what the adapter had to leave out."""

    epoch_s: int
    job_id: np.ndarray
    partition: np.ndarray  # int index into `partitions`
    qos: np.ndarray  # int index into `qos_names`
    tier: np.ndarray  # int index into `tier_names`
    submit_s: np.ndarray
    duration_s: np.ndarray
    timelimit_s: np.ndarray
    gpus: np.ndarray
    kind: np.ndarray
    mig_profile: np.ndarray  # int index into `profiles` (-1: none)
    need_gpu: np.ndarray
    need_mib: np.ndarray
    gpu_equiv: np.ndarray
    recorded_start_s: np.ndarray
    recorded_end_s: np.ndarray
    recorded_preemptions: np.ndarray
    partitions: list[str]
    qos_names: list[str]
    tier_names: list[str]
    profiles: list[str]
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> jobs not replayed
    # the recorded runs (a requeued job has several), for the "recorded" column
    recorded_runs: RecordedRuns | None = None
    # rows of the dumps the accounting loader rejected: (file, line, reason), reported
    rejected: tuple[tuple[str, int, str], ...] = ()
    # per job: when it was cancelled while pending (NaN: it was not); None: no such job
    cancel_s: np.ndarray | None = None
    # what the measure sources (ReplayOptions.measure_sources) could not measure, as lines
    measure_notes: tuple[str, ...] = ()

    def cancelled_pending(self) -> np.ndarray:
        """Per job: whether it was cancelled while pending in the recorded history."""
        if self.cancel_s is None:
            return np.zeros(len(self), bool)
        return np.isfinite(self.cancel_s)

    def __len__(self) -> int:
        return len(self.submit_s)

    def job(self, i: int) -> ReplayJob:
        """Row `i` as a typed record."""
        p = int(self.mig_profile[i])
        return ReplayJob(
            job_id=str(self.job_id[i]),
            partition=self.partitions[int(self.partition[i])],
            qos=self.qos_names[int(self.qos[i])],
            tier=self.tier_names[int(self.tier[i])],
            submit_s=float(self.submit_s[i]),
            duration_s=float(self.duration_s[i]),
            timelimit_s=float(self.timelimit_s[i]),
            gpus=float(self.gpus[i]),
            kind=int(self.kind[i]),
            mig_profile=self.profiles[p] if p >= 0 else "",
            need_gpu=float(self.need_gpu[i]),
            need_mib=float(self.need_mib[i]),
            gpu_equiv=float(self.gpu_equiv[i]),
            recorded_start_s=float(self.recorded_start_s[i]),
            recorded_end_s=float(self.recorded_end_s[i]),
            recorded_preemptions=int(self.recorded_preemptions[i]),
            cancel_s=float(self.cancel_s[i]) if self.cancel_s is not None else float("nan"),
        )

    def jobs(self) -> Iterator[ReplayJob]:
        for i in range(len(self)):
            yield self.job(i)

    @classmethod
    def from_jobs(
        cls, jobs: Sequence[ReplayJob], *, epoch_s: int = 0, skipped: dict[str, int] | None = None
    ) -> ReplayTrace:
        """Build the columns from records (sorted by submit time, then job order)."""
        order = sorted(range(len(jobs)), key=lambda i: (jobs[i].submit_s, i))
        rows = [jobs[i] for i in order]

        def index(values: list[str]) -> tuple[np.ndarray, list[str]]:
            names = sorted(set(values))
            pos = {n: k for k, n in enumerate(names)}
            return np.array([pos[v] for v in values], dtype=np.int32), names

        part, partitions = index([j.partition for j in rows])
        qos, qos_names = index([j.qos for j in rows])
        tier, tier_names = index([j.tier for j in rows])
        profiles = sorted({j.mig_profile for j in rows if j.mig_profile})
        ppos = {n: k for k, n in enumerate(profiles)}

        def col(name: str, dtype=np.float64) -> np.ndarray:
            return np.array([getattr(j, name) for j in rows], dtype=dtype)

        return cls(
            epoch_s=epoch_s,
            job_id=np.array([j.job_id for j in rows], dtype=object),
            partition=part,
            qos=qos,
            tier=tier,
            submit_s=col("submit_s"),
            duration_s=col("duration_s"),
            timelimit_s=col("timelimit_s"),
            gpus=col("gpus"),
            kind=col("kind", np.int8),
            mig_profile=np.array([ppos.get(j.mig_profile, -1) for j in rows], dtype=np.int32),
            need_gpu=col("need_gpu"),
            need_mib=col("need_mib"),
            gpu_equiv=col("gpu_equiv"),
            recorded_start_s=col("recorded_start_s"),
            recorded_end_s=col("recorded_end_s"),
            recorded_preemptions=col("recorded_preemptions", np.int32),
            partitions=partitions,
            qos_names=qos_names,
            tier_names=tier_names,
            profiles=profiles,
            skipped=dict(skipped or {}),
            cancel_s=col("cancel_s") if any(j.cancel_s == j.cancel_s for j in rows) else None,
        )
