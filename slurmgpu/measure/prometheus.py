"""GPU use from a Prometheus server: DCGM exporter or jobstats' exporter series per job.

For each run we ask for the time average of utilization (`avg_over_time`), the highest memory
used (`max_over_time`) and the device's size (`last_over_time`) over exactly the run's
window, on the series that carry the run's job id in a label (the DCGM exporter's
`--hpc-job-mapping-dir` adds `hpc_job`; jobstats' exporter adds `jobid`). Many runs go into
one request: each run's window becomes `[DURATION s] offset (T - END) s` at one evaluation
time T, joined with `or` (the job label keeps the answers apart). Runs of one job id (requeues)
never share a request.

Energy (docs/energy.md): where the exporter has a cumulative energy counter (DCGM's
`DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`, mJ) a device's energy is the counter's `increase` over
the run's window -- Prometheus counts a counter that went down (a driver reload) as a reset
and adds only what came after it; `resets` > 0 is reported as a warning. A device with only a
power gauge (DCGM's `DCGM_FI_DEV_POWER_USAGE`, W; jobstats' `nvidia_gpu_power_usage_milliwatts`)
gets the window's mean power times its length, marked an estimate. A MIG instance's series
carry its GPU's energy: the instance is charged its compute slices' share (an estimate). A
run has an energy only when every one of its devices has one.

What goes wrong is reported as `MeasureWarning`s, never dropped: a failed request names all
of its runs; Prometheus' own `warnings` (partial data) are passed on; a run that got series
for fewer devices than it had GPUs is reported as partial.
"""

from __future__ import annotations

import json
import math
import urllib.parse
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from slurmgpu.measure import http
from slurmgpu.measure.warnings import MeasureWarning
from slurmgpu.model.measure import JobGpuMeasure, RunRef

MIB = 2**20
DEFAULT_BATCH = 40
DEFAULT_TIMEOUT_S = 30.0  # the whole request, not one socket read
# an answer for DEFAULT_BATCH runs of 64 GPUs each is about 1 MiB; 64 MiB is room enough
DEFAULT_MAX_BYTES = 64 * MIB
MAX_FAILED_IN_A_ROW = 3


@dataclass(frozen=True)
class PrometheusSchema:
    """Metric and label names of one exporter (every name can be overridden by the site).

    `util_metrics`: (metric, factor to percent), tried in order per device (DCGM: the device
    utilization; on MIG instances, where it does not exist, the profiling engine-active ratio).
    `mem_total_metrics` are summed (DCGM reports used and free framebuffer, not the size).
    `device_labels` tell one GPU or MIG instance from another.
    """

    name: str
    job_label: str
    util_metrics: tuple[tuple[str, float], ...]
    mem_used_metric: str
    mem_unit_bytes: float
    mem_total_metrics: tuple[str, ...]
    device_labels: tuple[str, ...]
    cluster_label: str | None = None
    # (metric, factor to joules) of a cumulative energy counter; (metric, factor to watts)
    # of a power gauge; None: the exporter has none
    energy_counter: tuple[str, float] | None = None
    power_gauge: tuple[str, float] | None = None
    mig_profile_label: str | None = None  # labels a MIG instance's series with its profile


SCHEMAS: dict[str, PrometheusSchema] = {
    "dcgm": PrometheusSchema(
        name="dcgm",
        job_label="hpc_job",
        util_metrics=(("DCGM_FI_DEV_GPU_UTIL", 1.0), ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 100.0)),
        mem_used_metric="DCGM_FI_DEV_FB_USED",  # MiB
        mem_unit_bytes=MIB,
        mem_total_metrics=("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"),
        device_labels=("Hostname", "instance", "gpu", "GPU_I_ID"),
        energy_counter=("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 1e-3),  # mJ
        power_gauge=("DCGM_FI_DEV_POWER_USAGE", 1.0),  # W
        mig_profile_label="GPU_I_PROFILE",
    ),
    "jobstats": PrometheusSchema(
        name="jobstats",
        job_label="jobid",
        util_metrics=(("nvidia_gpu_duty_cycle", 1.0),),
        mem_used_metric="nvidia_gpu_memory_used_bytes",
        mem_unit_bytes=1.0,
        mem_total_metrics=("nvidia_gpu_memory_total_bytes",),
        device_labels=("instance", "minor_number"),
        cluster_label="cluster",
        power_gauge=("nvidia_gpu_power_usage_milliwatts", 1e-3),
    ),
    # `slurmgpu collect --textfile` scraped by node_exporter (templates/collect.prom.j2)
    "slurmgpu": PrometheusSchema(
        name="slurmgpu",
        job_label="jobid",
        util_metrics=(("slurmgpu_gpu_utilization_percent", 1.0),),
        mem_used_metric="slurmgpu_gpu_memory_used_bytes",
        mem_unit_bytes=1.0,
        mem_total_metrics=("slurmgpu_gpu_memory_total_bytes",),
        device_labels=("node", "gpu", "gpu_instance"),
    ),
}


