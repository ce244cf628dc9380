"""A recommendation's evidence and effect in human units for the text and HTML reports.

The JSON report keeps the raw numbers; people read `GPU-hours lost to preemption: 35.5 GPU-h`,
`share of allocated: 0.5 %`, `wait: p50 12 min, p95 2.1 h`, not `share_of_allocated=0.0049`.
Units follow the key's name, as the document names them (docs/architecture.md: names carry
their units): `*gpu_hours*` GPU-hours, `*_s` seconds, `share*`/`*_ratio`/`*_share` ratios,
`hours` hours; a MIG layout list reads `1 GPU as 7 x 1g.10gb`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

_WORDS = {"gpu": "GPU", "gpus": "GPUs", "mig": "MIG", "qos": "QOS", "p50": "p50", "p95": "p95"}


def label(key: str) -> str:
    """`gpu_hours_lost_to_preemption` -> `GPU-hours lost to preemption`."""
    text = str(key).replace("gpu_hours", "GPU-hours")
    return " ".join(_WORDS.get(w, w) for w in text.split("_"))


def duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def number(value: float) -> str:
    """Up to 4 significant digits, thousands separated, no exponent for ordinary sizes."""
    if value == int(value) and abs(value) < 1e15:
        return f"{int(value):,}"
    if abs(value) >= 100:
        return f"{value:,.0f}" if abs(value) >= 10000 else f"{value:,.1f}"
    return f"{value:.4g}"


def _is_ratio(key: str) -> bool:
    k = key.lower()
    return k.startswith("share") or k.endswith(("_ratio", "_share", "_fraction")) or k == "ratio"


def value_text(key: str, value: Any) -> str:
    """One evidence value in the unit its key names."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "unknown"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, Mapping):
        if _is_layout(value):
            return _layout(value)
        return ", ".join(f"{label(k)} {value_text(key if k in ('p50', 'p95', 'max') else k, v)}"
                         for k, v in value.items())  # fmt: skip
    if isinstance(value, list | tuple):
        if all(isinstance(v, Mapping) and _is_layout(v) for v in value) and value:
            return " + ".join(_layout(v) for v in value)
        return "; ".join(value_text(key, v) for v in value) if value else "none"
    if isinstance(value, int | float):
        k = key.lower()
        if _is_ratio(k):
            pct = 100 * float(value)
            return f"{pct:.1f} %" if abs(pct) < 10 else f"{pct:.0f} %"
        if "gpu_hours" in k:
            return f"{number(float(value))} GPU-h"
        if k.endswith("_s") or k == "s":
            return duration(float(value))
        if k == "hours" or k.endswith("_hours") or k.startswith("hours_"):
            return f"{number(float(value))} h"
        return number(float(value))
    return str(value)


def _is_layout(value: Mapping) -> bool:
    return {"profile", "per_gpu", "gpus"} <= set(value)


def _layout(value: Mapping) -> str:
    gpus = value["gpus"]
    return f"{gpus} GPU{'s' if gpus != 1 else ''} as {value['per_gpu']} x {value['profile']}"


def evidence_items(evidence: Any) -> list[str]:
    """`label: value` per entry of an evidence or effect mapping (a list: its values)."""
    if isinstance(evidence, Mapping):
        return [f"{label(k)}: {value_text(k, v)}" for k, v in evidence.items()]
    if isinstance(evidence, list | tuple):
        return [value_text("", v) for v in evidence]
    if evidence is None:
        return []
    return [str(evidence)]
