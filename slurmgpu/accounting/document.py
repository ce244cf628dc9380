"""The analysis document: what `analyze()` returns and every renderer reads, as typed data.

Every stage hands typed rows up (`metrics.py` gives `GroupStats`/`GroupRow`/`FitShares`/
`Timeseries`, `recommend.py` gives `Recommendation`s); `pipeline.py` assembles them into one
frozen `AnalysisDocument`; the renderers (`views/report/`) read its attributes.
`AnalysisDocument.to_json()` is the JSON contract (docs/accounting.md, "JSON schema",
`schema_version` 2) and `AnalysisDocument.from_json()` reads it back (saved reports, test
fixtures), so `from_json(d).to_json() == d` for every document the contract allows.

Conventions, one for the whole document:

- **`gpu_hours` means allocated GPU-hours**: physical-GPU equivalents (a MIG slice is its
  compute slices / the GPU's slices, a shard its share of a GPU) times the run's time inside
  the analysis window, on allocation rows (steps never add GPU-hours). Used GPU-hours are
  always `gpu_hours_used`, idle ones `idle_gpu_hours`, waiting demand `pending_gpu_hours`.
- `None` is *unknown* (no capacity, no `gres/gpuutil`, no run to take a percentile of); it is
  `null` in the JSON and never 0. The JSON has no NaN or infinity.
- Shares and ratios are 0..1; `gpu_util_mean` alone is a percentage (gres/gpuutil's unit).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any, ClassVar

from slurmgpu.util.json_safe import json_safe

SCHEMA_VERSION = 2

Json = Any  # a JSON-ready value: dict / list / str / int / float / bool / None


def iso_utc(t: datetime) -> str:
    """An aware datetime as the document writes times: ISO-8601 UTC with a `Z`."""
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def parse_iso_utc(text: str) -> datetime:
    """The inverse of `iso_utc` (a naive time is UTC)."""
    t = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class Window:
    """The analysis window [since, until): runs are clipped to it (aware UTC datetimes)."""

    since: datetime
    until: datetime

    def to_json(self) -> dict[str, str]:
        return {"since": iso_utc(self.since), "until": iso_utc(self.until)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Window:
        return cls(parse_iso_utc(data["since"]), parse_iso_utc(data["until"]))


@dataclass(frozen=True)
class Source:
    """Where the rows came from and how a step's GPU usage was read."""

    kind: str  # "file" (dumps), "sacct" (live text), "sacct-json", "pyslurm"
    files: tuple[str, ...]  # the dumps, in the order given (empty when live)
    slurm_version: str | None  # of the Slurm that wrote the rows; None: unknown
    # how gres/gpuutil and gres/gpumem of a step were read (one GPU's value, or 24.05+ sums
    # divided by the step's GPUs), in words: the reader must know which
    usage_reading: str
    capacity_error: str | None = None  # live only: why scontrol gave no capacity
    backend_note: str | None = None  # live only: which backend and why, sacct call count

    def to_json(self) -> dict[str, Json]:
        out: dict[str, Json] = {"kind": self.kind, "files": list(self.files)}
        if self.capacity_error is not None:
            out["capacity_error"] = self.capacity_error
        out["slurm_version"] = self.slurm_version
        out["usage_reading"] = self.usage_reading
        if self.backend_note is not None:
            out["backend_note"] = self.backend_note
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Source:
        return cls(
            kind=data["kind"],
            files=tuple(data["files"]),
            slurm_version=data["slurm_version"],
            usage_reading=data["usage_reading"],
            capacity_error=data.get("capacity_error"),
            backend_note=data.get("backend_note"),
        )


@dataclass(frozen=True)
class Waits:
    """Queue waits (Start - Submit, seconds) of the runs that started; None: no such run.

    Percentiles interpolate linearly (numpy's default); a requeued run's Submit is its
    requeue time, so a requeue's wait is its own."""

    p50: float | None
    p95: float | None
    max: float | None

    def to_json(self) -> dict[str, float | None]:
        return {"p50": self.p50, "p95": self.p95, "max": self.max}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Waits:
        return cls(_opt_float(data["p50"]), _opt_float(data["p95"]), _opt_float(data["max"]))


