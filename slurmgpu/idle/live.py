"""`slurmgpu idle --live`: warn the owners of idle running jobs, then act (run by a timer).

Each run: the running GPU jobs (`scontrol show -o job`), their samples up to now (the same
Prometheus series as the retrospective, implausible samples dropped), and per job the rule's
windows at its last sample: a warning window that holds and has not been mailed -> one mail
(and webhook); the full window holding, every warning sent at least `min_notice_min` earlier
-> the action (`scancel` / `scontrol requeue` of the id that names exactly that job: `32_3`
for an array task, `40+1` for a het component; `notify` only mails). A job whose shortest
warning window no longer holds has left its idle stretch: its warnings are forgotten, a later
stretch starts again. Never on exempt jobs; at most `max_actions_per_run` actions per run (the
rest wait for the next run); the job is read again just before acting (same run, still
running, still not exempt), under the locks of its nodes, and read back after it: a job still
running in the same allocation was not cancelled or requeued, whatever scancel's exit code.
Every action is journaled in `STATE/journal.jsonl`: its intent (`begin`) before, its outcome
(`done` / `failed`) after; a `begin` a killed run left is resolved at the next start by
reading the job back. A failed action is retried by later runs, said in each run's output,
and given up after `MAX_ATTEMPTS` (the admin is told once). `--dry-run` sends, does and
records nothing. One run at a time, whatever its state directory: a run lock in the shared
lock directory (`slurmgpu.util.lock.lock_dir()`), and one in the state dir.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import time
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
MAX_ATTEMPTS = 3  # failed actions on one job before it is given up (and the admin told once)
READ_BACK_S = 10.0  # how long a job may take to leave RUNNING after scancel / requeue
READ_BACK_STEP_S = 0.5
RUN_LOCK = ".idle-live.lock"  # in the shared lock directory (a node name never starts with .)


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
    kind: str  # "warning" | "action" | "deferred" | "exempt" | "undecided" | "given-up"
    detail: str
    done: bool
    at: str
    job: str = ""  # the id acted on: `32_3` for an array task, `40+1` for a het component


@dataclass(frozen=True)
class LiveReport:
    now: str
    dry_run: bool
    checked: int
    events: tuple[LiveEvent, ...]
    warnings: tuple[str, ...] = ()
    # the jobs this run cancelled or requeued (dry: would): the cluster changed (exit 3);
    # warnings, notify mails and a killed run's action resolved change no job
    acted_on: tuple[str, ...] = ()

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
    acted_on: list[str] = field(default_factory=list)  # cancelled/requeued (dry: would be)

    def event(self, job: IdleJob, kind: str, detail: str, done: bool) -> None:
        self.events.append(
            LiveEvent(job.job_id, job.user, kind, detail, done, iso_epoch(self.now_s), _name(job))
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
    with _run_lock(options), _lock(state_dir, options.dry_run):
        run = _Run(options, policy, policy.idle, _load_state(state_dir), epoch(now))
        if not options.dry_run:
            _resolve_pending(run)
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
        iso_epoch(run.now_s),
        options.dry_run,
        len(jobs),
        tuple(run.events),
        tuple(run.warnings),
        tuple(run.acted_on),
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
    from slurmgpu.sources.slurm_jobs import (
        exact_job_id,
        scontrol_time,
        time_limit_s,
        user_name_and_uid,
    )

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
        job=exact_job_id(rec),
    )


def _key(job: IdleJob) -> str:
    return f"{job.job_id}@{int(epoch(job.start))}"


def _name(job: IdleJob) -> str:
    """The id that names exactly this job to Slurm (`32_3`, `40+1`, else the raw id)."""
    return job.job or job.job_id


def _one_job(run: _Run, job: IdleJob, sources) -> None:
    reason, note = exemption(job, run.idle)
    if reason:
        run.event(job, "exempt", reason, False)
        return
    if note:
        run.warnings.append(f"job {job.job_id}: {note}")
    rule = run.idle.rule_for(job.tier, job.partition)
    series = next((s for src in sources if (s := src.series(job.ref())) is not None), None)
    dropped = (
        f"; {series.implausible} implausible samples dropped"
        if series and series.implausible
        else ""
    )
    if series is None or len(series.devices) < job.devices:
        have = 0 if series is None else len(series.devices)
        run.event(job, "undecided", f"series for {have} of {job.devices} GPUs{dropped}", False)
        return
    last = max((t for d in series.devices for t in d.times if t <= run.now_s), default=None)
    if last is None or run.now_s - last > run.idle.max_gap_s:
        run.event(job, "undecided", f"no recent samples{dropped}", False)
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
    subject = f"slurmgpu: job {_name(job)}: its GPUs have been idle for {w:g} minutes"
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
    if state.get("gave_up"):
        tries = state.get("attempts", 0)
        run.event(job, "given-up", f"{rule.action}: not retried after {tries} failed attempts "
                  f"(last: {state.get('last_error', '?')}); the admin was told", False)  # fmt: skip
        return
    if run.actions >= run.idle.max_actions_per_run:
        run.event(job, "deferred", f"{rule.action}: rate limit reached this run", False)
        return
    detail = f"{rule.action} after {rule.window_min:g} min idle"
    if rule.action == "requeue" and "+" in _name(job):
        why = f"Slurm requeues only a whole heterogeneous job, not its component {_name(job)}"
        if not run.options.dry_run:
            _failed(run, job, rule, state, detail, why, give_up=True)
        else:
            run.event(job, "action", f"{detail}: {why}", False)
        return
    if run.options.dry_run:
        if rule.action != "notify" and _still_the_same(run, job) is None:
            return
        run.actions += 1
        run.event(job, "action", detail, False)
        argv = ["scancel", _name(job)] if rule.action == "cancel" else None
        if rule.action == "requeue":
            argv = ["scontrol", "requeue", _name(job)]
        if argv:
            run.acted_on.append(_name(job))
            run.emitted_commands.append(f"# job {_name(job)} ({job.user}): {detail}")
            run.emitted_commands.append(_only_while_running(_name(job), argv))
        return
    if rule.action != "notify":
        try:
            with _node_locks(run, job):
                # checked again under the locks, right before acting
                if _still_the_same(run, job) is None:
                    return
                run.actions += 1
                why = _act(run, job, rule.action, state.get("attempts", 0) + 1)
        except NodeBusy as exc:
            run.event(job, "deferred", f"{rule.action}: {exc}", False)
            return
        if why is not None:
            _failed(run, job, rule, state, detail, why)
            return
        run.acted_on.append(_name(job))
    else:
        run.actions += 1
    state["acted"] = run.now_s
    body = _body(run, job, rule, f"It has been {_past(rule.action)}.")
    _notify(
        run,
        job,
        f"slurmgpu: job {_name(job)} {_past(rule.action)}: idle GPUs",
        body,
        {"kind": "action", "action": rule.action},
    )
    run.event(job, "action", detail, True)


def _failed(
    run: _Run,
    job: IdleJob,
    rule: IdleRule,
    state: dict,
    detail: str,
    why: str,
    give_up: bool = False,
) -> None:
    """A refused or failed action: counted in the state, said in this run's output; after
    MAX_ATTEMPTS (or at once, `give_up`: it can never work) the job is given up and the
    admin told once. The owner is not mailed: nothing was done to the job."""
    tries = MAX_ATTEMPTS if give_up else state.get("attempts", 0) + 1
    state["attempts"], state["last_error"] = tries, why
    run.event(job, "action", f"{detail}: failed (attempt {tries} of {MAX_ATTEMPTS}): {why}", False)
    run.warnings.append(
        f"job {_name(job)}: {rule.action} failed ({tries} of {MAX_ATTEMPTS}): {why}"
    )
    if tries < MAX_ATTEMPTS:
        return
    state["gave_up"] = run.now_s
    _journal(run, job, rule.action, "gave-up", why)
    message = (
        f"{rule.action} of job {_name(job)} ({job.user}) failed {tries} times; slurmgpu will not "
        f"try again: {why}"
    )
    run.event(job, "given-up", message, False)
    run.warnings.append(f"job {_name(job)}: given up: {message}")
    _notify_admin(run, job, f"slurmgpu: idle --live gave up on job {_name(job)}", message, rule)


def _notify_admin(run: _Run, job: IdleJob, subject: str, message: str, rule: IdleRule) -> None:
    """Tell the site's admins once (`admin_mail`, and the webhook): never the owner."""
    from slurmgpu.sources.mail import NotifyError, post_webhook, send_mail

    body = (
        f"{message}\n\nThe job still holds its GPUs. Act by hand (scancel {_name(job)} or "
        f"scontrol requeue {_name(job)}), or mark it exempt.\n\n-- slurmgpu idle --live\n"
    )
    if run.options.smtp and run.idle.admin_mail:
        try:
            send_mail(run.options.smtp, run.idle.mail_from or "slurmgpu",
                      list(run.idle.admin_mail), subject, body)  # fmt: skip
        except NotifyError as exc:
            run.warnings.append(str(exc))
    if run.options.webhook:
        payload = {"job_id": job.job_id, "job": _name(job), "user": job.user,
                   "subject": subject, "kind": "gave-up", "action": rule.action}  # fmt: skip
        try:
            post_webhook(run.options.webhook, payload)
        except NotifyError as exc:
            run.warnings.append(str(exc))


