"""The GPU runs the idle rule looks at, and who is exempt from it.

Runs come from the accounting loader (saved sacct dumps or a live `sacct` window), one per
allocation run (requeues are separate runs). Two facts the loader does not keep are read from
the same text: whether the job had a batch script (a `JOBID.batch` step; none for `salloc` /
`srun` jobs, which the policy may exempt as interactive) and the job's Comment (where a user
writes `idle-exempt=REASON`).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from slurmgpu.model.measure import RunRef
from slurmgpu.model.policy import IdlePolicy, Policy

EXEMPT_TAG = re.compile(r"(?:^|[\s;,])idle-exempt=(?P<reason>[A-Za-z0-9_.-]+)")


@dataclass(frozen=True)
class IdleJob:
    """One GPU run as the idle rule sees it (times naive UTC)."""

    job_id: str
    cluster: str
    user: str
    account: str
    partition: str
    qos: str
    tier: str
    start: datetime
    end: datetime | None  # None while running
    gpus: float  # GPUs held, MIG slices as fractions of a GPU (what GPU-hours count)
    devices: int  # GPUs or MIG instances the job holds (each has its own series)
    nodes: str
    interactive: bool
    comment: str = ""
    admin_comment: str = ""
    state: str = ""
    time_limit_s: float | None = None
    job: str = ""  # JobID as sacct prints it (`123_4` for an array task); job_id is JobIDRaw

    def ref(self) -> RunRef:
        return RunRef(
            job_id=self.job_id,
            cluster=self.cluster,
            start=self.start,
            end=self.end,
            nodes=self.nodes,
            gpus=self.gpus,
            admin_comment=self.admin_comment,
        )


def exemption(job: IdleJob, policy: IdlePolicy) -> tuple[str | None, str | None]:
    """(why the job is exempt, or None; a note on a refused `idle-exempt=` reason)."""
    if job.tier in policy.exempt_tiers:
        return f"tier {job.tier}", None
    if policy.exempt_interactive and job.interactive:
        return "interactive", None
    if job.user in policy.exempt_users:
        return f"user {job.user}", None
    if job.account.lower() in {a.lower() for a in policy.exempt_accounts}:
        return f"account {job.account}", None
    if job.partition in policy.exempt_partitions:
        return f"partition {job.partition}", None
    m = EXEMPT_TAG.search(job.comment)
    if m:
        reason = m.group("reason")
        if reason in policy.exempt_reasons:
            return f"idle-exempt={reason}", None
        allowed = ", ".join(policy.exempt_reasons) or "none"
        return None, f"idle-exempt={reason} is not an allowed reason (allowed: {allowed})"
    return None, None


# -- from sacct text -----------------------------------------------------------------------


def jobs_from_files(paths: Sequence[str | os.PathLike[str]], policy: Policy) -> list[IdleJob]:
    """GPU runs of saved sacct dumps (`sacct -a -D -P` with steps, as `analyze` reads)."""
    from slurmgpu.accounting.load import load_files, open_binary

    loaded = load_files(paths, options=_load_options(policy))
    facts: dict[str, tuple[bool, str]] = {}
    for path in paths:
        with open_binary(path) as stream:
            text = stream.read().decode("utf-8", "replace")
        facts.update(_side_facts(text.splitlines()))
    return _jobs(loaded.frame, facts)


def jobs_from_sacct(
    since: datetime, until: datetime, policy: Policy, env: dict[str, str] | None = None
) -> list[IdleJob]:
    """GPU runs active in [since, until] from the live cluster's sacct."""
    from slurmgpu.accounting.load import load_text
    from slurmgpu.sources import sacct

    text = sacct.sacct_text(since, until, env=env)
    loaded = load_text(text, options=_load_options(policy), delimiter=sacct.DELIMITER)
    jobs = _jobs(loaded.frame, _side_facts(text.splitlines(), sacct.DELIMITER))
    return _live_comments(jobs, env)


