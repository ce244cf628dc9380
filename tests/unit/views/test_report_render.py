"""The report renderers, on a recorded-shape analysis document (tests/data/reports).

Each test edits the JSON (a dict, as a site's numbers would differ) and renders the typed
`AnalysisDocument` read from it (`doc()`), as `analyze()` hands it to the renderers."""

from __future__ import annotations

import copy
import json
import math
import re
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from slurmgpu.accounting.document import AnalysisDocument
from slurmgpu.views import report
from slurmgpu.views.report import (
    check_prom_text,
    fmt_duration,
    prom_label_value,
    render_html,
    render_json,
    render_prom,
    render_report,
    render_text,
    text_table,
)
from tests.unit.tools import need

DATA = Path(__file__).resolve().parents[2] / "data" / "reports"
EVIL_USER = "<script>alert('x')</script>"


@pytest.fixture
def analysis() -> dict:
    return json.loads((DATA / "analysis-week.json").read_text())


def doc(data: dict) -> AnalysisDocument:
    return AnalysisDocument.from_json(data)


def _row(like: dict, **changes) -> dict:
    """A by_* row shaped like `like` (every GROUP key), with `changes`."""
    return {**copy.deepcopy(like), **changes}


@pytest.fixture
def unknown_analysis(analysis: dict) -> dict:
    """The same week, as a site without inventory, gpuutil or a time series would see it."""
    a = copy.deepcopy(analysis)
    a["totals"].update(capacity_gpu_hours=None, allocation_ratio=None, gpu_hours_used=None)
    for group in a["by_partition"]:
        group.update(capacity_gpu_hours=None, allocation_ratio=None)
    a["timeseries"]["points"] = []
    a["recommendations"] = []
    return a


# --------------------------------------------------------------------------- helpers


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (59.4, "59s"),
        (60, "1m 00s"),
        (3599, "59m 59s"),
        (3600, "1h 00m"),
        (86399, "23h 59m"),
        (90000, "1d 01h"),
        (None, "n/a"),
        (math.nan, "n/a"),
    ],
)
def test_fmt_duration(seconds, text):
    assert fmt_duration(seconds) == text


def test_text_table_aligns_columns():
    table = text_table(["NAME", "JOBS"], [["a", "1"], ["longer-name", "12,345"]]).splitlines()
    assert table[0] == "NAME           JOBS"
    assert table[1] == "-----------  ------"
    assert table[2] == "a                 1"
    assert table[3] == "longer-name  12,345"


def test_unknown_format_is_rejected(analysis):
    with pytest.raises(ValueError, match="unknown report format 'pdf'"):
        render_report(doc(analysis), "pdf")


# --------------------------------------------------------------------------- text


def test_text_totals(analysis):
    text = render_text(doc(analysis))
    assert "GPU-hours allocated  7,312.0 of 10,752.0 capacity (68.0%)" in text
    assert "jobs                 812 (640 with GPUs, 9 pending)" in text
    assert "p50 2m 00s, p95 1h 30m, max 23h 53m" in text
    assert "14 preempted (41.5 GPU-hours lost), 9 requeued (3.2 GPU-hours lost)" in text
    assert "2,412 read = 2,410 analyzed + 2 rejected" in text
    assert "2,400.0 of the 3,000.0 GPU-hours with gres/gpuutil (mean utilization 80.0%" in text
    assert "note: 8 allocation rows fall outside the window" in text
    assert "by reason: bad ElapsedRaw 1, wrong column count 1" in text
    # evidence and effects in human units (the JSON keeps the numbers)
    assert (
        "estimated effect: GPUs carved: 4, whole GPUs freed p50: 2.5, hours slices short: 3 h, "
        "hours: 168 h" in text
    )
    assert (
        "evidence: preemptions: 14, GPU-hours lost to preemption: 35.5 GPU-h, GPU-hours wait "
        "saved estimate: 20 GPU-h, share of allocated: 0.5 %, preempted tiers: P2" in text
    )
    assert "layouts: 1 GPU as 7 x 1g.10gb + 3 GPUs as 2 x 3g.40gb" in text
    assert "share fitting half GPU: 41 %" in text
    assert "=0.0049" not in text and '{"' not in text  # no raw JSON floats or objects


def test_text_partition_table_columns_line_up(analysis):
    lines = render_text(doc(analysis)).splitlines()
    start = lines.index("By partition") + 1
    header, rule, *rows = lines[start : start + 5]
    jobs_end = header.index("JOBS") + len("JOBS")
    alloc_end = header.index("GPU-H ALLOC") + len("GPU-H ALLOC")
    assert set(rule) == {" ", "-"}
    cells = {r.split()[0]: r for r in rows}
    assert cells["gpu"][:jobs_end].endswith("512")
    assert cells["gpu"][:alloc_end].endswith("6,100.0")
    # unknown capacity of the third partition is "n/a", never 0
    assert cells["<b>lab</b>"][:alloc_end].endswith("212.0")
    cap_end = header.index("CAPACITY GPU-H") + len("CAPACITY GPU-H")
    assert cells["<b>lab</b>"][:cap_end].endswith("n/a")


