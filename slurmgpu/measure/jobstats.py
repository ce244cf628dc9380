"""Princeton jobstats summaries in AdminComment, read as jobstats writes them.

jobstats' slurmctld epilog stores `JS1:` + the output of `jobstats -f -b JOBID`
(`report_job_json(encode=True)` in jobstats.py): base64 of gzip of the compact JSON
`{"nodes": {NODE: {...}}, "total_time": seconds, "gpus": count}`, or the short forms
`Short` (the job ran less than two sampling periods) and `None` (Prometheus had no data).
Per node: `cpus`, `total_time`, `used_memory`, `total_memory` and, for GPU jobs, the maps
`gpu_utilization` (percent, time-averaged with avg_over_time), `gpu_used_memory` and
`gpu_total_memory` (bytes, max_over_time), keyed by the GPU's minor number as a string.
On MIG nodes jobstats' exporter may give no `gpu_utilization` at all.

The epilog writes AdminComment whole (`sacctmgr ... set AdminComment=JS1:...`), so a
tier record there is gone; we still look for the token anywhere in the text.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from dataclasses import dataclass

from slurmgpu.measure import bounded
from slurmgpu.measure.warnings import MeasureWarning
from slurmgpu.model.measure import JobGpuMeasure, RunRef

PREFIX = "JS1:"
SHORT_FORMS = ("Short", "None")
MIB = 2**20
# any case: sacctmgr 22.05 lower-cases what it stores (then the token is reported, not skipped)
_TOKEN = re.compile(r"(?i)JS1:[A-Za-z0-9+/=]+")


@dataclass(frozen=True)
class JobstatsGpu:
    """One GPU of a jobstats summary (keyed by node and minor number)."""

    node: str
    minor: str
    util_pct: float | None
    used_bytes: float | None
    total_bytes: float | None


@dataclass(frozen=True)
class JobstatsSummary:
    """A decoded `JS1:` value: the run's length, GPU count and its GPUs."""

    total_time_s: float
    gpus_allocated: int
    gpus: tuple[JobstatsGpu, ...]
    negative: int = 0  # GPUs whose utilization was negative (left out of the mean)


class JobstatsFormatError(ValueError):
    """The text after `JS1:` is neither a short form nor base64(gzip(jobstats JSON))."""


def find_token(admin_comment: str) -> str | None:
    """The `JS1:...` token in an AdminComment, if any."""
    m = _TOKEN.search(admin_comment or "")
    return m.group(0) if m else None


