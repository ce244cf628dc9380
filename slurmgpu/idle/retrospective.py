"""What the idle policy would have done over a past window (`slurmgpu idle`).

For each GPU run: its rule (`IdlePolicy.rule_for(tier, partition)`), its samples (Prometheus
series; else a collector or jobstats summary, which can only prove a run idle when its mean
is 0: a mean of samples that are never negative is 0 only when every sample is), the
verdict, and the GPU-hours the action would have given back: (end - flagged_at) x GPUs held.
Exempt runs are evaluated too and listed apart (never counted as reclaimable).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from slurmgpu.idle.jobs import IdleJob, exemption
from slurmgpu.idle.rule import Verdict, evaluate
from slurmgpu.measure.warnings import MeasureWarning
from slurmgpu.model.measure import JobSeries, RunRef
from slurmgpu.model.policy import IdlePolicy, IdleRule


@dataclass(frozen=True)
class FlaggedJob:
    """One run the policy flags (JSON keys as docs/idle.md lists them)."""

    job_id: str
    user: str
    account: str
    tier: str
    partition: str
    gpus: float
    devices: int
    start: str
    end: str | None
    flagged_at: str
    warnings: tuple[str | None, ...]
    action: str
    action_at: str
    reclaimable_gpu_hours: float
    basis: str  # "series" | "summary"
    exempt: str | None = None
    cluster: str = ""
    job: str = ""  # JobID as printed (`123_4` for an array task)


@dataclass(frozen=True)
class Undecided:
    job_id: str
    reason: str


@dataclass(frozen=True)
class IdleReport:
    """The retrospective: flagged runs, exempt runs that were idle, runs not decided."""

    policy: dict
    since: str | None
    until: str
    jobs: tuple[FlaggedJob, ...]
    exempt: tuple[FlaggedJob, ...]
    undecided: tuple[Undecided, ...]
    gpu_runs: int
    measured: dict[str, int]
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def reclaimable_gpu_hours(self) -> float:
        return round(sum(j.reclaimable_gpu_hours for j in self.jobs), 4)

    def ranking(self, by: str) -> list[dict]:
        """Users (`by="user"`) or accounts by idle GPU-hours: flagged runs (what the policy
        reclaims) and exempt runs that were idle too (waste the policy lets stand)."""
        rows: dict[str, dict] = {}
        for entry, reclaimable in [(j, True) for j in self.jobs] + [
            (j, False) for j in self.exempt
        ]:
            name = getattr(entry, by)
            row = rows.setdefault(
                name, {by: name, "idle_gpu_hours": 0.0, "reclaimable_gpu_hours": 0.0, "runs": 0}
            )
            row["idle_gpu_hours"] += entry.reclaimable_gpu_hours
            row["runs"] += 1
            if reclaimable:
                row["reclaimable_gpu_hours"] += entry.reclaimable_gpu_hours
        for row in rows.values():
            row["idle_gpu_hours"] = round(row["idle_gpu_hours"], 4)
            row["reclaimable_gpu_hours"] = round(row["reclaimable_gpu_hours"], 4)
        return sorted(rows.values(), key=lambda r: (-r["idle_gpu_hours"], r[by]))

    def to_json(self) -> dict:
        return {
            "ranking": {"users": self.ranking("user"), "accounts": self.ranking("account")},
            "policy": self.policy,
            "since": self.since,
            "until": self.until,
            "jobs": [asdict(j) for j in self.jobs],
            "reclaimable_gpu_hours": self.reclaimable_gpu_hours,
            "exempt": [asdict(j) for j in self.exempt],
            "exempt_idle_gpu_hours": round(sum(j.reclaimable_gpu_hours for j in self.exempt), 4),
            "undecided": [asdict(u) for u in self.undecided],
            "gpu_runs": self.gpu_runs,
            "measured": self.measured,
            "warnings": list(self.warnings),
            "notes": list(self.notes),
        }


class SeriesSource(Protocol):
    """What the retrospective needs of a per-sample source (`measure/series.py`)."""

    name: str
    warnings: list[MeasureWarning]

    def series(self, run: RunRef) -> JobSeries | None:
        """The run's per-device samples, or None when the source has none."""
        ...


