"""What the jobs need, in MIG instances: from `--demand PROFILE=COUNT` or from accounting.

A demand item is a full profile name (`1g.10gb`, only GPUs offering it can serve it) or a
slice size (`3g`: the smallest-memory `3g` profile of each GPU model). Measured demand is the
p95 over time of how many runs needed each slice size at once: a run on one GPU whose
measured memory (p95 + 10% margin, like the accounting recommendations) fits a slice needs
that slice; a run that already ran in a MIG slice needs its own slice size.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from slurmgpu.errors import UsageError
from slurmgpu.model.catalog import GpuModel, MigProfile
from slurmgpu.util import numbers

# ASCII digits only (a regex `\d` and int() also read `٣` as 3, issue #33)
_ITEM = re.compile(r"(?P<what>[0-9]{1,2}g(?:\.[0-9]{1,4}gb(?:\+me)?)?)=(?P<count>[^=]*)")
MAX_INSTANCES = 100_000  # instances of one item at once: beyond any cluster
# headroom over a run's measured GPU memory before a slice counts as big enough
MEMORY_MARGIN = 1.10
PERCENTILE = 0.95
_PROFILE_IN = re.compile(r"([0-9]+g)\.[0-9]+gb")


@dataclass(frozen=True)
class Demand:
    """Instances wanted at once: ((profile name or slice size, count), ...), and from where."""

    items: tuple[tuple[str, int], ...]
    source: str = "command line"
    notes: tuple[str, ...] = ()

    @property
    def total(self) -> int:
        return sum(n for _, n in self.items)


def parse_demand(values: Iterable[str]) -> Demand:
    """`["1g.10gb=6", "3g=2"]` -> Demand; a malformed item is a UsageError naming it."""
    counts: dict[str, int] = {}
    for value in values:
        m = _ITEM.fullmatch(value.strip(" \t").lower())
        if not m:
            raise UsageError(f"--demand {value!r}: expected PROFILE=COUNT, e.g. 1g.10gb=4 or 3g=2")
        try:
            count = numbers.whole(m.group("count"), 0, MAX_INSTANCES, "COUNT")
        except ValueError:
            raise UsageError(
                f"--demand {value[:60]!r}: expected PROFILE=COUNT, COUNT a whole number from 0 "
                f"to {MAX_INSTANCES} in ASCII digits"
            ) from None
        counts[m.group("what")] = counts.get(m.group("what"), 0) + count
    if not counts or not any(counts.values()):
        raise UsageError("--demand: nothing asked for (give PROFILE=COUNT with COUNT > 0)")
    return Demand(tuple((k, v) for k, v in counts.items() if v > 0))


def profile_for(model: GpuModel, item: str) -> MigProfile | None:
    """The profile of `model` that serves a demand item (exact name, or `Ng` slice size)."""
    exact = model.profile(item)
    if exact is not None:
        return exact
    m = re.fullmatch(r"([0-9]+)g", item)
    if not m:
        return None
    sized = [
        p for p in model.mig_profiles if p.gpu_slices == int(m.group(1)) and not p.media_extensions
    ]
    return min(sized, key=lambda p: (p.memory_slices, p.memory_mib), default=None)


def slice_need(model: GpuModel, memory_mib: float) -> MigProfile | None:
    """The smallest non-`+me` profile of `model` holding `memory_mib` with the margin."""
    fitting = [
        p
        for p in model.mig_profiles
        if not p.media_extensions and p.memory_mib >= memory_mib * MEMORY_MARGIN
    ]
    return min(fitting, key=lambda p: (p.gpu_slices, p.memory_slices), default=None)


def p95_concurrency(intervals: Sequence[tuple[float, float]]) -> int:
    """The time-weighted 95th percentile of how many intervals overlap (0 when none)."""
    if not intervals:
        return 0
    events = sorted(
        [(s, 1) for s, e in intervals if e > s] + [(e, -1) for s, e in intervals if e > s]
    )
    if not events:
        return 0
    time_at: dict[int, float] = {}
    level, last = 0, events[0][0]
    for t, step in events:
        time_at[level] = time_at.get(level, 0.0) + (t - last)
        level, last = level + step, t
    span = sum(time_at.values())
    if span <= 0:
        return max(0, max(_levels(events)))
    covered = 0.0
    for level in sorted(time_at):
        covered += time_at[level]
        if covered >= PERCENTILE * span:
            return level
    return max(time_at)


def _levels(events: list[tuple[float, int]]) -> list[int]:
    out, level = [], 0
    for _, step in events:
        level += step
        out.append(level)
    return out


def demand_from_sacct(
    files: Sequence[str | os.PathLike[str]], model: GpuModel, *, analyze_kwargs=None
) -> Demand:
    """p95 concurrency per slice size of `model` measured from sacct dumps.

    Thin coupling to accounting: only `analyze(files).frame` and its per-run columns
    `start`, `run_end`, `gpu_count`, `mig_profile`, `gpu_mem_used_mib`.
    """
    from slurmgpu.accounting import AnalysisOptions, analyze

    frame = analyze(AnalysisOptions(files=list(files), **(analyze_kwargs or {}))).frame
    wanted = ["start", "run_end", "gpu_count", "mig_profile", "gpu_mem_used_mib"]
    missing = [c for c in wanted if c not in frame.columns]
    if missing:
        raise UsageError(f"--sacct-file: the analysis has no {', '.join(missing)} column")
    by_size: dict[str, list[tuple[float, float]]] = {}
    skipped = 0
    for start, end, gpus, mig, mem in frame[wanted].itertuples(index=False, name=None):
        if _missing(start) or _missing(end):
            continue
        profile = None
        found = _PROFILE_IN.search(mig) if isinstance(mig, str) else None
        if found:  # ran in a MIG slice (`1g.10gb`, `nvidia_a100_3g.20gb`): the same size
            profile = profile_for(model, found.group(0)) or profile_for(model, found.group(1))
        elif not _missing(gpus) and gpus == 1 and not _missing(mem):
            profile = slice_need(model, float(mem))
            if profile is not None and profile.gpu_slices == model.compute_slices:
                profile = None  # needs the whole GPU anyway
        if profile is None:
            skipped += 1
            continue
        size = f"{profile.gpu_slices}g"
        by_size.setdefault(size, []).append((start.timestamp(), end.timestamp()))
    items = tuple(
        (size, n)
        for size, spans in sorted(by_size.items(), key=lambda kv: int(kv[0][:-1]))
        if (n := p95_concurrency(spans)) > 0
    )
    names = ", ".join(os.fspath(f) for f in files)
    notes = (f"{skipped} runs need a whole GPU, several GPUs, or have no memory measure",)
    return Demand(items, source=f"p95 concurrency from {names} ({model.key} slices)", notes=notes)


def _missing(value: object) -> bool:
    if value is None:
        return True
    try:
        return bool(isinstance(value, float) and math.isnan(value)) or str(value) in (
            "<NA>",
            "NaT",
        )
    except (TypeError, ValueError):
        return False
