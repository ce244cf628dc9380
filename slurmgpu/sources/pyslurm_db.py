"""Slurm accounting through pyslurm's database API, when it is importable AND matches Slurm.

pyslurm is built against one Slurm major release (its version is `<slurm major.minor>.<n>`,
e.g. 25.11.2 for Slurm 25.11): a mismatched build either fails to import or talks a different
libslurm ABI. So pyslurm is used only when `pyslurm.__version__` names the same major.minor as
the installed Slurm; otherwise the caller falls back to the sacct text path, and says why.

Coded against the documented API (PySlurm `pyslurm/db/job.pxd`): `pyslurm.db.Jobs.load(
pyslurm.db.JobFilter(start_time=, end_time=, ...))` -> {id: Job}; Job attributes used below.
Not installable on the development machine (needs libslurm headers of a matching release), so
only the usability decision is unit-tested; the conversion is exercised where pyslurm exists.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from types import ModuleType
from typing import Any


@dataclass(frozen=True)
class PyslurmDecision:
    """Whether pyslurm can be used, and the one-line reason either way."""

    usable: bool
    reason: str
    module: ModuleType | None = None


def pyslurm_decision(
    slurm_version: tuple[int, int, int] | None, *, module_name: str = "pyslurm"
) -> PyslurmDecision:
    """Decide between pyslurm and the sacct fallback (never raises)."""
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or a libslurm load failure inside the extension
        return PyslurmDecision(False, f"pyslurm not importable ({type(exc).__name__}: {exc})")
    version = str(getattr(module, "__version__", "") or "")
    m = re.match(r"^(\d+)\.(\d+)", version)
    if not m:
        return PyslurmDecision(False, f"pyslurm version {version!r} not understood")
    if slurm_version is None:
        return PyslurmDecision(False, "installed Slurm version unknown")
    if (int(m.group(1)), int(m.group(2))) != tuple(slurm_version[:2]):
        want = f"{slurm_version[0]}.{slurm_version[1]:02d}"
        return PyslurmDecision(False, f"pyslurm {version} does not match Slurm {want}", module)
    if not hasattr(module, "db") or not hasattr(module.db, "Jobs"):
        return PyslurmDecision(False, f"pyslurm {version} has no db.Jobs API", module)
    return PyslurmDecision(True, f"pyslurm {version} matches Slurm", module)


def _epoch(value: Any) -> str:
    return "Unknown" if not value else str(int(value))


def _tres_text(value: Any) -> str:
    """pyslurm gives TRES as a dict ({"gres/gpu": 2}) or as sacct's string; accept both."""
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items())
    return str(value or "")


def pyslurm_records(module: ModuleType, since: datetime, until: datetime) -> Iterator[dict]:
    """Rows in sacct's column names from `pyslurm.db.Jobs.load` for the window."""
    db = module.db
    jobs = db.Jobs.load(
        db.JobFilter(start_time=int(since.timestamp()), end_time=int(until.timestamp()))
    )
    for job in jobs.values():
        raw = str(job.id)
        if job.array_id and job.array_task_id is not None:
            job_id = f"{job.array_id}_{job.array_task_id}"
        elif job.heterogeneous_id:
            job_id = f"{job.heterogeneous_id}+{job.heterogeneous_offset}"
        else:
            job_id = raw
        state = str(job.state or "")
        if job.cancelled_by and state == "CANCELLED":
            state = f"CANCELLED by {job.cancelled_by}"
        yield {
            "JobIDRaw": raw,
            "JobID": job_id,
            "Cluster": str(getattr(job, "cluster", "") or ""),
            "Partition": str(job.partition or ""),
            "QOS": str(job.qos or ""),
            "Account": str(job.account or ""),
            "User": str(job.user_name or ""),
            "Submit": _epoch(job.submit_time),
            "Start": _epoch(job.start_time),
            "End": _epoch(job.end_time),
            "ElapsedRaw": str(int(job.elapsed_time or 0)),
            "TimelimitRaw": "" if job.time_limit is None else str(job.time_limit),
            "State": state,
            "AllocTRES": _tres_text(job.allocated_tres),
            "ReqTRES": _tres_text(job.requested_tres),
            "AdminComment": str(job.admin_comment or ""),
            "Comment": str(getattr(job, "comment", "") or ""),
        }
