"""Every panel of the Grafana dashboards (etc/grafana/dashboards) returns series from a real
Prometheus filled with what slurmgpu's own writers produce, plus DCGM-exporter samples.

The writers run for real on test data: `slurmgpu collect` (the pynvml double: an H100 node
with jobs 4242/4243 on whole GPUs, an A100 node with job 4250 on three MIG instances; three
passes each, the load changing between them), `slurmgpu report --format prom` with the idle
retrospective and `report --trend monthly --format prom` (a two-month sacct dump with jobstats
summaries), the autopilot textfile of a pass that proposed a change (records and a
calibration), and `check`'s textfile (NVML health counters and a recorded kernel log with
Xids). Their textfiles are "scraped" every minute over two hours the way Prometheus scrapes
node_exporter's textfile collector (an `instance` and `job` label added) and backfilled with
promtool, beside DCGM-exporter series (`DCGM_FI_DEV_GPU_UTIL`, `DCGM_FI_DEV_FB_USED`,
`DCGM_FI_DEV_POWER_USAGE`, `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`, the MIG engine-active ratio;
labels gpu, UUID, Hostname, hpc_job). The sacct dump carries Slurm's energy
(ConsumedEnergyRaw) and the policy an [energy] table, so the report writes energy, cost and CO2.

Then each target of each panel is run with the dashboard's variables substituted (the job
dashboard once per job: a whole-GPU job and a MIG job): no metric a panel names may be unknown
to Prometheus, every panel must return series for every job, and every target for one job at
least (a MIG instance has no NVML utilization, so that one target is empty for the MIG job).
"""

from __future__ import annotations

import json
import re
import time
import urllib.parse
import urllib.request
from collections import defaultdict
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.harness.prometheus import PrometheusServer, missing_programs
from tests.unit.idle.test_cli import js1  # a jobstats summary as its epilog stores it

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slurm_only("host", reason="needs no Slurm daemons (a Prometheus test)"),
]

ROOT = Path(__file__).resolve().parents[2]
BOARDS = sorted((ROOT / "etc" / "grafana" / "dashboards").glob("*.json"))
STEP = 60  # the scrape interval
SPAN = 2 * 3600  # two hours of samples
END = int(time.time()) // 60 * 60 - 120
START = END - SPAN
RANGE = "2h"  # $__range of the queries: the whole span
JOBS = ("4242", "4250")  # a whole-GPU job (H100 node), a MIG job (A100 node)
METRIC = re.compile(r"\b(slurmgpu_[a-z0-9_]+|DCGM_FI_[A-Z0-9_]+)\b")
SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})? (?P<value>\S+)$")

POLICY = """default_tier = "P2"
[tiers.P0]
qos = "p0"
priority = 1000
[tiers.P2]
qos = "p2"
priority = 100
[idle]
window_min = 60
warn_after_min = [30]
[energy]
pue = 1.25
price_per_kwh = 0.2
currency = "EUR"
gco2_per_kwh = 400
"""
HEADER = (
    "JobIDRaw|JobID|Cluster|Partition|QOS|Account|User|Submit|Start|End|ElapsedRaw|"
    "State|AllocTRES|NodeList|AdminComment|Comment|JobName|ConsumedEnergyRaw"
)
OCT, NOV = 1_760_522_400, 1_763_200_800  # 2025-10-15 10:00 and 2025-11-15 10:00 UTC


# -- the writers' inputs ---------------------------------------------------------------------


# (job, start, hours, partition, account, user, GPUs, utilization)
SACCT_JOBS = [
    ("4100", OCT, 4, "gpu", "ml", "alice", 2, 70),
    ("4101", OCT + 3600, 2, "debug", "phys", "carol", 1, 0),
    ("4242", NOV, 3, "gpu", "ml", "alice", 2, 60),
    ("4243", NOV + 600, 3, "gpu", "phys", "bob", 2, 0),
    ("4250", NOV + 1200, 2, "debug", "phys", "bob", 1, 20),
]


def gpu_energy_j(hours: int, gpus: int, util: int) -> int:
    """Slurm's ConsumedEnergyRaw (acct_gather_energy/gpu) of a run: 100 W per GPU idle, 4 W
    more per utilization percent."""
    return hours * 3600 * gpus * (100 + 4 * util)


