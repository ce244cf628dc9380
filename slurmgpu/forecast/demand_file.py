"""`forecast --demand-file CSV`: the demand series given directly, not derived from sacct.

The file has a header row with (at least) the columns `time`, `partition`, `gpus`, in any
order, e.g. a Prometheus range query exported as CSV or demand derived elsewhere:

    time,partition,gpus
    2025-11-03T00:00:00Z,gpu,12.5
    2025-11-03T00:01:00Z,gpu,13

`time` is ISO 8601 (UTC unless it carries an offset) or seconds since the epoch; `gpus` a
finite number >= 0 (GPU equivalents: running + pending, or whatever demand the site
measures), in ASCII digits (`util.numbers.real`: not `nan`, `1_0`, `+1` or another script's
digits). A UTF-8 byte order mark is skipped; a column named twice in the header, or a row with
more (non-empty) fields than the header, is refused. Each `--freq` bucket gets the mean of
its samples; a bucket without a sample carries the previous bucket's value forward (0
before a partition's first sample), and the notes say how many were filled. There is no
queue split: the pending part is 0.
"""

from __future__ import annotations

import csv
import math
import os
import stat
from array import array
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np

from slurmgpu.errors import SlurmgpuError
from slurmgpu.forecast import budget
from slurmgpu.forecast.demand import SECOND, DemandSeries
from slurmgpu.util import numbers

COLUMNS = ("time", "partition", "gpus")
MAX_ROWS = 10_000_000
MAX_GPUS = 10_000_000  # GPU equivalents of one sample: beyond any cluster, within float range
_BLANK = " \t"  # what is stripped around a field (`1, gpu, 3`); no other space


class DemandFileError(SlurmgpuError):
    """A demand file that cannot be read as a demand series; names the file and line."""


@dataclass(frozen=True)
class DemandFile:
    series: DemandSeries
    notes: tuple[str, ...]


def _time(text: str, where: str) -> float:
    value = text.strip(_BLANK)
    if numbers.REAL.fullmatch(value):
        seconds = float(value)
    else:
        if not value.isascii():  # fromisoformat is strict today; say so whatever it does
            raise DemandFileError(f"{where}: time {text[:40]!r} is not ISO 8601 or epoch seconds")
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
    value = text.strip(_BLANK)
    if not numbers.REAL.fullmatch(value):
        raise DemandFileError(
            f"{where}: gpus {text[:40]!r} is not a number (ASCII digits, e.g. 12 or 12.5)"
        )
    try:
        return numbers.real(value, 0, MAX_GPUS, "gpus")
    except ValueError:
        raise DemandFileError(
            f"{where}: gpus {text[:40]!r}: use a finite number >= 0 (at most {MAX_GPUS:g})"
        ) from None


@dataclass(frozen=True)
class Rows:
    """The file's rows in file order: times (epoch seconds), partition numbers into `names`,
    GPUs; numpy arrays (8 + 4 + 8 bytes a row, not Python objects)."""

    times: np.ndarray
    part: np.ndarray
    gpus: np.ndarray
    names: tuple[str, ...]


def read_rows(path: str | os.PathLike[str]) -> Rows:
    """The file's rows; DemandFileError naming the file and line for anything that is not a
    demand row. A UTF-8 byte order mark before the header is skipped."""
    name = os.fspath(path)
    try:
        regular = stat.S_ISREG(os.stat(name).st_mode)
    except OSError as exc:
        raise DemandFileError(f"{name}: cannot read: {exc.strerror or exc}") from None
    if not regular:  # /dev/zero, a FIFO: read without end (or wait for a writer)
        raise DemandFileError(f"{name}: not a regular file (a device, FIFO or socket)")
    with open(name, encoding="utf-8-sig", newline="") as fh:
        try:
            return _rows(csv.reader(_lines(fh, name)), name)
        except csv.Error as exc:
            raise DemandFileError(f"{name}: not CSV: {exc}") from None


