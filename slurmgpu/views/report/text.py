"""The terminal report: fixed-width tables over the shared rows of `tables.py`."""

from __future__ import annotations

from slurmgpu.accounting.document import (
    AnalysisDocument,
    iso_utc,
)
from slurmgpu.views.report.tables import (
    _GROUP_SECTIONS,
    ACCEL_HEADERS,
    FIT_PARTITION_HEADERS,
    REJECTED_SHOWN,
    TOP_N,
    _by_count,
    _effect_text,
    _evidence_items,
    _fit_partition_rows,
    _fit_rows,
    _group_tables,
    _notes,
    _source_line,
    _totals_lines,
    accelerator_rows,
    energy_lines,
    energy_partition_rows,
    fidelity_text,
    fmt_gpu_hours,
    fmt_int,
    harm_text,
    left_cols,
    printable,
    replayed_text,
    text_table,
)


def render_text(analysis: AnalysisDocument) -> str:
    """Fixed-width tables for a person at a terminal."""
    window = analysis.window
    out = [
        f"slurmgpu report: {iso_utc(window.since)} .. {iso_utc(window.until)}",
        f"source: {_source_line(analysis.source)}; generated {iso_utc(analysis.generated_at)}",
        "",
        "Totals",
    ]
    totals = _totals_lines(analysis.totals) + energy_lines(analysis)
    label_w = max(len(label) for label, _ in totals)
    out += [f"  {label.ljust(label_w)}  {value}" for label, value in totals]
    out += [f"  note: {printable(note)}" for note in _notes(analysis)]
    energy_rows = energy_partition_rows(analysis)
    if len(energy_rows) > 1:
        out += ["", "GPU energy by partition"]
        table = text_table(["PARTITION", "KWH", "IDLE KWH"], energy_rows, left=1)
        out += ["  " + ln for ln in table.splitlines()]

    for title, key, name_key, capacity, limited in _GROUP_SECTIONS:
        groups = getattr(analysis, key)
        if key == "by_cluster" and len(groups) <= 1:
            continue  # one cluster: its row is the totals
        out += ["", title]
        if not groups:
            out.append("  (none)")
            continue
        tables, left_off = _group_tables(groups, name_key, capacity, TOP_N if limited else None)
        for i, (headers, rows) in enumerate(tables):
            out += [""] if i else []
            out += [
                "  " + ln for ln in text_table(headers, rows, left=left_cols(name_key)).splitlines()
            ]
        if left_off:
            out.append(f"  ... {left_off} more (see --format json)")

    fit = analysis.fit_fraction
    out += ["", "Would fit in a slice of their GPU (share of GPU jobs)"]
    out += [
        "  " + ln for ln in text_table(["SLICE", "JOBS", "GPU-HOURS"], _fit_rows(fit)).splitlines()
    ]
    if fit.basis:
        out.append(f"  basis: {printable(fit.basis)}")
    part_rows = _fit_partition_rows(analysis)
    if part_rows:
        out += ["", "  By partition"]
        out += ["  " + ln for ln in text_table(FIT_PARTITION_HEADERS, part_rows).splitlines()]
    if fit.unknown_runs:
        out.append(
            f"  shares are over the {fmt_int(fit.known_runs)} GPU runs with a known need; "
            f"{fmt_int(fit.unknown_runs)} runs "
            f"({fmt_gpu_hours(fit.unknown_gpu_hours)} GPU-hours) have an unknown need"
        )

    if analysis.by_accelerator:
        out += ["", "By accelerator (device-hours: a MIG slice, an AMD partition, an NPU = 1)"]
        table = text_table(ACCEL_HEADERS, accelerator_rows(analysis), left=3)
        out += ["  " + ln for ln in table.splitlines()]

    rejected = analysis.rejected
    n_rejected = analysis.totals.rows_rejected
    out += ["", f"Rejected rows: {fmt_int(n_rejected, str(len(rejected)))}"]
    reasons = analysis.totals.rejected_reasons
    if reasons:
        out.append(
            "  by reason: "
            + printable(", ".join(f"{k} {v}" for k, v in sorted(reasons.items(), key=_by_count)))
        )
    for row in rejected[:REJECTED_SHOWN]:
        out.append(f"  {printable(row.file)}:{row.line}: {printable(row.reason)}")
    if len(rejected) > REJECTED_SHOWN:
        out.append(f"  ... {len(rejected) - REJECTED_SHOWN} more (see --format json)")

    out += _recommendation_lines(analysis.recommendations)
    return "\n".join(out) + "\n"


def _recommendation_lines(recs: tuple) -> list[str]:
    """The Recommendations section: each with its harm mark, evidence and effects."""
    out = ["", "Recommendations"]
    if not recs:
        out.append("  none")
    for i, rec in enumerate(recs, 1):
        harm = harm_text(rec.replayed)
        fidelity = fidelity_text(rec.replayed)
        mark = "[not advised: its replay shows harm] " if harm else ""
        if fidelity:
            mark = "[not advised: the replay does not reproduce its partition] "
        out.append(f"  {i}. {mark}{printable(rec.title)}")
        if fidelity:
            out.append(f"     {printable(fidelity)}")
        if harm:
            out.append(f"     {printable(harm)}")
        if rec.detail:
            out.append(f"     {printable(rec.detail)}")
        evidence = _evidence_items(rec.evidence.to_json())
        if evidence:
            out.append(f"     evidence: {printable(', '.join(evidence))}")
        out.append(
            f"     estimated effect: {printable(_effect_text(rec.estimated_effect.to_json()))}"
        )
        if rec.replayed is not None:
            out.append(f"     replayed: {printable(replayed_text(rec.replayed))}")
    return out