def sacct_rows() -> list[str]:
    """SACCT_JOBS as sacct rows: two months, two partitions; jobs 4101 and 4243 idle from the
    start (the [idle] rule flags them). Each allocation row carries Slurm's GPU energy
    (ConsumedEnergyRaw)."""
    rows = []
    for job, start, hours, part, account, user, gpus, util in SACCT_JOBS:
        end = start + hours * 3600
        tres = f"billing=1,cpu=4,gres/gpu={gpus},mem=16G,node=1"
        common = [str(start - 300), str(start), str(end), str(end - start), "COMPLETED"]
        rows.append(
            "|".join([job, job, "c1", part, "p2", account, user, *common, tres, "gpu01",
                      js1(util, gpus), "", "train", str(gpu_energy_j(hours, gpus, util))])
        )  # fmt: skip
        rows.append(
            "|".join([f"{job}.batch", f"{job}.batch", "c1", "", "", account, user, *common,
                      "cpu=4,mem=16G,node=1", "gpu01", "", "", "batch", ""])
        )  # fmt: skip
    return rows


def run_cli(*args: str) -> str:
    from slurmgpu.cli import main

    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def collector_textfiles(tmp: Path) -> list[tuple[str, list[str]]]:
    """(node, the textfile of each of three passes) for an H100 node and a MIG A100 node."""
    from slurmgpu.measure.collector import CollectOptions, collect
    from tests.doubles.gpu_load import COLLECT_HOST, load_h100, load_mig
    from tests.doubles.machines import install_double, variant

    out = []
    with pytest.MonkeyPatch.context() as mp:
        nvml = install_double(mp)
        for node, name, loads in (
            ("gpu01", "dgx-h100", [[80, 40, 5], [60, 30, 5], [90, 50, 5]]),
            ("gpu02", "dgx-a100-mig", [None, None, None]),
        ):
            texts = []
            for k, util in enumerate(loads):

                def change(d, util=util):
                    return load_h100(d, util) if util else load_mig(d)

                where = tmp / f"{node}-{k}"
                where.mkdir()
                nvml.use_machine(variant(where, name, change))
                textfile = tmp / f"{node}.prom"
                options = CollectOptions(tmp / f"{node}.json", node, host_root=COLLECT_HOST,
                                         textfile=textfile)  # fmt: skip
                collect(options)
                texts.append(textfile.read_text())
            out.append((node, texts))
    return out


def report_textfiles(tmp: Path) -> list[str]:
    (tmp / "policy.toml").write_text(POLICY)
    (tmp / "s.txt").write_text("\n".join([HEADER, *sacct_rows()]) + "\n")
    base = ["report", "--policy", str(tmp / "policy.toml"), "--sacct-file", str(tmp / "s.txt"),
            "--capacity", "gpu=8", "--capacity", "debug=4", "--format", "prom"]  # fmt: skip
    return [run_cli(*base), run_cli(*base, "--trend", "monthly")]


def autopilot_textfile(tmp: Path) -> str:
    """The textfile a pass writes after proposing a change, with earlier changes in the log:
    one applied and verified, one applied and rolled back."""
    import datetime as dt

    from slurmgpu.advice.calibrate import Calibration, PartitionFidelity, Side, Tolerance
    from slurmgpu.advice.calibrate import WaitSummary as W
    from slurmgpu.autopilot.prom import write_prom
    from slurmgpu.autopilot.records import ChangeRecord, Predicted
    from slurmgpu.autopilot.run import PassResult
    from slurmgpu.model.rebalance import Move

    now = dt.datetime.fromtimestamp(END, dt.UTC).replace(microsecond=0)
    moves = (Move("gpu03", "gpu", "debug", "advise move:gpu:debug:8"),)

    def at(minutes: int) -> str:
        return (now - dt.timedelta(minutes=minutes)).isoformat()

    records = [
        ChangeRecord(at(600), "apply", id="ap-1", moves=moves),
        ChangeRecord(at(500), "verify", of="ap-1"),
        ChangeRecord(at(400), "apply", id="ap-2", moves=moves),
        ChangeRecord(at(300), "rollback", of="ap-2", moves=moves),
        ChangeRecord(at(5), "propose", id="ap-3", moves=moves, score=-0.3,
                     predicted=(Predicted("debug", 900.0, 300.0, -700.0, -450.0),
                                Predicted("gpu", 60.0, 75.0, 5.0, 30.0))),
    ]  # fmt: skip
    side = Side(0.6, W(600.0, 300.0, 1800.0))
    fidelity = (
        PartitionFidelity("gpu", 40, side, side, 0.9, 1.1, True, ""),
        PartitionFidelity("debug", 12, side, side, 0.7, 2.6, False, "baseline mean wait x2.6"),
    )
    result = PassResult(time=now.isoformat(), mode="propose", dry_run=False, status="proposed")
    path = tmp / "autopilot.prom"
    write_prom(path, result, records, Calibration(fidelity, Tolerance(), None, None))  # type: ignore[arg-type]
    return path.read_text()


