"""Reports from an accounting analysis: terminal text (`text.py`), JSON, self-contained HTML
(`html.py`), Prometheus (`prom.py`), around the tables they share (`tables.py`).

Pure functions from the typed `AnalysisDocument` (slurmgpu/accounting/document.py; its
`to_json()` is the schema in docs/accounting.md) to text. `None` means *unknown*: it is shown
as "unknown"/"n/a" and left out of the Prometheus file, never turned into 0.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from slurmgpu.accounting.document import AnalysisDocument
from slurmgpu.views.report.html import render_html
from slurmgpu.views.report.prom import check_prom_text, prom_label_value, render_prom
from slurmgpu.views.report.tables import (
    FIT_SLICES,
    FORMATS,
    HTML_TOP_N,
    REJECTED_SHOWN,
    TOP_N,
    fmt_duration,
    fmt_gpu_hours,
    fmt_int,
    fmt_percent,
    fmt_ratio,
    is_known,
    printable,
    replayed_text,
    text_table,
)
from slurmgpu.views.report.text import render_text
from slurmgpu.views.safe_text import neutralise


def render_report(doc: AnalysisDocument, fmt: str, idle: Any = None) -> str:
    """Render `doc` in one of `FORMATS` (with `idle`, an `IdleReport`: its section too)."""
    renderers: dict[str, Callable[[AnalysisDocument], str]] = {
        "text": render_text,
        "json": render_json,
        "html": render_html,
        "prom": render_prom,
    }
    try:
        renderer = renderers[fmt]
    except KeyError:
        raise ValueError(f"unknown report format {fmt!r} (one of {', '.join(FORMATS)})") from None
    text = renderer(doc)
    if idle is not None:
        from slurmgpu.views.idle import with_idle_section

        text = with_idle_section(text, idle, fmt)
    # text and HTML are read by people: a site string's bidi override must not reorder them
    # (Prometheus and JSON keep the values exact; their readers are programs)
    return neutralise(text) if fmt in ("text", "html") else text


def render_json(analysis: AnalysisDocument) -> str:
    """The document's `to_json()` (docs/accounting.md schema), strict JSON, one trailing
    newline."""
    text = json.dumps(analysis.to_json(), indent=2, ensure_ascii=False, allow_nan=False)
    return text + "\n"


__all__ = [
    "FIT_SLICES",
    "FORMATS",
    "HTML_TOP_N",
    "REJECTED_SHOWN",
    "TOP_N",
    "check_prom_text",
    "fmt_duration",
    "fmt_gpu_hours",
    "fmt_int",
    "fmt_percent",
    "fmt_ratio",
    "is_known",
    "printable",
    "prom_label_value",
    "render_html",
    "render_json",
    "render_prom",
    "render_report",
    "render_text",
    "replayed_text",
    "text_table",
]
