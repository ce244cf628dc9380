"""The collector's per-job summary (`SG1:`), where the epilog stores it, and the source reading it.

Form, documented in docs/measuring.md: `SG1:` + base32(gzip(compact JSON)), padding `=`
stripped. Base32, not jobstats' base64, because the epilog must store it with `sacctmgr
modify job ... set AdminComment=...` (slurmctld refuses `scontrol update` once the job has
ended), and sacctmgr 22.05 lower-cases the value (seen on the test cluster): base32 is read
back case-insensitively. No `=`, `|` or space inside, so it survives sacct's `|` output,
`KEY=value` parsing of `scontrol show job` and AdminComment's free text. The JSON
is one node's view of one job run:

    {"v": 1, "job": "42", "cluster": "c1", "node": "gpu01", "first": 1733220000,
     "last": 1733223600, "samples": 120,
     "gpus": [{"minor": 0, "gi": null, "profile": null, "uuid": "GPU-...",
               "mem_total_mib": 81559, "mem_max_mib": 20480.0,
               "util_mean_pct": 61.5, "util_samples": 120, "samples": 120}]}

`gi`/`profile` name a MIG instance (GPU instance id, profile such as `3g.40gb`);
`util_mean_pct` is null where NVML gives no utilization (MIG). A multi-node job stores one
token per node; readers merge them.

Energy (docs/energy.md) came later as optional keys of the same version 1, so a summary of
either age reads with either reader (a reader ignores keys it does not know): per GPU
`"energy_j"` (joules the device drew for the job, null: not measured) and
`"energy_estimated"` (true: a MIG instance's or shared GPU's split, or integrated power),
and per summary `"energy_warnings"` (counter resets, power gaps: energy that is missing).
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import math
import os
import re
import stat
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from slurmgpu.measure import bounded
from slurmgpu.measure.warnings import MeasureWarning
from slurmgpu.model.measure import JobGpuMeasure, RunRef

PREFIX = "SG1:"
SPOOL_SUFFIX = ".sg1"
FORMAT_VERSION = 1
# a summary belongs to the run whose window holds its first sample; the slack covers the
# collector's sampling interval and clock steps between nodes and slurmctld
WINDOW_SLACK_S = 120
_TOKEN = re.compile(r"(?i)SG1:[A-Z2-7]+")


@dataclass(frozen=True)
class GpuSummary:
    """One GPU (or MIG instance) as a job used it, over the samples the collector took."""

    minor: int
    gi: int | None  # MIG GPU-instance id; None for a whole GPU
    profile: str | None  # MIG profile (`3g.40gb`); None for a whole GPU
    uuid: str
    mem_total_mib: float
    mem_max_mib: float
    util_mean_pct: float | None  # None: NVML gave no utilization for this device (MIG)
    util_samples: int
    samples: int
    energy_j: float | None = None  # joules drawn for the job; None: not measured
    energy_estimated: bool = False  # a split (MIG, shared GPU) or integrated power


@dataclass(frozen=True)
class JobSummary:
    """One node's summary of one job run."""

    job: str
    cluster: str
    node: str
    first: int  # epoch seconds of the first and last sample that saw the job
    last: int
    samples: int
    gpus: tuple[GpuSummary, ...] = field(default_factory=tuple)
    energy_warnings: tuple[str, ...] = ()  # energy missing from a device's figure, and why

    def to_json(self) -> str:
        data = {"v": FORMAT_VERSION, **asdict(self)}
        data["gpus"] = [asdict(g) for g in self.gpus]
        data["energy_warnings"] = list(self.energy_warnings)
        return json.dumps(data, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> JobSummary:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("v") != FORMAT_VERSION:
            raise ValueError(f"not a version-{FORMAT_VERSION} summary")
        if not isinstance(data["gpus"], list):
            raise ValueError("gpus is not a list")
        gpus = tuple(
            GpuSummary(
                minor=int(g["minor"]),
                gi=None if g.get("gi") is None else int(g["gi"]),
                profile=g.get("profile"),
                uuid=str(g.get("uuid", "")),
                mem_total_mib=float(g["mem_total_mib"]),
                mem_max_mib=float(g["mem_max_mib"]),
                util_mean_pct=None if g.get("util_mean_pct") is None else float(g["util_mean_pct"]),
                util_samples=int(g.get("util_samples", 0)),
                samples=int(g.get("samples", 0)),
                energy_j=None if g.get("energy_j") is None else float(g["energy_j"]),
                energy_estimated=bool(g.get("energy_estimated", False)),
            )
            for g in data["gpus"]
        )
        for g in gpus:
            numbers = (g.mem_total_mib, g.mem_max_mib, g.util_mean_pct or 0.0, g.energy_j or 0.0)
            if not all(math.isfinite(x) and x >= 0 for x in numbers):
                raise ValueError(f"GPU {g.minor}: memory, utilization or energy not a number >= 0")
        warnings = data.get("energy_warnings", [])
        if not isinstance(warnings, list):
            raise ValueError("energy_warnings is not a list")
        return cls(
            job=str(data["job"]),
            cluster=str(data.get("cluster", "")),
            node=str(data["node"]),
            first=int(data["first"]),
            last=int(data["last"]),
            samples=int(data["samples"]),
            gpus=gpus,
            energy_warnings=tuple(str(w) for w in warnings),
        )


def encode(summary: JobSummary) -> str:
    """`SG1:` + base32(gzip(JSON)) without `=` padding; mtime 0 so equal summaries encode
    equally."""
    packed = gzip.compress(summary.to_json().encode("ascii"), mtime=0)
    return PREFIX + base64.b32encode(packed).decode("ascii").rstrip("=")


def decode(token: str) -> JobSummary:
    """The summary in one `SG1:` token; ValueError saying why when it is not one."""
    if not is_token(token):
        raise ValueError("does not start with SG1:")
    if len(token) > bounded.MAX_TOKEN_CHARS:
        raise ValueError(f"token of {len(token)} characters: longer than any summary")
    try:
        body = token[len(PREFIX) :].rstrip("=")
        padded = body + "=" * (-len(body) % 8)
        text = bounded.gunzip(base64.b32decode(padded, casefold=True))
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"not base32 gzip: {exc}") from exc
    try:
        return JobSummary.from_json(text.decode("utf-8"))
    except (KeyError, TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise ValueError(f"bad summary JSON: {type(exc).__name__}: {exc}") from exc


def is_token(word: str) -> bool:
    """Whether `word` is an `SG1:` token (any case: sacctmgr may have lower-cased it)."""
    return word[: len(PREFIX)].upper() == PREFIX


def tokens(admin_comment: str) -> list[str]:
    """The `SG1:` tokens in an AdminComment (which may also hold a tier record or `JS1:`)."""
    return _TOKEN.findall(admin_comment or "")


def merge_admin_comment(existing: str, summary: JobSummary) -> str:
    """`existing` with this node's token added (replacing an older one of the same node).

    Everything else -- job_submit.lua's `slurmgpu tier=P1 kind=finetune`, a jobstats `JS1:`
    token, an admin's note -- is kept as it was, in order; tokens are space separated, which
    is how the accounting loader already splits AdminComment. (sacctmgr 22.05 then lower-cases
    the whole value: `tier=p1`.)
    """
    kept: list[str] = []
    for word in (existing or "").split():
        if is_token(word):
            try:
                if decode(word).node == summary.node:
                    continue
            except ValueError:
                pass  # not ours to judge: keep it
        kept.append(word)
    return " ".join([*kept, encode(summary)])


def to_measure(run: RunRef, summaries: Iterable[JobSummary]) -> JobGpuMeasure | None:
    """One run's measure from its nodes' summaries (None when they saw no GPU)."""
    gpus = [g for s in summaries for g in s.gpus]
    if not gpus:
        return None
    utils = [g.util_mean_pct for g in gpus if g.util_mean_pct is not None]
    energy = [g.energy_j for g in gpus]
    known = None not in energy  # a device without a figure would make the sum too small
    return JobGpuMeasure(
        job_id=run.job_id,
        source="collector",
        gpus_measured=len(gpus),
        util_mean_pct=round(sum(utils) / len(utils), 2) if utils else None,
        mem_used_max_mib=max(g.mem_max_mib for g in gpus),
        gpu_memory_mib=max(g.mem_total_mib for g in gpus),
        cluster=run.cluster or None,
        start=run.start,
        energy_j=round(sum(e for e in energy if e is not None), 3) if known else None,
        energy_estimated=known and any(g.energy_estimated for g in gpus),
    )


def in_window(run: RunRef, summary: JobSummary) -> bool:
    """Whether the summary's first sample falls in the run (requeued runs share a job id)."""
    if run.start is None:
        return True
    first = datetime.fromtimestamp(summary.first, UTC).replace(tzinfo=None)
    if (first - run.start).total_seconds() < -WINDOW_SLACK_S:
        return False
    return run.end is None or (first - run.end).total_seconds() <= WINDOW_SLACK_S


# -- the spool directory ----------------------------------------------------------------------
def spool_path(spool_dir: str | os.PathLike[str], summary: JobSummary) -> Path:
    """`DIR/<cluster>/<job>.<node>.<first>.sg1`: one file per node and run, never overwritten
    by another node or a requeued run of the same job."""
    cluster = _safe(summary.cluster or "_")
    name = f"{_safe(summary.job)}.{_safe(summary.node)}.{summary.first}{SPOOL_SUFFIX}"
    return Path(spool_dir) / cluster / name


def _safe(text: str) -> str:
    # job ids, node and cluster names are plain words in Slurm; anything else must not
    # become a path component
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text).lstrip(".") or "_"


