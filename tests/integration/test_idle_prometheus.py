"""`slurmgpu idle` against a real Prometheus server holding DCGM-exporter series.

Series are generated here (seeded: idle from the start, busy then idle, busy, flickering,
gappy, at the threshold), written in the DCGM exporter's naming with its HPC job mapping
(`DCGM_FI_DEV_GPU_UTIL{Hostname,gpu,UUID,hpc_job}`; a MIG instance with `GPU_I_ID`,
`GPU_I_PROFILE` and the engine-active ratio) and backfilled into Prometheus. The expected
answer comes from `tests/idle_reference.py`, which applies the rule literally; the command
must flag exactly those jobs, each `flagged_at` within one sample interval and the
reclaimable GPU-hours within 1 %.
"""

from __future__ import annotations

import json
import time
from datetime import datetime

import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from tests.harness.prometheus import PrometheusServer
from tests.idle_reference import Dev, generate, reference_flag

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slurm_only("host", reason="needs no Slurm daemons (a Prometheus test)"),
]

INTERVAL = 30.0
HOURS = 5
T0 = (int(time.time()) // 3600 - 12) * 3600  # twelve hours ago, on the hour
WINDOW_MIN, WARN = 60, (30, 50)
POLICY = f"""
default_tier = "P2"
[tiers.P0]
priority = 1000
[tiers.P2]
priority = 100
[idle]
window_min = {WINDOW_MIN}
util_pct = 1
warn_after_min = [{WARN[0]}, {WARN[1]}]
action = "cancel"
exempt_tiers = ["P0"]
exempt_interactive = true
max_gap_s = 300
"""
HEADER = (
    "JobIDRaw|JobID|Cluster|Partition|QOS|Account|User|Submit|Start|End|ElapsedRaw|"
    "TimelimitRaw|State|AllocTRES|ReqTRES|NodeList|AdminComment|Comment|JobName"
)


class Job:
    def __init__(
        self, job_id, devs, start, end, *, qos="p2", gpus=None, tres=None, batch=True, kind=""
    ):
        self.job_id, self.devs, self.start, self.end = job_id, devs, start, end
        self.qos, self.batch, self.kind = qos, batch, kind
        self.gpus = len(devs) if gpus is None else gpus
        self.tres = tres or f"billing=1,cpu=4,gres/gpu={self.gpus},mem=16G,node=1"

    def lines(self) -> list[str]:
        s, e = int(self.start), int(self.end)
        node = self.devs[0].node if self.devs else "gpu09"
        base = [
            self.job_id,
            self.job_id,
            "c1",
            "gpu",
            self.qos,
            "ml",
            "alice",
            str(s - 60),
            str(s),
            str(e),
            str(e - s),
            "600",
            "COMPLETED",
            self.tres,
            self.tres,
            node,
            "",
            "",
            "train",
        ]
        out = ["|".join(base)]
        if self.batch:
            step = [
                f"{self.job_id}.batch",
                f"{self.job_id}.batch",
                "c1",
                "",
                "",
                "ml",
                "alice",
                str(s),
                str(s),
                str(e),
                str(e - s),
                "",
                "COMPLETED",
                "cpu=4,mem=16G,node=1",
                "",
                node,
                "",
                "",
                "batch",
            ]
            out.append("|".join(step))
        return out


def openmetrics(jobs: list[Job]) -> str:
    util, engine = [], []
    for job in jobs:
        for d in job.devs:
            if d.mig:
                labels = (
                    f'gpu="{d.gpu}",GPU_I_ID="{d.mig}",GPU_I_PROFILE="{d.profile}",'
                    f'UUID="GPU-{job.job_id}-{d.gpu}",Hostname="{d.node}",'
                    f'hpc_job="{job.job_id}"'
                )
                engine += [
                    f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{labels}}} {u / 100:.6f} {t:.3f}"
                    for t, u in zip(d.times, d.util, strict=False)
                ]
            else:
                labels = (
                    f'gpu="{d.gpu}",UUID="GPU-{job.job_id}-{d.gpu}",'
                    f'Hostname="{d.node}",hpc_job="{job.job_id}"'
                )
                util += [
                    f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {u:g} {t:.3f}"
                    for t, u in zip(d.times, d.util, strict=False)
                ]
    text = ["# TYPE DCGM_FI_DEV_GPU_UTIL gauge", *util]
    text += ["# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge", *engine]
    return "\n".join(text) + "\n# EOF\n"


def build_jobs() -> list[Job]:
    jobs = []
    for seed in range(18):  # generated mixes, one to four GPUs each
        start = T0 + seed * 600
        _kind, devs = generate(seed, start, HOURS, 1 + seed % 4, INTERVAL)
        for d in devs:
            d.node = f"gpu{seed:02d}"
        jobs.append(Job(str(7000 + seed), devs, start, start + HOURS * 3600, kind=_kind))

    def flat(job_id, start, n, value, gpus=1, **kw):
        devs = [
            Dev(
                f"x/{g}",
                f"gpu{int(job_id) % 100:02d}",
                str(g),
                [start + 15 + INTERVAL * i for i in range(n)],
                [value] * n,
            )
            for g in range(gpus)
        ]
        return Job(job_id, devs, start, start + 15 + INTERVAL * n, **kw)

    jobs.append(flat("7100", T0, 400, 0.0, qos="p0"))  # idle, exempt tier
    jobs.append(flat("7101", T0, 400, 0.0, batch=False))  # idle, interactive
    short = flat("7102", T0, 400, 0.0, gpus=2)
    short.devs = short.devs[:1]  # holds 2 GPUs, one exports: undecided
    jobs.append(short)
    mig = flat(
        "7103", T0, 400, 0.0, tres="billing=1,cpu=4,gres/gpu:3g.40gb=1,gres/gpu=1,mem=16G,node=1"
    )
    mig.devs[0].mig, mig.devs[0].profile = "2", "3g.40gb"
    mig.gpus = 3 / 7  # as the accounting loader counts a 3g.40gb slice: 3 of 7 compute slices
    jobs.append(mig)
    return jobs


