"""The collector's running per-job summaries, kept between passes in one small JSON file.

Each pass adds one sample per (job, device) the job had a process on: memory held by the
job's processes (their sum; the device's used memory where NVML does not give per-process
memory), the highest so far, and the device utilization where NVML gives it. The epilog takes
the job's entry out and stores it as an `SG1:` summary. Entries whose job was not seen for
`MAX_AGE_S` (an epilog that never ran) are dropped. The file is replaced atomically under
an flock, because the timer's pass and a job's epilog can run at the same moment.

Energy (docs/energy.md): the state keeps one `energy.Meter` per whole device. A job's energy
on a whole GPU it has to itself is the GPU meter's growth from the job's first pass to the
latest pass before its epilog (snapshots in `JobAccum.meter_first`): the GPU is the job's for
all that time, busy or not, and GPUs it held without a process (SLURM_JOB_GPUS) count too. A
MIG instance, or a GPU processes of several jobs ran on, is charged each pass's energy of its
GPU split by the rule of `energy.mig_share` (and evenly among the jobs on the device): an
estimate, marked so. Keys added to the state file are optional: an older file still reads.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from slurmgpu.measure.collector.cgroup import JobOwner, ProcessMapper
from slurmgpu.measure.collector.energy import MAX_POWER_GAP_S, EnergyReading, Meter, mig_share
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
    energy_j: float = 0.0  # split energy (MIG instance, shared GPU), joules
    energy_passes: int = 0  # passes that added split energy
    energy_split: bool = False  # charged a split of its GPU's energy (an estimate)

    def summary(self, energy_j: float | None = None, estimated: bool = False) -> GpuSummary:
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
            energy_j=None if energy_j is None else round(energy_j, 3),
            energy_estimated=estimated,
        )


@dataclass
class JobAccum:
    """Running summary of one job on this node."""

    user: str
    first: int
    last: int
    samples: int = 0
    gpus: dict[str, GpuAccum] = field(default_factory=dict)
    # whole device key -> [meter total J, resets, gaps] at the job's first pass
    meter_first: dict[str, list[float]] = field(default_factory=dict)


@dataclass
class CollectorState:
    """Everything the collector keeps between passes."""

    jobs: dict[str, JobAccum] = field(default_factory=dict)
    # whole GPUs seen in the last pass, minor -> memory size (MiB), for the epilog's idle GPUs
    whole_gpus: dict[str, float] = field(default_factory=dict)
    # whole device key -> its energy meter
    meters: dict[str, Meter] = field(default_factory=dict)

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
                gpus={k: GpuAccum(**_known(GpuAccum, g)) for k, g in j["gpus"].items()},
                meter_first={k: list(v) for k, v in j.get("meter_first", {}).items()},
            )
            for job, j in data["jobs"].items()
        }
        meters = {k: Meter(**_known(Meter, m)) for k, m in data.get("meters", {}).items()}
        whole = {k: float(v) for k, v in data["whole_gpus"].items()}
        return cls(jobs=jobs, whole_gpus=whole, meters=meters)


def _known(cls: type, data: dict) -> dict:
    """The keys of `data` that are fields of `cls`: a state file written by a later version
    (with keys this one does not know) still loads instead of losing every summary."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


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


def update(
    state: CollectorState,
    rows: list[Attributed],
    now: int,
    energy: dict[str, EnergyReading] | None = None,
) -> None:
    """Add one pass to the running summaries and forget jobs not seen for MAX_AGE_S."""
    added = {
        key: state.meters.setdefault(key, Meter()).advance(now, reading)
        for key, reading in (energy or {}).items()
    }
    snapshot = {k: [m.total_j, m.resets, m.gaps] for k, m in state.meters.items() if m.t}
    jobs_on: dict[str, int] = {}
    for row in rows:
        if row.owner is not None:
            jobs_on[row.device.key] = jobs_on.get(row.device.key, 0) + 1
    seen: set[str] = set()
    for row in rows:
        if row.owner is None:
            continue
        d = row.device
        job = state.jobs.get(row.owner.job_id)
        if job is None:
            job = state.jobs[row.owner.job_id] = JobAccum(row.owner.user, now, now)
            job.meter_first = {k: list(v) for k, v in snapshot.items()}
        if row.owner.job_id not in seen:
            seen.add(row.owner.job_id)
            job.samples += 1
            job.last = now
        first_pass = d.key not in job.gpus
        fresh = GpuAccum(d.minor, d.gi, d.profile, d.uuid, d.mem_total_mib)
        acc = job.gpus.setdefault(d.key, fresh)
        _charge(acc, d, jobs_on.get(d.key, 1), {} if first_pass else added)
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


def _charge(acc: GpuAccum, d: DeviceSample, jobs: int, added: dict[str, float]) -> None:
    """Charge the job its split of this pass's energy on a MIG instance or shared GPU (a
    whole GPU of its own is charged from the meter snapshots instead). `added` is empty on
    the pass that first sees the job on the device: the interval before it is not the job's
    (as a whole GPU's figure starts at the job's first pass)."""
    if d.gi is not None or jobs > 1:
        acc.energy_split = True
    parent = str(d.minor) if d.gi is not None else d.key
    if parent not in added:
        return
    share = 1.0 if d.gi is None else mig_share(d.profile)
    if share is None:
        return  # a MIG profile whose slices are unknown: no energy rather than a guess
    acc.energy_j += added[parent] * share / max(jobs, 1)
    acc.energy_passes += 1


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
    ordered = sorted(
        gpus.items(), key=lambda kg: (kg[1].minor, kg[1].gi if kg[1].gi is not None else -1)
    )
    warnings: list[str] = []
    summaries = tuple(g.summary(*_energy_of(state, job, k, g, warnings)) for k, g in ordered)
    return JobSummary(
        job=job_id,
        cluster=cluster,
        node=node,
        first=job.first,
        last=job.last,
        samples=job.samples,
        gpus=summaries,
        energy_warnings=tuple(warnings),
    )


def _energy_of(
    state: CollectorState, job: JobAccum, device: str, g: GpuAccum, warnings: list[str]
) -> tuple[float | None, bool]:
    """(the job's energy on this device in joules or None, whether it is an estimate)."""
    key = device.split("/", 1)[0]  # a MIG instance `0/gi7` is metered on its GPU `0`
    meter = state.meters.get(key)
    if g.gi is not None or g.energy_split:
        if g.energy_passes == 0:
            return None, False
        _meter_warnings(meter, job.meter_first.get(key), key, warnings)
        return g.energy_j, True
    first = job.meter_first.get(key)
    if meter is None or meter.t is None or first is None:
        return None, False  # no reading before the job, or none at all: not measured
    _meter_warnings(meter, first, key, warnings)
    return max(meter.total_j - first[0], 0.0), meter.source == "power"


def _meter_warnings(
    meter: Meter | None, first: list[float] | None, key: str, warnings: list[str]
) -> None:
    if meter is None or first is None:
        return
    resets, gaps = meter.resets - int(first[1]), meter.gaps - int(first[2])
    if resets > 0:
        warnings.append(
            f"GPU {key}: energy counter went down {resets} time(s) (driver reload): the "
            "energy before each reload in its interval is missing"
        )
    if gaps > 0:
        warnings.append(
            f"GPU {key}: {gaps} gap(s) of over {MAX_POWER_GAP_S:g} s between power samples: "
            "their energy is missing"
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