def _past(action: str) -> str:
    return {"cancel": "cancelled", "requeue": "requeued", "notify": "reported"}[action]


def _still_the_same(run: _Run, job: IdleJob) -> dict[str, str] | None:
    """Read the job again (its own record, not its array's first task): its record while it
    is still running the same run (start time) and still not exempt, else None."""
    from slurmgpu.sources.slurm_jobs import read_job

    try:
        rec = read_job(job.job_id, env=run.options.env)
    except SlurmgpuError as exc:
        run.event(job, "deferred", f"cannot read the job again: {exc}", False)
        return None
    if rec is None or rec.get("JobState") != "RUNNING":
        return None
    again = job_from_record(rec, run.policy)
    if again is None or again.start != job.start or exemption(again, run.idle)[0] is not None:
        return None
    return rec


class NodeBusy(SlurmgpuError):
    """A node of the job is locked by another acting command: the action waits."""


@contextlib.contextmanager
def _node_locks(run: _Run, job: IdleJob):
    """The locks of the job's nodes (`util/lock.node_locks`, shared by every acting command)
    for the action and its read-back."""
    from slurmgpu.util.hostlist import expand_hostlist
    from slurmgpu.util.lock import NodeLocked, node_locks

    try:
        nodes = expand_hostlist(job.nodes) if job.nodes else []
    except ValueError:
        nodes = []
    try:
        with node_locks(_lock_dir(run.options), nodes, "idle --live"):
            yield
    except NodeLocked as exc:
        raise NodeBusy(f"skipped this run: {exc}") from None