def test_text_escapes_control_characters_in_names(analysis):
    text = render_text(doc(analysis))
    assert 'bob "the\\builder"\\nx' in text  # the newline stays on one table line
    assert "\nx  " not in text


def test_text_sorts_users_by_gpu_hours_and_limits_rows(analysis):
    like = analysis["by_user"][0]
    analysis["by_user"] += [
        _row(like, user=f"u{i:02d}", jobs=1, gpu_hours_allocated=float(i)) for i in range(20)
    ]
    text = render_text(doc(analysis))
    section = text[text.index("By user") : text.index("Would fit")]
    assert section.index("bob") < section.index("alice") < section.index("u19")
    assert f"... {23 - report.TOP_N} more (see --format json)" in section


def test_text_unknowns_and_no_recommendation(unknown_analysis):
    unknown_analysis["totals"]["gpu_hours_used"] = None
    text = render_text(doc(unknown_analysis))
    assert "7,312.0 (capacity unknown)" in text
    assert re.search(r"GPU-hours used\s+unknown \(no gres/gpuutil", text)
    assert "Recommendations\n  none" in text


# --------------------------------------------------------------------------- JSON


def test_json_is_the_analysis(analysis):
    assert json.loads(render_json(doc(analysis))) == analysis


def test_document_reads_back_what_it_writes(analysis):
    document = doc(analysis)
    assert AnalysisDocument.from_json(document.to_json()) == document
    assert document.by_qos[0].tier and document.by_partition[0].name == "gpu"
    assert document.totals.wait_s.p95 == 5400
    carve, tier = document.recommendations
    assert (
        carve.evidence.layouts[1].profile == "3g.40gb" and carve.estimated_effect.gpus_carved == 4
    )
    assert tier.evidence.preempted_tiers == ("P2",)


def test_document_refuses_another_schema_version(analysis):
    analysis["schema_version"] = 1
    with pytest.raises(ValueError, match="schema_version 1"):
        doc(analysis)


def test_json_turns_nan_into_null(analysis):
    analysis["totals"]["gpu_hours_used"] = math.nan
    analysis["by_partition"][0]["gpu_util_mean"] = math.inf
    text = render_json(doc(analysis))
    assert "NaN" not in text and "Infinity" not in text
    parsed = json.loads(text)
    assert parsed["totals"]["gpu_hours_used"] is None
    assert parsed["by_partition"][0]["gpu_util_mean"] is None


# --------------------------------------------------------------------------- HTML


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += attrs

    def handle_data(self, data):
        self.text.append(data)


def _parse(page: str) -> _Collector:
    parser = _Collector()
    parser.feed(page)
    parser.close()
    return parser


def test_html_escapes_every_site_string(analysis):
    page = render_html(doc(analysis))
    assert EVIL_USER not in page
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in page
    assert "<b>lab</b>" not in page  # partition name, in tables and in SVG labels
    assert page.count("&lt;b&gt;lab&lt;/b&gt;") >= 3
    assert "checkpoint &lt;requirement&gt; for P2 &amp; a grace time" in page
    parsed = _parse(page)
    assert "script" not in parsed.tags
    assert "b" in parsed.tags  # the template's own bold window, not the partition's
    assert EVIL_USER in "".join(parsed.text)  # what a reader sees: the literal name


def test_html_is_self_contained(analysis):
    page = render_html(doc(analysis))
    assert "http://" not in page and "https://" not in page
    assert "//" not in re.sub(r"<!--.*?-->", "", page).replace("file://", "")
    parsed = _parse(page)
    assert not {"script", "link", "img", "iframe", "object", "embed"} & set(parsed.tags)
    assert not [a for a, _ in parsed.attrs if a in ("src", "href")]
    assert "url(" not in page and "@import" not in page and "@font-face" not in page
    assert "default-src 'none'" in page  # the browser itself refuses any fetch


def test_html_shows_totals_and_plots(analysis):
    page = render_html(doc(analysis))
    text = " ".join(_parse(page).text)
    assert "7,312.0 of 10,752.0 capacity (68.0%)" in text
    assert page.count("<svg ") == 7
    # the headline plot: allocation and measured use, % of capacity, over time
    assert 'class="chart use"' in page
    assert page.count('<polyline class="allocated"') == 1
    assert page.count('<polyline class="used"') == 1
    assert "Allocation and measured use, % of capacity, per day" in text
    # known values only: partitions, QOS, fit slices, waits (all + 2 partitions), tier waits
    assert page.count('class="bar s0"') == 3 + 3 + 3 + 3 + 3
    assert 'class="capacity"' in page
    assert page.count('<polygon class="series') == 3  # stacked by partition
    assert "&lt;b&gt;lab&lt;/b&gt;</text>" in page  # the legend names the partition
    assert "Carve 4 H100 GPUs" in text


