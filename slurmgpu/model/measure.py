"""Measured GPU use of one job run, from a source that averages over time.

Slurm's own `gres/gpuutil`/`gres/gpumem` are per-step high-water marks (23.02+, not on MIG).
Time-averaged measures come from slurmgpu's node collector, Princeton's jobstats summaries in
AdminComment, or a Prometheus server (DCGM exporter or jobstats' exporter). Each such source
turns what it read into `JobGpuMeasure` records; the accounting stage applies them to runs with
one precedence (time-averaged over high-water) and reports how many runs each source measured.
Pure data: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol


@dataclass(frozen=True)
class RunRef:
    """What a measure source needs to know about one run to look up its measures."""

    job_id: str  # JobIDRaw of the allocation (an array task has its own raw id)
    cluster: str
    start: datetime | None  # UTC, naive
    end: datetime | None  # UTC, naive; None while running
    nodes: str  # Slurm hostlist expression, as sacct prints NodeList
    gpus: float  # GPUs allocated (MIG slices as fractions)
    admin_comment: str = ""


@dataclass(frozen=True)
class JobGpuMeasure:
    """One run's GPU use as a time-averaging source measured it."""

    job_id: str
    source: str  # "collector" | "jobstats" | "prometheus"
    gpus_measured: int  # GPUs or MIG instances the source saw
    util_mean_pct: float | None  # time-averaged utilization, mean over the run's GPUs
    mem_used_max_mib: float | None  # highest memory used on any one of the run's GPUs
    gpu_memory_mib: float | None  # size of one of the run's GPUs (or MIG slices), if known
    cluster: str | None = None
    start: datetime | None = None  # to tell requeued runs of one job apart, when known
    # energy the run's GPUs drew over the measured span, joules (None: not measured);
    # `energy_estimated`: split from a whole GPU's counter (MIG instances, shared GPUs) or
    # integrated from power samples rather than read from a counter (docs/energy.md)
    energy_j: float | None = None
    energy_estimated: bool = False


class MeasureSource(Protocol):
    """A source of time-averaged GPU measures (collector spool, jobstats, Prometheus)."""

    name: str

    def measures(self, runs: list[RunRef]) -> list[JobGpuMeasure]:
        """The measures it has for these runs; runs it cannot see are simply absent."""
        ...


@dataclass(frozen=True)
class DeviceSeries:
    """Every sample one GPU or MIG instance gave while a job held it (epoch seconds, sorted).

    `util_pct` is aligned with `times`; `mem_times`/`mem_used_mib` are the memory samples
    (their own times: an exporter may scrape them apart). `key` tells devices apart:
    `node/gpu` or `node/gpu/gi` for a MIG instance.
    """

    key: str
    node: str
    gpu: str
    times: tuple[float, ...]
    util_pct: tuple[float, ...]
    uuid: str = ""
    mig_instance: str | None = None
    mig_profile: str | None = None
    mem_times: tuple[float, ...] = ()
    mem_used_mib: tuple[float, ...] = ()
    mem_total_mib: float | None = None


@dataclass(frozen=True)
class JobSeries:
    """A run's per-device series from one source (`complete`: no request failed or was cut;
    `implausible`: samples the source dropped as no true reading - negative, NaN, infinite,
    over 100 % - which are not evidence of anything)."""

    job_id: str
    source: str
    devices: tuple[DeviceSeries, ...]
    complete: bool = True
    implausible: int = 0
