"""`idle:FILE`: the idle policy switched on, in the replay.

FILE is what `slurmgpu idle --format json` wrote. Each flagged run there ends at its
`action_at`: the replayed job with the same id (sacct's printed JobID, else JobIDRaw) and the
same recorded start (to the second) keeps only the work it did before the action,
`action_at - start`, instead of its recorded duration. Exempt runs (`"exempt"` list) are not
touched. Only the jobs change; the cluster stays as it is.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from datetime import datetime

import numpy as np

from slurmgpu.errors import UsageError
from slurmgpu.model.changes import Change, IdleReclaim, Together
from slurmgpu.replay.jobs import ReplayTrace


@dataclass(frozen=True)
class Cut:
    job: str
    start_s: float  # epoch seconds
    action_s: float


def read_cuts(path: str) -> list[Cut]:
    """The flagged runs of an idle JSON document; UsageError naming the file otherwise."""
    try:
        with open(path, encoding="utf-8-sig") as fh:  # a UTF-8 byte order mark is dropped
            doc = json.load(fh)
    except OSError as exc:
        raise UsageError(f"change 'idle:{path}': {exc.strerror}") from None
    except ValueError as exc:
        raise UsageError(f"change 'idle:{path}': not JSON ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise UsageError(f"change 'idle:{path}': not the JSON of `slurmgpu idle` (no jobs list)")
    cuts = []
    for entry in doc["jobs"]:
        try:
            cuts.append(
                Cut(
                    str(entry.get("job") or entry["job_id"]),
                    _epoch(entry["start"]),
                    _epoch(entry["action_at"]),
                )
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            raise UsageError(
                f"change 'idle:{path}': a job without job_id, start and action_at: {entry!r:.80}"
            ) from None
    return cuts


def _epoch(text: str) -> float:
    return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()


def idle_files(change: Change) -> list[str]:
    if isinstance(change, IdleReclaim):
        return [change.path]
    if isinstance(change, Together):
        return [p for one in change.changes for p in idle_files(one)]
    return []


def reclaim(trace: ReplayTrace, change: Change) -> tuple[ReplayTrace, int]:
    """The trace with the flagged runs cut at their action (and how many were cut)."""
    paths = idle_files(change)
    if not paths:
        return trace, 0
    by_job: dict[str, list[Cut]] = {}
    for path in paths:
        for cut in read_cuts(os.fspath(path)):
            by_job.setdefault(cut.job, []).append(cut)
    duration = trace.duration_s.copy()
    cut_count = 0
    for i, job_id in enumerate(trace.job_id):
        for cut in by_job.get(str(job_id), ()):
            start = trace.epoch_s + float(trace.recorded_start_s[i])
            if np.isfinite(start) and abs(start - cut.start_s) <= 1.0:
                duration[i] = max(0.0, min(float(duration[i]), cut.action_s - cut.start_s))
                cut_count += 1
                break
    return replace(trace, duration_s=duration), cut_count