def check_textfile(tmp: Path) -> str:
    """`check`'s textfile for two nodes: gpu01 with the Xids of a recorded kernel log and an
    uncorrected ECC error counted by NVML, gpu02 healthy."""
    from slurmgpu.fleet.check import CRITICAL_XIDS, CheckReport, health_problems
    from slurmgpu.fleet.xids import XidOptions, read_xids, xid_problems
    from slurmgpu.model.fleet import GpuHealth
    from slurmgpu.views.fleet_check import render_prometheus

    health = [
        GpuHealth(0, "00000000:3A:00.0", ecc_uncorrected_volatile=2, remapped_rows_pending=True),
        GpuHealth(1, "00000000:5D:00.0"),
    ]
    log = ROOT / "tests" / "data" / "kernel" / "journalctl-k.txt"
    xids = read_xids(
        XidOptions(host_root=str(tmp), kernel_log=str(log), state_path=str(tmp / "x.json")),
        CRITICAL_XIDS,
    )
    problems = health_problems("gpu01", health) + xid_problems("gpu01", xids, health, CRITICAL_XIDS)
    assert {p.kind for p in problems} >= {"xid", "ecc-uncorrected", "row-remap-pending"}
    return render_prometheus(CheckReport(("gpu01", "gpu02"), tuple(problems)))


# -- scraping and backfilling ----------------------------------------------------------------


class Scrapes:
    """Samples by metric family, in time order per series, as OpenMetrics text."""

    def __init__(self) -> None:
        self.families: dict[str, list[str]] = defaultdict(list)

    def scrape(self, text: str, instance: str, start: int, end: int) -> None:
        """The textfile's samples at every scrape in [start, end), with the target's labels."""
        target = f'instance="{instance}:9100",job="node"'
        lines = [line for line in text.splitlines() if line and not line.startswith("#")]
        for line in lines:
            m = SAMPLE.match(line)
            assert m, f"not a sample line: {line!r}"
            labels = f"{m['labels']},{target}" if m["labels"] else target
            for t in range(start, end, STEP):
                self.families[m["name"]].append(f"{m['name']}{{{labels}}} {m['value']} {t}")

    def dcgm(self, name: str, labels: dict[str, str], value) -> None:
        text = ",".join(f'{k}="{v}"' for k, v in {**labels, "instance": "dcgm:9400"}.items())
        for i, t in enumerate(range(START, END + 1, STEP)):
            self.families[name].append(f"{name}{{{text}}} {value(i)} {t}")

    def openmetrics(self) -> str:
        out = []
        for name, lines in self.families.items():
            out.append(f"# TYPE {name} gauge")
            out.extend(lines)
        return "\n".join(out) + "\n# EOF\n"


ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
H100_WATTS = 350.0  # the energy counters' rates
A100_WATTS = {"1": 210.0, "2": 280.0}


def counter(watts: float):
    """DCGM's energy counter (mJ since the driver loaded) of a GPU drawing `watts`."""
    return lambda i: 5e9 + i * STEP * watts * 1000