def _lock_dir(options: LiveOptions) -> Path:
    from slurmgpu.util.lock import lock_dir

    return lock_dir({**os.environ, **(options.env or {})})


PHASES = ("begin", "done", "failed", "gave-up")


@dataclass(frozen=True)
class IdleAction:
    """One line of `STATE/journal.jsonl` (the project's sealed journal, `util/journal.py`):
    an action on a job, its intent written before it (`begin`) and its outcome after (`done`:
    read back, the job no longer runs in that allocation; `failed`); `gave-up` when the job
    is no longer tried."""

    at: str
    job_id: str
    user: str
    start: str
    action: str
    gpus: float
    phase: str
    error: str = ""
    job: str = ""  # the id acted on (`32_3`, `40+1`); job_id is the raw JobId
    attempt: int = 0

    def check(self) -> str | None:
        if self.phase not in PHASES:
            return f"phase {self.phase!r} is not one of {', '.join(PHASES)}"
        if self.action not in ("cancel", "requeue"):
            return f"action {self.action!r} is not cancel or requeue"
        return None


def journal_path(state_dir: str | os.PathLike[str]) -> Path:
    return Path(state_dir) / "journal.jsonl"


def read_journal(state_dir: str | os.PathLike[str]) -> list[IdleAction]:
    """The actions taken so far, each line checked (JournalError on a damaged line)."""
    from slurmgpu.util.journal import read_records

    return read_records(journal_path(state_dir), IdleAction)


