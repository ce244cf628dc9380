"""Per-sample GPU series of one run from Prometheus (what the idle rule needs).

`measure/prometheus.py` asks for time averages; the idle rule (docs/idle.md) needs every
sample. We ask for the raw samples, not `query_range`: a range selector evaluated at one time
(`DCGM_FI_DEV_GPU_UTIL{hpc_job="42"}[21600s]` at T) returns each stored sample with its own
timestamp, where `query_range` would resample on a step grid and fill gaps from the
5-minute lookback, turning a missing scrape into a repeated value. A run is read in chunks of
`chunk_s` seconds (one request per chunk and metric), and at most `max_samples` samples per
run are kept: a run past that is returned incomplete with a warning, never silently cut.

Devices are told apart by the schema's `device_labels` (DCGM: Hostname, gpu, GPU_I_ID: a MIG
instance is its own device; its profile is `GPU_I_PROFILE`). Utilization per device comes
from the first of the schema's `util_metrics` that has samples for it (DCGM gives no
`DCGM_FI_DEV_GPU_UTIL` on MIG instances; the engine-active ratio stands in, x100).

A sample that cannot be a true reading is not evidence and is dropped before anything sees
it, in every schema: a utilization (after the schema's factor) that is negative, NaN,
infinite or above 100 % by more than `UTIL_TOLERANCE_PCT` (a rounding excess up to that is
kept as 100 %), and a memory reading that is negative, NaN or infinite. The run's
`JobSeries.implausible` counts them and one warning names the run; a device none of whose
utilization samples was plausible is left out (its GPU then has no series: the rule cannot
decide). An answer of the wrong shape (`result` not a list of series, a series whose
`values` are not [time, value] pairs) is a warning and an incomplete series, never a crash.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime

from slurmgpu.measure.prometheus import (
    MIB,
    SCHEMAS,
    PrometheusError,
    PrometheusSchema,
    PrometheusSource,
    _quote,
)
from slurmgpu.measure.warnings import MeasureWarning
from slurmgpu.model.measure import DeviceSeries, JobSeries, RunRef

DEFAULT_CHUNK_S = 6 * 3600
DEFAULT_MAX_SAMPLES = 2_000_000
# labels naming the node, in the order tried (DCGM: Hostname; jobstats/node_exporter: instance)
_NODE_LABELS = ("Hostname", "node", "instance")
_GPU_LABELS = ("gpu", "minor_number")
_MIG_LABELS = ("GPU_I_ID", "gpu_instance")
_PROFILE_LABELS = ("GPU_I_PROFILE", "profile")
# a utilization above 100 % by at most this much is a rounding excess (kept as 100 %); more
# is no reading at all (dropped, like a negative or NaN one)
UTIL_TOLERANCE_PCT = 1.0


def plausible_util(value: float) -> float | None:
    """A utilization sample in percent as the rule may use it, or None when it cannot be a
    true reading (negative, NaN, infinite, over 100 % beyond the tolerance)."""
    if not math.isfinite(value) or value < 0 or value > 100.0 + UTIL_TOLERANCE_PCT:
        return None
    return min(value, 100.0)


@dataclass
class _Dev:
    labels: dict[str, str]
    util: dict[int, dict[float, float]] = field(default_factory=lambda: defaultdict(dict))
    mem: dict[float, float] = field(default_factory=dict)
    total: dict[str, float] = field(default_factory=dict)
    implausible: int = 0  # utilization samples dropped as no true reading


class PrometheusSeriesSource:
    """Runs' per-device sample series from Prometheus' HTTP API (`/api/v1/query`)."""

    name = "prometheus"

    def __init__(
        self,
        url: str,
        *,
        schema: PrometheusSchema | None = None,
        headers: tuple[tuple[str, str], ...] = (),
        timeout_s: float = 30.0,
        chunk_s: int = DEFAULT_CHUNK_S,
        max_samples: int = DEFAULT_MAX_SAMPLES,
        now: datetime | None = None,
    ) -> None:
        self.schema = schema or SCHEMAS["dcgm"]
        self.http = PrometheusSource(url, schema=self.schema, headers=headers, timeout_s=timeout_s)
        self.chunk_s = max(60, int(chunk_s))
        self.max_samples = max(1, int(max_samples))
        self.now = now
        self.warnings: list[MeasureWarning] = []
        self._dropped = 0  # implausible samples of the run being read

    @property
    def requests(self) -> int:
        return self.http.requests

    def series(self, run: RunRef) -> JobSeries | None:
        """The run's devices with every sample in [start, end]; None when Prometheus has
        none for it (or the run never started)."""
        if run.start is None:
            return None
        start = _epoch(run.start)
        end = _epoch(run.end or self.now or datetime.now(UTC).replace(tzinfo=None))
        devices: dict[tuple[str, ...], _Dev] = {}
        complete = True
        kept = 0
        self._dropped = 0
        try:
            for a, b in _chunks(start, end, self.chunk_s):
                kept += self._chunk(run, a, b, devices)
                if kept > self.max_samples:
                    message = f"more than {self.max_samples} samples: read up to {_iso(b)}"
                    self.warnings.append(
                        MeasureWarning(self.name, "truncated", message, (run.job_id,))
                    )
                    complete = False
                    break
        except PrometheusError as exc:
            self.warnings.append(MeasureWarning(self.name, exc.kind, str(exc), (run.job_id,)))
            complete = False
        dropped = self._dropped
        if dropped:
            message = (
                f"{dropped} implausible samples (negative, NaN, infinite or over 100 %) "
                "dropped: not evidence"
            )
            self.warnings.append(MeasureWarning(self.name, "invalid", message, (run.job_id,)))
        if not devices:
            if complete and not dropped:
                return None
            return JobSeries(run.job_id, self.name, (), complete=complete, implausible=dropped)
        return JobSeries(
            run.job_id, self.name, self._devices(devices), complete=complete, implausible=dropped
        )

    # -- requests -----------------------------------------------------------------------
    def _chunk(self, run: RunRef, a: int, b: int, devices: dict[tuple[str, ...], _Dev]) -> int:
        """Samples in [a, b] of every metric; returns how many were kept."""
        s = self.schema
        kept = 0
        for rank, (metric, factor) in enumerate(s.util_metrics):
            for dev, t, v in self._samples(run, metric, a, b, devices):
                util = plausible_util(v * factor)
                if util is None:
                    dev.implausible += 1
                    self._dropped += 1
                    continue
                dev.util[rank][t] = util
                kept += 1
        for dev, t, v in self._samples(run, s.mem_used_metric, a, b, devices):
            if math.isfinite(v) and v >= 0:
                dev.mem[t] = v * s.mem_unit_bytes / MIB
            else:
                self._dropped += 1
        for metric in s.mem_total_metrics:
            for dev, _t, v in self._samples(run, metric, a, b, devices, last_only=True):
                if math.isfinite(v) and v >= 0:
                    dev.total[metric] = v * s.mem_unit_bytes / MIB
        return kept

    def _samples(self, run, metric, a, b, devices, last_only=False):
        s = self.schema
        matchers = [f'{s.job_label}="{_quote(run.job_id)}"']
        if s.cluster_label and run.cluster:
            matchers.append(f'{s.cluster_label}="{_quote(run.cluster)}"')
        expr = f"{metric}{{{','.join(matchers)}}}[{max(1, b - a)}s]"
        data = self.http.query_data(expr, b)
        if data.get("resultType") != "matrix":
            raise PrometheusError("http", f"expected a matrix, got {data.get('resultType')}")
        result = data.get("result")
        if result is None:
            result = []
        if not isinstance(result, list):
            kind = type(result).__name__
            raise PrometheusError("malformed", f"matrix answer: result is a {kind}, not a list")
        for item in result:
            try:
                if not isinstance(item, dict) or not isinstance(item["metric"], dict):
                    raise TypeError("a series is not an object with a metric object")
                raw = item.get("values", [])
                if not isinstance(raw, list):
                    raise TypeError("values is not a list")
                labels = {str(k): str(v) for k, v in item["metric"].items()}
                values = [_pair(p) for p in raw]
            except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
                raise PrometheusError("http", f"malformed series in the answer: {exc}") from exc
            key = tuple(labels.get(k, "") for k in s.device_labels)
            dev = devices.setdefault(key, _Dev(labels))
            for t, value in values[-1:] if last_only else values:
                if math.isfinite(t):
                    yield dev, t, value

    # -- devices ------------------------------------------------------------------------
    def _devices(self, devices: dict[tuple[str, ...], _Dev]) -> tuple[DeviceSeries, ...]:
        out = []
        for dev in devices.values():
            if dev.implausible and not any(dev.util.values()):
                continue  # only implausible readings: this GPU has no series
            util = dev.util[min(dev.util)] if dev.util else {}
            times = tuple(sorted(util))
            node = _first(dev.labels, _NODE_LABELS)
            gpu = _first(dev.labels, _GPU_LABELS)
            gi = _first(dev.labels, _MIG_LABELS) or None
            parts = len(self.schema.mem_total_metrics)
            mem_times = tuple(sorted(dev.mem))
            out.append(
                DeviceSeries(
                    key="/".join(p for p in (node, gpu, gi or "") if p),
                    node=node,
                    gpu=gpu,
                    times=times,
                    util_pct=tuple(util[t] for t in times),
                    uuid=dev.labels.get("UUID", dev.labels.get("uuid", "")),
                    mig_instance=gi,
                    mig_profile=_first(dev.labels, _PROFILE_LABELS) or None,
                    mem_times=mem_times,
                    mem_used_mib=tuple(dev.mem[t] for t in mem_times),
                    mem_total_mib=sum(dev.total.values()) if len(dev.total) == parts else None,
                )
            )
        return tuple(sorted(out, key=lambda d: d.key))


def _pair(item: object) -> tuple[float, float]:
    """A `[time, "value"]` pair of a matrix answer (TypeError/ValueError otherwise)."""
    if not isinstance(item, list | tuple) or len(item) != 2:
        raise TypeError(f"a sample is not a [time, value] pair: {str(item)[:40]}")
    t, v = item
    if isinstance(t, bool) or isinstance(v, bool):
        raise TypeError("a sample holds a boolean")
    return float(t), float(v)


def _chunks(start: int, end: int, size: int) -> list[tuple[int, int]]:
    """[start, end] as consecutive (a, b] pieces of at most `size` s (the first closed)."""
    out = []
    a = start - 1  # the range selector is (a, b]: keep a sample at the start itself
    while a < end:
        b = min(end, a + size)
        out.append((a, b))
        a = b
    return out


def _first(labels: dict[str, str], names: tuple[str, ...]) -> str:
    return next((labels[n] for n in names if labels.get(n)), "")


def _epoch(moment: datetime) -> int:
    aware = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return int(aware.timestamp())


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