def decode(token: str) -> JobstatsSummary | None:
    """The summary in a `JS1:` token; None for the short forms `JS1:Short` / `JS1:None`.

    Bounded: a token longer than `MAX_TOKEN_CHARS`, or one that inflates past
    `MAX_SUMMARY_BYTES` (a gzip bomb), is refused before it is inflated whole. Every number
    must be finite; a negative utilization is left out of that GPU (`None`), counted in
    `JobstatsSummary.negative`."""
    body = token[len(PREFIX) :] if token[: len(PREFIX)].upper() == PREFIX else token
    if body.capitalize() in SHORT_FORMS:
        return None
    if len(body) > bounded.MAX_TOKEN_CHARS:
        raise JobstatsFormatError(f"token of {len(body)} characters: longer than any summary")
    try:
        data = bounded.loads(bounded.gunzip(base64.b64decode(body, validate=True)))
    except (binascii.Error, ValueError) as exc:
        if body == body.lower() and token.startswith(PREFIX.lower()):
            raise JobstatsFormatError(
                "lower-cased (sacctmgr of Slurm 22.05 lower-cases AdminComment): the base64 "
                "cannot be recovered"
            ) from exc
        raise JobstatsFormatError(f"not base64(gzip(JSON)): {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), dict):
        raise JobstatsFormatError("JSON has no 'nodes' map")
    gpus: list[JobstatsGpu] = []
    negative = 0
    for node, stats in sorted(data["nodes"].items()):
        if not isinstance(stats, dict):
            raise JobstatsFormatError(f"node {node}: not a map")
        util = _gpu_map(stats, "gpu_utilization", node)
        used = _gpu_map(stats, "gpu_used_memory", node)
        total = _gpu_map(stats, "gpu_total_memory", node)
        for minor in sorted(set(util) | set(used) | set(total), key=_minor_key):
            values = [util.get(minor), used.get(minor), total.get(minor)]
            if values[0] is not None and values[0] < 0:
                negative += 1
                values[0] = None  # no utilization is negative: not averaged in
            if any(v is not None and v < 0 for v in values[1:]):
                raise JobstatsFormatError(f"node {node}: GPU {minor}: negative memory")
            gpus.append(JobstatsGpu(node, minor, *values))
    return JobstatsSummary(
        total_time_s=_number(data.get("total_time") or 0, "total_time"),
        gpus_allocated=int(_number(data.get("gpus") or 0, "gpus")),
        gpus=tuple(gpus),
        negative=negative,
    )


def _number(value: object, what: str) -> float:
    """A finite JSON number (not a bool, not a string)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise JobstatsFormatError(f"{what}: {str(value)[:40]!r} is not a finite number")
    return float(value)


def _gpu_map(stats: dict, key: str, node: str) -> dict[str, float]:
    value = stats.get(key, {})
    if not isinstance(value, dict):
        raise JobstatsFormatError(f"node {node}: {key} is not a map by minor number")
    return {str(k): _number(v, f"node {node}: {key}[{k}]") for k, v in value.items()}


def _minor_key(minor: str) -> tuple[int, str]:
    return (int(minor), "") if minor.isdigit() else (1 << 30, minor)


def to_measure(run: RunRef, summary: JobstatsSummary) -> JobGpuMeasure | None:
    """The run's measure: mean utilization over its GPUs, the highest memory used on one GPU
    and the size of its GPUs (jobstats carries each GPU's total memory)."""
    if not summary.gpus:
        return None
    utils = [g.util_pct for g in summary.gpus if g.util_pct is not None]
    used = [g.used_bytes for g in summary.gpus if g.used_bytes is not None]
    totals = [g.total_bytes for g in summary.gpus if g.total_bytes]
    return JobGpuMeasure(
        job_id=run.job_id,
        source="jobstats",
        gpus_measured=len(summary.gpus),
        util_mean_pct=round(sum(utils) / len(utils), 2) if utils else None,
        mem_used_max_mib=round(max(used) / MIB, 1) if used else None,
        gpu_memory_mib=round(max(totals) / MIB, 1) if totals else None,
        cluster=run.cluster or None,
        start=run.start,
    )


class JobstatsSource:
    """jobstats' `JS1:` summaries in the runs' AdminComment (no I/O: sacct already read it).

    `short` counts runs stored as `JS1:Short`/`JS1:None` (too short or no data: nothing to
    measure, not an error); broken tokens become warnings of kind "undecodable".
    """

    name = "jobstats"

    def __init__(self) -> None:
        self.warnings: list[MeasureWarning] = []
        self.short = 0
        # only runs whose AdminComment holds a summary can be measured (see CollectorSource)
        self.admin_comment_markers: tuple[str, ...] = (PREFIX,)

    def measures(self, runs: list[RunRef]) -> list[JobGpuMeasure]:
        out: list[JobGpuMeasure] = []
        for run in runs:
            token = find_token(run.admin_comment)
            if token is None:
                continue
            try:
                summary = decode(token)
            except JobstatsFormatError as exc:
                self.warnings.append(
                    MeasureWarning(self.name, "undecodable", str(exc), (run.job_id,))
                )
                continue
            if summary is None:
                self.short += 1
                continue
            if summary.negative:
                message = f"{summary.negative} GPU(s) with a negative utilization, left out"
                self.warnings.append(MeasureWarning(self.name, "invalid", message, (run.job_id,)))
            measure = to_measure(run, summary)
            if measure is not None:
                out.append(measure)
        return out
