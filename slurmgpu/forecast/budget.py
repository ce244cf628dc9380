"""How long a history a forecast may hold: what the computation allocates, bounded.

A forecast holds every series (running and pending, 8 bytes a bucket each) for the whole
history and, one series at a time, fits and back-tests its models, whose design matrices
grow with the history plus the horizon and with the slot-of-day classes of the bucket
(`models.slot_classes`: one per bucket of a day down to 5-minute buckets, 96 below). Measured
with tracemalloc (`forecast_series`, one series, every model and the back-test's folds):
about 375 bytes a bucket at 1d, 915 at 1h, 2,600 at 15m, 2,350 at 1m and 6,700 at 5m; the
estimate below lies above each. A span whose estimate passes `MAX_BYTES` is refused before
anything of its size is allocated, with a coarser `--freq` that fits: a year of 1-minute
buckets once took 1.5 GB and a century of hours 0.9 GB (issue #33).
"""

from __future__ import annotations

from slurmgpu.errors import UsageError

MAX_BYTES = 512 * 2**20
MODEL_BASE = 512  # bytes per bucket of history + horizon, one series' models and folds
MODEL_PER_CLASS = 24  # ... and per slot-of-day class (the one-hot columns)
SERIES_BYTES = 16  # per bucket of history and series kept: running + pending
READ_BYTES = 64  # per bucket while a series is bucketed (edges, indices, sums, means)
# whatever the length: the level ridge's MAX_PAIRS (20,000) rows of about 12 columns plus the
# slot classes, a few copies; the trees' 12,000 rows
FIXED_BYTES = 4 * 2**20
FIXED_PER_CLASS = 20_000 * 8 * 4  # per column of the pairs (12 + the slot classes)
FINE_DAY = 288  # as models.FINE_DAY: finer buckets use 96 slot classes
FREQS = (
    60, 120, 180, 240, 300, 360, 480, 600, 720, 900, 1200, 1440, 1800, 3600, 7200, 10800,
    14400, 21600, 28800, 43200, 86400,
)  # fmt: skip


def slot_classes(freq_s: int) -> int:
    day = 86400 // freq_s
    return day if day <= FINE_DAY else 96


def need_bytes(buckets: int, steps: int, series: int, freq_s: int) -> int:
    """About the peak bytes of a forecast of `series` series of `buckets` buckets of
    `freq_s` seconds over a horizon of `steps` buckets."""
    model = MODEL_BASE + MODEL_PER_CLASS * slot_classes(freq_s)
    per_bucket = (buckets + steps) * model + buckets * (SERIES_BYTES * series + READ_BYTES)
    return FIXED_BYTES + FIXED_PER_CLASS * (12 + slot_classes(freq_s)) + per_bucket


def freq_text(freq_s: int) -> str:
    if freq_s % 86400 == 0:
        return f"{freq_s // 86400}d"
    if freq_s % 3600 == 0:
        return f"{freq_s // 3600}h"
    return f"{freq_s // 60}m"


def _span_text(span_s: float) -> str:
    days = span_s / 86400
    if days >= 730:
        return f"{days / 365.25:.1f} years"
    if days >= 2:
        return f"{days:.0f} days"
    return f"{span_s / 3600:.0f} hours"


def check_buckets(
    span_s: float, freq_s: int, horizon_s: int, series: int, *, where: str = "the history"
) -> None:
    """UsageError when `series` series over `span_s` seconds at `freq_s` (and a horizon of
    `horizon_s`) would need more than MAX_BYTES: it says the span, the frequency and the
    finest coarser `--freq` that fits (or to shorten the span when none does)."""
    series = max(series, 1)

    def need(f: int) -> int:
        return need_bytes(int(span_s // f) + 1, -(-horizon_s // f), series, f)

    if need(freq_s) <= MAX_BYTES:
        return
    fits = next((f for f in FREQS if f > freq_s and need(f) <= MAX_BYTES), None)
    head = (
        f"{where} spans {_span_text(span_s)}: at --freq {freq_text(freq_s)} that is "
        f"{int(span_s // freq_s)} buckets of {series} series and {-(-horizon_s // freq_s)} "
        "ahead, about "
        f"{need(freq_s) / 2**20:.0f} MiB, more than the forecast's {MAX_BYTES // 2**20} MiB"
    )
    if fits is not None:
        raise UsageError(
            f"{head}: use --freq {freq_text(fits)} or coarser, or a shorter history or horizon"
        )
    raise UsageError(f"{head}: give a shorter history (--since, --train-until) or --horizon")
