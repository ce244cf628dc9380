"""`forecast --demand-file CSV`: the demand series given directly, not derived from sacct.

The file has a header row with (at least) the columns `time`, `partition`, `gpus`, in any
order, e.g. a Prometheus range query exported as CSV or demand derived elsewhere:

    time,partition,gpus
    2025-11-03T00:00:00Z,gpu,12.5
    2025-11-03T00:01:00Z,gpu,13

`time` is ISO 8601 (UTC unless it carries an offset) or seconds since the epoch; `gpus` a
finite number >= 0 (GPU equivalents: running + pending, or whatever demand the site
measures). Each `--freq` bucket gets the mean of its samples; a bucket without a sample
carries the previous bucket's value forward (0 before a partition's first sample), and the
notes say how many were filled. There is no queue split: the pending part is 0.
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np

from slurmgpu.errors import SlurmgpuError
from slurmgpu.forecast.demand import SECOND, DemandSeries

COLUMNS = ("time", "partition", "gpus")
MAX_ROWS = 20_000_000
MAX_BUCKETS = 10_000_000


class DemandFileError(SlurmgpuError):
    """A demand file that cannot be read as a demand series; names the file and line."""


@dataclass(frozen=True)
class DemandFile:
    series: DemandSeries
    notes: tuple[str, ...]


def _time(text: str, where: str) -> float:
    value = text.strip()
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
        try:
            t = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise DemandFileError(
                f"{where}: time {text[:40]!r} is not ISO 8601 or epoch seconds"
            ) from None
        seconds = (t if t.tzinfo else t.replace(tzinfo=UTC)).timestamp()
    if not math.isfinite(seconds) or not 0 <= seconds < 253402300800:  # year 1970..9999
        raise DemandFileError(f"{where}: time {text[:40]!r} is out of range")
    return seconds


def _gpus(text: str, where: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise DemandFileError(f"{where}: gpus {text[:40]!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise DemandFileError(f"{where}: gpus {text[:40]!r}: use a finite number >= 0")
    return value


def read_rows(path: str | os.PathLike[str]) -> tuple[list[float], list[str], list[float]]:
    """(times, partitions, gpus) of the file's rows, in file order; DemandFileError naming the
    file and line for anything that is not a demand row."""
    name = os.fspath(path)
    with open(name, encoding="utf-8", newline="") as fh:
        try:
            return _rows(csv.reader(fh), name)
        except csv.Error as exc:
            raise DemandFileError(f"{name}: not CSV: {exc}") from None


def _rows(reader, name: str) -> tuple[list[float], list[str], list[float]]:
    """The rows after the header (`read_rows`)."""
    header = next(reader, None)
    if header is None:
        raise DemandFileError(f"{name}: empty; want a header row {','.join(COLUMNS)}")
    cols = [h.strip().lower() for h in header]
    missing = [c for c in COLUMNS if c not in cols]
    if missing:
        raise DemandFileError(f"{name}: no column {', '.join(missing)} in the header row")
    at = [cols.index(c) for c in COLUMNS]
    times, parts, gpus = [], [], []
    for row in reader:
        where = f"{name} line {reader.line_num}"
        if not row or all(not x.strip() for x in row):
            continue
        if len(row) < len(cols):
            raise DemandFileError(f"{where}: {len(row)} fields, the header has {len(cols)}")
        part = row[at[1]].strip()
        if not part or not part.isprintable():
            raise DemandFileError(f"{where}: partition {part[:40]!r} is empty or unprintable")
        times.append(_time(row[at[0]], where))
        parts.append(part)
        gpus.append(_gpus(row[at[2]], where))
        if len(times) > MAX_ROWS:
            raise DemandFileError(f"{name}: more than {MAX_ROWS} rows")
    if not times:
        raise DemandFileError(f"{name}: no demand rows after the header")
    return times, parts, gpus


def demand_file_series(
    path: str | os.PathLike[str],
    freq_s: int,
    since: datetime | None = None,
    until: datetime | None = None,
) -> DemandFile:
    """The file's demand per partition on the UTC-aligned `freq_s` grid: from the bucket of
    the first sample (or `since`, rounded up to a bucket) to the end of the last sample's
    bucket (or `until`, rounded down); samples outside it are not used."""
    times, parts, gpus = read_rows(path)
    t = np.asarray(times)
    g = np.asarray(gpus)
    p = np.asarray(parts, dtype=object)
    lo = (
        math.ceil(since.timestamp() / freq_s) * freq_s
        if since
        else math.floor(t.min() / freq_s) * freq_s
    )
    hi = (
        math.floor(until.timestamp() / freq_s) * freq_s
        if until
        else (math.floor(t.max() / freq_s) + 1) * freq_s
    )
    n = (hi - lo) // freq_s
    if n > MAX_BUCKETS:
        raise DemandFileError(f"{os.fspath(path)}: {n} buckets of {freq_s}s: use a larger --freq")
    keep = (t >= lo) & (t < hi)
    if n <= 0 or not keep.any():
        raise DemandFileError(f"{os.fspath(path)}: no samples between --since and --train-until")
    t, g, p = t[keep], g[keep], p[keep]
    idx = ((t - lo) // freq_s).astype(np.int64)
    running, pending, notes = {}, {}, []
    for part in sorted(set(p.tolist())):
        mine = p == part
        y, filled = _bucket_means(idx[mine], g[mine], n)
        running[part], pending[part] = y, np.zeros(n)
        if filled:
            notes.append(
                f"{part}: {filled} of {n} buckets had no sample in the demand file; the "
                "previous bucket's value is carried forward (0 before the first sample)"
            )
    times64 = (np.datetime64(0, "s") + (lo + freq_s * np.arange(n)) * SECOND).astype(
        "datetime64[s]"
    )
    return DemandFile(DemandSeries(times64, freq_s, running, pending), tuple(notes))


def _bucket_means(idx: np.ndarray, gpus: np.ndarray, n: int) -> tuple[np.ndarray, int]:
    """Mean of the samples in each of n buckets; an empty bucket carries the last value."""
    total = np.bincount(idx, weights=gpus, minlength=n)
    count = np.bincount(idx, minlength=n)
    has = count > 0
    last = np.maximum.accumulate(np.where(has, np.arange(n), -1))
    mean = np.where(has, total / np.maximum(count, 1), 0.0)
    out = np.where(last >= 0, mean[np.maximum(last, 0)], 0.0)
    return out, int((~has).sum())