def write_spool(spool_dir: str | os.PathLike[str], summary: JobSummary) -> Path:
    """Store a summary in the spool directory (atomic: readers never see half a file)."""
    from slurmgpu.util.atomic import write_atomic

    path = spool_path(spool_dir, summary)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, encode(summary) + "\n", mode=0o644, backup=False)
    return path


class CollectorSource:
    """Summaries stored by `slurmgpu collect --epilog`: `SG1:` in AdminComment and/or a spool.

    Runs with no summary are absent from the answer; unreadable tokens and files become
    `warnings` (kind "undecodable"/"unreadable").
    """

    name = "collector"

    def __init__(self, spool_dir: str | os.PathLike[str] | None = None) -> None:
        self.spool_dir = Path(spool_dir) if spool_dir is not None else None
        self.warnings: list[MeasureWarning] = []
        # Without a spool only runs whose AdminComment holds a summary can be measured: the
        # accounting stage asks about those runs alone (no RunRef for the other million).
        self.admin_comment_markers: tuple[str, ...] = () if self.spool_dir else (PREFIX,)

    def measures(self, runs: list[RunRef]) -> list[JobGpuMeasure]:
        spooled = self._read_spool({r.cluster or "_" for r in runs}) if self.spool_dir else {}
        out: list[JobGpuMeasure] = []
        for run in runs:
            found: dict[tuple[str, int], JobSummary] = {}
            for token in tokens(run.admin_comment):
                try:
                    s = decode(token)
                except ValueError as exc:
                    self._warn("undecodable", f"AdminComment token: {exc}", run.job_id)
                    continue
                found[(s.node, s.first)] = s
            for s in spooled.get((run.cluster or "_", run.job_id), []):
                found.setdefault((s.node, s.first), s)
            mine = [s for s in found.values() if s.job == run.job_id and in_window(run, s)]
            for s in mine:
                for warning in s.energy_warnings:
                    self._warn("energy", f"{s.node}: {warning}", run.job_id)
            measure = to_measure(run, mine) if mine else None
            if measure is not None:
                out.append(measure)
        return out

    def _read_spool(self, clusters: set[str]) -> dict[tuple[str, str], list[JobSummary]]:
        """One directory listing per cluster, indexed by job id (never one per run)."""
        assert self.spool_dir is not None
        index: dict[tuple[str, str], list[JobSummary]] = defaultdict(list)
        for cluster in sorted(clusters):
            directory = self.spool_dir / _safe(cluster)
            try:
                names = os.listdir(directory)
            except FileNotFoundError:
                continue
            except OSError as exc:
                self._warn("unreadable", f"spool {directory}: {exc.strerror}")
                continue
            for name in names:
                if not name.endswith(SPOOL_SUFFIX):
                    continue
                path = directory / name
                try:
                    s = decode(_read_spool_file(path))
                except (OSError, UnicodeDecodeError, ValueError) as exc:
                    self._warn("undecodable", f"{path}: {exc}", name.split(".", 1)[0])
                    continue
                index[(cluster, s.job)].append(s)
        return index

    def _warn(self, kind: str, message: str, *job_ids: str) -> None:
        self.warnings.append(MeasureWarning(self.name, kind, message, tuple(job_ids)))


def _read_spool_file(path: Path) -> str:
    """One spool file's token, read no further than a token can be long (a 3 GB file, a FIFO
    or a device put in the spool is refused, not read whole)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block the analysis
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file")
        data = f.read(bounded.MAX_TOKEN_CHARS + 1)
    if len(data) > bounded.MAX_TOKEN_CHARS:
        raise ValueError(f"longer than {bounded.MAX_TOKEN_CHARS} bytes: not a summary")
    return data.decode("ascii").strip()


# the name the issue uses for the spool reader: one class reads both places
SpoolSource = CollectorSource