def retrospective(
    jobs: Sequence[IdleJob],
    policy: IdlePolicy,
    *,
    series_sources: Sequence[SeriesSource] = (),
    summary_sources: Sequence = (),
    until: datetime,
    since: datetime | None = None,
) -> IdleReport:
    """Apply the policy to every run (`until`: the end of runs still running)."""
    from slurmgpu.measure.apply import measure_runs, run_key

    flagged: list[FlaggedJob] = []
    exempt: list[FlaggedJob] = []
    undecided: list[Undecided] = []
    measured = {"series": 0, "summary": 0}
    notes: list[str] = []
    no_series: list[IdleJob] = []
    for job in jobs:
        rule = policy.rule_for(job.tier, job.partition)
        series = _series_of(job, series_sources)
        if series is None:
            no_series.append(job)
            continue
        measured["series"] += 1
        verdict = _verdict(job, series, rule, policy, until)
        if not series.complete:
            verdict = Verdict(None, (), undecided=f"{series.source}: incomplete series")
        if verdict.undecided and series.implausible:
            dropped = f"; {series.implausible} implausible samples dropped"
            verdict = Verdict(None, (), undecided=verdict.undecided + dropped)
        _file(job, verdict, rule, policy, until, "series", flagged, exempt, undecided, notes)
    if no_series and summary_sources:
        result = measure_runs([j.ref() for j in no_series], summary_sources)
        for job in no_series:
            m = result.by_run.get(run_key(job.ref()))
            rule = policy.rule_for(job.tier, job.partition)
            if m is None:
                undecided.append(Undecided(job.job_id, "no samples (no series, no summary)"))
                continue
            measured["summary"] += 1
            verdict = _summary_verdict(job, m, rule, until)
            _file(job, verdict, rule, policy, until, "summary", flagged, exempt, undecided, notes)
        warnings = [str(w) for w in result.warnings]
    else:
        undecided += [Undecided(j.job_id, "no samples") for j in no_series]
        warnings = []
    for source in series_sources:
        warnings += [str(w) for w in source.warnings]
    return IdleReport(
        policy=policy_json(policy),
        since=iso(since) if since else None,
        until=iso(until),
        jobs=tuple(sorted(flagged, key=lambda j: (j.flagged_at, j.job_id))),
        exempt=tuple(exempt),
        undecided=tuple(undecided),
        gpu_runs=len(jobs),
        measured=measured,
        warnings=tuple(warnings),
        notes=tuple(notes),
    )


def _series_of(job: IdleJob, sources: Sequence[SeriesSource]) -> JobSeries | None:
    for source in sources:
        found = source.series(job.ref())
        if found is not None:
            return found
    return None


def _verdict(
    job: IdleJob, series: JobSeries, rule: IdleRule, policy: IdlePolicy, until: datetime
) -> Verdict:
    end = job.end or until
    return evaluate(
        series.devices,
        start=epoch(job.start),
        end=epoch(end),
        rule=rule,
        max_gap_s=policy.max_gap_s,
        gpus_held=job.devices,
    )


def _summary_verdict(job: IdleJob, m, rule: IdleRule, until: datetime) -> Verdict:
    """A summary proves idleness only at mean 0 on every device (no memory rule); a mean
    that cannot be true (negative, NaN: left out by `measure_runs`; over 100 %) decides
    nothing."""
    from slurmgpu.measure.series import plausible_util

    start, end = epoch(job.start), epoch(job.end or until)
    if m.gpus_measured < job.devices:
        return Verdict(None, (), undecided=f"summary of {m.gpus_measured} of {job.devices} GPUs")
    if m.util_mean_pct is None:
        return Verdict(None, (), undecided="summary without utilization")
    if plausible_util(m.util_mean_pct) is None:  # a mean over 100 %: no evidence either way
        return Verdict(None, (), undecided=f"summary utilization {m.util_mean_pct:g}% implausible")
    if m.util_mean_pct > 0 or rule.memory_held_mib is not None:
        if m.util_mean_pct <= rule.util_pct:
            return Verdict(None, (), undecided="summary mean only: the rule needs samples")
        return Verdict(None, ())
    if end - start < rule.window_s:
        return Verdict(None, ())
    warnings = tuple(start + w * 60.0 for w in rule.warn_after_min)
    return Verdict(start + rule.window_s, warnings)


def _file(job, verdict, rule, policy, until, basis, flagged, exempt, undecided, notes) -> None:
    if verdict.undecided:
        undecided.append(Undecided(job.job_id, verdict.undecided))
        return
    reason, note = exemption(job, policy)
    if note:
        notes.append(f"job {job.job_id}: {note}")
    if verdict.flagged_at is None:
        return
    end = epoch(job.end or until)
    hours = max(0.0, end - verdict.flagged_at) / 3600.0 * job.gpus
    entry = FlaggedJob(
        job_id=job.job_id,
        cluster=job.cluster,
        user=job.user,
        account=job.account,
        tier=job.tier,
        partition=job.partition,
        gpus=job.gpus,
        devices=job.devices,
        start=iso(job.start),
        end=iso(job.end) if job.end else None,
        flagged_at=iso_epoch(verdict.flagged_at),
        warnings=tuple(iso_epoch(w) if w is not None else None for w in verdict.warnings),
        action="none" if reason else rule.action,
        action_at=iso_epoch(verdict.flagged_at),
        reclaimable_gpu_hours=round(hours, 4),
        basis=basis,
        exempt=reason,
        job=job.job or job.job_id,
    )
    (exempt if reason else flagged).append(entry)


def policy_json(policy: IdlePolicy) -> dict:
    data = asdict(policy)
    data["tiers"] = {name: asdict(rule) for name, rule in policy.tiers}
    data["partitions"] = {name: asdict(rule) for name, rule in policy.partitions}
    return data


def epoch(t: datetime) -> float:
    return (t if t.tzinfo else t.replace(tzinfo=UTC)).timestamp()


def iso(t: datetime) -> str:
    return iso_epoch(epoch(t))


def iso_epoch(t: float) -> str:
    moment = datetime.fromtimestamp(t, UTC)
    fmt = "%Y-%m-%dT%H:%M:%S.%fZ" if moment.microsecond else "%Y-%m-%dT%H:%M:%SZ"
    return moment.strftime(fmt)
