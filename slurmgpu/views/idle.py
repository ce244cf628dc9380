"""The idle retrospective as text, JSON and HTML (`slurmgpu idle --format`)."""

from __future__ import annotations

import json

from slurmgpu.idle.retrospective import IdleReport

FORMATS = ("text", "json", "html")
# the flagged runs `report --format prom` gives one series each (the largest, by reclaimable
# GPU-hours): a job id label is one new series per job, so the textfile keeps a bounded number
PROM_FLAGGED_JOBS = 50


def render_idle(report: IdleReport, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(report.to_json(), indent=2, sort_keys=True) + "\n"
    if fmt == "html":
        from slurmgpu import __version__
        from slurmgpu.render.templating import render

        rankings = [
            (t, by, report.ranking(by)[:20])
            for by, t in (("user", "Users"), ("account", "Accounts"))
        ]
        return render(
            "idle.html.j2",
            report=report,
            version=__version__,
            rules=_rules(report),
            rankings=rankings,
        )
    return render_text(report)


def _rules(report: IdleReport) -> list[str]:
    p = report.policy
    out = [_rule_line("default", p["rule"])]
    out += [_rule_line(f"tier {n}", r) for n, r in p["tiers"].items()]
    out += [_rule_line(f"partition {n}", r) for n, r in p["partitions"].items()]
    return out


def _rule_line(name: str, r: dict) -> str:
    warn = ", ".join(f"{w:g}" for w in r["warn_after_min"]) or "none"
    memory = f", memory held >= {r['memory_held_mib']:g} MiB" if r["memory_held_mib"] else ""
    return (
        f"{name}: idle when every sample <= {r['util_pct']:g}% for {r['window_min']:g} min"
        f"{memory}; warnings at {warn} min; then {r['action']}"
    )


def render_text(report: IdleReport) -> str:
    lines = ["Idle GPUs: what the [idle] policy would have done", ""]
    lines += [f"  {r}" for r in _rules(report)]
    exempt = report.policy
    lines.append(
        f"  exempt: tiers {', '.join(exempt['exempt_tiers']) or '-'}; interactive "
        f"{'yes' if exempt['exempt_interactive'] else 'no'}"
    )
    window = f"{report.since or 'the dumps'} .. {report.until}"
    lines += [
        "",
        f"Window: {window}; GPU runs: {report.gpu_runs}; with samples: "
        f"{report.measured['series']}, with summaries only: {report.measured['summary']}",
    ]
    lines.append("")
    if report.jobs:
        lines.append(
            f"{'job':>10} {'user':<10} {'tier':<5} {'GPUs':>5} {'flagged at':<21} "
            f"{'action':<8} {'GPU-h back':>10}"
        )
        for j in report.jobs:
            lines.append(
                f"{j.job_id:>10} {j.user[:10]:<10} {j.tier[:5]:<5} {j.gpus:>5g} "
                f"{j.flagged_at:<21} {j.action:<8} {j.reclaimable_gpu_hours:>10.2f}"
            )
    else:
        lines.append("No run was idle long enough to be flagged.")
    lines += [
        "",
        f"Reclaimable: {report.reclaimable_gpu_hours:.2f} GPU-hours ({len(report.jobs)} runs)",
    ]
    for by, title in (("user", "Users"), ("account", "Accounts")):
        ranking = report.ranking(by)[:10]
        if ranking:
            lines += ["", f"{title} by idle GPU-hours (reclaimable / idle, runs):"]
            lines += [
                f"  {r[by][:20]:<20} {r['reclaimable_gpu_hours']:>9.2f} {r['idle_gpu_hours']:>9.2f}"
                f" {r['runs']:>5}"
                for r in ranking
            ]
    if report.exempt:
        hours = sum(j.reclaimable_gpu_hours for j in report.exempt)
        lines.append(
            f"Exempt but idle: {len(report.exempt)} runs, {hours:.2f} GPU-hours "
            f"({', '.join(sorted({j.exempt or '' for j in report.exempt}))})"
        )
    if report.undecided:
        lines.append(
            f"Not decided: {len(report.undecided)} runs (e.g. job "
            f"{report.undecided[0].job_id}: {report.undecided[0].reason})"
        )
    lines += [f"note: {n}" for n in report.notes]
    lines += [f"warning: {w}" for w in report.warnings]
    return "\n".join(lines) + "\n"


def render_live(report, fmt: str) -> str:
    """`idle --live`: one line per event (text), or the events as JSON."""
    if fmt == "json":
        return json.dumps(report.to_json(), indent=2, sort_keys=True) + "\n"
    prefix = "would " if report.dry_run else ""
    lines = [f"idle --live at {report.now}: {report.checked} running GPU jobs checked"]
    for e in report.events:
        quiet = ("exempt", "undecided", "deferred", "given-up")
        verb = e.kind if e.done or e.kind in quiet or "failed" in e.detail else prefix + e.kind
        name = e.job if e.job and e.job != e.job_id else e.job_id
        if name != e.job_id:
            name = f"{name} (id {e.job_id})"
        lines.append(f"  job {name} ({e.user}): {verb}: {e.detail}")
    lines += [f"warning: {w}" for w in report.warnings]
    return "\n".join(lines) + "\n"


# -- the idle section of `slurmgpu report` ----------------------------------------------------


def report_summary(report: IdleReport) -> dict:
    """What `report` shows of the retrospective: totals and the waste rankings."""
    return {
        "reclaimable_gpu_hours": report.reclaimable_gpu_hours,
        "flagged_runs": len(report.jobs),
        "exempt_idle_gpu_hours": round(sum(j.reclaimable_gpu_hours for j in report.exempt), 4),
        "undecided_runs": len(report.undecided),
        "gpu_runs": report.gpu_runs,
        "rule": report.policy["rule"],
        "ranking": {"users": report.ranking("user"), "accounts": report.ranking("account")},
        "warnings": list(report.warnings),
    }


def with_idle_section(text: str, report: IdleReport, fmt: str) -> str:
    """The analysis report `text` (in `fmt`) with the idle policy's retrospective added."""
    summary = report_summary(report)
    if fmt == "json":
        doc = json.loads(text)
        doc["idle"] = summary
        return json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    if fmt == "prom":
        return text + _prom_lines(summary, report.ranking("partition"), report.jobs)
    if fmt == "html":
        from slurmgpu.render.templating import render

        section = render("idle-section.html.j2", s=summary, rules=_rules(report))
        head, sep, tail = text.rpartition("</body>")
        return head + section + sep + tail if sep else text + section
    return text + "\n" + _section_text(summary, report) + "\n"


def _section_text(summary: dict, report: IdleReport) -> str:
    lines = ["Idle GPUs (the policy's [idle] rule over the same window; docs/idle.md)"]
    lines += [f"  {r}" for r in _rules(report)]
    lines.append(
        f"  reclaimable: {summary['reclaimable_gpu_hours']:.2f} GPU-hours in "
        f"{summary['flagged_runs']} runs; exempt but idle: "
        f"{summary['exempt_idle_gpu_hours']:.2f} GPU-hours; not decided: "
        f"{summary['undecided_runs']} of {summary['gpu_runs']} GPU runs"
    )
    for by, title in (("users", "users"), ("accounts", "accounts")):
        rows = summary["ranking"][by][:10]
        key = by[:-1]
        if rows:
            lines.append(f"  waste ranking, {title} (idle GPU-hours, reclaimable):")
            lines += [
                f"    {r[key][:24]:<24} {r['idle_gpu_hours']:>9.2f}"
                f" {r['reclaimable_gpu_hours']:>9.2f}"
                for r in rows
            ]
    lines += [f"  warning: {w}" for w in summary["warnings"]]
    return "\n".join(lines)


def _prom_lines(summary: dict, partitions: list[dict], flagged=()) -> str:
    """The retrospective's gauges; `partitions` is `IdleReport.ranking("partition")`,
    `flagged` the flagged runs (`IdleReport.jobs`)."""

    def label(value: str) -> str:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    out = [
        "# HELP slurmgpu_idle_reclaimable_gpu_hours GPU-hours the [idle] policy would have "
        "reclaimed in the report window",
        "# TYPE slurmgpu_idle_reclaimable_gpu_hours gauge",
        f"slurmgpu_idle_reclaimable_gpu_hours {summary['reclaimable_gpu_hours']!r}",
        "# HELP slurmgpu_idle_user_gpu_hours Idle GPU-hours per user (flagged and exempt runs)",
        "# TYPE slurmgpu_idle_user_gpu_hours gauge",
    ]
    out += [
        f'slurmgpu_idle_user_gpu_hours{{user="{label(r["user"])}"}} {r["idle_gpu_hours"]!r}'
        for r in summary["ranking"]["users"]
    ]
    out += [
        "# HELP slurmgpu_idle_account_gpu_hours Idle GPU-hours per account",
        "# TYPE slurmgpu_idle_account_gpu_hours gauge",
    ]
    out += [
        f'slurmgpu_idle_account_gpu_hours{{account="{label(r["account"])}"}} '
        f"{r['idle_gpu_hours']!r}"
        for r in summary["ranking"]["accounts"]
    ]
    out += [
        "# HELP slurmgpu_idle_partition_gpu_hours Idle GPU-hours per partition (flagged and "
        "exempt runs)",
        "# TYPE slurmgpu_idle_partition_gpu_hours gauge",
    ]
    out += [
        f'slurmgpu_idle_partition_gpu_hours{{partition="{label(r["partition"])}"}} '
        f"{r['idle_gpu_hours']!r}"
        for r in partitions
    ]
    out += [
        "# HELP slurmgpu_idle_partition_reclaimable_gpu_hours GPU-hours the [idle] policy would "
        "have reclaimed per partition",
        "# TYPE slurmgpu_idle_partition_reclaimable_gpu_hours gauge",
    ]
    out += [
        f'slurmgpu_idle_partition_reclaimable_gpu_hours{{partition="{label(r["partition"])}"}} '
        f"{r['reclaimable_gpu_hours']!r}"
        for r in partitions
    ]
    out += [
        "# HELP slurmgpu_idle_flagged_runs Runs the [idle] policy flags in the report window",
        "# TYPE slurmgpu_idle_flagged_runs gauge",
        f"slurmgpu_idle_flagged_runs {summary['flagged_runs']}",
        "# HELP slurmgpu_idle_exempt_gpu_hours Idle GPU-hours of exempt runs (waste the policy "
        "lets stand)",
        "# TYPE slurmgpu_idle_exempt_gpu_hours gauge",
        f"slurmgpu_idle_exempt_gpu_hours {summary['exempt_idle_gpu_hours']!r}",
    ]
    out += [
        "# HELP slurmgpu_idle_flagged_job_gpu_hours GPU-hours the [idle] policy would have "
        f"reclaimed from a flagged job (its runs; the {PROM_FLAGGED_JOBS} largest)",
        "# TYPE slurmgpu_idle_flagged_job_gpu_hours gauge",
    ]
    per_job: dict[tuple[str, str, str, str], float] = {}
    for j in flagged:  # a requeued job's runs share the labels: one series, their sum
        key = (j.job_id, j.user, j.account, j.partition)
        per_job[key] = per_job.get(key, 0.0) + j.reclaimable_gpu_hours
    largest = sorted(per_job.items(), key=lambda kv: (-kv[1], kv[0]))[:PROM_FLAGGED_JOBS]
    out += [
        f'slurmgpu_idle_flagged_job_gpu_hours{{jobid="{label(job)}",user="{label(user)}",'
        f'account="{label(account)}",partition="{label(part)}"}} {round(hours, 4)!r}'
        for (job, user, account, part), hours in largest
    ]
    return "\n".join(out) + "\n"


def describe_policy(idle) -> list[str]:
    """`policy check`'s lines for an `IdlePolicy`: the rules and the exemptions."""
    from slurmgpu.idle.retrospective import policy_json

    data = policy_json(idle)
    exempt = [
        *(f"tier {t}" for t in idle.exempt_tiers),
        *(["interactive jobs"] if idle.exempt_interactive else []),
        *(f"user {u}" for u in idle.exempt_users),
        *(f"account {a}" for a in idle.exempt_accounts),
        *(f"partition {p}" for p in idle.exempt_partitions),
    ]
    reasons = ", ".join(idle.exempt_reasons) or "none"
    lines = [f"idle {line}" for line in _rules(IdleView(data))]
    lines.append(f"idle exempt: {', '.join(exempt) or 'nobody'}; idle-exempt= reasons: {reasons}")
    return lines


class IdleView:
    """The part of an IdleReport `_rules` reads (its policy as JSON)."""

    def __init__(self, policy: dict) -> None:
        self.policy = policy
