"""`slurmgpu idle --live`: warn the owners of idle running jobs, then act (run by a timer).

Each run: the running GPU jobs (`scontrol show -o job`), their samples up to now (the same
Prometheus series as the retrospective), and per job the rule's windows at its last sample:
a warning window that holds and has not been mailed -> one mail (and webhook); the full
window holding, every warning sent at least `min_notice_min` earlier -> the action
(`scancel` / `scontrol requeue`; `notify` only mails). A job whose shortest warning window
no longer holds has left its idle stretch: its warnings are forgotten, a later stretch
starts again. Never on exempt jobs; at most `max_actions_per_run` actions per run (the rest
wait for the next run); the job is read again just before acting (same run, still running,
still not exempt). Every action is journaled before and after in `STATE/journal.jsonl`;
`--dry-run` sends, does and records nothing. One run at a time (a lock in the state dir).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from slurmgpu.errors import SlurmgpuError, UsageError
from slurmgpu.idle.jobs import IdleJob, exemption
from slurmgpu.idle.retrospective import epoch, iso_epoch
from slurmgpu.idle.rule import idle_at
from slurmgpu.measure.options import MeasureOptions
from slurmgpu.model.policy import IdlePolicy, IdleRule, Policy

STATE_VERSION = 1


@dataclass(frozen=True)
class LiveOptions:
    policy: str
    now: datetime
    measure: MeasureOptions
    state_dir: str
    smtp: str | None = None
    webhook: str | None = None
    dry_run: bool = False
    env: Mapping[str, str] | None = None
    emit_dir: str | None = None  # with dry_run: write the mails and the commands there


@dataclass(frozen=True)
class LiveEvent:
    """One thing this run did (or, dry, would do) to one job."""

    job_id: str
    user: str
    kind: str  # "warning" | "action" | "deferred" | "exempt" | "undecided"
    detail: str
    done: bool
    at: str


@dataclass(frozen=True)
class LiveReport:
    now: str
    dry_run: bool
    checked: int
    events: tuple[LiveEvent, ...]
    warnings: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {
            "now": self.now,
            "dry_run": self.dry_run,
            "checked": self.checked,
            "events": [asdict(e) for e in self.events],
            "warnings": list(self.warnings),
        }


@dataclass
class _Run:
    """One live run's working state."""

    options: LiveOptions
    policy: Policy
    idle: IdlePolicy
    state: dict
    now_s: float
    events: list[LiveEvent] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    actions: int = 0
    emitted_mail: list[str] = field(default_factory=list)
    emitted_commands: list[str] = field(default_factory=list)

    def event(self, job: IdleJob, kind: str, detail: str, done: bool) -> None:
        self.events.append(
            LiveEvent(job.job_id, job.user, kind, detail, done, iso_epoch(self.now_s))
        )


def idle_live(options: LiveOptions) -> LiveReport:
    """One pass of the live mode over the running jobs."""
    from slurmgpu.idle import load_idle_policy, series_sources

    policy = load_idle_policy(options.policy)
    assert policy.idle is not None
    if not options.dry_run and options.smtp is None and options.webhook is None:
        raise UsageError("--live needs --smtp HOST[:PORT] or --webhook URL (or --dry-run)")
    if options.emit_dir and not Path(options.emit_dir).is_dir():
        raise UsageError(f"--emit {options.emit_dir}: not a directory")
    state_dir = Path(options.state_dir)
    if not options.dry_run:
        state_dir.mkdir(parents=True, exist_ok=True)
    now = options.now.astimezone(UTC).replace(tzinfo=None)
    with _lock(state_dir, options.dry_run):
        run = _Run(options, policy, policy.idle, _load_state(state_dir), epoch(now))
        jobs = running_jobs(policy, options.env)
        sources = series_sources(options.measure, now, 6 * 3600, 2_000_000)
        if not sources:
            raise UsageError("--live needs --prometheus URL (the rule needs per-sample series)")
        seen = set()
        for job in jobs:
            seen.add(_key(job))
            _one_job(run, job, sources)
        for key in [k for k in run.state["jobs"] if k not in seen]:
            del run.state["jobs"][key]  # ended or requeued: a new run starts afresh
        for source in sources:
            run.warnings += [str(w) for w in source.warnings]
        if not options.dry_run:
            _save_state(state_dir, run.state)
    if options.emit_dir:
        _emit(Path(options.emit_dir), run)
    return LiveReport(
        iso_epoch(run.now_s), options.dry_run, len(jobs), tuple(run.events), tuple(run.warnings)
    )