@dataclass(frozen=True)
class GroupStats:
    """The numbers of one group of runs (a partition, a QOS, ... or all of them: `Totals`).

    The JSON keys are the field names, in this order (docs/accounting.md, GROUP)."""

    jobs: int  # allocation rows that count as jobs (a pending array range: its tasks)
    gpu_jobs: int  # of those, the ones with GPUs or shards
    pending_jobs: int  # state PENDING
    gpu_hours_allocated: float  # allocated GPU-hours (the module docstring's definition)
    gpu_hours_used: float | None  # allocated x utilization where known; None: none known
    capacity_gpu_hours: float | None  # GPUs x window hours; None: capacity unknown
    allocation_ratio: float | None  # allocated / capacity (0..1)
    idle_gpu_hours: float | None  # capacity - allocated (>= 0)
    pending_gpu_hours: float  # unmet demand: GPUs asked for x time waited in the window
    gpu_util_mean: float | None  # GPU-hour-weighted mean utilization, percent
    util_known_gpu_hours: float  # the allocated GPU-hours that mean covers
    waste_gpu_hours: float | None  # allocated x (1 - utilization) where known
    low_memory_gpu_hours: float | None  # runs whose measured memory < 1/4 of what they got
    wait_s: Waits
    preemptions: int  # runs that ended PREEMPTED
    requeues: int  # runs REQUEUED or followed by another run of the same job
    gpu_hours_lost_to_preemption: float  # GPU-hours of PREEMPTED runs
    gpu_hours_lost_to_requeue: float  # GPU-hours of the other requeued runs

    def stats_json(self) -> dict[str, Json]:
        """The GROUP keys, in contract order."""
        return {
            f.name: getattr(self, f.name).to_json() if f.name == "wait_s" else getattr(self, f.name)
            for f in fields(GroupStats)
        }

    def as_fields(self) -> dict[str, Any]:
        """The GROUP fields as keyword arguments (shallow: `wait_s` stays a `Waits`), to build
        a `Totals` or `GroupRow` from the numbers `metrics.py` computed."""
        return {f.name: getattr(self, f.name) for f in fields(GroupStats)}

    @staticmethod
    def stats_from_json(data: Mapping[str, Any]) -> dict[str, Any]:
        """Keyword arguments of the GROUP fields read from a JSON group."""
        out: dict[str, Any] = {}
        for f in fields(GroupStats):
            value = data[f.name]
            if f.name == "wait_s":
                value = Waits.from_json(value)
            elif f.type == "int":
                value = int(value)
            elif f.type == "float":
                value = float(value)
            elif f.type == "float | None":
                value = _opt_float(value)
            out[f.name] = value
        return out


@dataclass(frozen=True)
class FitShare:
    """Share of GPU runs with a known need (of jobs, of GPU-hours) that fit one slice size."""

    jobs: float | None  # None: no GPU run with a known need
    gpu_hours: float | None

    def to_json(self) -> dict[str, float | None]:
        return {"jobs": self.jobs, "gpu_hours": self.gpu_hours}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FitShare:
        return cls(_opt_float(data["jobs"]), _opt_float(data["gpu_hours"]))


UNKNOWN_SHARE = FitShare(None, None)


@dataclass(frozen=True)
class FitShares:
    """Which GPU runs would fit a fraction of one GPU, over the runs whose need is KNOWN.

    A run with an unknown need (still running, nothing measured, GPU size unknown) is
    counted apart (`unknown_runs`, `unknown_gpu_hours`), never as "does not fit".

    The `jobs` share is per job (a requeued job counts once, its need the largest known
    need of its runs) over `known_jobs`; the `gpu_hours` share is per run over the GPU-hours
    of the `known_runs`."""

    shares: Mapping[str, FitShare]  # "1/7", "1/4", "1/2" -> share (JSON keys, in order)
    known_runs: int
    unknown_runs: int
    unknown_gpu_hours: float
    known_jobs: int = 0  # the jobs share's denominator (array tasks counted as jobs)

    def as_fields(self) -> dict[str, Any]:
        """The fields of `FitShares` as keyword arguments (to build a `FitFraction`)."""
        return {f.name: getattr(self, f.name) for f in fields(FitShares)}

    def share(self, label: str) -> FitShare:
        """The share for `label`, or an unknown one."""
        return self.shares.get(label, UNKNOWN_SHARE)

    def to_json(self) -> dict[str, Json]:
        out: dict[str, Json] = {label: s.to_json() for label, s in self.shares.items()}
        out.update(
            known_runs=self.known_runs,
            unknown_runs=self.unknown_runs,
            unknown_gpu_hours=self.unknown_gpu_hours,
            known_jobs=self.known_jobs,
        )
        return out

    @staticmethod
    def shares_from_json(data: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "shares": {k: FitShare.from_json(v) for k, v in data.items() if "/" in k},
            "known_runs": int(data["known_runs"]),
            "unknown_runs": int(data["unknown_runs"]),
            "unknown_gpu_hours": float(data["unknown_gpu_hours"]),
            "known_jobs": int(data.get("known_jobs", 0)),  # absent before it was added
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FitShares:
        return cls(**cls.shares_from_json(data))


@dataclass(frozen=True)
class UnknownGpuType:
    """A GPU type whose memory size is unknown, so its measured runs' need is unknown; or
    (`type` "", `partition` set) an untyped partition with no type or size given."""

    type: str
    gpu_runs: int
    fix: str  # the option that gives the size
    partition: str | None = None  # the untyped partition (type "")

    def to_json(self) -> dict[str, Json]:
        return {
            "type": self.type,
            "gpu_runs": self.gpu_runs,
            "fix": self.fix,
            "partition": self.partition,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> UnknownGpuType:
        return cls(data["type"], int(data["gpu_runs"]), data["fix"], data.get("partition"))


@dataclass(frozen=True)
class FitFraction(FitShares):
    """Cluster-wide fit shares, plus what decided each run's need and what would fix unknowns."""

    # runs per basis: measured_gpumem, requested_slice, multi_gpu_request,
    # unknown_not_measured, unknown_gpu_size
    basis_counts: Mapping[str, int] = field(default_factory=dict)
    basis: str = ""  # the counts in words
    unknown_gpu_types: tuple[UnknownGpuType, ...] = ()

    def to_json(self) -> dict[str, Json]:
        out = super().to_json()
        out.update(
            basis_counts=dict(self.basis_counts),
            basis=self.basis,
            unknown_gpu_types=[t.to_json() for t in self.unknown_gpu_types],
        )
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FitFraction:
        return cls(
            **cls.shares_from_json(data),
            basis_counts={k: int(v) for k, v in data["basis_counts"].items()},
            basis=data["basis"],
            unknown_gpu_types=tuple(UnknownGpuType.from_json(t) for t in data["unknown_gpu_types"]),
        )


@dataclass(frozen=True)
class GroupRow(GroupStats):
    """One row of a by_* table: the group's name and numbers.

    The JSON row names the grouping (`{"partition": name, ...}`): the document knows which
    table a row is in (`AnalysisDocument.GROUPINGS`)."""

    name: str = ""  # "" for runs without the column (a dump without Account)
    tier: str | None = None  # by_qos only: the QOS's tier(s), comma-joined when several
    fit_fraction: FitShares | None = None  # by_partition only: the partition's own fit

    def to_json(self, key: str) -> dict[str, Json]:
        out: dict[str, Json] = {key: self.name, **self.stats_json()}
        if self.fit_fraction is not None:
            out["fit_fraction"] = self.fit_fraction.to_json()
        if self.tier is not None:
            out["tier"] = self.tier
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any], key: str) -> GroupRow:
        fit = data.get("fit_fraction")
        return cls(
            **cls.stats_from_json(data),
            name=str(data[key]),
            tier=data.get("tier") if key != "tier" else None,
            fit_fraction=FitShares.from_json(fit) if fit is not None else None,
        )


