"""`--since/--until` values: ISO dates/times (UTC unless an offset is given) or `7d`, `12h`."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from slurmgpu.errors import UsageError

# ASCII digits only: a regex `\d` (and float()) also read `٣` or `３` as 3 (issue #33)
_RELATIVE = re.compile(r"(?P<n>[0-9]{1,12}(?:\.[0-9]{1,6})?)(?P<unit>[smhdw])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(2200, 1, 1, tzinfo=UTC)


def parse_when(text: str, *, now: datetime, option: str = "--since") -> datetime:
    """`"7d"` -> now - 7 days; `"2026-12-01"` / `"2026-12-01T08:00"` -> that time in UTC."""
    value = text.strip()
    m = _RELATIVE.fullmatch(value)
    if m:
        seconds = float(m.group("n")) * _UNIT_S[m.group("unit")]
        try:
            t = now - timedelta(seconds=seconds)
        except OverflowError:
            t = None
        if t is None or t < EARLIEST:
            raise UsageError(
                f"{option} {text!r}: reaches back before 1970, where no Slurm job can be"
            )
        return t
    if value == "now":
        return now
    try:
        if not value.isascii():
            raise ValueError(value)
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"{option} {text!r}: use an ISO date/time (2026-12-01, 2026-12-01T08:00) "
            "or a relative age (30m, 12h, 7d, 2w)"
        ) from None
    t = t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)
    if not EARLIEST <= t < LATEST:
        raise UsageError(f"{option} {text!r}: outside 1970..2200")
    return t


# a live window is cut into at most this many sacct calls (chunks grow beyond chunk_hours)
MAX_SACCT_CALLS = 1000


def sacct_calls(
    since: datetime, until: datetime, chunk_hours: float
) -> tuple[list[tuple[datetime, datetime]], float]:
    """The sub-windows of a live query (one sacct call each) and their length in hours:
    `chunk_hours`, or longer for a years-long window (at most MAX_SACCT_CALLS calls)."""
    hours = chunk_hours
    span_h = (until - since).total_seconds() / 3600
    if span_h / hours > MAX_SACCT_CALLS:  # a years-long window: fewer, larger calls
        hours = span_h / MAX_SACCT_CALLS
    return sub_windows(since, until, hours), hours


def sub_windows(since: datetime, until: datetime, hours: float) -> list[tuple[datetime, datetime]]:
    """[since, until) cut into consecutive pieces of at most `hours`."""
    step = timedelta(hours=hours)
    out = []
    a = since
    while a < until:
        b = min(a + step, until)
        out.append((a, b))
        a = b
    return out or [(since, until)]
