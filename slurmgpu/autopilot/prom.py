"""The Prometheus textfile of the last pass (node_exporter's textfile collector)."""

from __future__ import annotations

import datetime as dt
import math
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


def prom_text(result: Any, records: Sequence[ChangeRecord], calibration: Any = None) -> str:
    """The gauges of a pass; `calibration` is the pass's `advice.calibrate.Calibration` (None
    when the pass ran no replay: the calibration family is then left out)."""
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
    lines += _pending_lines(pending_proposal(records, now))
    lines += _calibration_lines(calibration)
    return "\n".join(lines) + "\n"


def _label(value: object) -> str:
    """A label value escaped as the exposition format requires (backslash, quote, newline)."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float | None) -> str | None:
    return None if value is None or not math.isfinite(value) else f"{value:g}"


def pending_proposal(records: Sequence[ChangeRecord], now: dt.datetime) -> ChangeRecord | None:
    """The last proposal not applied and younger than a day (older ones expire unapplied)."""
    applied = {r.id for r in records if r.action == "apply"}
    for r in reversed(records):
        if r.action == "propose" and r.id not in applied:
            return r if (now - r.when) <= dt.timedelta(days=1) else None
    return None


def _pending_lines(prop: ChangeRecord | None) -> list[str]:
    """The pending proposal: when, its replayed score, and the calibrated replay's predicted
    mean wait per partition before/after with the range of its change (perturbed replays)."""
    lines = [
        "# HELP slurmgpu_autopilot_pending_proposals Proposals waiting for approval (0 or 1).",
        "# TYPE slurmgpu_autopilot_pending_proposals gauge",
        f"slurmgpu_autopilot_pending_proposals {int(prop is not None)}",
    ]
    if prop is None:
        return lines
    pid = f'proposal="{_label(prop.id)}"'
    lines += [
        "# HELP slurmgpu_autopilot_pending_proposal_timestamp_seconds When it was proposed.",
        "# TYPE slurmgpu_autopilot_pending_proposal_timestamp_seconds gauge",
        f"slurmgpu_autopilot_pending_proposal_timestamp_seconds{{{pid}}} "
        f"{prop.when.timestamp():.0f}",
        "# HELP slurmgpu_autopilot_pending_proposal_score Its replayed score (negative: a gain).",
        "# TYPE slurmgpu_autopilot_pending_proposal_score gauge",
    ]
    if (score := _number(prop.score)) is not None:
        lines.append(f"slurmgpu_autopilot_pending_proposal_score{{{pid}}} {score}")
    waits, changes = [], []
    wait_name = "slurmgpu_autopilot_pending_predicted_mean_wait_seconds"
    change_name = "slurmgpu_autopilot_pending_predicted_wait_change_seconds"
    for e in prop.predicted:
        part = f'{pid},partition="{_label(e.partition)}"'
        for when, value in (("before", e.mean_wait_before_s), ("after", e.mean_wait_after_s)):
            if (v := _number(value)) is not None:
                waits.append(f'{wait_name}{{{part},when="{when}"}} {v}')
        for bound, value in (("low", e.change_low_s), ("high", e.change_high_s)):
            if (v := _number(value)) is not None:
                changes.append(f'{change_name}{{{part},bound="{bound}"}} {v}')
    if waits:
        lines += [
            "# HELP slurmgpu_autopilot_pending_predicted_mean_wait_seconds Mean wait the "
            "calibrated replay predicts per partition, before and after the change.",
            "# TYPE slurmgpu_autopilot_pending_predicted_mean_wait_seconds gauge",
            *waits,
        ]
    if changes:
        lines += [
            "# HELP slurmgpu_autopilot_pending_predicted_wait_change_seconds Range (low, high) "
            "of the mean wait's change over the perturbed replays.",
            "# TYPE slurmgpu_autopilot_pending_predicted_wait_change_seconds gauge",
            *changes,
        ]
    return lines


def _calibration_lines(calibration: Any) -> list[str]:
    """Per partition: whether the baseline replay reproduces the record (advise acts only on
    calibrated partitions) and its mean wait / the recorded mean wait."""
    if calibration is None or not calibration.by_partition:
        return []
    ok, factors = [], []
    for p in calibration.by_partition:
        part = f'partition="{_label(p.partition)}"'
        ok.append(f"slurmgpu_autopilot_partition_calibrated{{{part}}} {int(p.calibrated)}")
        if (v := _number(p.mean_wait_factor)) is not None:
            factors.append(f"slurmgpu_autopilot_calibration_mean_wait_factor{{{part}}} {v}")
    lines = [
        "# HELP slurmgpu_autopilot_partition_calibrated 1 when the last pass's baseline replay "
        "reproduced the partition's record within the policy's tolerance, else 0.",
        "# TYPE slurmgpu_autopilot_partition_calibrated gauge",
        *ok,
    ]
    if factors:
        lines += [
            "# HELP slurmgpu_autopilot_calibration_mean_wait_factor Baseline replay's mean wait "
            "/ the recorded mean wait (1: exact).",
            "# TYPE slurmgpu_autopilot_calibration_mean_wait_factor gauge",
            *factors,
        ]
    return lines


def write_prom(
    path: Path, result: Any, records: Sequence[ChangeRecord], calibration: Any = None
) -> None:
    from slurmgpu.util.atomic import write_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, prom_text(result, records, calibration), backup=False, mode=0o644)
