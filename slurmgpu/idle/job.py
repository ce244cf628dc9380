"""`slurmgpu job JOBID...`: one job's GPUs, their use over time, efficiency, idle stretches,
advice in Slurm's terms. What a user runs on their own job (docs/idle.md "slurmgpu job").

Who may see a job: its owner (the caller's uid equals the job's UserId uid), root, the
SlurmUser and Slurm operators/administrators (`sacctmgr show user` AdminLevel). Anyone else is
refused before any series is read: the series source may hold credentials users do not.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from slurmgpu.errors import SlurmgpuError, UsageError
from slurmgpu.idle.jobs import IdleJob
from slurmgpu.idle.retrospective import epoch, iso_epoch
from slurmgpu.idle.rule import _Device, idle_stretches
from slurmgpu.measure.options import MeasureOptions
from slurmgpu.model.measure import DeviceSeries
from slurmgpu.model.policy import IdleRule, Policy

SPARK = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 48
HEADROOM = 1.1  # advice leaves 10 % above the peak memory


class NotYourJob(SlurmgpuError):
    """An ordinary user asked for another user's job."""


@dataclass(frozen=True)
class JobOptions:
    job_ids: tuple[str, ...]
    measure: MeasureOptions = field(default_factory=MeasureOptions)
    policy: str | None = None
    now: datetime | None = None
    caller_uid: int | None = None  # None: os.getuid()
    env: Mapping[str, str] | None = None
    idle_min: float = 10.0  # shortest idle stretch shown


@dataclass(frozen=True)
class DeviceUse:
    key: str
    mig_profile: str | None
    samples: int
    util_mean_pct: float | None
    util_max_pct: float | None
    mem_max_mib: float | None
    mem_total_mib: float | None
    util_spark: str
    mem_spark: str


@dataclass(frozen=True)
class JobUse:
    job_id: str
    user: str
    state: str
    partition: str
    tier: str
    start: str
    end: str | None
    elapsed_s: float
    time_limit_s: float | None
    gpus: float
    devices_held: int
    gres: str
    devices: tuple[DeviceUse, ...]
    util_mean_pct: float | None
    mem_max_mib: float | None
    gpu_memory_mib: float | None
    idle_stretches: tuple[tuple[str, str], ...]
    idle_gpu_hours: float
    advice: tuple[str, ...]
    notes: tuple[str, ...] = ()
    energy_kwh: float | None = None  # the GPUs' energy so far (measure.energy; None: none)
    energy_estimated: bool = False


@dataclass(frozen=True)
class JobReport:
    jobs: tuple[JobUse, ...]
    warnings: tuple[str, ...] = ()

    def to_json(self) -> dict:
        from dataclasses import asdict

        return {"jobs": [asdict(j) for j in self.jobs], "warnings": list(self.warnings)}


def job_report(options: JobOptions) -> JobReport:
    """The report for each job id (refused for jobs the caller may not see)."""
    from slurmgpu.idle import series_sources

    policy = _policy(options.policy)
    now = (options.now or datetime.now(UTC)).astimezone(UTC).replace(tzinfo=None)
    uid = os.getuid() if options.caller_uid is None else options.caller_uid
    facts = [_find(job_id, policy, options.env) for job_id in options.job_ids]
    privileged = None
    for job, owner_uid in facts:
        if owner_uid != uid:
            if privileged is None:
                privileged = may_see_all(uid, options.env)
            if not privileged:
                raise NotYourJob(
                    f"job {job.job_id} belongs to {job.user}: you may only see your own jobs"
                )
    sources = series_sources(options.measure, now, 6 * 3600, 500_000)
    rule = policy.idle.rule if policy and policy.idle else IdleRule()
    gap = policy.idle.max_gap_s if policy and policy.idle else 300.0
    out = [_use(job, sources, rule, gap, policy, now, options.idle_min) for job, _ in facts]
    warnings = [str(w) for s in sources for w in s.warnings]
    out = [
        _with_energy(use, job, options.measure, now, warnings)
        for use, (job, _) in zip(out, facts, strict=True)
    ]
    return JobReport(tuple(out), tuple(warnings))


def _with_energy(use: JobUse, job, measure: MeasureOptions, now, warnings: list[str]) -> JobUse:
    """The job's energy from the first measure source that has one (measure/energy.py)."""
    from dataclasses import replace

    from slurmgpu.measure.energy import run_energy

    got = run_energy(job.ref(), measure, now)
    if got is None:
        return use
    warnings.extend(got.warnings)
    return replace(use, energy_kwh=round(got.kwh, 4), energy_estimated=got.estimated)


def _policy(path: str | None) -> Policy | None:
    from slurmgpu.sources.policy_file import default_policy_path, load_policy

    path = path or default_policy_path()
    if not os.path.exists(path):
        return None
    return load_policy(path)