def _journal(run: _Run, job: IdleJob, action: str, phase: str, error: str = "",
             attempt: int = 0) -> IdleAction:  # fmt: skip
    from slurmgpu.util.journal import append_record

    entry = IdleAction(
        at=iso_epoch(run.now_s), job_id=job.job_id, user=job.user,
        start=iso_epoch(epoch(job.start)), action=action, gpus=float(job.gpus), phase=phase,
        error=error, job=_name(job), attempt=attempt,
    )  # fmt: skip
    append_record(journal_path(run.options.state_dir), entry)
    return entry


def _act(run: _Run, job: IdleJob, action: str, attempt: int) -> str | None:
    """Journal the intent, act on the job's exact id, read it back, journal the outcome;
    None when it was done, else why not."""
    from slurmgpu.sources import slurm_jobs
    from slurmgpu.util.journal import append_record

    entry = _journal(run, job, action, "begin", attempt=attempt)
    try:
        if action == "cancel":
            slurm_jobs.cancel(_name(job), env=run.options.env)
        elif action == "requeue":
            slurm_jobs.requeue(_name(job), env=run.options.env)
    except SlurmgpuError as exc:
        why = str(exc)
    else:
        why = _read_back(run.options.env, job.job_id, job.start, action)
    journal = journal_path(run.options.state_dir)
    if why is None:
        append_record(journal, replace(entry, phase="done"))
    else:
        append_record(journal, replace(entry, phase="failed", error=why))
    return why


def _read_back(env, job_id: str, start: datetime, action: str) -> str | None:
    """None when the job no longer runs in the allocation that started at `start` (ended,
    cancelled, requeued: pending or restarted), else why it was not acted on. scancel exits 0
    where slurmctld refused the job id, so only the job itself tells."""
    from slurmgpu.sources.slurm_jobs import read_job, scontrol_time

    deadline = time.monotonic() + READ_BACK_S
    while True:
        try:
            rec = read_job(job_id, env=env)
        except SlurmgpuError as exc:
            why = f"cannot read the job back: {exc}"
        else:
            if rec is None:
                return None
            running = rec.get("JobState") == "RUNNING"
            if not running or scontrol_time(rec.get("StartTime")) != start:
                return None
            why = f"still running in the same allocation after {action} (Slurm did not act)"
        if time.monotonic() >= deadline:
            return why
        time.sleep(READ_BACK_STEP_S)


def _resolve_pending(run: _Run) -> None:
    """A `begin` with no outcome: a run killed while acting. Read the job back: no longer in
    that allocation -> `done`; still running in it -> `failed` (one more attempt)."""
    from slurmgpu.sources.slurm_jobs import read_job, scontrol_time
    from slurmgpu.util.journal import append_record

    path = journal_path(run.options.state_dir)
    if not path.exists():
        return
    open_: dict[tuple[str, str, str], IdleAction] = {}
    for entry in read_journal(run.options.state_dir):
        key = (entry.job_id, entry.start, entry.action)
        if entry.phase == "begin":
            open_[key] = entry
        else:
            open_.pop(key, None)
    for (job_id, start_text, action), entry in open_.items():
        start = datetime.fromisoformat(start_text.replace("Z", "+00:00")).replace(tzinfo=None)
        # unreadable (slurmctld down): the error stops the run and the record stays pending
        rec = read_job(job_id, env=run.options.env)
        same = rec is not None and rec.get("JobState") == "RUNNING"
        same = same and rec is not None and scontrol_time(rec.get("StartTime")) == start
        why = "still running in the same allocation" if same else None
        outcome = replace(entry, at=iso_epoch(run.now_s))
        jobs = run.state["jobs"]
        state = jobs.setdefault(f"{job_id}@{int(epoch(start))}", {"warned": {}})
        name = entry.job or job_id
        if why is None:
            append_record(path, replace(outcome, phase="done", error="resolved at start"))
            state["acted"] = run.now_s
            run.warnings.append(f"job {name}: the {action} a killed run began was done")
        else:
            why = f"a killed run began it: {why}"
            append_record(path, replace(outcome, phase="failed", error=why))
            state["attempts"], state["last_error"] = state.get("attempts", 0) + 1, why
            run.warnings.append(f"job {name}: {action} not done: {why}")


