"""`slurmgpu autopilot`: a pass's result as text or JSON (from `PassResult.to_dict()`)."""

from __future__ import annotations

import json
from typing import Any


def _predicted(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for r in rows:

        def s(v: Any) -> str:
            return "?" if v is None else f"{v:.0f}"

        out.append(
            f"  {r['partition']}: mean wait {s(r['mean_wait_before_s'])} s -> "
            f"{s(r['mean_wait_after_s'])} s (change {s(r['change_low_s'])} .. "
            f"{s(r['change_high_s'])} s over the perturbed replays)"
        )
    return out


def render_autopilot(result: dict[str, Any], fmt: str = "text") -> str:
    if fmt == "json":
        return json.dumps(result, indent=2, sort_keys=True) + "\n"
    head = f"autopilot pass {result['time']} ({result['mode']}"
    head += ", dry run)" if result["dry_run"] else ")"
    lines = [
        head,
        f"status: {result['status']}"
        + (f" (change {result['change_id']})" if result["change_id"] else ""),
    ]
    for m in result["moves"]:
        lines.append(f"move {m['node']}: {m['source']} -> {m['target']}  ({m['reason']})")
    for c in result.get("mig", ()):
        lines.append(
            f"MIG {c['node']} ({c['partition']}): {' | '.join(c['before'])} -> "
            f"{' | '.join(c['after'])}"
        )
    if result["changes"]:
        lines.append(f"advise plan: {' + '.join(result['changes'])} (score {result['score']:+.3f})")
    if result["predicted"]:
        lines.append("predicted by the calibrated replay:")
        lines += _predicted(result["predicted"])
    for f in result["forecast"]:
        lines.append(
            f"forecast {f['partition']}: {f['mean_gpus']:g} GPUs on average, up to "
            f"{f['high_gpus']:g}"
        )
    sections = (("verification", "verification"), ("refused", "refusals"), ("note", "notes"))
    for label, key in sections:
        lines += [f"{label}: {x}" for x in result[key]]
    lines += [f"wrote {x}" for x in result["written"]]
    return "\n".join(lines) + "\n"
