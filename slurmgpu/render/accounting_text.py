"""The analysis document (see docs/accounting.md) as compact terminal tables. Pure: dict -> str."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def _num(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}"


def _pct(value: Any) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


def _dur(seconds: Any) -> str:
    if seconds is None:
        return "-"
    s = round(float(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> str:
    """Left-aligned first column, right-aligned numbers, two spaces between columns."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = []
    for r in [header, *rows]:
        cells = [
            str(c).ljust(widths[i]) if i == 0 else str(c).rjust(widths[i]) for i, c in enumerate(r)
        ]
        lines.append("  ".join(cells).rstrip())
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _group_table(entries: Sequence[Mapping[str, Any]], key: str, limit: int = 15) -> str:
    header = [key, "jobs", "GPU-h", "cap GPU-h", "alloc", "util", "waste GPU-h",
              "wait p50", "wait p95", "preempt", "requeue"]  # fmt: skip
    rows = [
        [
            e[key] or "(none)",
            _num(e["jobs"]),
            _num(e["gpu_hours_allocated"]),
            _num(e["capacity_gpu_hours"]),
            _pct(e["allocation_ratio"]),
            "-" if e["gpu_util_mean"] is None else f"{e['gpu_util_mean']:.0f}%",
            _num(e["waste_gpu_hours"]),
            _dur(e["wait_s"]["p50"]),
            _dur(e["wait_s"]["p95"]),
            _num(e["preemptions"]),
            _num(e["requeues"]),
        ]
        for e in entries[:limit]
    ]
    more = f"\n({len(entries) - limit} more)" if len(entries) > limit else ""
    return table(rows, header) + more


def render_text(doc: Mapping[str, Any]) -> str:
    """The whole analysis as text for a terminal."""
    t = doc["totals"]
    w = doc["window"]
    src = doc["source"]
    out = [
        f"GPU accounting {w['since']} .. {w['until']}  (source: {src['kind']}"
        + (f", Slurm {src['slurm_version']}" if src.get("slurm_version") else "")
        + ")",
        f"rows read {t['rows_read']:,} = analyzed {t['rows_analyzed']:,} + rejected "
        f"{t['rows_rejected']:,};  jobs {t['jobs']:,} ({t['gpu_jobs']:,} with GPUs, "
        f"{t['pending_jobs']:,} pending)",
        f"GPU-hours allocated {_num(t['gpu_hours_allocated'])} of capacity "
        f"{_num(t['capacity_gpu_hours'])} ({_pct(t['allocation_ratio'])});  used "
        f"{_num(t['gpu_hours_used'])};  lost to preemption "
        f"{_num(t['gpu_hours_lost_to_preemption'])} ({t['preemptions']} preemptions, "
        f"{t['requeues']} requeues);  wait p50 {_dur(t['wait_s']['p50'])} p95 "
        f"{_dur(t['wait_s']['p95'])} max {_dur(t['wait_s']['max'])}",
        "",
        "By partition",
        _group_table(doc["by_partition"], "partition"),
        "",
        "By QOS",
        _group_table(doc["by_qos"], "qos"),
        "",
        "By user (top 15 by GPU-hours)",
        _group_table(doc["by_user"], "user"),
        "",
        "By job kind",
        _group_table(doc["by_kind"], "kind"),
        "",
    ]
    ff = doc["fit_fraction"]
    out.append(
        "Would fit a fraction of one GPU: "
        + ", ".join(
            f"{k}: {_pct(ff[k]['jobs'])} of jobs / {_pct(ff[k]['gpu_hours'])} of GPU-h"
            for k in ("1/7", "1/4", "1/2")
        )
    )
    out.append(f"  basis: {ff['basis']}")
    out.append("")
    out.append("Recommendations")
    for i, rec in enumerate(doc["recommendations"], 1):
        out.append(f"{i}. [{rec['kind']}] {rec['title']}")
        out.append(f"   {rec['detail']}")
        if rec["estimated_effect"]:
            eff = ", ".join(f"{k}={_num(v, 2)}" for k, v in rec["estimated_effect"].items())
            out.append(f"   effect: {eff}")
    if doc["rejected"]:
        out.append("")
        out.append(f"Rejected rows ({t['rows_rejected']}, first {len(doc['rejected'])}):")
        for r in doc["rejected"][:10]:
            out.append(f"  {r['file']}:{r['line']}: {r['reason']}")
    return "\n".join(out) + "\n"
