"""The analysis window: what it is when not given, and which runs are in it.

With dump files and no explicit bounds, the window is the files' whole span: from the first
Submit/Start to one second past the last time any row names (End, Start or Submit), so a
job ending at the last timestamp and a job submitted then are both inside it. Live queries
default to the last 7 days (`pipeline.live_window`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import pandas as pd

ONE_SECOND = np.timedelta64(1, "s")


@dataclass(frozen=True)
class Window:
    """The analysis window [since, until) as naive-UTC numpy datetimes."""

    since: np.datetime64
    until: np.datetime64

    @property
    def hours(self) -> float:
        return float((self.until - self.since) / ONE_SECOND) / 3600.0

    def datetimes(self) -> tuple[datetime, datetime]:
        """(since, until) as aware UTC datetimes (the document's `Window`)."""

        def aware(t: np.datetime64) -> datetime:
            return pd.Timestamp(t).to_pydatetime().replace(tzinfo=UTC)

        return aware(self.since), aware(self.until)


def to64(t: datetime) -> np.datetime64:
    """An aware or naive-UTC datetime -> naive-UTC datetime64[s]."""
    if t.tzinfo is not None:
        t = t.astimezone(UTC).replace(tzinfo=None)
    return np.datetime64(t, "s")


def dt_column(frame: pd.DataFrame, col: str) -> np.ndarray:
    """A timestamp column as datetime64[s] with NaT for unknown."""
    return frame[col].to_numpy(dtype="datetime64[s]", na_value=np.datetime64("NaT"))


def window_for(frame: pd.DataFrame, since: datetime | None, until: datetime | None) -> Window:
    """The given bounds, or (for files) the span the data covers, last second included."""
    starts, submits = dt_column(frame, "start"), dt_column(frame, "submit")
    known = np.concatenate([starts[~np.isnat(starts)], submits[~np.isnat(submits)]])
    lo = to64(since) if since else (known.min() if len(known) else np.datetime64(0, "s"))
    if until:
        hi = to64(until)
    else:
        times = np.concatenate([dt_column(frame, c) for c in ("run_end", "end", "start", "submit")])
        times = times[~np.isnat(times)]
        hi = (times.max() if len(times) else lo) + ONE_SECOND
    if hi <= lo:
        hi = lo + ONE_SECOND
    return Window(lo, hi)


def active_in(frame: pd.DataFrame, window: Window) -> np.ndarray:
    """Runs that overlap the window, and jobs submitted before its end that never started."""
    start, end = dt_column(frame, "start"), dt_column(frame, "run_end")
    submit, fin = dt_column(frame, "submit"), dt_column(frame, "end")
    ran = ~np.isnat(start) & (start < window.until) & (np.isnat(end) | (end >= window.since))
    never = (
        np.isnat(start)
        & (np.isnat(submit) | (submit < window.until))
        & (np.isnat(fin) | (fin >= window.since))
    )
    return ran | never