def dcgm_series(s: Scrapes) -> None:
    """DCGM exporter series with its HPC job mapping: job 4242 on GPUs 0 and 1 of gpu01, job
    4250 on three MIG instances of gpu02's GPUs 1 and 2, an idle GPU of gpu01 without a job.
    The energy counter is on each GPU's series and on each MIG instance's (its GPU's)."""
    for gpu, job in (("0", "4242"), ("1", "4242"), ("2", "")):
        labels = {"gpu": gpu, "UUID": f"GPU-h100-{gpu}", "device": f"nvidia{gpu}",
                  "modelName": "H100 80GB", "Hostname": "gpu01", "hpc_job": job}  # fmt: skip
        if not job:
            del labels["hpc_job"]
        s.dcgm("DCGM_FI_DEV_GPU_UTIL", labels, lambda i, g=int(gpu): (40 + 10 * g + i) % 100)
        s.dcgm("DCGM_FI_DEV_FB_USED", labels, lambda i: 30000 + i)
        s.dcgm("DCGM_FI_DEV_POWER_USAGE", labels, lambda i: 350.5 + i % 7)
        s.dcgm(ENERGY, labels, counter(H100_WATTS))
    for gpu, gi, profile in (("1", "1", "3g.20gb"), ("1", "2", "3g.20gb"), ("2", "6", "1g.10gb")):
        labels = {"gpu": gpu, "UUID": f"GPU-a100-{gpu}", "GPU_I_ID": gi,
                  "GPU_I_PROFILE": profile, "Hostname": "gpu02", "hpc_job": "4250"}  # fmt: skip
        s.dcgm("DCGM_FI_PROF_GR_ENGINE_ACTIVE", labels, lambda i: 0.25 + (i % 3) / 10)
        s.dcgm("DCGM_FI_DEV_FB_USED", labels, lambda i: 15000 - i)
        # a GPU-level field on a MIG instance's series carries its GPU's value
        s.dcgm(ENERGY, labels, counter(A100_WATTS[gpu]))
    for gpu in ("1", "2"):
        labels = {"gpu": gpu, "UUID": f"GPU-a100-{gpu}", "Hostname": "gpu02", "hpc_job": "4250"}
        s.dcgm("DCGM_FI_DEV_POWER_USAGE", labels, lambda i: 210.0 + i % 5)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    if missing_programs():
        pytest.fail(f"missing {missing_programs()}: run scripts/run-tests as root", pytrace=False)
    tmp = tmp_path_factory.mktemp("dashboards")
    s = Scrapes()
    for node, passes in collector_textfiles(tmp):
        third = SPAN // len(passes) // STEP * STEP
        for k, text in enumerate(passes):
            end = END + 1 if k == len(passes) - 1 else START + (k + 1) * third
            s.scrape(text, node, START + k * third, end)
    for text in [*report_textfiles(tmp), autopilot_textfile(tmp), check_textfile(tmp)]:
        s.scrape(text, "head", START, END + 1)
    dcgm_series(s)
    server = PrometheusServer(tmp / "prom", s.openmetrics()).up()
    yield server
    server.down()


# -- the queries -----------------------------------------------------------------------------


def api(server, path: str, **params: str) -> dict:
    url = f"{server.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=30) as answer:
        doc = json.load(answer)
    assert doc["status"] == "success", doc
    return doc["data"]


def substitute(expr: str, values: dict[str, str]) -> str:
    out = expr.replace("$__range", RANGE)
    for name, value in values.items():
        out = out.replace("${" + name + "}", value).replace("$" + name, value)
    assert "$" not in out, out
    return out


def run_target(server, target: dict, values: dict[str, str]) -> list:
    query = substitute(target["expr"], values)
    if target.get("instant"):
        return api(server, "query", query=query, time=str(END))["result"]
    return api(server, "query_range", query=query, start=str(START), end=str(END),
               step=str(STEP))["result"]  # fmt: skip


def variable_values(board: dict) -> list[dict[str, str]]:
    """The values the test gives the variables: All (`.*`) for a query variable, each test
    job for the job id."""
    names = {v["name"]: v["type"] for v in board["templating"]["list"]}
    fixed = {n: ".*" for n, kind in names.items() if kind == "query"}
    if "jobid" in names:
        return [{**fixed, "jobid": job} for job in JOBS]
    return [fixed]


def panels(board: dict) -> list[dict]:
    return [p for p in board["panels"] if p["type"] not in ("row", "text")]


def test_no_panel_names_a_metric_prometheus_does_not_have(prometheus):
    known = set(api(prometheus, "label/__name__/values"))
    for path in BOARDS:
        for p in panels(json.loads(path.read_text())):
            for t in p["targets"]:
                unknown = set(METRIC.findall(t["expr"])) - known
                assert not unknown, f"{path.name} {p['title']!r}: {sorted(unknown)}"