def running_jobs(policy: Policy, env: Mapping[str, str] | None = None) -> list[IdleJob]:
    """Running jobs that hold GPUs, as the rule sees them."""
    from slurmgpu.sources.slurm_jobs import job_records

    out = []
    for rec in job_records(env=env):
        if rec.get("JobState") != "RUNNING":
            continue
        job = job_from_record(rec, policy)
        if job is not None:
            out.append(job)
    return out


def job_from_record(
    rec: Mapping[str, str], policy: Policy, any_state: bool = False
) -> IdleJob | None:
    """An `scontrol show -o job` record -> IdleJob (None without GPUs or a start; with
    `any_state`, an ended job gets its EndTime)."""
    import pyarrow as pa

    from slurmgpu.accounting.tres import parse_alloc_tres
    from slurmgpu.sources.slurm_jobs import scontrol_time, time_limit_s, user_name_and_uid

    tres = parse_alloc_tres(pa.array([rec.get("AllocTRES") or rec.get("TRES") or ""]))
    count, equiv = float(tres.gpu_count[0]), float(tres.gpu_equiv[0])
    shards = float(tres.shards[0])
    if (math.isnan(count) or count <= 0) and shards > 0 and policy.shards_per_gpu:
        count, equiv = 1.0, shards / policy.shards_per_gpu  # one shared GPU
    start = scontrol_time(rec.get("StartTime"))
    if math.isnan(count) or count <= 0 or start is None:
        return None
    user, _uid = user_name_and_uid(rec.get("UserId", ""))
    state = rec.get("JobState", "")
    qos = rec.get("QOS", "")
    tier = policy.tier_for_qos(qos)
    comment = rec.get("Comment", "")
    if comment == "(null)":
        comment = ""
    return IdleJob(
        job_id=rec.get("JobId", ""),
        cluster="",
        user=user,
        account=rec.get("Account", ""),
        partition=rec.get("Partition", ""),
        qos=qos,
        tier=tier.name if tier else qos,
        start=start,
        end=scontrol_time(rec.get("EndTime")) if any_state and state != "RUNNING" else None,
        gpus=equiv if not math.isnan(equiv) else count,
        devices=max(1, math.ceil(count)),
        nodes=rec.get("NodeList", ""),
        interactive=rec.get("BatchFlag", "1") == "0",
        comment=comment,
        state=state,
        time_limit_s=time_limit_s(rec.get("TimeLimit", "")),
    )


def _key(job: IdleJob) -> str:
    return f"{job.job_id}@{int(epoch(job.start))}"


def _one_job(run: _Run, job: IdleJob, sources) -> None:
    reason, note = exemption(job, run.idle)
    if reason:
        run.event(job, "exempt", reason, False)
        return
    if note:
        run.warnings.append(f"job {job.job_id}: {note}")
    rule = run.idle.rule_for(job.tier, job.partition)
    series = next((s for src in sources if (s := src.series(job.ref())) is not None), None)
    if series is None or len(series.devices) < job.devices:
        have = 0 if series is None else len(series.devices)
        run.event(job, "undecided", f"series for {have} of {job.devices} GPUs", False)
        return
    last = max((t for d in series.devices for t in d.times if t <= run.now_s), default=None)
    if last is None or run.now_s - last > run.idle.max_gap_s:
        run.event(job, "undecided", "no recent samples", False)
        return
    state = run.state["jobs"].setdefault(_key(job), {"warned": {}})
    gap = run.idle.max_gap_s
    start = epoch(job.start)
    windows = list(rule.warn_after_min)
    shortest = windows[0] if windows else rule.window_min
    if last - start < shortest * 60 or not idle_at(series.devices, last, rule, gap, shortest):
        state["warned"] = {}  # not (or no longer) idle: a later stretch starts afresh
        return
    for number, w in enumerate(windows, start=1):
        due = str(number) not in state["warned"] and last - start >= w * 60
        if due and idle_at(series.devices, last, rule, gap, w):
            _warn(run, job, rule, number, w, state)
    if last - start >= rule.window_s and idle_at(series.devices, last, rule, gap, rule.window_min):
        _maybe_act(run, job, rule, state)