def may_see_all(uid: int, env: Mapping[str, str] | None = None) -> bool:
    """root, the SlurmUser, or a Slurm operator/administrator."""
    from slurmgpu.sources.slurm import scontrol_show_config
    from slurmgpu.sources.slurm_jobs import admin_level, user_name_and_uid

    if uid == 0:
        return True
    try:
        _name, slurm_uid = user_name_and_uid(scontrol_show_config(env).get("SlurmUser", ""))
    except SlurmgpuError:
        slurm_uid = None
    if slurm_uid == uid:
        return True
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        return False
    return admin_level(name, env) in ("Operator", "Administrator")


def _find(job_id: str, policy: Policy | None, env) -> tuple[IdleJob, int | None]:
    """The job from slurmctld (running or recently ended), else from accounting."""
    from slurmgpu.idle.live import job_from_record
    from slurmgpu.sources.slurm_jobs import (
        exact_job_id,
        job_records,
        sacct_job,
        user_name_and_uid,
    )

    if not (job_id.isascii() and job_id.replace("_", "").isdigit()):
        raise UsageError(f"{job_id!r}: not a job id")
    empty = policy or Policy(tiers=(), kinds=(), partitions=(), default_tier="")
    # `scontrol show job ARRAYID` lists every task of the array (and a het leader's id every
    # component): the record named is the one whose JobId (or A_T / H+O) is the id asked
    for rec in job_records((job_id,), env=env):
        if job_id not in (rec.get("JobId"), exact_job_id(rec)):
            continue
        job = job_from_record(rec, empty, any_state=True)
        if job is not None:
            return job, user_name_and_uid(rec.get("UserId", ""))[1]
    found = sacct_job(job_id, env=env)
    if found is None:
        raise SlurmgpuError(f"job {job_id}: not found (or it holds no GPUs)")
    rec, uid = found
    job = job_from_record(rec, empty, any_state=True)
    if job is None:
        raise SlurmgpuError(f"job {job_id}: it holds no GPUs")
    return job, uid


def _use(job: IdleJob, sources, rule: IdleRule, gap, policy, now, idle_min: float) -> JobUse:
    end = job.end or now
    start_s, end_s = epoch(job.start), epoch(end)
    series = next((s for src in sources if (s := src.series(job.ref())) is not None), None)
    notes: list[str] = []
    if not sources:
        notes.append("no per-GPU series: give --prometheus URL")
    elif series is None:
        notes.append("Prometheus has no series for this job")
    if series is not None and series.implausible:
        notes.append(
            f"{series.implausible} implausible samples (negative, NaN, infinite or over 100 %) "
            "were dropped: not shown as use, no advice from them"
        )
    devices = series.devices if series else ()
    if devices and len(devices) < job.devices:
        notes.append(f"series for {len(devices)} of {job.devices} GPUs")
    uses = tuple(_device_use(d, start_s, end_s) for d in devices)
    utils = [u.util_mean_pct for u in uses if u.util_mean_pct is not None]
    mems = [u.mem_max_mib for u in uses if u.mem_max_mib is not None]
    totals = [u.mem_total_mib for u in uses if u.mem_total_mib]
    gpu_mem = max(totals) if totals else None
    stretches: tuple[tuple[float, float], ...] = ()
    if devices and len(devices) >= job.devices:
        shortest = idle_min * 60
        devs = [_Device(d, rule, gap) for d in devices]
        times = sorted({t for d in devices for t in d.times if start_s <= t <= end_s})
        stretches = idle_stretches(devs, times, shortest, start_s)
    idle_h = sum(b - a for a, b in stretches) / 3600 * job.gpus
    use = JobUse(
        job_id=job.job_id,
        user=job.user,
        state=job.state,
        partition=job.partition,
        tier=job.tier,
        start=iso_epoch(start_s),
        end=iso_epoch(end_s) if job.end else None,
        elapsed_s=end_s - start_s,
        time_limit_s=job.time_limit_s,
        gpus=job.gpus,
        devices_held=job.devices,
        gres=job.nodes and f"{job.devices} GPU(s) on {job.nodes}",
        devices=uses,
        util_mean_pct=round(sum(utils) / len(utils), 1) if utils else None,
        mem_max_mib=max(mems) if mems else None,
        gpu_memory_mib=gpu_mem,
        idle_stretches=tuple((iso_epoch(a), iso_epoch(b)) for a, b in stretches),
        idle_gpu_hours=round(idle_h, 3),
        advice=(),
        notes=tuple(notes),
    )
    return _with_advice(use, job, policy, rule)


