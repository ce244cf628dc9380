"""What a measure source could not do, as data the report can count and show."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MeasureWarning:
    """One run (or batch of runs) a source could not measure fully, and why.

    `job_ids` is empty when the problem is not tied to runs (e.g. a spool directory that
    cannot be listed). `kind` is a stable word to count by: "undecodable", "http", "timeout",
    "prometheus-warning", "unreadable", "partial", "skipped".
    """

    source: str
    kind: str
    message: str
    job_ids: tuple[str, ...] = ()

    def __str__(self) -> str:
        jobs = ""
        if self.job_ids:
            shown = ",".join(self.job_ids[:5]) + ("..." if len(self.job_ids) > 5 else "")
            jobs = f" (jobs {shown})"
        return f"{self.source}: {self.kind}: {self.message}{jobs}"
