"""`slurmgpu forecast` as text or JSON: the back-test table, then each partition's forecast."""

from __future__ import annotations

import json

from slurmgpu.forecast import Forecast


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}%"


def render_forecast(result: Forecast, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(result.to_json(), indent=2) + "\n"
    iso = lambda t: t.strftime("%Y-%m-%d %H:%M")  # noqa: E731
    lines = [
        f"GPU demand forecast (running + pending GPUs), {result.horizon_buckets} buckets of "
        f"{result.freq_s // 60} min from {iso(result.train_until)} UTC",
        f"history {iso(result.history_from)} .. {iso(result.train_until)}; back-test held out "
        f"{result.test_buckets} buckets from {iso(result.held_out_from)}",
        "",
        f"{'partition':<20} {'model':<15} {'sMAPE':>8} {'under':>7}  picked",
    ]
    for b in result.backtest:
        label = b.partition if b.slice is None else f"{b.partition}:{b.slice}"
        for s in b.scores:
            under = "-" if s.under_forecast_rate is None else f"{100 * s.under_forecast_rate:.0f}%"
            mark = "*" if s.model == b.picked else (s.note or "")
            lines.append(f"{label:<20} {s.model:<15} {_pct(s.smape_pct):>8} {under:>7}  {mark}")
    for p in result.by_partition:
        lines += ["", f"{p.label} ({p.model}): time UTC, GPUs [low .. high]"]
        for x in p.points:
            lines.append(f"  {iso(x.time)}  {x.gpus:8.1f}  [{x.low:.1f} .. {x.high:.1f}]")
    lines += [""] + [f"note: {n}" for n in result.notes] if result.notes else []
    return "\n".join(lines) + "\n"