def expected(job: Job):
    if job.qos == "p0" or not job.batch or job.job_id == "7102":
        return None
    return reference_flag(job.devs, job.start, job.end, WINDOW_MIN * 60, 1.0, 300.0)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("idle-prom")
    jobs = build_jobs()
    server = PrometheusServer(root / "prom", openmetrics(jobs)).up(timeout=180)
    (root / "policy.toml").write_text(POLICY)
    (root / "sacct.txt").write_text(
        "\n".join([HEADER, *(line for j in jobs for line in j.lines())]) + "\n"
    )
    yield root, jobs, server
    server.down()


def run_idle(root, server, *extra):
    result = CliRunner().invoke(
        main,
        [
            "idle",
            "--policy",
            str(root / "policy.toml"),
            "--sacct-file",
            str(root / "sacct.txt"),
            "--prometheus",
            server.url,
            "--no-jobstats",
            "--no-collector-admin-comment",
            *extra,
        ],
    )
    assert result.exit_code == 0, result.output
    return result.output


def epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def test_flags_exactly_the_jobs_the_rule_defines(world):
    root, jobs, server = world
    doc = json.loads(run_idle(root, server, "--format", "json"))
    got = {j["job_id"]: j for j in doc["jobs"]}
    want = {j.job_id: (j, f) for j in jobs if (f := expected(j)) is not None}
    kinds = {j.kind for j, _ in want.values()}
    assert {"idle-from-start", "busy-then-idle"} <= kinds  # the mix holds both
    assert any(j.kind == "busy" for j in jobs if j.job_id not in want)
    assert set(got) == set(want)
    total = 0.0
    for job_id, (job, flag) in want.items():
        entry = got[job_id]
        assert abs(epoch(entry["flagged_at"]) - flag) <= INTERVAL, job_id
        hours = (job.end - flag) / 3600 * job.gpus
        total += hours
        assert entry["reclaimable_gpu_hours"] == pytest.approx(hours, rel=0.01), job_id
        assert entry["action"] == "cancel" and entry["action_at"] == entry["flagged_at"]
        assert len(entry["warnings"]) == 2
        assert epoch(entry["warnings"][0]) < epoch(entry["warnings"][1]) <= flag
    assert doc["reclaimable_gpu_hours"] == pytest.approx(total, rel=0.01)


def test_mig_slice_is_measured_by_its_engine_activity(world):
    root, _jobs, server = world
    doc = json.loads(run_idle(root, server, "--format", "json"))
    mig = next(j for j in doc["jobs"] if j["job_id"] == "7103")
    assert mig["gpus"] == pytest.approx(3 / 7)
    start = T0
    assert abs(epoch(mig["flagged_at"]) - (start + 15 + WINDOW_MIN * 60)) <= INTERVAL


def test_exempt_and_undecided_are_reported_not_flagged(world):
    root, _jobs, server = world
    doc = json.loads(run_idle(root, server, "--format", "json"))
    exempt = {j["job_id"]: j["exempt"] for j in doc["exempt"]}
    assert exempt == {"7100": "tier P0", "7101": "interactive"}
    undecided = {u["job_id"]: u["reason"] for u in doc["undecided"]}
    assert undecided["7102"] == "series for 1 of 2 GPUs"
    assert not {"7100", "7101", "7102"} & {j["job_id"] for j in doc["jobs"]}


def test_text_and_html(world):
    root, _jobs, server = world
    text = run_idle(root, server)
    assert "Reclaimable:" in text and "7103" in text and "Users by idle GPU-hours" in text
    html = run_idle(root, server, "--format", "html")
    assert html.startswith("<!DOCTYPE html>") and "7103" in html


def test_unreachable_prometheus_is_a_warning_not_a_failure(world):
    root, _jobs, _server = world
    result = CliRunner().invoke(
        main,
        [
            "idle",
            "--policy",
            str(root / "policy.toml"),
            "--sacct-file",
            str(root / "sacct.txt"),
            "--prometheus",
            "http://127.0.0.1:9",
            "--format",
            "json",
            "--prometheus-timeout",
            "2",
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["jobs"] == [] and doc["warnings"]
    assert len(doc["undecided"]) == len(build_jobs())


def test_report_carries_the_same_total_and_the_waste_ranking(world):
    root, _jobs, server = world
    idle_doc = json.loads(run_idle(root, server, "--format", "json"))
    result = CliRunner().invoke(
        main,
        ["report", "--policy", str(root / "policy.toml"), "--sacct-file",
         str(root / "sacct.txt"), "--prometheus", server.url, "--format", "json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    section = json.loads(result.output)["idle"]
    assert section["reclaimable_gpu_hours"] == idle_doc["reclaimable_gpu_hours"]
    assert section["flagged_runs"] == len(idle_doc["jobs"])
    (user,) = section["ranking"]["users"]  # every generated job is alice's
    assert user["user"] == "alice"
    assert user["reclaimable_gpu_hours"] == pytest.approx(idle_doc["reclaimable_gpu_hours"])
