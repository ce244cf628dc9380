"""The Grafana dashboards of etc/grafana/ against the classic dashboard JSON model of the schema
version they declare (`schemaVersion` 39, Grafana 10.4 to 11), and the provisioning files.

No Grafana server can be installed where the tests run, so the model's rules are checked here
(Grafana's dashboard JSON model docs and its dashboard kind schema): the dashboard's uid (1 to
40 characters of letters, digits, `-` and `_`), title, tags, time range, `templating.list`
and `annotations.list`; each panel's integer id, unique in the dashboard, type, title and
gridPos (h > 0, 1 <= w <= 24, 0 <= x, x + w <= 24, y >= 0; panels may not overlap); each
query panel's Prometheus targets (refId unique in the panel, a PromQL `expr`, the datasource
reference); every variable a query uses defined in `templating` or built into Grafana.
tests/integration/test_dashboards.py runs every query against a real Prometheus.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "etc" / "grafana"
DASHBOARDS = sorted((GRAFANA / "dashboards").glob("*.json"))
DATASOURCE_UID = "slurmgpu-prometheus"
SCHEMA_VERSION = 39  # the version whose rules this file checks
PANEL_TYPES = {"timeseries", "stat", "table", "bargauge", "text", "row"}
VARIABLE_TYPES = {"datasource", "query", "textbox", "custom", "constant", "interval"}
BUILT_IN = {"__range", "__range_s", "__range_ms", "__interval", "__interval_ms",
            "__rate_interval", "__all", "__name", "__field", "__series", "__value"}  # fmt: skip
UID = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
VARIABLE_USE = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")
METRIC = re.compile(r"\b(slurmgpu_[a-z0-9_]+|DCGM_FI_[A-Z0-9_]+)\b")


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def query_panels(board: dict) -> list[dict]:
    return [p for p in board["panels"] if p["type"] not in ("row", "text")]


def test_there_are_the_five_dashboards_of_issue_36():
    uids = {load(p)["uid"] for p in DASHBOARDS}
    assert uids == {
        "slurmgpu-job",
        "slurmgpu-waste",
        "slurmgpu-capacity",
        "slurmgpu-decisions",
        "slurmgpu-health",
    }


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_the_dashboard_fields_of_its_schema_version(path):
    board = load(path)
    assert board["schemaVersion"] == SCHEMA_VERSION
    assert UID.match(board["uid"]) and path.stem == board["uid"]
    assert isinstance(board["title"], str) and board["title"].strip()
    assert isinstance(board["tags"], list) and "slurmgpu" in board["tags"]
    assert isinstance(board["editable"], bool) and isinstance(board["version"], int)
    assert board["timezone"] in ("browser", "utc", "")
    assert board["graphTooltip"] in (0, 1, 2)
    assert {"from", "to"} <= set(board["time"])
    assert isinstance(board["templating"]["list"], list)
    assert isinstance(board["annotations"]["list"], list)
    assert isinstance(board["panels"], list) and board["panels"]
    for link in board["links"]:
        assert link["type"] in ("dashboards", "link") and link["title"]


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_panels_have_unique_ids_and_a_grid_position_that_overlaps_none(path):
    panels = load(path)["panels"]
    ids = [p["id"] for p in panels]
    assert all(isinstance(i, int) and i > 0 for i in ids) and len(set(ids)) == len(ids)
    boxes = []
    for p in panels:
        assert p["type"] in PANEL_TYPES, p["type"]
        assert isinstance(p["title"], str) and p["title"].strip()
        g = p["gridPos"]
        assert set(g) >= {"h", "w", "x", "y"} and all(isinstance(g[k], int) for k in "hwxy")
        assert g["h"] > 0 and 1 <= g["w"] <= 24 and g["x"] >= 0 and g["x"] + g["w"] <= 24
        assert g["y"] >= 0
        if p["type"] == "row":
            assert (g["h"], g["w"], g["x"]) == (1, 24, 0) and p["panels"] == []
        boxes.append((p["id"], g["x"], g["y"], g["x"] + g["w"], g["y"] + g["h"]))
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            apart = a[3] <= b[1] or b[3] <= a[1] or a[4] <= b[2] or b[4] <= a[2]
            assert apart, f"panels {a[0]} and {b[0]} overlap"


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_query_panel_has_prometheus_targets_on_the_datasource_variable(path):
    board = load(path)
    reference = {"type": "prometheus", "uid": "${datasource}"}
    for p in query_panels(board):
        assert p["datasource"] == reference, p["title"]
        assert p["targets"], f"panel {p['title']!r} has no query"
        refs = [t["refId"] for t in p["targets"]]
        assert len(set(refs)) == len(refs)
        for t in p["targets"]:
            assert t["datasource"] == reference
            assert isinstance(t["expr"], str) and METRIC.search(t["expr"]), t["expr"]
            assert t["expr"].count("(") == t["expr"].count(")")
            assert t["expr"].count("{") == t["expr"].count("}")
    for p in board["panels"]:
        if p["type"] == "text":
            assert p["options"]["mode"] == "markdown" and p["options"]["content"].strip()


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_variables_are_defined_and_the_datasource_is_the_provisioned_one(path):
    board = load(path)
    variables = board["templating"]["list"]
    names = [v["name"] for v in variables]
    assert len(set(names)) == len(names)
    assert all(v["type"] in VARIABLE_TYPES for v in variables)
    [ds] = [v for v in variables if v["type"] == "datasource"]
    assert ds["name"] == "datasource" and ds["query"] == "prometheus"
    assert ds["current"]["value"] == DATASOURCE_UID
    for v in variables:
        if v["type"] == "query":
            assert v["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert v["definition"] == v["query"]["query"]
            # Grafana builds the label-values query (qryType 1) from metric and label
            query = v["query"]
            assert query["qryType"] == 1
            assert v["definition"] == f"label_values({query['metric']}, {query['label']})"
    text = json.dumps([p.get("targets", []) for p in board["panels"]])
    text += json.dumps([p.get("options", {}).get("content", "") for p in board["panels"]])
    used = {a or b for a, b in VARIABLE_USE.findall(text)}
    assert used - set(names) - BUILT_IN == set()


def test_data_links_open_a_dashboard_of_these_files_with_its_variables():
    boards = {load(p)["uid"]: load(p) for p in DASHBOARDS}
    links = [
        link["url"]
        for board in boards.values()
        for p in board["panels"]
        for link in p.get("fieldConfig", {}).get("defaults", {}).get("links", [])
    ]
    assert links
    for url in links:
        m = re.match(r"^/d/([\w-]+)/[\w-]+\?(.*)$", url)
        assert m and m[1] in boards, url
        names = {v["name"] for v in boards[m[1]]["templating"]["list"]}
        given = re.findall(r"var-(\w+)=", m[2])
        assert given and set(given) <= names, url


def test_the_provisioning_files_point_at_the_datasource_and_the_dashboards():
    ds = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "slurmgpu.yaml").read_text())
    assert ds["apiVersion"] == 1
    [source] = ds["datasources"]
    assert (source["type"], source["uid"], source["access"]) == (
        "prometheus",
        DATASOURCE_UID,
        "proxy",
    )
    boards = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "slurmgpu.yaml").read_text())
    [provider] = boards["providers"]
    assert provider["type"] == "file" and provider["options"]["path"].startswith("/")


def test_the_docs_name_every_dashboard_and_every_series_a_panel_queries():
    docs = (ROOT / "docs" / "dashboards.md").read_text(encoding="utf-8")
    for path in DASHBOARDS:
        board = load(path)
        assert f"etc/grafana/dashboards/{path.name}" in docs
        for p in query_panels(board):
            for t in p["targets"]:
                for metric in METRIC.findall(t["expr"]):
                    in_code = re.search(rf"`[^`\n]*\b{metric}\b[^`\n]*`", docs)
                    assert in_code, f"{metric} ({board['uid']}) not in the docs"


def test_the_job_energy_charges_a_mig_instance_the_share_slurmgpu_charges():
    """The job dashboard's energy sums DCGM's counter per series, a MIG instance's (its GPU's
    counter) times a share picked by its profile: the share must be slurmgpu's own rule
    (measure/collector/energy.py, docs/energy.md) for every profile size, and a whole GPU's
    series (no GPU_I_PROFILE) counts once."""
    from slurmgpu.measure.collector.energy import mig_share

    board = load(GRAFANA / "dashboards" / "slurmgpu-job.json")
    [panel] = [p for p in board["panels"] if p["title"] == "GPU energy (kWh)"]
    [target] = panel["targets"]
    terms = target["expr"].removeprefix("sum(").split(") / 3.6e9")[0].split(" or ")
    shares = {}
    for term in terms:
        assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" in term and "[$__range]" in term, term
        m = re.fullmatch(r'(?:(\d+)/(\d+) \* )?increase\(.*GPU_I_PROFILE(=~?)"([^"]*)".*', term)
        assert m, term
        share = int(m[1]) / int(m[2]) if m[1] else 1.0
        shares["" if m[3] == "=" else m[4]] = share
    assert shares.pop("") == 1.0  # a whole GPU: not an instance, its whole counter
    for k in range(1, 8):
        [(pattern, share)] = [(p, s) for p, s in shares.items() if re.fullmatch(p, f"{k}g.10gb")]
        assert share == pytest.approx(mig_share(f"{k}g.10gb")), pattern
        assert re.fullmatch(pattern, f"{k}g.10gb+me") and not re.fullmatch(pattern, "1c.3g.40gb")
    assert len(shares) == 7