@pytest.mark.parametrize("path", BOARDS, ids=lambda p: p.stem)
def test_every_panel_returns_series(prometheus, path):
    board = json.loads(path.read_text())
    empty_targets = defaultdict(int)
    for values in variable_values(board):
        for p in panels(board):
            answers = [run_target(prometheus, t, values) for t in p["targets"]]
            assert any(answers), f"panel {p['title']!r} is empty for {values}"
            for t, answer in zip(p["targets"], answers, strict=True):
                empty_targets[(p["id"], t["refId"])] += not answer
    runs = len(variable_values(board))
    never = [k for k, n in empty_targets.items() if n == runs]
    assert not never, f"targets (panel id, refId) empty for every variable value: {never}"


@pytest.mark.parametrize("path", BOARDS, ids=lambda p: p.stem)
def test_every_query_variable_lists_values(prometheus, path):
    board = json.loads(path.read_text())
    for v in board["templating"]["list"]:
        if v["type"] != "query":
            continue
        metric, label = re.fullmatch(r"label_values\((\w+), (\w+)\)", v["definition"]).groups()
        values = api(prometheus, f"label/{label}/values", **{"match[]": metric})
        assert values, v["definition"]


def test_the_job_view_tells_gpus_and_mig_instances_apart(prometheus):
    board = json.loads((ROOT / "etc/grafana/dashboards/slurmgpu-job.json").read_text())
    [memory] = [p for p in board["panels"] if p["title"] == "GPU memory used"]
    by_source = {}
    for job in JOBS:
        got = [run_target(prometheus, t, {"jobid": job}) for t in memory["targets"]]
        by_source[job] = [len(series) for series in got]
    # collector: job 4242 on GPUs 0 and 1 (whole), job 4250 on three MIG instances; DCGM alike
    assert by_source == {"4242": [2, 2], "4250": [3, 3]}
    [devices] = [p for p in board["panels"] if p["title"] == "GPUs and MIG instances"]
    [answer] = run_target(prometheus, devices["targets"][0], {"jobid": "4250"})
    assert answer["value"][1] == "3"
    [util] = [p for p in board["panels"] if p["title"] == "Mean utilization"]
    [answer] = run_target(prometheus, util["targets"][0], {"jobid": "4242"})
    # the collector's three passes (80/40, 60/30, 90/50 on GPUs 0 and 1), time-weighted
    assert 40 < float(answer["value"][1]) < 70


def test_the_decisions_view_shows_the_pending_proposal_and_calibration(prometheus):
    wait = api(prometheus, "query", query="slurmgpu_autopilot_pending_predicted_mean_wait_seconds",
               time=str(END))["result"]  # fmt: skip
    got = {(r["metric"]["partition"], r["metric"]["when"]): float(r["value"][1]) for r in wait}
    assert got == {("debug", "before"): 900, ("debug", "after"): 300,
                   ("gpu", "before"): 60, ("gpu", "after"): 75}  # fmt: skip
    cal = api(prometheus, "query", query="slurmgpu_autopilot_partition_calibrated",
              time=str(END))["result"]  # fmt: skip
    assert {r["metric"]["partition"]: r["value"][1] for r in cal} == {"gpu": "1", "debug": "0"}
    records = api(prometheus, "query", query="slurmgpu_autopilot_records_total",
                  time=str(END))["result"]  # fmt: skip
    counts = {r["metric"]["action"]: r["value"][1] for r in records}
    assert (counts["apply"], counts["rollback"], counts["propose"]) == ("2", "1", "1")


def test_the_waste_view_shows_the_idle_jobs_of_the_dump(prometheus):
    """Jobs 4243 (2 GPUs, 3 h) and 4101 (1 GPU, 2 h) are idle from the start: the 60-minute
    window flags them, and the rest of each run is what the policy reclaims."""

    def instant(query: str) -> list:
        return api(prometheus, "query", query=query, time=str(END))["result"]

    flagged = {
        r["metric"]["jobid"]: float(r["value"][1])
        for r in instant("slurmgpu_idle_flagged_job_gpu_hours")
    }
    assert flagged == {"4243": 4.0, "4101": 1.0}
    by_partition = {
        r["metric"]["partition"]: float(r["value"][1])
        for r in instant("slurmgpu_idle_partition_reclaimable_gpu_hours")
    }
    assert by_partition == {"gpu": 4.0, "debug": 1.0}


def panel(uid: str, title: str) -> dict:
    board = json.loads((ROOT / "etc" / "grafana" / "dashboards" / f"{uid}.json").read_text())
    [found] = [p for p in board["panels"] if p["title"] == title]
    return found


def by_label(answer: list, label: str) -> dict[str, float]:
    return {r["metric"].get(label, ""): float(r["value"][1]) for r in answer}


