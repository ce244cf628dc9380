"""A normalized trace on disk: what the tasks of a Slurm sweep read instead of the sacct dumps.

Parsing a year of sacct text takes minutes and gigabytes; the trace it yields is a few numeric
columns. The gatherer writes it once (`save_trace`), every array task loads it in a second
(`load_trace_file`). The format is a numpy `.npz` (no pickle: `allow_pickle=False` on load, so
a file on a shared file system cannot run code) holding one array per column, the names
lists as string arrays and a small JSON header (format version, epoch, skipped counts).
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import numpy as np

from slurmgpu.errors import UsageError
from slurmgpu.replay.jobs import RecordedRuns, ReplayTrace

FORMAT = "slurmgpu-replay-trace/1"
_COLUMNS = (
    "partition", "qos", "tier", "submit_s", "duration_s", "timelimit_s", "gpus", "kind",
    "mig_profile", "need_gpu", "need_mib", "gpu_equiv", "recorded_start_s", "recorded_end_s",
    "recorded_preemptions",
)  # fmt: skip
_NAMES = ("partitions", "qos_names", "tier_names", "profiles")
_RUNS = ("start_s", "end_s", "equiv", "partition", "preempted", "job")


def save_trace(trace: ReplayTrace, path: str | os.PathLike[str]) -> Path:
    """Write `trace` to `path` (temp file + rename: a reader never sees half a file)."""
    target = Path(path)
    arrays: dict[str, np.ndarray] = {c: np.asarray(getattr(trace, c)) for c in _COLUMNS}
    arrays["job_id"] = np.asarray([str(j) for j in trace.job_id], dtype=str)
    for name in _NAMES:
        arrays[name] = np.asarray(getattr(trace, name), dtype=str)
    if trace.cancel_s is not None:
        arrays["cancel_s"] = np.asarray(trace.cancel_s)
    runs = trace.recorded_runs
    if runs is not None:
        for name in _RUNS:
            value = getattr(runs, name)
            if value is not None:
                arrays[f"runs_{name}"] = np.asarray(value)
    header = {"format": FORMAT, "epoch_s": int(trace.epoch_s), "skipped": dict(trace.skipped),
              "runs": runs is not None}  # fmt: skip
    arrays["header"] = np.asarray(json.dumps(header))
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def load_trace_file(path: str | os.PathLike[str]) -> ReplayTrace:
    """The trace `save_trace` wrote; UsageError naming the file when it is not one."""
    try:
        with np.load(path, allow_pickle=False) as data:
            header = json.loads(str(data["header"]))
            if header.get("format") != FORMAT:
                raise ValueError(f"format {header.get('format')!r}, expected {FORMAT}")
            cols = {c: data[c] for c in _COLUMNS}
            names = {n: [str(x) for x in data[n]] for n in _NAMES}
            job_id = np.array([str(x) for x in data["job_id"]], dtype=object)
            cancel = data["cancel_s"] if "cancel_s" in data.files else None
            runs = None
            if header.get("runs"):
                got = {n: data[f"runs_{n}"] for n in _RUNS if f"runs_{n}" in data.files}
                runs = RecordedRuns(**got)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{os.fspath(path)}: not a slurmgpu replay trace ({exc})") from None
    return ReplayTrace(
        epoch_s=int(header["epoch_s"]),
        job_id=job_id,
        **cols,
        **names,
        skipped={str(k): int(v) for k, v in header.get("skipped", {}).items()},
        recorded_runs=runs,
        cancel_s=cancel,
    )