MAX_LINE = 1 << 20  # characters of one line: a demand row is a few dozen


def _lines(fh, name: str):
    """The file's lines, none longer than MAX_LINE (a file without line ends is not read
    whole into one line)."""
    number = 0
    while line := fh.readline(MAX_LINE + 1):
        number += 1
        if len(line) > MAX_LINE:
            raise DemandFileError(f"{name} line {number}: longer than {MAX_LINE} characters")
        yield line


def _header(header: list[str] | None, name: str) -> tuple[int, list[int]]:
    """(the header's width, the index of each of COLUMNS); DemandFileError for a header
    without them or with a column named twice."""
    if header is None:
        raise DemandFileError(f"{name}: empty; want a header row {','.join(COLUMNS)}")
    cols = [h.strip(_BLANK).lower() for h in header]
    twice = sorted({c for c in cols if c and cols.count(c) > 1})
    if twice:
        raise DemandFileError(
            f"{name}: column {twice[0]!r} appears twice in the header row "
            "(which one is meant is not known)"
        )
    missing = [c for c in COLUMNS if c not in cols]
    if missing:
        raise DemandFileError(f"{name}: no column {', '.join(missing)} in the header row")
    return len(cols), [cols.index(c) for c in COLUMNS]


def _rows(reader, name: str) -> Rows:
    """The rows after the header (`read_rows`)."""
    width, at = _header(next(reader, None), name)
    times, gpus = array("d"), array("d")
    parts, names = array("i"), {}
    for row in reader:
        where = f"{name} line {reader.line_num}"
        if not row or all(not x.strip() for x in row):
            continue
        if len(row) != width and (len(row) < width or any(x.strip() for x in row[width:])):
            raise DemandFileError(
                f"{where}: {len(row)} fields, the header has {width}"
                + (" (a decimal comma? write 12.5, not 12,5)" if len(row) > width else "")
            )
        part = row[at[1]].strip(_BLANK)
        if not part or not part.isprintable():
            raise DemandFileError(f"{where}: partition {part[:40]!r} is empty or unprintable")
        times.append(_time(row[at[0]], where))
        parts.append(names.setdefault(part, len(names)))
        gpus.append(_gpus(row[at[2]], where))
        if len(times) > MAX_ROWS:
            raise DemandFileError(f"{name}: more than {MAX_ROWS} rows")
    if not times:
        raise DemandFileError(f"{name}: no demand rows after the header")
    return Rows(
        np.frombuffer(times, dtype=float),
        np.frombuffer(parts, dtype=np.int32),
        np.frombuffer(gpus, dtype=float),
        tuple(names),
    )


def demand_file_series(
    path: str | os.PathLike[str],
    freq_s: int,
    since: datetime | None = None,
    until: datetime | None = None,
    *,
    horizon_s: int = 0,
) -> DemandFile:
    """The file's demand per partition on the UTC-aligned `freq_s` grid: from the bucket of
    the first sample (or `since`, rounded up to a bucket) to the end of the last sample's
    bucket (or `until`, rounded down); samples outside it are not used. A grid whose
    forecast (with `horizon_s` ahead) would not fit the memory bound (`budget`) is a
    UsageError naming the span and a coarser `--freq`, before it is allocated."""
    rows = read_rows(path)
    t, g, p = rows.times, rows.gpus, rows.part
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
    keep = (t >= lo) & (t < hi)
    if n <= 0 or not keep.any():
        raise DemandFileError(f"{os.fspath(path)}: no samples between --since and --train-until")
    t, g, p = t[keep], g[keep], p[keep]
    present = np.unique(p)
    budget.check_buckets(hi - lo, freq_s, horizon_s, len(present), where=os.fspath(path))
    idx = ((t - lo) // freq_s).astype(np.int64)
    running, pending, notes = {}, {}, []
    for k in sorted(present.tolist(), key=lambda k: rows.names[k]):
        part = rows.names[k]
        mine = p == k
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