def test_html_unknown_values_are_not_drawn_as_zero(unknown_analysis):
    page = render_html(doc(unknown_analysis))
    assert page.count("<svg ") == 5  # no time series points: no chart
    assert "No data in this window." in page
    assert "p50: unknown" in page  # the third partition has no waits
    assert "No change recommended" in page


def test_html_is_deterministic(analysis):
    assert render_html(doc(analysis)) == render_html(doc(copy.deepcopy(analysis)))


# --------------------------------------------------------------------------- Prometheus


def _samples(text: str) -> dict[str, str]:
    return {
        line.rsplit(" ", 1)[0]: line.rsplit(" ", 1)[1]
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def test_prom_format_is_valid_and_families_are_declared_once(analysis):
    text = render_prom(doc(analysis))
    check_prom_text(text)
    names = [ln.split()[2] for ln in text.splitlines() if ln.startswith("# TYPE")]
    assert len(names) == len(set(names))
    assert all(n.startswith("slurmgpu_") for n in names)
    current = None
    for line in text.splitlines():
        if line.startswith("# TYPE"):
            current = line.split()[2]
            assert line.endswith(" gauge")
        elif not line.startswith("#"):
            assert re.split(r"[{ ]", line)[0] == current  # sample under its own family


def test_prom_values(analysis):
    samples = _samples(render_prom(doc(analysis)))
    assert samples["slurmgpu_gpu_allocated_seconds"] == str(7312 * 3600)  # GPU-seconds
    assert samples["slurmgpu_allocation_ratio"] == "0.68"
    assert samples['slurmgpu_partition_gpu_allocated_seconds{partition="gpu"}'] == str(6100 * 3600)
    assert samples['slurmgpu_qos_wait_p95_seconds{qos="p2",tier="P2"}'] == "20000"
    assert samples['slurmgpu_fit_fraction_jobs_ratio{slice="1/2"}'] == "0.41"
    assert samples["slurmgpu_report_window_end_timestamp_seconds"] == "1796083200"
    # a known zero stays a zero
    assert samples['slurmgpu_partition_preemptions{partition="mig"}'] == "0"


def test_prom_omits_unknowns(analysis):
    analysis["totals"]["gpu_hours_used"] = None
    text = render_prom(doc(analysis))
    assert "slurmgpu_gpu_used_seconds " not in text  # null in totals: no sample, no family
    assert "# TYPE slurmgpu_gpu_used_seconds gauge" not in text
    samples = _samples(text)
    assert samples['slurmgpu_partition_gpu_util_mean_ratio{partition="gpu"}'] == "0.8"  # 80%
    assert 'slurmgpu_partition_gpu_util_mean_ratio{partition="mig"}' not in samples
    assert 'slurmgpu_partition_gpu_capacity_seconds{partition="<b>lab</b>"}' not in samples
    assert 'slurmgpu_partition_wait_p50_seconds{partition="<b>lab</b>"}' not in samples
    assert 'slurmgpu_partition_jobs{partition="<b>lab</b>"}' in samples


def test_prom_escapes_label_values(analysis):
    analysis["by_partition"][0]["partition"] = 'we"ird\\part\nname'
    text = render_prom(doc(analysis))
    check_prom_text(text)
    assert 'slurmgpu_partition_jobs{partition="we\\"ird\\\\part\\nname"} 512' in text
    assert prom_label_value('a\\b"c\nd') == 'a\\\\b\\"c\\nd'


def test_check_prom_text_rejects_bad_lines():
    with pytest.raises(ValueError, match="line 2"):
        check_prom_text('# TYPE x gauge\nx{a="unterminated} 1\n')
    with pytest.raises(ValueError, match="newline"):
        check_prom_text("x 1")


def test_docs_list_exactly_the_exported_metrics(analysis):
    """docs/reports.md names every metric the Prometheus file can contain, and no other."""
    full = copy.deepcopy(analysis)
    full["totals"].update(
        gpu_hours_used=1.0, gpu_util_mean=50.0, waste_gpu_hours=2.0, low_memory_gpu_hours=0.5
    )
    for group in full["by_partition"] + full["by_qos"]:
        group.update(
            gpu_util_mean=50.0,
            gpu_hours_used=1.0,
            waste_gpu_hours=2.0,
            low_memory_gpu_hours=0.5,
            capacity_gpu_hours=10.0,
            allocation_ratio=0.1,
        )
    full["energy"] = {
        "kwh": 2.0,
        "kwh_idle": 0.5,
        "kwh_per_used_gpu_hour": 0.4,
        "coverage": 1.0,
        "by_partition": [{"partition": "gpu", "kwh": 2.0, "kwh_idle": 0.5}],
    }
    full["energy_cost"] = {
        "pue": 1.2, "facility_kwh": 2.4, "facility_kwh_idle": 0.6, "currency": "EUR",
        "price_per_kwh": 0.2, "cost": 0.48, "cost_idle": 0.12, "gco2_per_kwh": 300.0,
        "co2_kg": 0.72, "co2_kg_idle": 0.18,
    }  # fmt: skip
    text = render_prom(doc(full))
    # with the idle policy's section (`report --policy` with an [idle] table, docs/idle.md)
    from slurmgpu.idle.retrospective import IdleReport, policy_json
    from slurmgpu.model.policy import IdlePolicy
    from slurmgpu.views.idle import with_idle_section

    idle = IdleReport(policy_json(IdlePolicy()), None, "2026-12-01T00:00:00Z", (), (), (), 0, {})
    text = with_idle_section(text, idle, "prom")
    exported = {ln.split()[2] for ln in text.splitlines() if ln.startswith("# TYPE")}
    docs = (Path(__file__).resolve().parents[3] / "docs" / "reports.md").read_text()
    named = set(re.findall(r"`(slurmgpu_[a-z0-9_]+)[`{]", docs))
    per_group = set(re.findall(r"^\| `([a-z0-9_]+)` \|", docs, flags=re.MULTILINE))
    for metric in per_group - {m for m in per_group if m.startswith("slurmgpu_")}:
        named |= {f"slurmgpu_{metric}", f"slurmgpu_partition_{metric}", f"slurmgpu_qos_{metric}"}
    assert exported == named


def test_a_bucket_the_window_cuts_short_is_scaled_not_a_drop():
    """The last bucket of a window ending at 00:30 holds half an hour: its capacity and
    allocation are drawn per whole hour, so the capacity line stays flat."""
    from slurmgpu.accounting.document import TimePoint
    from slurmgpu.views import svg

    full = TimePoint("2026-12-01T22:00:00Z", 8.0, 16.0, 0.5, {}, hours=1.0)
    half = TimePoint("2026-12-01T23:00:00Z", 4.0, 8.0, 0.5, {}, hours=0.5)
    tiny = TimePoint("2026-12-02T00:00:00Z", 0.004, 0.008, 0.5, {}, hours=0.0005)
    chart = svg.timeseries_chart([full, half, tiny], "1h")
    line = re.search(r'class="capacity"[^>]*points="([^"]+)"', chart).group(1)
    ys = {pt.split(",")[1] for pt in line.split()}
    assert len(ys) == 1, line  # one height: no drop at the end
    totals = re.search(r'class="total"[^>]*points="([^"]+)"', chart).group(1)
    assert len({pt.split(",")[1] for pt in totals.split()}) == 1
    # the use chart draws ratios: the same 50 % in every bucket
    use = svg.use_chart([full, half, tiny])
    allocated = re.search(r'class="allocated"[^>]*points="([^"]+)"', use).group(1)
    assert len({pt.split(",")[1] for pt in allocated.split()}) == 1
    assert 'class="used"' not in use  # nothing measured: no line, never a zero line


@pytest.mark.parametrize(
    ("key", "value", "text"),
    [
        ("gpu_hours_lost", 1234.5678, "1,234.6 GPU-h"),
        ("share_of_allocated", 0.0049, "0.5 %"),
        ("allocation_ratio", 0.8512, "85 %"),
        ("wait_s", {"p50": 720.0, "p95": 7560.0, "max": None},
         "p50 12 min, p95 2.1 h, max unknown"),
        ("hours", 168, "168 h"),
        ("idle_s", 5400, "1.5 h"),
        ("tiers", ["P1", "P2"], "P1; P2"),
        ("count", 3.0, "3"),
        ("flag", True, "yes"),
    ],
)  # fmt: skip
def test_evidence_values_in_human_units(key, value, text):
    from slurmgpu.views.evidence import value_text

    assert value_text(key, value) == text


def test_prom_passes_promtool_check_metrics(analysis):
    need("promtool")
    """Prometheus' own linter (base units, _ratio, help and type) accepts every family."""
    text = render_prom(doc(analysis))
    proc = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == proc.stderr == ""  # not even a lint warning
    # and the linter does catch what the names used to be
    bad = "# HELP x_gpu_hours x\n# TYPE x_gpu_hours gauge\nx_gpu_hours 1\n"
    proc = subprocess.run(
        ["promtool", "check", "metrics"], input=bad, capture_output=True, text=True, timeout=60
    )
    assert 'use base unit "seconds" instead of "hours"' in proc.stdout + proc.stderr