def schema(
    name: str = "dcgm",
    *,
    job_label: str | None = None,
    util_metric: str | None = None,
    mem_used_metric: str | None = None,
    cluster_label: str | None = None,
) -> PrometheusSchema:
    """A named schema with the site's overrides (KeyError for an unknown name)."""
    base = SCHEMAS[name]
    changes: dict[str, object] = {}
    if job_label:
        changes["job_label"] = job_label
    if util_metric:
        changes["util_metrics"] = ((util_metric, base.util_metrics[0][1]),)
    if mem_used_metric:
        changes["mem_used_metric"] = mem_used_metric
    if cluster_label is not None:
        changes["cluster_label"] = cluster_label or None
    return replace(base, **changes)


class PrometheusError(Exception):
    """One request failed (HTTP, timeout, an error answer); carries the warning kind."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class _Window:
    run: RunRef
    end_epoch: int
    duration_s: int


@dataclass
class _Device:
    util_pct: float | None = None
    util_rank: int = 99  # which of schema.util_metrics gave util_pct (lower wins)
    mem_used: float | None = None
    mem_total: float = 0.0
    mem_total_parts: int = 0
    energy_j: float | None = None
    energy_estimated: bool = False
    counter_resets: int = 0
    profile: str | None = None  # MIG profile, where the series say


class PrometheusSource:
    """Runs' GPU use from Prometheus' HTTP API (`/api/v1/query`, POST, batched)."""

    name = "prometheus"

    def __init__(
        self,
        url: str,
        *,
        schema: PrometheusSchema | None = None,
        headers: Sequence[tuple[str, str]] = (),
        timeout_s: float = DEFAULT_TIMEOUT_S,
        batch_size: int = DEFAULT_BATCH,
        max_bytes: int = DEFAULT_MAX_BYTES,
        now: datetime | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.max_bytes = max_bytes
        self.schema = schema or SCHEMAS["dcgm"]
        self.headers = list(headers)
        self.timeout_s = timeout_s
        self.batch_size = max(1, batch_size)
        self.now = now
        self.warnings: list[MeasureWarning] = []
        self.requests = 0
        self.unmeasured: list[str] = []  # job ids Prometheus had no series for

    # -- the interface ------------------------------------------------------------------
    def measures(self, runs: list[RunRef]) -> list[JobGpuMeasure]:
        out: list[JobGpuMeasure] = []
        failed_in_a_row = 0
        for batch in self._batches([w for r in runs if (w := self._window(r)) is not None]):
            ids = tuple(w.run.job_id for w in batch)
            if failed_in_a_row >= MAX_FAILED_IN_A_ROW:
                # a server that is down would cost a timeout per batch: name the runs, move on
                message = f"not asked: {failed_in_a_row} requests in a row failed"
                self.warnings.append(MeasureWarning(self.name, "skipped", message, ids))
                continue
            try:
                devices = self._query_batch(batch)
            except PrometheusError as exc:
                failed_in_a_row += 1
                self.warnings.append(MeasureWarning(self.name, exc.kind, str(exc), ids))
                continue
            failed_in_a_row = 0
            for w in batch:
                measure = self._measure(w.run, devices.get(w.run.job_id, {}))
                if measure is not None:
                    out.append(measure)
        return out

    # -- windows and batches ------------------------------------------------------------
    def _window(self, run: RunRef) -> _Window | None:
        if run.start is None or run.gpus <= 0:
            return None  # never started, or no GPU: nothing to ask for
        end = run.end or (self.now or datetime.now(UTC).replace(tzinfo=None))
        start_epoch, end_epoch = _epoch(run.start), _epoch(end)
        return _Window(run, end_epoch, max(1, end_epoch - start_epoch))

    def _batches(self, windows: list[_Window]) -> list[list[_Window]]:
        """Up to `batch_size` windows per request, no job id twice in one request."""
        batches: list[list[_Window]] = []
        for w in sorted(windows, key=lambda w: w.end_epoch):
            for batch in batches[-4:]:  # recent batches only: stays linear in the run count
                ids = {x.run.job_id for x in batch}
                if len(batch) < self.batch_size and w.run.job_id not in ids:
                    batch.append(w)
                    break
            else:
                batches.append([w])
        return batches

    # -- queries ------------------------------------------------------------------------
    def _query_batch(self, batch: list[_Window]) -> dict[str, dict[tuple[str, ...], _Device]]:
        s = self.schema
        at = max(w.end_epoch for w in batch)
        devices: dict[str, dict[tuple[str, ...], _Device]] = defaultdict(dict)
        negative: dict[str, set[str]] = defaultdict(set)  # metric -> jobs with a value < 0

        def each(func: str, metric: str, times_duration: bool = False):
            expr = self._expr(func, metric, batch, at, times_duration)
            for labels, value in self.query(expr, at):
                job = labels.get(s.job_label)
                if job is None or not math.isfinite(value):
                    continue  # NaN (no sample in the window) or +-Inf: nothing to average
                if value < 0:  # no utilization or memory is negative: a broken exporter
                    negative[metric].add(job)
                    continue
                key = tuple(labels.get(k, "") for k in s.device_labels)
                dev = devices[job].setdefault(key, _Device())
                if s.mig_profile_label and labels.get(s.mig_profile_label):
                    dev.profile = labels[s.mig_profile_label]
                yield dev, value

        for rank, (metric, factor) in enumerate(s.util_metrics):
            for dev, value in each("avg_over_time", metric):
                if rank < dev.util_rank:
                    dev.util_pct, dev.util_rank = value * factor, rank
        for dev, value in each("max_over_time", s.mem_used_metric):
            dev.mem_used = value
        for metric in s.mem_total_metrics:
            for dev, value in each("last_over_time", metric):
                dev.mem_total += value
                dev.mem_total_parts += 1
        self._energy(batch, each)
        for metric, jobs in sorted(negative.items()):
            message = f"negative {metric} values left out (not averaged in)"
            ordered = tuple(sorted(jobs, key=lambda j: (len(j), j)))
            self.warnings.append(MeasureWarning(self.name, "invalid", message, ordered))
        return devices

    def _energy(self, batch: list[_Window], each) -> None:
        """Each device's energy over its run's window: the counter's increase, else the mean
        power times the window (an estimate); resets counted for a warning."""
        s = self.schema
        if s.energy_counter is not None:
            metric, factor = s.energy_counter
            for dev, value in each("increase", metric):
                dev.energy_j = value * factor
            for dev, value in each("resets", metric):
                dev.counter_resets = int(value)
        if s.power_gauge is not None:
            metric, factor = s.power_gauge
            # the mean power times each run's own window length, in the expression
            for dev, value in each("avg_over_time", metric, times_duration=True):
                if dev.energy_j is None:
                    dev.energy_j, dev.energy_estimated = value * factor, True

    def _expr(
        self, func: str, metric: str, batch: list[_Window], at: int, times_duration: bool = False
    ) -> str:
        parts = []
        for w in batch:
            matchers = [f'{self.schema.job_label}="{_quote(w.run.job_id)}"']
            if self.schema.cluster_label and w.run.cluster:
                matchers.append(f'{self.schema.cluster_label}="{_quote(w.run.cluster)}"')
            offset = at - w.end_epoch
            shift = f" offset {offset}s" if offset > 0 else ""
            part = f"{func}({metric}{{{','.join(matchers)}}}[{w.duration_s}s]{shift})"
            parts.append(f"({part} * {w.duration_s})" if times_duration else part)
        return " or ".join(parts)

    def query(self, expr: str, at: int) -> list[tuple[dict[str, str], float]]:
        """One instant query: [(labels, value)]; PrometheusError on any failure.

        The whole request (connect, headers, body) has `timeout_s`, the answer at most
        `max_bytes`; an answer of the wrong shape is refused whole ("malformed"), a result
        entry of the wrong shape is left out and counted in one warning."""
        data = self.query_data(expr, at)
        if data.get("resultType") != "vector":
            got = data.get("resultType")
            raise PrometheusError("malformed", f"{self.url}: expected a vector, got {got!r}")
        result = data.get("result", [])
        if not isinstance(result, list):
            raise PrometheusError("malformed", f"{self.url}: 'result' is not a list")
        out: list[tuple[dict[str, str], float]] = []
        bad = 0
        for entry in result:
            pair = _sample(entry)
            if pair is None:
                bad += 1
            else:
                out.append(pair)
        if bad:
            message = f"{bad} of {len(result)} results of the wrong shape, left out"
            self.warnings.append(MeasureWarning(self.name, "malformed", message))
        return out

    def query_data(self, expr: str, at: int) -> dict:
        """One instant query's `data` (any result type), checked to be an object;
        PrometheusError on any failure (same deadline and size limit as `query`)."""
        body = urllib.parse.urlencode(
            {"query": expr, "time": str(at), "timeout": f"{self.timeout_s:g}s"}
        ).encode()
        headers = [("Content-Type", "application/x-www-form-urlencoded"), *self.headers]
        self.requests += 1
        try:
            answer = http.post(
                f"{self.url}/api/v1/query",
                body,
                headers,
                deadline_s=self.timeout_s,
                max_bytes=self.max_bytes,
            )
        except http.HttpTimeout as exc:
            raise PrometheusError("timeout", f"{self.url}: {exc}") from exc
        except http.HttpTooLarge as exc:
            raise PrometheusError("too-large", f"{self.url}: {exc}") from exc
        except http.HttpError as exc:
            raise PrometheusError("http", f"{self.url}: {exc}") from exc
        doc = _json(answer.body)
        if answer.status >= 300:
            error = doc.get("error") if isinstance(doc, dict) else None
            detail = str(error) if isinstance(error, str) and error else answer.reason
            raise PrometheusError("http", f"{self.url}: HTTP {answer.status}: {_short(detail)}")
        if doc is _NOT_JSON:
            raise PrometheusError("malformed", f"{self.url}: answer is not JSON")
        return self._data(doc)

    def _data(self, doc: object) -> dict:
        """The `data` object of a successful answer, checked by shape; warnings kept."""
        if not isinstance(doc, dict):
            raise PrometheusError("malformed", f"{self.url}: answer is not a JSON object")
        if doc.get("status") != "success":
            kind, error = doc.get("errorType", "error"), doc.get("error", "no error text")
            raise PrometheusError("http", f"{self.url}: {_short(f'{kind}: {error}')}")
        notes = doc.get("warnings") or []
        for text in notes if isinstance(notes, list) else [notes]:
            self.warnings.append(MeasureWarning(self.name, "prometheus-warning", _short(text)))
        data = doc.get("data")
        if not isinstance(data, dict):
            got = type(data).__name__
            raise PrometheusError("malformed", f"{self.url}: expected a data object, got {got}")
        return data

    # -- one run ------------------------------------------------------------------------
    def _measure(
        self, run: RunRef, devices: dict[tuple[str, ...], _Device]
    ) -> JobGpuMeasure | None:
        if not devices:
            self.unmeasured.append(run.job_id)
            return None
        unit = self.schema.mem_unit_bytes / MIB
        expected = math.ceil(run.gpus) if run.gpus else 0
        if len(devices) < expected:
            self.warnings.append(
                MeasureWarning(
                    self.name,
                    "partial",
                    f"series for {len(devices)} of {expected} GPUs",
                    (run.job_id,),
                )
            )
        utils = [d.util_pct for d in devices.values() if d.util_pct is not None]
        used = [d.mem_used for d in devices.values() if d.mem_used is not None]
        full = len(self.schema.mem_total_metrics)
        totals = [d.mem_total for d in devices.values() if d.mem_total_parts == full]
        energy, estimated = self._run_energy(run, devices, expected)
        return JobGpuMeasure(
            job_id=run.job_id,
            source="prometheus",
            gpus_measured=len(devices),
            util_mean_pct=round(sum(utils) / len(utils), 2) if utils else None,
            mem_used_max_mib=round(max(used) * unit, 1) if used else None,
            gpu_memory_mib=round(max(totals) * unit, 1) if totals else None,
            cluster=run.cluster or None,
            start=run.start,
            energy_j=energy,
            energy_estimated=estimated,
        )

    def _run_energy(
        self, run: RunRef, devices: dict[tuple[str, ...], _Device], expected: int
    ) -> tuple[float | None, bool]:
        """The run's energy (J) when every device has one and no GPU lacks series."""
        from slurmgpu.measure.collector.energy import mig_share

        total, estimated = 0.0, False
        if len(devices) < expected:
            return None, False  # partial: already reported
        for dev in devices.values():
            if dev.energy_j is None:
                return None, False
            share = 1.0
            if dev.profile is not None:
                got = mig_share(dev.profile)
                if got is None:
                    return None, False
                share, estimated = got, True
            total += dev.energy_j * share
            estimated = estimated or dev.energy_estimated
        resets = sum(d.counter_resets for d in devices.values())
        if resets:
            message = (
                f"energy counter went down {resets} time(s) in the run (driver reload): "
                "counted from the value after each reset"
            )
            self.warnings.append(MeasureWarning(self.name, "energy", message, (run.job_id,)))
        return round(total, 3), estimated


def _epoch(moment: datetime) -> int:
    """Seconds since the epoch of a naive-UTC (or aware) datetime."""
    aware = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return int(aware.timestamp())


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


_NOT_JSON = object()


def _json(body: bytes) -> object:
    """The parsed answer, or _NOT_JSON (not UTF-8, not JSON, nested too deeply)."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return _NOT_JSON


def _sample(entry: object) -> tuple[dict[str, str], float] | None:
    """One vector entry `{"metric": {...}, "value": [time, "number"]}`, or None."""
    if not isinstance(entry, dict):
        return None
    labels, value = entry.get("metric"), entry.get("value")
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        return None
    if not isinstance(value, list) or len(value) != 2 or not isinstance(value[1], str):
        return None
    try:
        number = float(value[1])
    except ValueError:
        return None
    return labels, number


def _short(text: object, limit: int = 300) -> str:
    text = str(text)
    return text if len(text) <= limit else text[:limit] + "..."
