"""Jobs on the live controller (`scontrol show -o job`) and the two things done to them.

`scontrol show -o job` rather than squeue: one line per job with every field the idle rule
needs (AllocTRES, BatchFlag for interactive jobs, Comment, MailUser, UserId with its uid).
The actions are `scancel JOBID` and `scontrol requeue JOBID`, argument lists, no shell, with
JOBID the id that names exactly one job (`exact_job_id`): Slurm reads the raw id of the array
task that carries the array's id as the whole array, and the leader's raw id of a
heterogeneous job as every component.
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


def exact_job_id(rec: Mapping[str, str]) -> str:
    """The id that names exactly this job to scancel / scontrol: `ARRAYJOBID_TASKID` for an
    array task (`scancel 32` cancels every task of array 32, and the raw id of another task
    is refused by slurmctld while scancel exits 0), `HETJOBID+OFFSET` for a component of a
    heterogeneous job (the leader's raw id names every component), else the JobId."""
    array, task = rec.get("ArrayJobId", ""), rec.get("ArrayTaskId", "")
    if array.isdigit() and task.isdigit():
        return f"{array}_{task}"
    het, offset = rec.get("HetJobId", ""), rec.get("HetJobOffset", "")
    if het.isdigit() and offset.isdigit():
        return f"{het}+{offset}"
    return rec.get("JobId", "")


def read_job(job_id: str, env: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """The one `scontrol show -o job` record whose JobId is the raw `job_id`; None when
    slurmctld no longer knows it. `scontrol show job` of an array's id or a het leader lists
    every task or component: only the record of that id counts. SlurmCommandError when
    slurmctld cannot be asked (then nothing is known)."""
    from slurmgpu.errors import SlurmCommandError

    full_env = {**(env or {}), "TZ": "UTC"}
    proc = run(["scontrol", "show", "-o", "job", job_id], env=full_env, timeout=30, check=False)
    if proc.returncode != 0:
        if "Invalid job id" in proc.stderr:
            return None
        detail = proc.stderr.strip()[-200:] or f"exit {proc.returncode}"
        raise SlurmCommandError(f"scontrol show job {job_id}: {detail}")
    for line in proc.stdout.splitlines():
        rec = parse_scontrol_record(line) if line.strip() else {}
        if rec.get("JobId") == job_id:
            return rec
    return None


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


def time_limit_s(text: str) -> float | None:
    """`[D-]HH:MM:SS` / `MM:SS` / `MM` -> seconds; None for UNLIMITED or unreadable."""
    days, _, rest = text.partition("-") if "-" in text else ("0", "", text)
    parts = rest.split(":")
    if not days.isdigit() or not parts or not all(p.isdigit() for p in parts) or len(parts) > 3:
        return None
    nums = [int(p) for p in parts]
    if len(nums) == 1:
        nums = [0, nums[0], 0]  # minutes
    elif len(nums) == 2:
        nums = [0, *nums]
    h, m, s = nums
    return float(int(days) * 86400 + h * 3600 + m * 60 + s)


SACCT_JOB_FIELDS = (
    "JobIDRaw", "User", "UID", "State", "Start", "End", "AllocTRES", "Partition", "QOS",
    "Account", "NodeList", "TimelimitRaw", "Comment",
)  # fmt: skip


def sacct_job(job_id: str, env: Mapping[str, str] | None = None):
    """An ended job from accounting as an scontrol-like record, and its owner's uid."""
    argv = ["sacct", "-j", job_id, "-X", "-n", "-P", "--delimiter=\x1f",
            "--format", ",".join(SACCT_JOB_FIELDS)]  # fmt: skip
    full_env = {**(env or {}), "TZ": "UTC"}
    out = run(argv, env=full_env, timeout=60).stdout
    for line in out.splitlines():
        fields = line.split("\x1f")
        if len(fields) < len(SACCT_JOB_FIELDS):
            continue
        f = dict(zip(SACCT_JOB_FIELDS, fields, strict=False))
        if f["JobIDRaw"] != job_id:
            continue
        limit = f["TimelimitRaw"]
        record = {
            "JobId": job_id,
            "UserId": f"{f['User']}({f['UID']})",
            "JobState": f["State"].split()[0] if f["State"] else "",
            "StartTime": f["Start"],
            "EndTime": f["End"],
            "AllocTRES": f["AllocTRES"],
            "Partition": f["Partition"],
            "QOS": f["QOS"],
            "Account": f["Account"],
            "NodeList": f["NodeList"],
            "TimeLimit": f"{limit}" if limit.isdigit() else "",
            "Comment": f["Comment"],
        }
        return record, _owner_uid(f["User"], f["UID"])
    return None


def _owner_uid(user: str, uid_text: str) -> int | None:
    """The owner's uid: sacct's UID, except that slurmdbd 22.05 was seen printing UID 0 for an
    ordinary user's job (`User=sgi-jobb UID=0`, now and then); then the name decides, through
    the passwd database. None when neither can be trusted (the caller then refuses)."""
    import pwd

    uid = int(uid_text) if uid_text.isdigit() else None
    if uid == 0 and user not in ("", "root"):
        uid = None
    if uid is None and user:
        try:
            uid = pwd.getpwnam(user).pw_uid
        except KeyError:
            return None
    return uid


def admin_level(user: str, env: Mapping[str, str] | None = None) -> str:
    """The user's Slurm AdminLevel (`None`, `Operator`, `Administrator`); '' when unknown."""
    proc = run(
        ["sacctmgr", "-n", "-P", "show", "user", user, "format=AdminLevel"],
        env=env, timeout=30, check=False,
    )  # fmt: skip
    return proc.stdout.strip().splitlines()[0] if proc.stdout.strip() else ""


def cancel(job_id: str, env: Mapping[str, str] | None = None) -> str:
    return run(["scancel", job_id], env=env, timeout=30).stdout


def requeue(job_id: str, env: Mapping[str, str] | None = None) -> str:
    return run(["scontrol", "requeue", job_id], env=env, timeout=30).stdout
