"""The Prometheus textfile of the last pass (node_exporter's textfile collector)."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from slurmgpu.autopilot.guardrails import nodes_today
from slurmgpu.autopilot.records import ACTIONS, ChangeRecord

STATUSES = (
    "killed",
    "waiting",
    "rolled-back",
    "applied",
    "proposed",
    "held",
    "would-apply",
    "would-propose",
    "failed",
)


def prom_text(result: Any, records: Sequence[ChangeRecord]) -> str:
    now = dt.datetime.fromisoformat(result.time)
    counts = Counter(r.action for r in records)
    today = nodes_today(records, now)  # the guardrail's count (aborted applies left out)
    lines = [
        "# HELP slurmgpu_autopilot_last_pass_timestamp_seconds When the last pass ran.",
        "# TYPE slurmgpu_autopilot_last_pass_timestamp_seconds gauge",
        f"slurmgpu_autopilot_last_pass_timestamp_seconds {now.timestamp():.0f}",
        "# HELP slurmgpu_autopilot_last_pass_status 1 for the last pass's outcome.",
        "# TYPE slurmgpu_autopilot_last_pass_status gauge",
    ]
    lines += [
        f'slurmgpu_autopilot_last_pass_status{{status="{s}"}} {int(result.status == s)}'
        for s in STATUSES
    ]
    lines += [
        "# HELP slurmgpu_autopilot_records_total Change log records by action.",
        "# TYPE slurmgpu_autopilot_records_total counter",
    ]
    lines += [
        f'slurmgpu_autopilot_records_total{{action="{a}"}} {counts.get(a, 0)}'
        for a in ACTIONS
        if a != "skip"
    ]
    lines += [
        "# HELP slurmgpu_autopilot_nodes_changed_24h Nodes applied in the last 24 hours.",
        "# TYPE slurmgpu_autopilot_nodes_changed_24h gauge",
        f"slurmgpu_autopilot_nodes_changed_24h {today}",
        "# HELP slurmgpu_autopilot_refusals Guardrail refusals of the last pass.",
        "# TYPE slurmgpu_autopilot_refusals gauge",
        f"slurmgpu_autopilot_refusals {len(result.refusals)}",
    ]
    return "\n".join(lines) + "\n"


def write_prom(path: Path, result: Any, records: Sequence[ChangeRecord]) -> None:
    from slurmgpu.util.atomic import write_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, prom_text(result, records), backup=False, mode=0o644)