@dataclass(frozen=True)
class AcceleratorRow:
    """One accelerator kind (a GRES `name:type`: `gpu:h100`, `gpu:mi300x_cpx`, `gpu:1g.10gb`,
    `npu:910b`; `shard`; `gpu` untyped) with its vendor and class (slurmgpu.model.accel):
    allocated device-hours in the window (a MIG slice, an AMD partition, an NPU or a shard
    counts as one device, as Slurm counts it), the capacity when known, and the fit of the
    runs' need in one device (NPU runs: unknown, sacct records no NPU memory)."""

    accelerator: str
    vendor: str  # nvidia, amd, ascend; "" unknown
    accel_class: str  # npu, gpu-slice, gpu, linked-gpu; "" unknown
    runs: int
    jobs: float
    device_hours: float
    devices: float | None  # capacity in devices (None: unknown)
    alloc_share: float | None  # device_hours / (devices x window hours)
    fit: FitShares

    def to_json(self) -> dict[str, Json]:
        return {
            "accelerator": self.accelerator,
            "vendor": self.vendor,
            "class": self.accel_class,
            "runs": self.runs,
            "jobs": self.jobs,
            "device_hours": self.device_hours,
            "devices": self.devices,
            "alloc_share": self.alloc_share,
            "fit_fraction": self.fit.to_json(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AcceleratorRow:
        return cls(
            accelerator=str(data["accelerator"]),
            vendor=str(data["vendor"]),
            accel_class=str(data["class"]),
            runs=int(data["runs"]),
            jobs=float(data["jobs"]),
            device_hours=float(data["device_hours"]),
            devices=_opt_float(data["devices"]),
            alloc_share=_opt_float(data["alloc_share"]),
            fit=FitShares.from_json(data["fit_fraction"]),
        )


@dataclass(frozen=True)
class Totals(GroupStats):
    """All runs in the window together, and how every sacct row was accounted for.

    `rows_read == rows_analyzed + rows_rejected` always (nothing is dropped silently)."""

    rows_read: int = 0  # lines after the header (blank lines apart)
    rows_analyzed: int = 0  # allocation and step rows used
    rows_rejected: int = 0  # malformed rows, each with file:line:reason
    step_rows: int = 0
    allocation_rows: int = 0  # in the window + outside it
    rows_outside_window: int = 0
    rows_overlap_skipped: int = 0  # live: rows repeated by overlapping sacct calls
    blank_lines: int = 0
    rows_latin1_decoded: int = 0  # lines that were not UTF-8
    rejected_reasons: Mapping[str, int] = field(default_factory=dict)  # reason -> rows
    shard_runs_unknown_fraction: int = 0  # gres/shard runs counted as 0 GPU-hours
    steps_gpu_usage_over_100: int = 0  # steps with gpuutil > 100 (a 24.05+ dump's sums)
    # allocated GPU-hours in partitions whose capacity is unknown: left out of
    # allocation_ratio and idle_gpu_hours (which compare known partitions with their capacity)
    gpu_hours_capacity_unknown: float = 0.0
    partitions_capacity_unknown: tuple[str, ...] = ()

    ROW_COUNTS = (
        "rows_read", "rows_analyzed", "rows_rejected", "step_rows", "allocation_rows",
        "rows_outside_window", "rows_overlap_skipped", "blank_lines", "rows_latin1_decoded",
    )  # fmt: skip

    def to_json(self) -> dict[str, Json]:
        out = self.stats_json()
        out.update({k: getattr(self, k) for k in self.ROW_COUNTS})
        out.update(
            rejected_reasons=dict(self.rejected_reasons),
            shard_runs_unknown_fraction=self.shard_runs_unknown_fraction,
            steps_gpu_usage_over_100=self.steps_gpu_usage_over_100,
            gpu_hours_capacity_unknown=self.gpu_hours_capacity_unknown,
            partitions_capacity_unknown=list(self.partitions_capacity_unknown),
        )
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Totals:
        return cls(
            **cls.stats_from_json(data),
            **{k: int(data[k]) for k in cls.ROW_COUNTS},
            rejected_reasons={str(k): int(v) for k, v in data["rejected_reasons"].items()},
            shard_runs_unknown_fraction=int(data["shard_runs_unknown_fraction"]),
            steps_gpu_usage_over_100=int(data["steps_gpu_usage_over_100"]),
            gpu_hours_capacity_unknown=float(data.get("gpu_hours_capacity_unknown", 0.0)),
            partitions_capacity_unknown=tuple(
                str(p) for p in data.get("partitions_capacity_unknown", ())
            ),
        )


@dataclass(frozen=True)
class TimePoint:
    """One time-series bucket: the GPU-hours of every run split exactly across buckets."""

    t: str  # bucket start, ISO-8601 UTC (the label a chart prints)
    gpu_hours_allocated: float
    capacity_gpu_hours: float | None  # cluster GPUs x bucket hours
    allocation_ratio: float | None
    by_partition: Mapping[str, float]  # allocated GPU-hours per partition (sorted by name)
    # the bucket's length (the first and last may be cut by the window: charts scale them)
    hours: float | None = None
    # measured use: GPU-hours x utilization of the runs with a measurement, and the allocated
    # GPU-hours of those runs (None: no run in the bucket was measured)
    gpu_hours_used: float | None = None
    util_known_gpu_hours: float | None = None

    def to_json(self) -> dict[str, Json]:
        return {
            "t": self.t,
            "gpu_hours_allocated": self.gpu_hours_allocated,
            "capacity_gpu_hours": self.capacity_gpu_hours,
            "allocation_ratio": self.allocation_ratio,
            "by_partition": dict(self.by_partition),
            "hours": self.hours,
            "gpu_hours_used": self.gpu_hours_used,
            "util_known_gpu_hours": self.util_known_gpu_hours,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TimePoint:
        return cls(
            t=str(data["t"]),
            gpu_hours_allocated=float(data["gpu_hours_allocated"]),
            capacity_gpu_hours=_opt_float(data["capacity_gpu_hours"]),
            allocation_ratio=_opt_float(data["allocation_ratio"]),
            by_partition={str(k): float(v) for k, v in data["by_partition"].items()},
            hours=_opt_float(data.get("hours")),
            gpu_hours_used=_opt_float(data.get("gpu_hours_used")),
            util_known_gpu_hours=_opt_float(data.get("util_known_gpu_hours")),
        )

    def per_full_bucket(self, value: float | None, full_hours: float) -> float | None:
        """`value` scaled to a whole bucket: a bucket the window cuts short (the last one,
        often) would otherwise draw as a drop in both allocation and capacity."""
        if value is None or not self.hours:
            return value
        return value * full_hours / self.hours


@dataclass(frozen=True)
class Timeseries:
    """Allocated GPU-hours over the window, per `freq` bucket ("1h" or "1D")."""

    freq: str
    points: tuple[TimePoint, ...]

    def to_json(self) -> dict[str, Json]:
        return {"freq": self.freq, "points": [p.to_json() for p in self.points]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Timeseries:
        return cls(data["freq"], tuple(TimePoint.from_json(p) for p in data["points"]))


@dataclass(frozen=True)
class Rejected:
    """A sacct row that was not analyzed, and why (the first 100 are kept)."""

    file: str
    line: int
    reason: str

    def to_json(self) -> dict[str, Json]:
        return {"file": self.file, "line": self.line, "reason": self.reason}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Rejected:
        return cls(str(data["file"]), int(data["line"]), str(data["reason"]))


@dataclass(frozen=True)
class MeasureWarning:
    """What a measure source could not read or reach (never silently dropped)."""

    source: str
    kind: str
    message: str
    job_ids: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Json]:
        return {
            "source": self.source,
            "kind": self.kind,
            "message": self.message,
            "job_ids": list(self.job_ids),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MeasureWarning:
        return cls(data["source"], data["kind"], data["message"], tuple(data["job_ids"]))


class _Record:
    """A frozen record whose JSON is its fields in order, nested records and tuples converted.

    `JSON_KEYS` renames a field in the JSON (`donor` is `"from"`); `READERS` reads a nested
    field back in `from_json`. Numbers pass through as written: an int stays an int."""

    JSON_KEYS: ClassVar[Mapping[str, str]] = {}
    READERS: ClassVar[Mapping[str, Callable[[Any], Any]]] = {}

    def to_json(self) -> dict[str, Json]:
        return {
            self.JSON_KEYS.get(f.name, f.name): _record_json(getattr(self, f.name))
            for f in fields(self)  # type: ignore[arg-type]
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Any:
        kwargs = {}
        for f in fields(cls):  # type: ignore[arg-type]
            value = data[cls.JSON_KEYS.get(f.name, f.name)]
            read = cls.READERS.get(f.name)
            kwargs[f.name] = read(value) if read else value
        return cls(**kwargs)


def _record_json(value: Any) -> Json:
    if hasattr(value, "to_json"):
        return value.to_json()
    if isinstance(value, tuple | list):
        return [_record_json(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _record_json(v) for k, v in value.items()}
    return value


def _tuple_of(reader: Callable[[Any], Any] = lambda v: v) -> Callable[[Any], tuple]:
    return lambda values: tuple(reader(v) for v in values)


@dataclass(frozen=True)
class Layout(_Record):
    """One MIG layout of a carve: `gpus` GPUs, each as `per_gpu` instances of `profile`."""

    profile: str
    per_gpu: int
    gpus: int


@dataclass(frozen=True)
class SliceEvidence(_Record):
    """What a carve or shard rule saw in one partition (whole-GPU runs with a measured need)."""

    partition: str
    gpu_runs: int
    gpu_runs_need_known: int
    runs_fitting_half_gpu: int
    runs_fitting_one_slice: int  # need <= one compute slice of the partition's GPU model
    one_slice: str  # that slice as a share of the GPU: "1/7" (A100/H100/H200), "1/4" (A30)
    share_fitting_half_gpu: float  # of the runs with a known need
    small_job_gpu_hours: float
    p95_concurrent_small_runs: Mapping[str, float]  # per class ("1/7", "1/2"): runs at once
    basis: str


@dataclass(frozen=True)
class CarveEvidence(SliceEvidence):
    gpu_model: str = ""  # catalogue key
    layouts: tuple[Layout, ...] = ()

    READERS: ClassVar[Mapping[str, Callable[[Any], Any]]] = {"layouts": _tuple_of(Layout.from_json)}


@dataclass(frozen=True)
class ShardEvidence(SliceEvidence):
    gpu_memory_mib: float = 0.0  # the smallest GPU of the partition
    p95_gpu_memory_mib: float = 0.0  # of the small runs


@dataclass(frozen=True)
class CarveEffect(_Record):
    """Hour by hour: whole GPUs the small runs would have freed, and hours the slices fell short."""

    gpus_carved: int
    whole_gpus_freed_p50: float
    hours_slices_short: int
    hours: int


@dataclass(frozen=True)
class ShardEffect(_Record):
    gpus_shared: int
    shards_per_gpu: int
    whole_gpus_freed_p50: float
    hours_slices_short: int
    hours: int


@dataclass(frozen=True)
class PartitionLoad(_Record):
    """The numbers of one partition a node move rests on."""

    partition: str
    allocation_ratio: float | None
    wait_s: Waits
    idle_gpu_hours: float | None
    pending_gpu_hours: float

    READERS: ClassVar[Mapping[str, Callable[[Any], Any]]] = {"wait_s": Waits.from_json}


@dataclass(frozen=True)
class MoveEvidence(_Record):
    donor: PartitionLoad  # JSON "from"
    taker: PartitionLoad  # JSON "to"
    gpus_per_node: float

    JSON_KEYS: ClassVar[Mapping[str, str]] = {"donor": "from", "taker": "to"}
    READERS: ClassVar[Mapping[str, Callable[[Any], Any]]] = {
        "donor": PartitionLoad.from_json,
        "taker": PartitionLoad.from_json,
    }


@dataclass(frozen=True)
class MoveEffect(_Record):
    gpus_moved: float
    donor_allocation_ratio_after: float
    capacity_gpu_hours_added_to_taker: float
    demand_gpu_hours_served: float  # waiting GPU-hours the moved GPUs could have served


@dataclass(frozen=True)
class PreemptionEvidence(_Record):
    preemptions: int
    gpu_hours_lost_to_preemption: float
    gpu_hours_wait_saved_estimate: float  # victims' remaining limit (or run time) x GPUs
    share_of_allocated: float
    preempted_tiers: tuple[str, ...]

    READERS: ClassVar[Mapping[str, Callable[[Any], Any]]] = {"preempted_tiers": _tuple_of()}


@dataclass(frozen=True)
class PreemptionEffect(_Record):
    gpu_hours_recovered_max: float


@dataclass(frozen=True)
class TopTierEvidence(_Record):
    tier: str
    wait_s: Waits
    jobs: int

    READERS: ClassVar[Mapping[str, Callable[[Any], Any]]] = {"wait_s": Waits.from_json}


@dataclass(frozen=True)
class TopTierEffect(_Record):
    target_wait_p95_s: float


@dataclass(frozen=True)
class ChecksEvidence(_Record):
    """`none`: each check made, and why it did not fire."""

    checks: tuple[str, ...]

    READERS: ClassVar[Mapping[str, Callable[[Any], Any]]] = {"checks": _tuple_of()}


@dataclass(frozen=True)
class NoEffect(_Record):
    """`none` expects no change: `{}`."""


Evidence = (
    CarveEvidence
    | ShardEvidence
    | MoveEvidence
    | PreemptionEvidence
    | TopTierEvidence
    | ChecksEvidence
)
Effect = CarveEffect | ShardEffect | MoveEffect | PreemptionEffect | TopTierEffect | NoEffect


def _evidence_types(kind: str, evidence: Mapping[str, Any]) -> tuple[type, type]:
    """The (evidence, effect) classes of a recommendation kind (tier_adjust has two rules)."""
    if kind == "tier_adjust":
        if "preemptions" in evidence:
            return PreemptionEvidence, PreemptionEffect
        return TopTierEvidence, TopTierEffect
    try:
        return {
            "mig_carve": (CarveEvidence, CarveEffect),
            "shard": (ShardEvidence, ShardEffect),
            "move_nodes": (MoveEvidence, MoveEffect),
            "none": (ChecksEvidence, NoEffect),
        }[kind]
    except KeyError:
        raise ValueError(f"recommendation kind {kind!r}: not one this schema knows") from None


@dataclass(frozen=True)
class ReplayedEffect:
    """What `slurmgpu replay` predicts for a recommendation's change(s), replayed on the
    window's own runs with and without them (`advice/effects.py`, docs/replay.md "Effects").

    The pairs are (before, after): the baseline replay and the replay with the change. `full`
    is the replay's whole effect (per partition and tier) as its JSON; `unavailable` says why
    the change could not be replayed (it does not fit the cluster model), then the pairs are
    (None, None)."""

    changes: tuple[str, ...]
    allocation_ratio: tuple[float | None, float | None]
    wait_p95_s: tuple[float | None, float | None]
    gpu_hours_lost: tuple[float | None, float | None]
    jobs_not_run: tuple[float | None, float | None]
    full: Mapping[str, Json]
    unavailable: str | None = None
    # the limits of the site's objective the change breaks in its replay (`advice.objective`):
    # a recommendation with any is printed as "replay shows harm: ...", never as advice
    harm: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Json]:
        return dict(json_safe(dict(self.full)))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ReplayedEffect:
        def pair(name: str) -> tuple[float | None, float | None]:
            d = data.get(name) or {}
            return (d.get("before"), d.get("after"))

        return cls(
            changes=tuple(data.get("changes", ())),
            allocation_ratio=pair("allocation_ratio"),
            wait_p95_s=pair("wait_p95_s"),
            gpu_hours_lost=pair("gpu_hours_lost"),
            jobs_not_run=pair("jobs_not_run"),
            full=dict(data),
            unavailable=data.get("unavailable"),
            harm=tuple(data.get("harm") or ()),
        )


@dataclass(frozen=True)
class Recommendation:
    """One recommended change, with the numbers it rests on and what it expects.

    `evidence` and `estimated_effect` are typed per rule (`recommend.py`): a carve's
    `CarveEvidence`/`CarveEffect`, a node move's `MoveEvidence`/`MoveEffect`, ... `change` /
    `changes` are the change in `slurmgpu replay --what-if` grammar (`model/changes.py`):
    the first, and all of them (a carve in two layouts lists both); `none` has None, ()."""

    kind: str  # "mig_carve", "shard", "move_nodes", "tier_adjust" or "none"
    title: str
    detail: str
    evidence: Evidence
    estimated_effect: Effect
    change: str | None = None
    changes: tuple[str, ...] = ()
    # the change(s) replayed on the window's runs (in the JSON: `estimated_effect.replay`)
    replayed: ReplayedEffect | None = None

    def to_json(self) -> dict[str, Json]:
        effect = json_safe(self.estimated_effect.to_json())
        if self.replayed is not None:
            effect = {**effect, "replay": self.replayed.to_json()}
        return {
            "kind": self.kind,
            "title": self.title,
            "detail": self.detail,
            "evidence": json_safe(self.evidence.to_json()),
            "estimated_effect": effect,
            "change": self.change,
            "changes": list(self.changes),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Recommendation:
        evidence_type, effect_type = _evidence_types(data["kind"], data["evidence"])
        effect = dict(data["estimated_effect"])
        replayed = effect.pop("replay", None)
        return cls(
            kind=data["kind"],
            title=data["title"],
            detail=data["detail"],
            evidence=evidence_type.from_json(data["evidence"]),
            estimated_effect=effect_type.from_json(effect),
            change=data["change"],
            changes=tuple(data["changes"]),
            replayed=ReplayedEffect.from_json(replayed) if replayed is not None else None,
        )


@dataclass(frozen=True)
class PartitionEnergy:
    """One partition's energy in the window (kWh; docs/energy.md)."""

    partition: str
    kwh: float
    kwh_idle: float

    def to_json(self) -> dict[str, Json]:
        return {"partition": self.partition, "kwh": self.kwh, "kwh_idle": self.kwh_idle}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PartitionEnergy:
        return cls(str(data["partition"]), float(data["kwh"]), float(data["kwh_idle"]))


@dataclass(frozen=True)
class Energy:
    """The energy the window's GPU runs drew, where measured (docs/energy.md).

    `kwh`: measured energy inside the window; `kwh_idle`: the part drawn while the GPUs were
    idle (the rule of docs/energy.md); `kwh_per_used_gpu_hour`: kWh over the used GPU-hours
    of the runs with both an energy and a utilization (None: no such hour); `coverage`:
    the share of allocated GPU-hours whose run has an energy measure (0..1)."""

    kwh: float
    kwh_idle: float
    kwh_per_used_gpu_hour: float | None
    coverage: float
    by_partition: tuple[PartitionEnergy, ...] = ()

    def to_json(self) -> dict[str, Json]:
        return {
            "kwh": self.kwh,
            "kwh_idle": self.kwh_idle,
            "kwh_per_used_gpu_hour": self.kwh_per_used_gpu_hour,
            "coverage": self.coverage,
            "by_partition": [p.to_json() for p in self.by_partition],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Energy:
        return cls(
            kwh=float(data["kwh"]),
            kwh_idle=float(data["kwh_idle"]),
            kwh_per_used_gpu_hour=_opt_float(data["kwh_per_used_gpu_hour"]),
            coverage=float(data["coverage"]),
            by_partition=tuple(PartitionEnergy.from_json(p) for p in data["by_partition"]),
        )


@dataclass(frozen=True)
class EnergyCost:
    """The window's energy in money and CO2, from the policy's `[energy]` table: facility
    kWh = kWh x PUE; cost = facility kWh x price; CO2 = facility kWh x grams per kWh. None
    where the policy gives no price or no CO2 intensity."""

    pue: float
    facility_kwh: float
    facility_kwh_idle: float
    currency: str
    price_per_kwh: float | None
    cost: float | None
    cost_idle: float | None
    gco2_per_kwh: float | None
    co2_kg: float | None
    co2_kg_idle: float | None

    def to_json(self) -> dict[str, Json]:
        return {f.name: getattr(self, f.name) for f in fields(EnergyCost)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EnergyCost:
        return cls(
            pue=float(data["pue"]),
            facility_kwh=float(data["facility_kwh"]),
            facility_kwh_idle=float(data["facility_kwh_idle"]),
            currency=str(data["currency"]),
            price_per_kwh=_opt_float(data["price_per_kwh"]),
            cost=_opt_float(data["cost"]),
            cost_idle=_opt_float(data["cost_idle"]),
            gco2_per_kwh=_opt_float(data["gco2_per_kwh"]),
            co2_kg=_opt_float(data["co2_kg"]),
            co2_kg_idle=_opt_float(data["co2_kg_idle"]),
        )


@dataclass(frozen=True)
class AnalysisDocument:
    """Everything the analysis found, in the order of the JSON document."""

    schema_version: int
    generated_at: datetime  # when the analysis ran (aware UTC)
    window: Window
    source: Source
    totals: Totals
    utilization_basis: Mapping[str, int]  # measure source (or "slurm_gpuutil") -> runs
    measure_warnings: tuple[MeasureWarning, ...]
    by_partition: tuple[GroupRow, ...]  # sorted by GPU-hours, then name; idle ones too
    # (several clusters in the window: partitions are labelled CLUSTER/PARTITION)
    by_cluster: tuple[GroupRow, ...]  # one row per cluster (Cluster column; "" when absent)
    by_qos: tuple[GroupRow, ...]  # each with its `tier`
    by_tier: tuple[GroupRow, ...]
    by_account: tuple[GroupRow, ...]
    by_user: tuple[GroupRow, ...]
    by_kind: tuple[GroupRow, ...]
    fit_fraction: FitFraction
    timeseries: Timeseries
    rejected: tuple[Rejected, ...]  # the first 100 (all are counted in totals)
    notes: tuple[str, ...]  # options that had no effect, said out loud
    recommendations: tuple[Recommendation, ...]  # at least one (`none` when nothing fires)
    # per accelerator kind across vendors (GPUs, MIG slices, AMD partitions, NPUs)
    by_accelerator: tuple[AcceleratorRow, ...] = ()
    # measured GPU energy (None only in documents written before it was added)
    energy: Energy | None = None
    energy_cost: EnergyCost | None = None  # None: the policy has no `[energy]` table

    # (attribute, the JSON key naming a row's group) of each by_* table
    GROUPINGS = (
        ("by_partition", "partition"), ("by_cluster", "cluster"), ("by_qos", "qos"),
        ("by_tier", "tier"), ("by_account", "account"), ("by_user", "user"), ("by_kind", "kind"),
    )  # fmt: skip

    def to_json(self) -> dict[str, Json]:
        """The JSON contract (docs/accounting.md, schema 2): a dict of plain JSON values.

        Keys in contract order; unknown is None (never NaN/inf); numpy scalars are Python
        numbers; `json.dumps(doc.to_json(), allow_nan=False)` always succeeds."""
        out: dict[str, Json] = {
            "schema_version": self.schema_version,
            "generated_at": iso_utc(self.generated_at),
            "window": self.window.to_json(),
            "source": self.source.to_json(),
            "totals": self.totals.to_json(),
            "utilization_basis": dict(self.utilization_basis),
            "measure_warnings": [w.to_json() for w in self.measure_warnings],
        }
        for attr, key in self.GROUPINGS:
            out[attr] = [row.to_json(key) for row in getattr(self, attr)]
        out.update(
            fit_fraction=self.fit_fraction.to_json(),
            timeseries=self.timeseries.to_json(),
            rejected=[r.to_json() for r in self.rejected],
            notes=list(self.notes),
            recommendations=[r.to_json() for r in self.recommendations],
            by_accelerator=[r.to_json() for r in self.by_accelerator],
        )
        if self.energy is not None:
            out["energy"] = self.energy.to_json()
            out["energy_cost"] = self.energy_cost.to_json() if self.energy_cost else None
        return json_safe(out)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AnalysisDocument:
        """A document from its JSON (`to_json()`'s inverse); KeyError names a missing key."""
        version = int(data["schema_version"])
        if version != SCHEMA_VERSION:
            raise ValueError(f"analysis schema_version {version}: this reads {SCHEMA_VERSION}")
        groups = {
            # by_cluster came later: documents written before it read as having none
            attr: tuple(GroupRow.from_json(row, key) for row in data.get(attr, ()))
            if attr == "by_cluster"
            else tuple(GroupRow.from_json(row, key) for row in data[attr])
            for attr, key in cls.GROUPINGS
        }
        return cls(
            schema_version=version,
            generated_at=parse_iso_utc(data["generated_at"]),
            window=Window.from_json(data["window"]),
            source=Source.from_json(data["source"]),
            totals=Totals.from_json(data["totals"]),
            utilization_basis={str(k): int(v) for k, v in data["utilization_basis"].items()},
            measure_warnings=tuple(MeasureWarning.from_json(w) for w in data["measure_warnings"]),
            **groups,
            fit_fraction=FitFraction.from_json(data["fit_fraction"]),
            timeseries=Timeseries.from_json(data["timeseries"]),
            rejected=tuple(Rejected.from_json(r) for r in data["rejected"]),
            notes=tuple(str(n) for n in data["notes"]),
            recommendations=tuple(Recommendation.from_json(r) for r in data["recommendations"]),
            # by_accelerator came later: documents written before it read as having none
            by_accelerator=tuple(
                AcceleratorRow.from_json(r) for r in data.get("by_accelerator", ())
            ),
            # energy came later: documents written before it read as having none
            energy=Energy.from_json(data["energy"]) if data.get("energy") else None,
            energy_cost=EnergyCost.from_json(data["energy_cost"])
            if data.get("energy_cost")
            else None,
        )


@dataclass(frozen=True)
class ClusterFacts:
    """What the analysis knows of the cluster model, for a replay of its window
    (`advice/`): GPUs per partition, GPUs per node, GPU type per partition (keyed by the
    window's partition labels), the clusters seen, and each run's GPU memory (MiB, NaN
    unknown; aligned with the result's frame)."""

    capacity: Mapping[str, float]
    gpus_per_node: Mapping[str, float]
    gpu_types: Mapping[str, str]
    clusters: frozenset[str]
    gpu_memory_mib: Any = field(repr=False, default=None)  # numpy array, one per run


@dataclass
class AnalysisResult:
    """What `analyze` found: the typed document and the per-run frame it came from."""

    document: AnalysisDocument
    frame: Any  # pandas.DataFrame (normalized allocation rows, pyarrow dtypes)
    load: Any = field(repr=False, default=None)  # accounting.load.LoadResult
    cluster: ClusterFacts | None = field(repr=False, default=None)

    def to_json(self) -> dict[str, Any]:
        """The JSON contract: `self.document.to_json()`."""
        return self.document.to_json()

    to_dict = to_json


__all__ = [
    "SCHEMA_VERSION",
    "AcceleratorRow",
    "AnalysisDocument",
    "AnalysisResult",
    "ClusterFacts",
    "Energy",
    "EnergyCost",
    "FitFraction",
    "FitShare",
    "FitShares",
    "GroupRow",
    "GroupStats",
    "MeasureWarning",
    "PartitionEnergy",
    "Recommendation",
    "Rejected",
    "Source",
    "TimePoint",
    "Timeseries",
    "Totals",
    "UnknownGpuType",
    "Waits",
    "Window",
    "iso_utc",
    "json_safe",
]
