"""The collector's running per-job summaries, kept between passes in one small JSON file.

Each pass adds one sample per (job, device) the job had a process on: memory held by the
job's processes (their sum; the device's used memory where NVML does not give per-process
memory), the highest so far, and the device utilization where NVML gives it. The epilog takes
the job's entry out and stores it as an `SG1:` summary. Entries whose job was not seen for
`MAX_AGE_S` (an epilog that never ran) are dropped. The file is replaced atomically under
an flock, because the timer's pass and a job's epilog can run at the same moment.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from slurmgpu.measure.collector.cgroup import JobOwner, ProcessMapper
from slurmgpu.measure.collector.nvml import DeviceSample, NodeSample
from slurmgpu.measure.summary import GpuSummary, JobSummary
from slurmgpu.util.atomic import write_atomic

STATE_VERSION = 1
MAX_AGE_S = 3 * 24 * 3600


@dataclass
class GpuAccum:
    """Running sums of one job on one device."""

    minor: int
    gi: int | None
    profile: str | None
    uuid: str
    mem_total_mib: float
    mem_max_mib: float = 0.0
    util_sum: float = 0.0
    util_samples: int = 0
    samples: int = 0

    def summary(self) -> GpuSummary:
        util = round(self.util_sum / self.util_samples, 1) if self.util_samples else None
        return GpuSummary(
            minor=self.minor,
            gi=self.gi,
            profile=self.profile,
            uuid=self.uuid,
            mem_total_mib=round(self.mem_total_mib, 1),
            mem_max_mib=round(self.mem_max_mib, 1),
            util_mean_pct=util,
            util_samples=self.util_samples,
            samples=self.samples,
        )


@dataclass
class JobAccum:
    """Running summary of one job on this node."""

    user: str
    first: int
    last: int
    samples: int = 0
    gpus: dict[str, GpuAccum] = field(default_factory=dict)


@dataclass
class CollectorState:
    """Everything the collector keeps between passes."""

    jobs: dict[str, JobAccum] = field(default_factory=dict)
    # whole GPUs seen in the last pass, minor -> memory size (MiB), for the epilog's idle GPUs
    whole_gpus: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({"v": STATE_VERSION, **asdict(self)}, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> CollectorState:
        data = json.loads(text)
        if data.get("v") != STATE_VERSION:
            raise ValueError(f"state version {data.get('v')!r}, expected {STATE_VERSION}")
        jobs = {
            job: JobAccum(
                user=j["user"],
                first=j["first"],
                last=j["last"],
                samples=j["samples"],
                gpus={k: GpuAccum(**g) for k, g in j["gpus"].items()},
            )
            for job, j in data["jobs"].items()
        }
        return cls(jobs=jobs, whole_gpus={k: float(v) for k, v in data["whole_gpus"].items()})


@dataclass(frozen=True)
class Attributed:
    """One device's use by one job in this pass (job None: no Slurm process on it)."""

    device: DeviceSample
    owner: JobOwner | None
    mem_used_mib: float


def attribute(sample: NodeSample, mapper: ProcessMapper) -> list[Attributed]:
    """Split each device's processes by job; a device without job processes stays unowned."""
    rows: list[Attributed] = []
    for device in sample.devices:
        by_job: dict[str, tuple[JobOwner, list[float | None]]] = {}
        for proc in device.processes:
            owner = mapper.job_of(proc.pid)
            if owner is not None:
                by_job.setdefault(owner.job_id, (owner, []))[1].append(proc.used_mib)
        if not by_job:
            rows.append(Attributed(device, None, device.mem_used_mib))
        for owner, used in by_job.values():
            known = None not in used
            mem = sum(u for u in used if u is not None) if known else device.mem_used_mib
            rows.append(Attributed(device, owner, mem))
    return rows


def update(state: CollectorState, rows: list[Attributed], now: int) -> None:
    """Add one pass to the running summaries and forget jobs not seen for MAX_AGE_S."""
    seen: set[str] = set()
    for row in rows:
        if row.owner is None:
            continue
        d = row.device
        job = state.jobs.setdefault(row.owner.job_id, JobAccum(row.owner.user, now, now))
        if row.owner.job_id not in seen:
            seen.add(row.owner.job_id)
            job.samples += 1
            job.last = now
        fresh = GpuAccum(d.minor, d.gi, d.profile, d.uuid, d.mem_total_mib)
        acc = job.gpus.setdefault(d.key, fresh)
        acc.samples += 1
        acc.mem_max_mib = max(acc.mem_max_mib, row.mem_used_mib)
        if d.util_pct is not None:
            acc.util_sum += d.util_pct
            acc.util_samples += 1
    whole = {r.device.key: r.device.mem_total_mib for r in rows if r.device.gi is None}
    if whole:
        state.whole_gpus = whole
    for job_id in [j for j, acc in state.jobs.items() if now - acc.last > MAX_AGE_S]:
        del state.jobs[job_id]


def job_summary(
    state: CollectorState,
    job_id: str,
    *,
    node: str,
    cluster: str,
    allocated_minors: tuple[int, ...] = (),
) -> JobSummary | None:
    """The job's summary from its running sums (None if no pass ever saw it).

    `allocated_minors` (the epilog's SLURM_JOB_GPUS) adds the whole GPUs the job held but
    never ran a process on: their use by the job was nil, and leaving them out would make a
    job that holds 8 GPUs and uses 1 look busy.
    """
    job = state.jobs.get(job_id)
    if job is None:
        return None
    gpus = dict(job.gpus)
    used_minors = {g.minor for g in gpus.values()}
    for minor in allocated_minors:
        size = state.whole_gpus.get(str(minor))
        if minor not in used_minors and size is not None:
            gpus[str(minor)] = GpuAccum(
                minor, None, None, "", size, 0.0, 0.0, job.samples, job.samples
            )
    ordered = sorted(gpus.values(), key=lambda g: (g.minor, g.gi if g.gi is not None else -1))
    return JobSummary(
        job=job_id,
        cluster=cluster,
        node=node,
        first=job.first,
        last=job.last,
        samples=job.samples,
        gpus=tuple(g.summary() for g in ordered),
    )


@contextlib.contextmanager
def locked_state(
    path: str | os.PathLike[str], problems: list[str] | None = None
) -> Iterator[CollectorState]:
    """Load the state under an exclusive lock, yield it, write it back atomically.

    A missing file is an empty state; an unreadable one is replaced (its summaries are lost,
    which the caller logs) rather than stopping every later pass.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_name(target.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            state = load_state(target)
        except ValueError as exc:
            state = CollectorState()
            if problems is not None:
                problems.append(f"{exc}; starting with an empty state")
        yield state
        write_atomic(target, state.to_json() + "\n", mode=0o600, backup=False)


def load_state(path: Path) -> CollectorState:
    """The saved state; empty when missing. ValueError when it cannot be read."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return CollectorState()
    try:
        return CollectorState.from_json(text)
    except (KeyError, TypeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a collector state file: {exc}") from exc