def _device_use(d: DeviceSeries, start: float, end: float) -> DeviceUse:
    util = [u for t, u in zip(d.times, d.util_pct, strict=True) if start <= t <= end]
    mem = [m for t, m in zip(d.mem_times, d.mem_used_mib, strict=True) if start <= t <= end]
    return DeviceUse(
        key=d.key,
        mig_profile=d.mig_profile,
        samples=len(util),
        util_mean_pct=round(sum(util) / len(util), 1) if util else None,
        util_max_pct=max(util) if util else None,
        mem_max_mib=round(max(mem), 1) if mem else None,
        mem_total_mib=d.mem_total_mib,
        util_spark=sparkline(d.times, d.util_pct, start, end, 100.0),
        mem_spark=sparkline(d.mem_times, d.mem_used_mib, start, end, d.mem_total_mib or None),
    )


def sparkline(
    times: Sequence[float], values: Sequence[float], start: float, end: float, top: float | None
) -> str:
    """Mean per bucket over [start, end], SPARK_WIDTH buckets; ' ' where there is no sample."""
    if not values or end <= start:
        return ""
    top = top or max(values) or 1.0
    width = SPARK_WIDTH
    sums, counts = [0.0] * width, [0] * width
    for t, v in zip(times, values, strict=True):
        if start <= t <= end:
            i = min(width - 1, int((t - start) / (end - start) * width))
            sums[i] += v
            counts[i] += 1
    out = []
    for s, c in zip(sums, counts, strict=True):
        if not c:
            out.append(" ")
            continue
        level = max(0.0, min(1.0, s / c / top))
        out.append(SPARK[min(len(SPARK) - 1, int(level * (len(SPARK) - 1) + 0.5))])
    return "".join(out)


def _with_advice(use: JobUse, job: IdleJob, policy: Policy | None, rule: IdleRule) -> JobUse:
    from dataclasses import replace

    return replace(use, advice=tuple(advice(use, policy, rule)))


def advice(use: JobUse, policy: Policy | None, rule: IdleRule) -> list[str]:
    """Advice in Slurm's terms, from what the job used."""
    from slurmgpu.model.catalog import GPU_MODELS

    out: list[str] = []
    if not use.devices:
        return out
    idle_devices = [d for d in use.devices if (d.util_max_pct or 0) <= rule.util_pct]
    if idle_devices and len(idle_devices) < len(use.devices):
        keep = len(use.devices) - len(idle_devices)
        out.append(
            f"{len(idle_devices)} of {len(use.devices)} GPUs were never used: "
            f"`--gres=gpu:{keep}` next time"
        )
    if use.mem_max_mib is not None and use.gpu_memory_mib and len(use.devices) == 1:
        used, total = use.mem_max_mib, use.gpu_memory_mib
        whole = not any(d.mig_profile for d in use.devices)
        model = min(
            (m for m in GPU_MODELS if m.mig_profiles),
            key=lambda m: abs(m.memory_mib - total),
            default=None,
        )
        if whole and model is not None and abs(model.memory_mib - total) < 0.1 * total:
            fits = [p for p in model.mig_profiles if p.memory_mib >= used * HEADROOM]
            if fits:
                best = min(fits, key=lambda p: (p.memory_mib, p.gpu_slices))
                if best.memory_mib < total * 0.75:
                    out.append(
                        f"this job used {_gb(used)} of {_gb(total)}: "
                        f"`--gres=gpu:{best.name}:1` next time (where MIG is set up)"
                    )
        kinds = _kind_for(policy, used * HEADROOM, total)
        if kinds:
            out.append(f"`slurmgpu submit --kind {kinds}` gives a slice that holds it")
    if use.util_mean_pct is not None and use.util_mean_pct < 20 and not out:
        out.append(
            f"the GPUs averaged {use.util_mean_pct:g}%: a smaller slice (MIG or shard) would do"
        )
    if use.idle_gpu_hours > 0:
        out.append(
            f"idle for {use.idle_gpu_hours:g} GPU-hours: end the job when the work is done "
            "(the site's idle policy may cancel it)"
        )
    return out


def _kind_for(policy: Policy | None, need_mib: float, total: float) -> str | None:
    """The policy's job kind with the smallest slice that holds `need_mib` (below a GPU)."""
    if policy is None:
        return None
    from slurmgpu.model.policy import slice_memory_mib

    best = None
    for kind in policy.kinds:
        mem = slice_memory_mib(kind.slice, policy.shards_per_gpu)
        if mem is not None and need_mib <= mem < total and (best is None or mem < best[0]):
            best = (mem, kind.name)
    return best[1] if best else None


def _gb(mib: float) -> str:
    return f"{mib / 1024:.0f} GB" if mib >= 1024 else f"{mib:.0f} MiB"
