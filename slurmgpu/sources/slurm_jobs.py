"""Jobs on the live controller (`scontrol show -o job`) and the two things done to them.

`scontrol show -o job` rather than squeue: one line per job with every field the idle rule
needs (AllocTRES, BatchFlag for interactive jobs, Comment, MailUser, UserId with its uid).
The actions are `scancel JOBID` and `scontrol requeue JOBID`, argument lists, no shell.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from slurmgpu.sources.slurm import parse_scontrol_record
from slurmgpu.util.proc import run


def job_records(job_ids: tuple[str, ...] = (), env: Mapping[str, str] | None = None):
    """`scontrol show -o job [ID]` records (all jobs when no ids are given; times in UTC)."""
    env = {**(env or {}), "TZ": "UTC"}
    if not job_ids:
        out = run(["scontrol", "show", "-o", "job"], env=env, timeout=60).stdout
        return [parse_scontrol_record(line) for line in out.splitlines() if line.strip()]
    records = []
    for job_id in job_ids:
        proc = run(["scontrol", "show", "-o", "job", job_id], env=env, timeout=30, check=False)
        records += [parse_scontrol_record(x) for x in proc.stdout.splitlines() if x.strip()]
    return records


def user_name_and_uid(user_id: str) -> tuple[str, int | None]:
    """`alice(1001)` -> ("alice", 1001)."""
    name, _, rest = user_id.partition("(")
    uid = rest.rstrip(")")
    return name, int(uid) if uid.isdigit() else None


def scontrol_time(text: str | None) -> datetime | None:
    """`2026-12-03T18:40:00` (naive UTC: scontrol runs with TZ=UTC)."""
    if not text or text in ("Unknown", "None", "N/A"):
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def cancel(job_id: str, env: Mapping[str, str] | None = None) -> str:
    return run(["scancel", job_id], env=env, timeout=30).stdout


def requeue(job_id: str, env: Mapping[str, str] | None = None) -> str:
    return run(["scontrol", "requeue", job_id], env=env, timeout=30).stdout
