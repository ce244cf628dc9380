"""`--since/--until` values: ISO dates/times (UTC unless an offset is given) or `7d`, `12h`."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from slurmgpu.errors import UsageError

_RELATIVE = re.compile(r"^(?P<n>\d+(?:\.\d+)?)(?P<unit>[smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_when(text: str, *, now: datetime, option: str = "--since") -> datetime:
    """`"7d"` -> now - 7 days; `"2026-12-01"` / `"2026-12-01T08:00"` -> that time in UTC."""
    value = text.strip()
    m = _RELATIVE.match(value)
    if m:
        return now - timedelta(seconds=float(m.group("n")) * _UNIT_S[m.group("unit")])
    if value == "now":
        return now
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"{option} {text!r}: use an ISO date/time (2026-12-01, 2026-12-01T08:00) "
            "or a relative age (30m, 12h, 7d, 2w)"
        ) from None
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)