def test_the_waste_view_shows_the_dumps_energy_cost_and_co2(prometheus):
    """kWh by partition from the dump's ConsumedEnergyRaw; cost and CO2 from the policy's
    [energy] table (PUE 1.25, 0.2 EUR and 400 g per kWh), in total and per partition."""
    kwh: dict[str, float] = defaultdict(float)
    for line in sacct_rows():
        f = dict(zip(HEADER.split("|"), line.split("|"), strict=True))
        if f["ConsumedEnergyRaw"]:
            kwh[f["Partition"]] += int(f["ConsumedEnergyRaw"]) / 3.6e6
    total = sum(kwh.values())
    values = {"partition": ".*"}
    [answer] = run_target(
        prometheus, panel("slurmgpu-waste", "GPU energy (kWh)")["targets"][0], values
    )
    assert float(answer["value"][1]) == pytest.approx(total)
    [cost] = run_target(prometheus, panel("slurmgpu-waste", "Energy cost")["targets"][0], values)
    assert (cost["metric"]["currency"], float(cost["value"][1])) == (
        "EUR",
        pytest.approx(total * 1.25 * 0.2),
    )
    [co2] = run_target(prometheus, panel("slurmgpu-waste", "CO2 (kg)")["targets"][0], values)
    assert float(co2["value"][1]) == pytest.approx(total * 1.25 * 0.4)
    [idle] = run_target(
        prometheus, panel("slurmgpu-waste", "Idle GPU energy (kWh)")["targets"][0], values
    )
    # jobs 4101 and 4243 ran at 0 % all along: all of their energy is idle, and some of the rest
    idle_runs = (gpu_energy_j(2, 1, 0) + gpu_energy_j(3, 2, 0)) / 3.6e6
    assert idle_runs < float(idle["value"][1]) < total
    kwh_t, _, cost_t, co2_t = panel("slurmgpu-waste", "Energy, cost and CO2 by partition")[
        "targets"
    ]
    assert by_label(run_target(prometheus, kwh_t, values), "partition") == pytest.approx(kwh)
    got_cost = by_label(run_target(prometheus, cost_t, values), "partition")
    assert got_cost == pytest.approx({p: k * 1.25 * 0.2 for p, k in kwh.items()})
    got_co2 = by_label(run_target(prometheus, co2_t, values), "partition")
    assert got_co2 == pytest.approx({p: k * 1.25 * 0.4 for p, k in kwh.items()})


def test_the_capacity_view_gives_kwh_per_used_gpu_hour(prometheus):
    """The dump's kWh per partition over its used GPU-hours (allocated x utilization)."""
    kwh: dict[str, float] = defaultdict(float)
    used: dict[str, float] = defaultdict(float)
    for line in sacct_rows():
        f = dict(zip(HEADER.split("|"), line.split("|"), strict=True))
        if f["ConsumedEnergyRaw"]:
            kwh[f["Partition"]] += int(f["ConsumedEnergyRaw"]) / 3.6e6
    for _job, _start, hours, part, _a, _u, gpus, util in SACCT_JOBS:
        used[part] += hours * gpus * util / 100
    [t] = panel("slurmgpu-capacity", "kWh per used GPU-hour")["targets"]
    got = {r["metric"]["partition"]: float(r["values"][-1][1])
           for r in run_target(prometheus, t, {"partition": ".*"})}  # fmt: skip
    assert got == pytest.approx({p: kwh[p] / used[p] for p in kwh})


def test_the_job_view_gives_the_jobs_energy_from_dcgms_counter(prometheus):
    """Job 4242's two whole H100s draw 350 W each for the two hours; job 4250's MIG instances
    (two 3g on GPU 1 at 210 W, one 1g on GPU 2 at 280 W) are charged slices / 7 of their GPU."""
    [t] = panel("slurmgpu-job", "GPU energy (kWh)")["targets"]
    seconds = SPAN
    expected = {
        "4242": 2 * H100_WATTS * seconds / 3.6e6,
        "4250": (2 * 3 / 7 * A100_WATTS["1"] + 1 / 7 * A100_WATTS["2"]) * seconds / 3.6e6,
    }
    for job, kwh in expected.items():
        [answer] = run_target(prometheus, t, {"jobid": job})
        assert float(answer["value"][1]) == pytest.approx(kwh, rel=0.02), job