def _warn(run: _Run, job: IdleJob, rule: IdleRule, number: int, w: float, state: dict) -> None:
    left = rule.window_min - w
    what = {"cancel": "cancelled", "requeue": "requeued", "notify": "reported"}[rule.action]
    subject = f"slurmgpu: job {job.job_id}: its GPUs have been idle for {w:g} minutes"
    body = _body(
        run,
        job,
        rule,
        f"If they stay idle, the job will be {what} in about "
        f"{left:g} minutes (after {rule.window_min:g} minutes idle).",
    )
    if _notify(run, job, subject, body, {"kind": "warning", "number": number}):
        state["warned"][str(number)] = run.now_s
        run.event(job, "warning", f"warning {number}: idle {w:g} min", not run.options.dry_run)


def _maybe_act(run: _Run, job: IdleJob, rule: IdleRule, state: dict) -> None:
    sent = state["warned"]
    needed = [str(i) for i in range(1, len(rule.warn_after_min) + 1)]
    if any(n not in sent for n in needed):
        return  # the action comes only after every warning
    if needed and run.now_s - max(sent[n] for n in needed) < run.idle.min_notice_min * 60:
        return
    if state.get("acted"):
        return
    if run.actions >= run.idle.max_actions_per_run:
        run.event(job, "deferred", f"{rule.action}: rate limit reached this run", False)
        return
    if rule.action != "notify" and not _still_the_same(run, job):
        return
    run.actions += 1
    detail = f"{rule.action} after {rule.window_min:g} min idle"
    if run.options.dry_run:
        run.event(job, "action", detail, False)
        argv = ["scancel", job.job_id] if rule.action == "cancel" else None
        if rule.action == "requeue":
            argv = ["scontrol", "requeue", job.job_id]
        if argv:
            run.emitted_commands.append(f"# job {job.job_id} ({job.user}): {detail}")
            run.emitted_commands.append(" ".join(argv))
        return
    ok = _act(run, job, rule.action)
    if ok:
        state["acted"] = run.now_s
        body = _body(run, job, rule, f"It has been {_past(rule.action)}.")
        _notify(
            run,
            job,
            f"slurmgpu: job {job.job_id} {_past(rule.action)}: idle GPUs",
            body,
            {"kind": "action", "action": rule.action},
        )
    run.event(job, "action", detail if ok else f"{detail}: failed", ok)


def _past(action: str) -> str:
    return {"cancel": "cancelled", "requeue": "requeued", "notify": "reported"}[action]


def _still_the_same(run: _Run, job: IdleJob) -> bool:
    """Read the job again: still running, same start, still not exempt."""
    from slurmgpu.sources.slurm_jobs import job_records

    for rec in job_records((job.job_id,), env=run.options.env):
        again = job_from_record(rec, run.policy)
        if again is None or rec.get("JobState") != "RUNNING" or again.start != job.start:
            return False
        return exemption(again, run.idle)[0] is None
    return False


@dataclass(frozen=True)
class IdleAction:
    """One line of `STATE/journal.jsonl` (the project's sealed journal, `util/journal.py`):
    an action on a job, written before (`begin`) and after (`done` / `failed`) it."""

    at: str
    job_id: str
    user: str
    start: str
    action: str
    gpus: float
    phase: str
    error: str = ""

    def check(self) -> str | None:
        if self.phase not in ("begin", "done", "failed"):
            return f"phase {self.phase!r} is not begin, done or failed"
        if self.action not in ("cancel", "requeue"):
            return f"action {self.action!r} is not cancel or requeue"
        return None


def journal_path(state_dir: str | os.PathLike[str]) -> Path:
    return Path(state_dir) / "journal.jsonl"


def read_journal(state_dir: str | os.PathLike[str]) -> list[IdleAction]:
    """The actions taken so far, each line checked (JournalError on a damaged line)."""
    from slurmgpu.util.journal import read_records

    return read_records(journal_path(state_dir), IdleAction)


