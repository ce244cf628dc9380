"""`AnalysisOptions`: everything `analyze()` needs to know, in one typed, frozen object.

The CLI (`cli/analysis_options.py`) and library users build it; every stage reads from it.
Errors raised while validating it name the problem (a time zone, a window), never a CLI flag:
the library does not know which flag a value came from.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from slurmgpu.errors import UsageError
from slurmgpu.model.measure import MeasureSource

# Slurm 24.05 changed gres/gpuutil and gres/gpumem of a step to sums over its GPUs
# (CHANGELOG/slurm-24.05.md: "gpuutil/gpumem will record sums of all GPUS in the step").
USAGE_SUMS_FROM = (24, 5)
_VERSION = re.compile(r"([0-9]{1,4})\.([0-9]{1,4})(?:\.([0-9]{1,4}))?")  # ASCII digits


@dataclass(frozen=True)
class AnalysisOptions:
    """One analysis request. Empty `files` means: query the live cluster (`backend`)."""

    files: Sequence[str | os.PathLike[str]] = ()
    # an accounting store (`accounting/store.py`) instead of files or the live cluster, and
    # the clusters of it to analyze (empty: all)
    store: str | os.PathLike[str] | None = None
    clusters: Sequence[str] = ()
    since: datetime | None = None  # None: dumps -> their whole span; live -> now - 7 days
    until: datetime | None = None  # None: dumps -> their last second; live -> now
    now: datetime | None = None
    backend: str = "auto"  # a name in accounting.read.SOURCES (live only)
    # a Policy (tier_for_qos), a {qos: tier} mapping or a function qos -> tier
    tiers: Any = None
    capacity: Mapping[str, float] | None = None  # partition -> GPUs (overrides scontrol)
    shards_per_gpu: Mapping[str, float] = field(default_factory=dict)  # partition or "*"
    gpu_types: Mapping[str, str] = field(default_factory=dict)  # partition -> GPU type name
    # accelerator kind (`gpu:mi300x`, `npu:910b`) -> devices (overrides scontrol's count)
    accelerator_devices: Mapping[str, float] = field(default_factory=dict)
    # partition (or "*": every partition) -> GPUs in one of its nodes (overrides scontrol)
    gpus_per_node: Mapping[str, float] = field(default_factory=dict)
    # GPU type -> MiB; a key naming a partition sizes its GPUs when their type is unknown
    gpu_memory_mib: Mapping[str, float] = field(default_factory=dict)
    inventories: Sequence[str | os.PathLike[str]] = ()
    env: Mapping[str, str] | None = None  # environment of live Slurm commands
    freq: str | None = None  # time-series bucket: "1h" or "1D" (None: by window length)
    timezone: str = "UTC"  # zone of ISO times in dumps (sacct prints local time)
    chunk_hours: float = 24.0  # live text query: one sacct call per this many hours
    # "X.Y" of the Slurm that wrote a dump (live: asked from Slurm); decides how
    # gres/gpuutil and gres/gpumem of a step are read (sums over GPUs from 24.05 on)
    slurm_version: str | None = None
    measure_sources: Sequence[MeasureSource] = ()
    # replay each recommendation's change on the window's runs (`slurmgpu.advice.effects`):
    # "auto" when the cluster model is known and the window holds at most
    # REPLAY_EFFECTS_AUTO_RUNS runs, "always" when the model is known, "never"
    replay_effects: str = "auto"
    # the policy's `[energy]` table (model.policy.EnergyPolicy): kWh into money and CO2
    energy: Any = None
    # the idle rule's utilization threshold (percent) for idle energy (docs/energy.md)
    idle_util_pct: float = 1.0

    def validated(self) -> AnalysisOptions:
        """Check values that can be checked up front; times made timezone-aware UTC."""
        check_timezone(self.timezone)
        if not self.chunk_hours > 0:
            raise UsageError(f"sacct query chunk of {self.chunk_hours} hours: must be > 0")
        if self.replay_effects not in ("auto", "always", "never"):
            raise UsageError(f"replay effects {self.replay_effects!r}: use auto, always or never")
        if self.freq not in (None, "1h", "1D"):
            raise UsageError(f"time-series bucket {self.freq!r}: use 1h or 1D")
        if self.store is not None and self.files:
            raise UsageError("analyze either an accounting store or sacct dumps, not both")
        if self.clusters and self.store is None:
            raise UsageError("clusters are chosen within an accounting store: give the store")
        if self.slurm_version is not None:
            parse_version(self.slurm_version)
        for name, n in self.gpus_per_node.items():
            if not (n >= 1 and float(n).is_integer()):
                raise UsageError(f"GPUs per node of {name!r}: {n} is not a whole number >= 1")
        for name, mib in self.gpu_memory_mib.items():
            if not mib > 0:
                raise UsageError(f"memory of GPU type {name!r}: {mib} MiB is not a size")
        since, until = _utc(self.since), _utc(self.until)
        if since and until and until <= since:
            raise UsageError(f"window end {until:%Y-%m-%dT%H:%M:%S} is not after its start")
        now = _utc(self.now) or datetime.now(UTC)
        from dataclasses import replace

        return replace(self, since=since, until=until, now=now.replace(microsecond=0))

    def tier_function(self) -> Callable[[str], str | None] | None:
        """`tiers` as a function qos -> tier name (None: the tier is the QOS name)."""
        tiers = self.tiers
        if tiers is None:
            return None
        if hasattr(tiers, "tier_for_qos"):

            def from_policy(qos: str) -> str | None:
                tier = tiers.tier_for_qos(qos)
                return getattr(tier, "name", tier)

            return from_policy
        if isinstance(tiers, Mapping):
            return tiers.get
        return tiers


def parse_version(text: str) -> tuple[int, int]:
    """`"24.05"` / `"24.05.3"` -> (24, 5)."""
    m = _VERSION.fullmatch(text.strip())
    if not m:
        raise UsageError(f"Slurm version {text!r}: use MAJOR.MINOR such as 24.05")
    return int(m.group(1)), int(m.group(2))


def _utc(t: datetime | None) -> datetime | None:
    if t is None:
        return None
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


def check_timezone(name: str) -> str:
    """`name` when it is an IANA time zone name (`Europe/Paris`, `UTC`); UsageError else.

    Dumps of ISO times are read in this zone: a name no zone has must not read them as UTC."""
    import zoneinfo

    try:
        zoneinfo.ZoneInfo(name)
    except (ValueError, OSError, zoneinfo.ZoneInfoNotFoundError):
        raise UsageError(f"--timezone {name!r}: not a time zone name (e.g. Europe/Paris)") from None
    return name