def _body(run: _Run, job: IdleJob, rule: IdleRule, consequence: str) -> str:
    lines = [
        f"Job {_name(job)} ({job.user}, partition {job.partition}, {job.gpus:g} GPUs) holds GPUs "
        f"that have been at or below {rule.util_pct:g}% utilization.",
        "",
        consequence,
        "",
        "Idle GPUs keep other jobs waiting. If the job no longer needs them, please end it",
        f"(scancel {_name(job)}).",
    ]
    if run.idle.exempt_reasons:
        reasons = ", ".join(run.idle.exempt_reasons)
        lines += [
            "",
            "If it must keep them for an allowed reason, mark it:",
            f"  scontrol update job {_name(job)} comment=idle-exempt=REASON",
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
        payload = {"job_id": job.job_id, "job": _name(job), "user": job.user,
                   "subject": subject, **extra}  # fmt: skip
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


def _only_while_running(name: str, argv: list[str]) -> str:
    """The emitted line acts only on a job still RUNNING when a person runs the script, so a
    second run (the job already cancelled, or requeued and pending) does nothing and exits 0;
    one that acted marks the script's exit status 3 (docs/acting.md, exit codes)."""
    import shlex

    job = shlex.quote(name)
    state = f'"$(squeue -h -j {job} -o %T 2>/dev/null)"'
    return f"if [ {state} = RUNNING ]; then {shlex.join(argv)}; changed=1; fi"


def _emit(directory: Path, run: _Run) -> None:
    """`--emit DIR`: the commands as a script to run by hand, each mail as a file. The script
    exits 3 when it acted on a job, 0 when none was still running (the one convention)."""
    from slurmgpu.util.atomic import write_atomic

    script = ["#!/bin/sh", "# slurmgpu idle --live --emit: the actions of this run", "set -e",
              "changed=0"]  # fmt: skip
    end = ["# exit 3: a job was acted on, 0: none (docs/acting.md, exit codes)",
           'if [ "$changed" = 1 ]; then exit 3; fi', "exit 0"]  # fmt: skip
    write_atomic(directory / "idle-actions.sh",
                 "\n".join([*script, *run.emitted_commands, *end]) + "\n",
                 mode=0o755, backup=False)  # fmt: skip
    for n, text in enumerate(run.emitted_mail, 1):
        write_atomic(directory / f"mail-{n:03d}.txt", text, mode=0o644, backup=False)


@contextlib.contextmanager
def _run_lock(options: LiveOptions):
    """One `idle --live` at a time on this host (and over a shared lock directory, across
    hosts), whatever its state directory: two timers would both warn and both act."""
    from slurmgpu.util.lock import LockUnavailable

    if options.dry_run:
        yield
        return
    directory = _lock_dir(options)
    path = directory / RUN_LOCK
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise LockUnavailable(f"cannot open the run lock {path}: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        try:
            holder = " ".join(path.read_text(encoding="utf-8").split())[:160] or "unknown"
        except OSError:
            holder = "unknown"
        raise SlurmgpuError(
            f"another `idle --live` is running ({holder}; lock {path}): this run does nothing"
        ) from None
    try:
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        os.ftruncate(fd, 0)
        text = f"pid {os.getpid()}: idle --live --state-dir {options.state_dir}, since {stamp}\n"
        os.pwrite(fd, text.encode(), 0)
        yield
    finally:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        os.close(fd)  # closing the descriptor releases the flock


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