def _live_comments(jobs: list[IdleJob], env: dict[str, str] | None) -> list[IdleJob]:
    """Running jobs' Comment from slurmctld: slurmdbd gets it only when the job ends (seen on
    22.05 with AccountingStoreFlags=job_comment), and `idle-exempt=` lives there."""
    from dataclasses import replace

    from slurmgpu.errors import SlurmgpuError
    from slurmgpu.sources.slurm_jobs import job_records

    running = tuple(j.job_id for j in jobs if j.end is None and not j.comment)
    if not running:
        return jobs
    try:
        records = job_records(running, env=env)
    except SlurmgpuError:
        return jobs  # the controller is not reachable: the dumps' comments stand
    comments = {r.get("JobId"): r.get("Comment", "") for r in records}
    return [
        replace(j, comment=c)
        if j.end is None and (c := comments.get(j.job_id)) and c != "(null)"
        else j
        for j in jobs
    ]


def _load_options(policy: Policy):
    from slurmgpu.accounting.load import Options

    def tier_for_qos(qos: str) -> str | None:
        tier = policy.tier_for_qos(qos)
        return tier.name if tier else None

    shards = {"*": float(policy.shards_per_gpu)} if policy.shards_per_gpu else {}
    return Options(tier_for_qos=tier_for_qos, shards_per_gpu=shards, keep_admin_comment=True)


def _side_facts(lines: Iterable[str], delimiter: str = "|") -> dict[str, tuple[bool, str]]:
    """JobIDRaw -> (has a batch step, Comment) from sacct text with a header line."""
    it = iter(lines)
    header = next(it, "")
    if delimiter not in header and "|" in header:
        delimiter = "|"
    names = [n.strip() for n in header.split(delimiter)]
    if "JobIDRaw" not in names:
        return {}
    idx, cidx = names.index("JobIDRaw"), names.index("Comment") if "Comment" in names else None
    batch: set[str] = set()
    comments: dict[str, str] = {}
    for line in it:
        fields = line.split(delimiter)
        if len(fields) <= idx:
            continue
        raw = fields[idx]
        if raw.endswith(".batch"):
            batch.add(raw[: -len(".batch")])
        elif "." not in raw and cidx is not None and len(fields) > cidx:
            comments[raw] = fields[cidx]
    ids = set(comments) | batch
    return {i: (i in batch, comments.get(i, "")) for i in ids}


def _jobs(frame, facts: dict[str, tuple[bool, str]]) -> list[IdleJob]:
    import pandas as pd

    out: list[IdleJob] = []
    if len(frame) == 0:
        return out
    cols = {c: frame[c].to_numpy(dtype=object, na_value=None) for c in _COLUMNS if c in frame}
    for i in range(len(frame)):
        row = {c: v[i] for c, v in cols.items()}
        start, count, equiv = row.get("start"), row.get("gpu_count"), row.get("gpu_equiv")
        if start is None or not equiv or math.isnan(equiv):
            continue  # never started, no GPU, or shards without shards_per_gpu
        # a shard job's GPU is one device (shared: it is idle when the GPU is)
        devices = max(1, math.ceil(count)) if count and not math.isnan(count) else 1
        raw = str(row["job_id_raw"])
        has_batch, comment = facts.get(raw, (True, ""))
        end = row.get("end")
        limit = row.get("timelimit_s")
        out.append(
            IdleJob(
                job_id=raw,
                cluster=str(row.get("cluster") or ""),
                user=str(row.get("user") or ""),
                account=str(row.get("account") or ""),
                partition=str(row.get("partition") or ""),
                qos=str(row.get("qos") or ""),
                tier=str(row.get("tier") or row.get("qos") or ""),
                start=pd.Timestamp(start).to_pydatetime(),
                end=None if end is None else pd.Timestamp(end).to_pydatetime(),
                gpus=float(equiv),
                devices=devices,
                nodes=str(row.get("node_list") or ""),
                interactive=not has_batch,
                comment=comment,
                admin_comment=str(row.get("admin_comment") or ""),
                state=str(row.get("state") or ""),
                time_limit_s=None if limit is None or math.isnan(limit) else float(limit),
                job=str(row.get("job_id") or raw),
            )
        )
    return out


_COLUMNS = (
    "job_id_raw",
    "job_id",
    "cluster",
    "user",
    "account",
    "partition",
    "qos",
    "tier",
    "start",
    "end",
    "gpu_count",
    "gpu_equiv",
    "shards",
    "node_list",
    "admin_comment",
    "state",
    "timelimit_s",
)