def _act(run: _Run, job: IdleJob, action: str) -> bool:
    from slurmgpu.sources import slurm_jobs
    from slurmgpu.util.journal import append_record

    journal = journal_path(run.options.state_dir)
    entry = IdleAction(
        at=iso_epoch(run.now_s), job_id=job.job_id, user=job.user,
        start=iso_epoch(epoch(job.start)), action=action, gpus=float(job.gpus), phase="begin",
    )  # fmt: skip
    append_record(journal, entry)
    try:
        if action == "cancel":
            slurm_jobs.cancel(job.job_id, env=run.options.env)
        elif action == "requeue":
            slurm_jobs.requeue(job.job_id, env=run.options.env)
    except SlurmgpuError as exc:
        run.warnings.append(f"job {job.job_id}: {action} failed: {exc}")
        append_record(journal, replace(entry, phase="failed", error=str(exc)))
        return False
    append_record(journal, replace(entry, phase="done"))
    return True


def _body(run: _Run, job: IdleJob, rule: IdleRule, consequence: str) -> str:
    lines = [
        f"Job {job.job_id} ({job.user}, partition {job.partition}, {job.gpus:g} GPUs) holds GPUs "
        f"that have been at or below {rule.util_pct:g}% utilization.",
        "",
        consequence,
        "",
        "Idle GPUs keep other jobs waiting. If the job no longer needs them, please end it",
        f"(scancel {job.job_id}).",
    ]
    if run.idle.exempt_reasons:
        reasons = ", ".join(run.idle.exempt_reasons)
        lines += [
            "",
            "If it must keep them for an allowed reason, mark it:",
            f"  scontrol update job {job.job_id} comment=idle-exempt=REASON",
            f"(allowed reasons: {reasons}).",
        ]
    lines += ["", "-- slurmgpu idle (the site's idle-GPU policy)"]
    return "\n".join(lines) + "\n"


def _notify(run: _Run, job: IdleJob, subject: str, body: str, extra: dict) -> bool:
    """Mail the owner (and admins) and call the webhook; False when nothing got out."""
    from slurmgpu.sources.mail import NotifyError, post_webhook, send_mail

    if run.options.dry_run:
        to = ", ".join([_address(job.user, run.idle.mail_domain), *run.idle.admin_mail])
        run.emitted_mail.append(f"To: {to}\nSubject: {subject}\n\n{body}")
        return True
    ok = False
    if run.options.smtp:
        to = [_address(job.user, run.idle.mail_domain), *run.idle.admin_mail]
        sender = run.idle.mail_from or "slurmgpu"
        try:
            send_mail(run.options.smtp, sender, to, subject, body)
            ok = True
        except NotifyError as exc:
            run.warnings.append(str(exc))
    if run.options.webhook:
        payload = {"job_id": job.job_id, "user": job.user, "subject": subject, **extra}
        try:
            post_webhook(run.options.webhook, payload)
            ok = True
        except NotifyError as exc:
            run.warnings.append(str(exc))
    return ok


def _address(user: str, domain: str) -> str:
    return f"{user}@{domain}" if domain else user


def _load_state(state_dir: Path) -> dict:
    path = state_dir / "state.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"version": STATE_VERSION, "jobs": {}}
    except (OSError, ValueError) as exc:
        raise SlurmgpuError(f"{path}: unreadable idle state ({exc}); move it away") from exc
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), dict):
        raise SlurmgpuError(f"{path}: not an idle state file; move it away")
    return data


def _save_state(state_dir: Path, state: dict) -> None:
    from slurmgpu.util.atomic import write_atomic

    text = json.dumps(state, sort_keys=True, indent=1) + "\n"
    write_atomic(state_dir / "state.json", text, mode=0o600, backup=False)


def _emit(directory: Path, run: _Run) -> None:
    """`--emit DIR`: the commands as a script to run by hand, each mail as a file."""
    from slurmgpu.util.atomic import write_atomic

    script = ["#!/bin/sh", "# slurmgpu idle --live --emit: the actions of this run", "set -e"]
    write_atomic(directory / "idle-actions.sh", "\n".join([*script, *run.emitted_commands]) + "\n",
                 mode=0o755, backup=False)  # fmt: skip
    for n, text in enumerate(run.emitted_mail, 1):
        write_atomic(directory / f"mail-{n:03d}.txt", text, mode=0o644, backup=False)


@contextlib.contextmanager
def _lock(state_dir: Path, dry_run: bool):
    if dry_run:  # reads the state, writes nothing (not even the lock file)
        yield
        return
    with open(state_dir / "lock", "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SlurmgpuError(f"{state_dir}: another `idle --live` is running") from None
        yield
