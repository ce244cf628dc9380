"""The soak (issue #33): slurmgpu's acting set deployed on the multi-node test cluster as a site
would, a compressed workload, faults injected while it runs, and invariants checked after.

Deployed (all real processes): the collector Epilog on every node (`collect --epilog`), the
tiers' job_submit module beside a site script (`gen-job-submit --module` +
tests/data/tiers/site-job_submit.lua), `idle --live` in cancel mode every `idle_period_s`,
`autopilot` in apply mode every `autopilot_period_s`, `report` and `ingest` every
`report_period_s`. GPU utilization comes from a real Prometheus that scrapes an exporter
(`Exporter`: DCGM's naming, `hpc_job` = the raw job id) every second; what each job shows is
its plan: busy (40-95 %), idle (0 %), garbage (-5 % or NaN the whole run) or stale (0 % for
15 s, then no more samples).

The workload (seeded): batch jobs of tiers P0/P1/P2 (P2 through the module's default), 3-task
arrays with a kind per task, interactive allocations (`salloc --no-shell`), jobs exempt by
`--comment idle-exempt=data-loading`. Faults (seeded times): slurmctld restart, `scontrol
reconfigure`, a node drained then resumed, a node set DOWN then resumed, Prometheus stopped and
started again and frozen (SIGSTOP) for a while, the mail server stopped and started, the state
disk (a small tmpfs) filled up for a while, a share of the timer passes SIGKILLed (with their
process group, as systemd does) at a seeded random point, and overlapping passes.

`Soak(cluster, config, work).run()` returns a `SoakResult`: figures and one `Invariant` per
rule, each with its evidence. The CI test and benchmarks/soak.py only differ in size.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.harness.mail import MailServer
from tests.harness.prometheus import free_port

REPO = Path(__file__).resolve().parents[2]
SITE_SCRIPT = REPO / "tests" / "data" / "tiers" / "site-job_submit.lua"
PARTITIONS = (
    "PartitionName=train Nodes=gpu[01-02] Default=YES MaxTime=INFINITE State=UP PriorityTier=1",
    "PartitionName=infer Nodes=gpu03 MaxTime=INFINITE State=UP PriorityTier=1",
    "PartitionName=spare Nodes=gpu04 MaxTime=INFINITE State=UP PriorityTier=1",
)
QOS = {"P0": "soak_p0", "P1": "soak_p1", "P2": "soak_p2"}
WINDOW_MIN, UTIL_PCT, MAX_GAP_S = 0.75, 1, 10
POLICY = f"""
default_tier = "P2"
priority_weight_qos = 10000
[tiers.P0]
qos = "{QOS["P0"]}"
priority = 1000
preempts = ["P2"]
preempt_mode = "requeue"
[tiers.P1]
qos = "{QOS["P1"]}"
priority = 500
[tiers.P2]
qos = "{QOS["P2"]}"
priority = 100
[idle]
window_min = {WINDOW_MIN}
util_pct = {UTIL_PCT}
warn_after_min = [0.25, 0.5]
action = "cancel"
exempt_tiers = ["P0"]
exempt_interactive = true
exempt_reasons = ["data-loading"]
max_gap_s = {MAX_GAP_S}
min_notice_min = 0.1
mail_from = "slurmgpu@example.org"
mail_domain = "example.org"
max_actions_per_run = 5
[autopilot]
mode = "apply"
max_nodes_per_pass = 1
max_nodes_per_day = 4
cooldown_h = 0
verify_after_min = 0
min_gain = 0.02
rollback_tolerance = 0.25
rollback_slack_s = 5
kill_switch = "{{switch}}"
[objective]
perturb_submit_s = 5
"""
KINDS = ("busy", "idle", "neg", "nan", "stale")
TEMP_NAME = re.compile(r"(\.tmp$|^\.nfs|~$|\.partial$)")


@dataclass(frozen=True)
class SoakConfig:
    """The size and the pace of one soak; the defaults are the CI size."""

    seed: int = 33
    jobs: int = 100  # submissions (an array counts once; its 3 tasks are jobs in sacct)
    span_s: float = 110.0  # submissions spread over this many seconds
    drain_s: float = 60.0  # after the span, wait at most this long for the queue to empty
    idle_period_s: float = 8.0
    autopilot_period_s: float = 60.0
    report_period_s: float = 45.0
    kill_share: float = 0.2  # share of timer passes SIGKILLed at a random point
    overlap_share: float = 0.15  # share of passes started while another of its kind runs
    faults: bool = True
    state_disk_mib: int = 16


@dataclass
class JobPlan:
    """One submission: what it asks for and what its GPUs show."""

    seq: int
    shape: str  # batch | array | interactive
    tier: str
    partition: str
    gpus: int
    seconds: int
    kinds: tuple[str, ...]  # one per task (batch, interactive: one)
    exempt: bool = False
    job_id: int | None = None
    refused: str = ""

    @property
    def name(self) -> str:
        return f"soak-{self.seq}"

    def kind_of(self, task: int | None) -> str:
        return (
            self.kinds[task or 0] if task is not None and task < len(self.kinds) else self.kinds[0]
        )


# 0: nothing changed, 3: changed (docs/acting.md "Exit codes"); None: killed by the soak
OK_EXITS = (0, 3, None)


@dataclass
class PassRecord:
    timer: str
    started: float
    seconds: float
    rc: int | None
    killed: bool = False
    stalled: bool = False
    overlap: bool = False
    stderr: str = ""


@dataclass
class Invariant:
    name: str
    ok: bool
    checked: int
    evidence: list[str] = field(default_factory=list)

    def line(self) -> str:
        head = f"{'PASS' if self.ok else 'FAIL'} {self.name} ({self.checked} checked)"
        return head + "".join(f"\n    {e}" for e in self.evidence[:12])


@dataclass
class SoakResult:
    config: SoakConfig
    jobs_submitted: int
    jobs_in_sacct: int
    refused: int
    refused_why: dict[str, int]
    faults: list[tuple[float, str]]
    passes: list[PassRecord]
    actions: dict[str, int]
    invariants: list[Invariant]
    wall_s: float

    def failed(self) -> list[Invariant]:
        return [i for i in self.invariants if not i.ok]

    def figures(self) -> dict:
        by_timer: dict[str, list[PassRecord]] = {}
        for p in self.passes:
            by_timer.setdefault(p.timer, []).append(p)
        timers = {}
        for name, ps in sorted(by_timer.items()):
            clean = sorted(p.seconds for p in ps if not p.killed)
            timers[name] = {
                "passes": len(ps),
                "killed": sum(p.killed for p in ps),
                "overlapping": sum(p.overlap for p in ps),
                "failed_rc": sum(1 for p in ps if not p.killed and p.rc not in OK_EXITS),
                "stalled": sum(p.stalled for p in ps),
                "median_s": round(clean[len(clean) // 2], 2) if clean else None,
                "max_s": round(clean[-1], 2) if clean else None,
            }
        return {
            "seed": self.config.seed,
            "submissions": self.jobs_submitted,
            "jobs_in_sacct": self.jobs_in_sacct,
            "refused_submissions": self.refused,
            "refused_why": self.refused_why,
            "faults": [f"{t:.0f}s {what}" for t, what in self.faults],
            "actions": self.actions,
            "timers": timers,
            "invariants": {i.name: "PASS" if i.ok else "FAIL" for i in self.invariants},
            "wall_s": round(self.wall_s, 1),
        }

    def report(self) -> str:
        lines = [json.dumps(self.figures(), indent=1)]
        lines += [i.line() for i in self.invariants]
        return "\n".join(lines)


# ---------------------------------------------------------------- the exporter


class Exporter:
    """DCGM-named utilization of every running soak job, from its plan, for Prometheus to
    scrape. A thread reads squeue every second (keeping the last answer while slurmctld is
    away); the handler renders from that."""

    def __init__(self, cluster, plans: dict[str, JobPlan]) -> None:
        self.cluster = cluster
        self.plans = plans
        self.running: dict[str, tuple[str, int | None, float]] = {}  # raw id -> name, task, seen
        self.stop = threading.Event()
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                body = exporter.render(time.time()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.target = f"127.0.0.1:{self.server.server_port}"
        self.threads = [
            threading.Thread(target=self.server.serve_forever, daemon=True),
            threading.Thread(target=self._poll, daemon=True),
        ]
        for t in self.threads:
            t.start()

    def _poll(self) -> None:
        while not self.stop.is_set():
            with contextlib.suppress(Exception):
                out = self.cluster.run(
                    ["squeue", "-h", "-t", "R", "-o", "%A|%j|%K"], check=True, timeout=10
                ).stdout
                now = time.time()
                seen = {}
                for line in out.splitlines():
                    raw, name, task = ([*line.split("|"), "", ""])[:3]
                    if not name.startswith("soak-"):
                        continue
                    first = self.running.get(raw, (name, None, now))[2]
                    seen[raw] = (name, int(task) if task.isdigit() else None, first)
                self.running = seen
            self.stop.wait(1.0)

    def kind(self, raw: str) -> str:
        name, task, _ = self.running[raw]
        plan = self.plans.get(name)
        return plan.kind_of(task) if plan else "busy"

    def render(self, now: float) -> str:
        lines = ["# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
        for raw, (name, task, first) in list(self.running.items()):
            plan = self.plans.get(name)
            if plan is None:
                continue
            kind = plan.kind_of(task)
            if kind == "stale" and now - first > 15:
                continue
            value = {"idle": "0", "stale": "0", "neg": "-5", "nan": "NaN"}.get(kind)
            for gpu in range(plan.gpus):
                v = value or f"{40 + (int(raw) * 7 + gpu * 13 + int(now)) % 56}"
                labels = f'gpu="{gpu}",UUID="GPU-{raw}-{gpu}",Hostname="soak",hpc_job="{raw}"'
                lines.append(f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {v}")
        return "\n".join(lines) + "\n"

    def down(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


class ScrapingPrometheus:
    """A real Prometheus that scrapes `target` every second into `root/data`; `down()` and
    `up()` again keep its port and its data (an outage, not a new server)."""

    def __init__(self, root: Path, target: str) -> None:
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        root.mkdir(parents=True, exist_ok=True)
        self.config = root / "prometheus.yml"
        self.config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            f"scrape_configs:\n  - job_name: dcgm\n    static_configs:\n"
            f"      - targets: ['{target}']\n"
        )

    def up(self, timeout: float = 120) -> None:
        argv = [
            "prometheus",
            f"--config.file={self.config}",
            f"--storage.tsdb.path={self.root / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=warn",
        ]
        with open(self.root / "prometheus.log", "ab") as log:
            self.proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.root, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while True:
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer,
            ):
                if answer.status == 200:
                    return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"prometheus did not start: {self.root / 'prometheus.log'}")
            time.sleep(0.3)

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def down(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def samples(self, job: str, at: float, seconds: float) -> list[list[tuple[float, float]]]:
        """Each device's raw samples of job `job` in (at - seconds, at]."""
        query = f'DCGM_FI_DEV_GPU_UTIL{{hpc_job="{job}"}}[{math.ceil(seconds)}s]'
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": query, "time": at})
        with urllib.request.urlopen(url, timeout=30) as answer:
            doc = json.load(answer)
        return [[(float(t), float(v)) for t, v in s["values"]] for s in doc["data"]["result"]]


# ---------------------------------------------------------------- timers


class Timer:
    """One systemd timer's worth of passes: every `period` seconds run `argv`; a seeded share
    is SIGKILLed (the whole process group) at a random point, a share gets a second pass
    started beside it; a pass running past `limit` is killed and recorded as stalled."""

    def __init__(
        self, soak: Soak, name: str, argv: list[str], period: float, limit: float, typical: float
    ):
        self.soak, self.name, self.argv = soak, name, argv
        self.period, self.limit, self.typical = period, limit, typical
        self.rng = random.Random(f"{soak.config.seed}-{name}")
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.count = 0

    def start(self) -> None:
        self.thread.start()

    def _loop(self) -> None:
        while not self.soak.stopping.is_set():
            t0 = time.monotonic()
            kill_at = None
            if self.rng.random() < self.soak.config.kill_share:
                kill_at = self.rng.uniform(0.1, self.typical)  # a point inside a pass
            overlap = self.rng.random() < self.soak.config.overlap_share
            extra = None
            if overlap:
                extra = threading.Thread(target=self.one, args=(None, True), daemon=True)
                extra.start()
                time.sleep(self.rng.uniform(0.0, 1.5))
            self.one(kill_at, False)
            if extra:
                extra.join(self.limit + 30)
            self.soak.stopping.wait(max(0.0, self.period - (time.monotonic() - t0)))

    def one(self, kill_at: float | None, overlap: bool) -> PassRecord:
        self.count += 1
        log = self.soak.logs / f"{self.name}-{self.count:04d}{'-o' if overlap else ''}"
        started = time.monotonic()
        with open(f"{log}.out", "wb") as out, open(f"{log}.err", "wb") as err:
            proc = subprocess.Popen(
                self.argv,
                stdout=out,
                stderr=err,
                env=self.soak.env,
                cwd=self.soak.work,
                start_new_session=True,
            )
            killed = stalled = False
            while proc.poll() is None:
                elapsed = time.monotonic() - started
                if kill_at is not None and elapsed >= kill_at:
                    killed = True
                elif elapsed > self.limit:
                    stalled = True
                if killed or stalled:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    break
                time.sleep(0.05)
        record = PassRecord(
            self.name,
            started - self.soak.t0,
            time.monotonic() - started,
            proc.returncode,
            killed,
            stalled,
            overlap,
            Path(f"{log}.err").read_text(errors="replace"),
        )
        with self.soak.lock:
            self.soak.passes.append(record)
        return record


# ---------------------------------------------------------------- the soak


class Soak:
    def __init__(self, cluster, config: SoakConfig, work: Path) -> None:
        self.cluster, self.config, self.work = cluster, config, Path(work)
        self.rng = random.Random(config.seed)
        self.state = self.work / "state"  # the small tmpfs
        self.logs = self.work / "logs"
        self.passes: list[PassRecord] = []
        self.faults: list[tuple[float, str]] = []
        self.plans: dict[str, JobPlan] = {}
        self.salloc: list[tuple[JobPlan, subprocess.Popen]] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.t0 = time.monotonic()
        self.mounted = False
        self.env = {
            **os.environ,
            **cluster.env,
            "PYTHONPATH": str(REPO),
            "SLURMGPU_LOCK_DIR": str(self.state / "locks"),
            "XDG_CACHE_HOME": str(self.work / "cache"),
        }

    # ---------------------------------------------------------------- deploy

    def slurmgpu(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, "-m", "slurmgpu", *args],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=self.work,
            timeout=timeout,
        )
        if proc.returncode not in OK_EXITS:
            raise AssertionError(f"slurmgpu {' '.join(args)}: {proc.stdout}\n{proc.stderr}")
        return proc

    def deploy(self) -> None:
        c = self.cluster
        for d in (self.state, self.logs, self.work / "spool", self.work / "store"):
            d.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                "mount",
                "-t",
                "tmpfs",
                "-o",
                f"size={self.config.state_disk_mib}m",
                "soak-state",
                str(self.state),
            ],
            check=True,
        )
        self.mounted = True
        self.policy = self.work / "policy.toml"
        self.switch = self.work / "autopilot.disable"
        self.policy.write_text(POLICY.replace("{switch}", str(self.switch)))
        self.slurmgpu(
            "qos", "apply", "--policy", str(self.policy), "--log", str(self.work / "qos.jsonl")
        )
        c.allow_qos(*QOS.values())
        module = c.conf_dir / "slurmgpu_tiers.lua"
        self.slurmgpu("gen-job-submit", "--module", "--policy", str(self.policy), "-o", str(module))
        epilog = self.work / "epilog.sh"
        epilog.write_text(
            "#!/bin/sh\n"
            f"export SLURM_CONF={c.slurm_conf} PYTHONPATH={REPO}\n"
            f"{sys.executable} -m slurmgpu collect --epilog"
            f" --state {self.work}/collect-$(hostname).json --spool {self.work}/spool"
            f" --node $(hostname) --log-file {self.logs}/epilog.log || true\n"
            "exit 0\n"
        )
        epilog.chmod(0o755)
        extra = f"Epilog={epilog}\nPriorityWeightQOS=10000\nKillWait=2\n"
        # the partitions rebalance may change live in an included file, as docs/rebalance.md
        # asks of a site, so that autopilot's moves outlive a restart or reconfigure
        self.partitions_conf = self.work / "partitions.conf"
        self.partitions_conf.write_text("\n".join(PARTITIONS) + "\n")
        c.reconfigure(
            partitions=[f"Include {self.partitions_conf}"],
            extra_conf=extra,
            job_submit_lua=SITE_SCRIPT.read_text(),
        )
        self.exporter = Exporter(c, self.plans)
        self.prom = ScrapingPrometheus(self.work / "prom", self.exporter.target)
        self.prom.up()
        self.mail = MailServer()
        self.mail.up(timeout=120)
        self.since = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 60))

    def timers(self) -> list[Timer]:
        py = [sys.executable, "-m", "slurmgpu"]
        s, cfg = self.state, self.config
        idle = [
            *py,
            "idle",
            "--live",
            "--policy",
            str(self.policy),
            "--prometheus",
            self.prom.url,
            "--smtp",
            self.mail.smtp,
            "--state-dir",
            str(s / "idle"),
            "--format",
            "json",
        ]
        auto = [
            *py,
            "autopilot",
            "--policy",
            str(self.policy),
            "--since",
            self.since,
            "--live",
            "--state-dir",
            str(s / "autopilot"),
            "--format",
            "json",
            "--no-forecast",
            "--candidate",
            "move:train:infer:8",
            "--partitions-conf",
            str(self.partitions_conf),
        ]
        report = [
            *py,
            "report",
            "--since",
            "1d",
            "--policy",
            str(self.policy),
            "--format",
            "json",
            "--measure-spool",
            str(self.work / "spool"),
            "-o",
            str(s / "report.json"),
        ]
        ingest = [*py, "ingest", "--store", str(s / "store"), "--since", "1d"]
        return [
            Timer(self, "idle", idle, cfg.idle_period_s, cfg.idle_period_s * 3, 2.0),
            Timer(self, "autopilot", auto, cfg.autopilot_period_s, cfg.autopilot_period_s * 2, 3.0),
            Timer(self, "report", report, cfg.report_period_s, cfg.report_period_s * 2, 3.0),
            Timer(self, "ingest", ingest, cfg.report_period_s, cfg.report_period_s * 2, 2.0),
        ]

    # ---------------------------------------------------------------- workload

    def make_plans(self) -> list[tuple[float, JobPlan]]:
        r, out = self.rng, []
        for seq in range(self.config.jobs):
            at = r.uniform(0, self.config.span_s)
            shape = r.choices(("batch", "array", "interactive"), (0.75, 0.15, 0.10))[0]
            tier = r.choices(("P0", "P1", "P2"), (0.15, 0.3, 0.55))[0]
            n = 3 if shape == "array" else 1
            kinds = tuple(r.choices(KINDS, (0.5, 0.3, 0.07, 0.06, 0.07))[0] for _ in range(n))
            idle_like = any(k != "busy" for k in kinds)
            seconds = r.randint(50, 65) if idle_like else r.randint(5, 25)
            plan = JobPlan(
                seq,
                shape,
                tier,
                r.choices(("train", "infer", "spare"), (0.3, 0.5, 0.2))[0],  # infer is short
                r.choice((1, 1, 2)) if shape != "array" else 1,
                seconds,
                kinds,
                exempt=shape == "batch" and r.random() < 0.08,
            )
            self.plans[plan.name] = plan
            out.append((at, plan))
        return sorted(out, key=lambda x: x[0])

    def submit(self, plan: JobPlan) -> None:
        args = ["-J", plan.name, "-p", plan.partition, f"--gres=gpu:{plan.gpus}"]
        if plan.tier != "P2":
            args.append(f"--qos={QOS[plan.tier]}")  # P2: the module's default tier
        if plan.exempt:
            args.append("--comment=idle-exempt=data-loading")
        if plan.shape == "interactive":
            argv = ["salloc", "--no-shell", *args, "-t", "1"]
            proc = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env={**self.env},
                text=True,
                start_new_session=True,
            )
            self.salloc.append((plan, proc))
            return
        args += ["-t", "3"]
        if plan.shape == "array":
            args.append("--array=0-2")
        script = f"#!/bin/sh\nsleep {plan.seconds}\n"
        proc = self.cluster.run(
            ["sbatch", "--parsable", "--requeue", *args], check=False, input=script, timeout=60
        )
        if proc.returncode == 0:
            plan.job_id = int(proc.stdout.strip().split(";")[0])
        else:
            plan.refused = (proc.stderr or proc.stdout).strip()[:200]

    def collect_salloc(self) -> set[str]:
        """The interactive jobs' ids; those whose salloc still waits are cancelled here (by
        the soak: the returned ids)."""
        ended_by_soak = set()
        for plan, proc in self.salloc:
            waiting = proc.poll() is None
            if waiting:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
            try:
                _, err = proc.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                _, err = proc.communicate()
            m = re.search(r"job allocation (\d+)", err or "")
            if m:
                plan.job_id = int(m.group(1))
                if waiting:
                    ended_by_soak.add(m.group(1))
            elif plan.job_id is None:
                plan.refused = (err or "no allocation id").strip()[:200]
        return ended_by_soak

    # ---------------------------------------------------------------- faults

    def fault_schedule(self) -> list[tuple[float, str]]:
        if not self.config.faults:
            return []
        r, span = random.Random(f"{self.config.seed}-faults"), self.config.span_s
        names = [
            "slurmctld-restart",
            "reconfigure",
            "drain-resume",
            "down-resume",
            "prometheus-down",
            "prometheus-freeze",
            "mail-down",
            "disk-full",
        ]
        rounds = max(1, round(span / 300))  # the long run: every fault once per 5 minutes
        part = span / rounds
        return sorted(
            (k * part + r.uniform(0.1 * part, 0.9 * part), n) for k in range(rounds) for n in names
        )

    def inject(self, name: str) -> None:
        c, r = self.cluster, random.Random(f"{self.config.seed}-{name}")
        self.faults.append((time.monotonic() - self.t0, name))
        if name == "slurmctld-restart":  # from another process, as systemctl would: a
            # daemon started from this thread would die with it (PR_SET_PDEATHSIG)
            subprocess.run(c.control_command("restart-slurmctld"), check=False, timeout=120)
            c.sync()
        elif name == "reconfigure":
            c.run(["scontrol", "reconfigure"], check=False, timeout=60)
        elif name in ("drain-resume", "down-resume"):
            node = r.choice(("gpu02", "gpu04"))
            state = "DRAIN" if name == "drain-resume" else "DOWN"
            c.run(
                ["scontrol", "update", f"NodeName={node}", f"State={state}", "Reason=soak"],
                check=False,
            )
            self.stopping.wait(12)
            c.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], check=False)
        elif name == "prometheus-down":
            self.prom.down()
            self.stopping.wait(12)
            self.prom.up()
        elif name == "prometheus-freeze":
            self.prom.signal(signal.SIGSTOP)
            self.stopping.wait(10)
            self.prom.signal(signal.SIGCONT)
        elif name == "mail-down":
            self.mail._stop()
            self.stopping.wait(15)
            self.mail.up(timeout=60)
        elif name == "disk-full":
            filler = self.state / "soak-filler"
            with open(filler, "wb") as f, contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * (1 << 20))
            self.stopping.wait(15)
            filler.unlink(missing_ok=True)

    # ---------------------------------------------------------------- run

    def run(self) -> SoakResult:
        self.t0 = time.monotonic()
        self.deploy()
        timers = self.timers()
        schedule = [(at, "submit", p) for at, p in self.make_plans()]
        schedule += [(at, "fault", n) for at, n in self.fault_schedule()]
        schedule.sort(key=lambda x: x[0])
        start = time.monotonic()
        for t in timers:
            t.start()
        fault_threads = []
        try:
            for at, what, obj in schedule:
                time.sleep(max(0.0, at - (time.monotonic() - start)))
                if what == "submit":
                    self.submit(obj)
                else:  # faults run beside the workload, one thread each
                    th = threading.Thread(target=self.inject, args=(obj,), daemon=True)
                    th.start()
                    fault_threads.append(th)
            for th in fault_threads:
                th.join(180)
            self.wait_queue(self.config.drain_s)
        finally:
            self.stopping.set()
            for t in timers:
                t.thread.join(self.config.autopilot_period_s * 3)
        return self.finish(timers)

    def wait_queue(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and self.soak_jobs_active():
            time.sleep(2)

    def soak_jobs_active(self, field: str = "%A") -> list[str]:
        out = self.cluster.run(["squeue", "-h", "-o", f"{field}|%j"], check=False, timeout=30)
        return [ln.split("|")[0] for ln in out.stdout.splitlines() if "|soak-" in ln]

    def finish(self, timers: list[Timer]) -> SoakResult:
        # one clean pass of each timer after the faults: what a killed pass left pending is
        # the next pass's to finish or undo
        self.stopping.clear()
        for t in timers:
            t.one(None, False)
        self.stopping.set()
        teardown = self.collect_salloc()
        teardown |= set(self.soak_jobs_active())
        for _ in range(60):
            active = self.soak_jobs_active("%i")  # 12_3, or 12_[4-6] for pending tasks
            if not active:
                break
            teardown |= set(self.soak_jobs_active())
            self.cluster.run(["scancel", *active], check=False, timeout=60)
            time.sleep(1)
        time.sleep(3)  # slurmdbd has the last ends
        return check_all(self, teardown)

    def down(self) -> None:
        self.stopping.set()
        for what in ("exporter", "prom", "mail"):
            obj = getattr(self, what, None)
            if obj is not None:
                with contextlib.suppress(Exception):
                    obj.down()
        if self.mounted:
            keep = self.work / "state-copy"
            with contextlib.suppress(Exception):
                shutil.copytree(self.state, keep, symlinks=True)
            subprocess.run(["umount", "-l", str(self.state)], check=False)
            self.mounted = False
        with contextlib.suppress(Exception):
            (self.cluster.conf_dir / "slurmgpu_tiers.lua").unlink(missing_ok=True)


# ---------------------------------------------------------------- invariants


def sacct_latest(cluster, ids: list[int]) -> list[dict[str, str]]:
    """The latest run of every job (and array task) of `ids`, allocation rows only."""
    rows: list[dict[str, str]] = []
    keys = ("raw", "id", "name", "state", "qos", "partition", "start", "end")
    for i in range(0, len(ids), 200):
        out = cluster.run(
            [
                "env",
                "TZ=UTC",
                "SLURM_TIME_FORMAT=%s",
                "sacct",
                "-X",
                "-n",
                "-P",
                "-j",
                ",".join(map(str, ids[i : i + 200])),
                "--format=JobIDRaw,JobID,JobName,State,QOS,Partition,Start,End",
            ],
            timeout=120,
        ).stdout
        rows += [dict(zip(keys, ln.split("|"), strict=True)) for ln in out.splitlines() if ln]
    return rows


def expected_jobs(plans: list[JobPlan]) -> dict[str, JobPlan]:
    """sacct JobID -> plan: `N` for a job, `N_0`..`N_2` for an array's tasks."""
    out = {}
    for p in plans:
        if p.job_id is None:
            continue
        ids = [f"{p.job_id}_{t}" for t in range(3)] if p.shape == "array" else [str(p.job_id)]
        out.update(dict.fromkeys(ids, p))
    return out


def array_tasks(job_id: str) -> list[str]:
    """sacct's id of a row -> the jobs it stands for: `12_[0-2]` (tasks that never started,
    cancelled together) is 12_0, 12_1, 12_2."""
    m = re.fullmatch(r"(\d+)_\[([0-9,\-]+)(?:%\d+)?\]", job_id)
    if not m:
        return [job_id]
    out = []
    for part in m.group(2).split(","):
        lo, _, hi = part.partition("-")
        out += [f"{m.group(1)}_{t}" for t in range(int(lo), int(hi or lo) + 1)]
    return out


def task_of(job_id: str) -> int | None:
    _, sep, task = job_id.partition("_")
    return int(task) if sep and task.isdigit() else None


def rule_holds(prom: ScrapingPrometheus, job: str, at: float, gpus: int) -> str | None:
    """None when job `job`'s samples in Prometheus make it idle by the rule at its last sample
    before `at`; else why not."""
    w = WINDOW_MIN * 60
    devices = prom.samples(job, at, w + 3 * MAX_GAP_S)
    if len(devices) < gpus:
        return f"series for {len(devices)} of {gpus} GPUs"
    last = max(t for d in devices for t, _ in d)
    for d in devices:
        inside = [(t, v) for t, v in d if last - w <= t <= last]
        bad = [v for _, v in inside if not (0 <= v <= UTIL_PCT)]  # NaN is not <=, so it is bad
        if bad:
            return f"samples {bad[:3]} in the window ending {last:.0f}"
        times = [last - w, *(t for t, _ in inside), last]
        gap = max(b - a for a, b in itertools.pairwise(times))
        if gap > MAX_GAP_S:
            return f"a {gap:.0f} s hole in the window ending {last:.0f}"
    return None


def check_all(soak: Soak, teardown: set[str]) -> SoakResult:
    from slurmgpu.idle.live import read_journal

    plans = list(soak.plans.values())
    expected = expected_jobs(plans)
    ids = sorted({p.job_id for p in plans if p.job_id is not None})
    rows = sacct_latest(soak.cluster, ids) if ids else []
    by_id = {task: r for r in rows for task in array_tasks(r["id"])}
    by_raw = {r["raw"]: r for r in rows}
    inv: list[Invariant] = []

    # 1. no job lost
    lost = [
        f"{j} ({p.name}, {p.shape}): not in sacct" for j, p in expected.items() if j not in by_id
    ]
    for r in rows:
        if r["state"] in ("PENDING", "RUNNING", "REQUEUED", "SUSPENDED"):
            ctld = soak.cluster.run(
                ["scontrol", "show", "-o", "job", r["raw"]], check=False, timeout=30
            )
            m = re.search(r"JobState=(\S+)", ctld.stdout)
            lost.append(
                f"{r['id']}: sacct says {r['state']} after the teardown; slurmctld: "
                f"{m.group(1) if m else (ctld.stderr or ctld.stdout).strip()[:80]}"
            )
    inv.append(
        Invariant(
            "0 jobs lost (every submitted job and array task in sacct, ended)",
            not lost,
            len(expected),
            lost,
        )
    )

    # the idle timer's journal
    journal_errors: list[str] = []
    try:
        journal = read_journal(soak.state / "idle")
    except Exception as exc:  # a damaged line is the finding
        journal, journal_errors = [], [f"idle journal: {exc}"]
    done = {e.job_id: e for e in journal if e.phase == "done" and e.action == "cancel"}
    outcome = {(e.job_id, e.start) for e in journal if e.phase in ("done", "failed")}
    pending = [
        f"job {e.job_id}: {e.action} begun at {e.at}, no done/failed"
        for e in journal
        if e.phase == "begin" and (e.job_id, e.start) not in outcome
    ]

    # 2 and 3: cancels
    cancelled = [r for r in rows if r["state"].startswith("CANCELLED") and r["raw"] not in teardown]
    wrong, unjustified, unjournaled = [], [], []
    for r in cancelled:
        plan = expected.get(r["id"]) or soak.plans.get(r["name"])
        kind = plan.kind_of(task_of(r["id"])) if plan else "?"
        if plan and (
            plan.tier == "P0" or plan.shape == "interactive" or plan.exempt or kind == "busy"
        ):
            why = "busy" if kind == "busy" else "top tier" if plan.tier == "P0" else "exempt"
            wrong.append(
                f"{r['id']} ({plan.name}, {plan.tier}, {plan.shape}, {kind}): {why} job "
                f"CANCELLED; journal: {'done' if r['raw'] in done else 'none'}"
            )
        entry = done.get(r["raw"])
        if entry is None:
            unjournaled.append(f"{r['id']} ({r['name']}, {kind}): CANCELLED, no journal record")
            continue
        at = _epoch(entry.at)
        why = rule_holds(soak.prom, r["raw"], at, plan.gpus if plan else 1)
        if why:
            unjustified.append(f"{r['id']} ({kind}) cancelled at {entry.at}: {why}")
    for job, e in done.items():
        row = by_raw.get(job)
        if row is None or not row["state"].startswith("CANCELLED"):
            unjournaled.append(
                f"journal: cancel of {job} done at {e.at}, sacct says "
                f"{row['id'] + ' ' + row['state'] if row else 'no such job'}"
            )
    inv.append(
        Invariant("0 busy, exempt or top-tier jobs cancelled", not wrong, len(cancelled), wrong)
    )
    inv.append(
        Invariant(
            "every cancel justified by the idle rule over Prometheus' samples",
            not unjustified,
            len(cancelled),
            unjustified,
        )
    )
    inv.append(
        Invariant(
            "every action in the journal, complete, and what it says happened",
            not (unjournaled or pending or journal_errors),
            len(journal),
            journal_errors + unjournaled + pending,
        )
    )

    inv.append(check_autopilot(soak))
    inv += check_passes(soak)
    inv.append(check_nodes(soak))
    inv.append(check_disk(soak))
    actions = {
        "idle_cancels_journaled": len(done),
        "idle_actions_failed": sum(e.phase == "failed" for e in journal),
        "mails": len(soak.mail.messages()) if soak.mail.proc else -1,
        "cancelled_in_sacct": len(cancelled),
        "autopilot_changes": _count_changes(soak),
        "epilog_runs": _lines_with(soak.logs / "epilog.log", "epilog:"),
        "collector_summaries": sum(1 for p in (soak.work / "spool").rglob("*") if p.is_file()),
        "ended_by_soak_teardown": len(teardown),
    }
    refused = [p for p in plans if p.refused]
    why: dict[str, int] = {}
    for p in refused:
        key = re.sub(r"\d+", "N", p.refused.splitlines()[-1])[:100]
        why[key] = why.get(key, 0) + 1
    return SoakResult(
        soak.config,
        len(plans),
        len(rows),
        len(refused),
        why,
        soak.faults,
        soak.passes,
        actions,
        inv,
        time.monotonic() - soak.t0,
    )


def _lines_with(path: Path, text: str) -> int:
    try:
        return sum(text in line for line in path.read_text(errors="replace").splitlines())
    except OSError:
        return 0


def _epoch(iso: str) -> float:
    from datetime import UTC, datetime

    t = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    return (t if t.tzinfo else t.replace(tzinfo=UTC)).timestamp()


def _count_changes(soak: Soak) -> dict[str, int]:
    from slurmgpu.autopilot.records import StateDir, read_changes

    out: dict[str, int] = {}
    with contextlib.suppress(Exception):
        for c in read_changes(StateDir(soak.state / "autopilot")):
            out[c.action] = out.get(c.action, 0) + 1
    return out


def partitions_now(cluster) -> dict[str, list[str]]:
    from slurmgpu.util.hostlist import expand_hostlist

    out = {}
    for line in cluster.scontrol("show", "-o", "partition").splitlines():
        f = dict(x.split("=", 1) for x in line.split() if "=" in x)
        if "PartitionName" in f:
            nodes = f.get("Nodes", "")
            out[f["PartitionName"]] = expand_hostlist(nodes) if nodes and nodes != "(null)" else []
    return out


def check_autopilot(soak: Soak) -> Invariant:
    """The change log and rebalance journal parse; every apply is undone or still what the
    live partitions say (so `--undo` can put it back); each node in exactly one partition."""
    from slurmgpu.autopilot.records import StateDir, read_changes
    from slurmgpu.fleet.rebalance import LogEntry
    from slurmgpu.util.hostlist import expand_hostlist
    from slurmgpu.util.journal import read_records

    state = StateDir(soak.state / "autopilot")
    evidence, checked = [], 0
    try:
        changes = read_changes(state) if state.changes.exists() else []
        entries = (
            read_records(state.rebalance_log, LogEntry) if state.rebalance_log.exists() else []
        )
    except Exception as exc:
        return Invariant("autopilot: every move journaled, undoable, durable", False, 0, [str(exc)])
    applies = [e for e in entries if e.action == "apply"]
    undone = {e.undoes for e in entries if e.action == "undo"}
    times = {e.time for e in applies}
    for c in changes:
        checked += 1
        if c.action == "apply" and c.moves and c.rebalance_time not in times:
            evidence.append(f"change {c.id}: apply with moves, no rebalance journal entry")
    live = partitions_now(soak.cluster)
    open_applies = [e for e in applies if e.time not in undone]
    if open_applies:
        last = open_applies[-1]
        for name, hostlist in last.after.items():
            checked += 1
            if sorted(expand_hostlist(hostlist)) != sorted(live.get(name, [])):
                evidence.append(
                    f"apply {last.time}: {name} should be {hostlist}, live "
                    f"{','.join(live.get(name, []))} (move not durable)"
                )
    conf = getattr(soak, "partitions_conf", None)
    for line in conf.read_text().splitlines() if conf and conf.exists() else []:
        f = dict(w.split("=", 1) for w in line.split() if "=" in w)
        if "PartitionName" in f:  # what a restart or reconfigure would bring back
            checked += 1
            want = sorted(expand_hostlist(f.get("Nodes", "")))
            if want != sorted(live.get(f["PartitionName"], [])):
                evidence.append(
                    f"{f['PartitionName']}: include file says {f.get('Nodes')}, live "
                    f"{','.join(live.get(f['PartitionName'], []))}"
                )
    owners: dict[str, list[str]] = {}
    for part, nodes in live.items():
        for n in nodes:
            owners.setdefault(n, []).append(part)
    for node in soak.cluster.node_names:
        checked += 1
        if len(owners.get(node, [])) != 1:
            evidence.append(f"{node} in partitions {owners.get(node, [])}")
    return Invariant(
        "autopilot: every move journaled, undoable, durable; nodes in one partition",
        not evidence,
        checked,
        evidence,
    )


def check_passes(soak: Soak) -> list[Invariant]:
    stalled = [
        f"{p.timer} pass at {p.started:.0f}s: ran {p.seconds:.0f} s, killed at the limit"
        for p in soak.passes
        if p.stalled
    ]
    bad = []
    for p in soak.passes:
        if p.killed:
            continue
        if "Traceback" in p.stderr:
            last = p.stderr.strip().splitlines()[-1]
            bad.append(f"{p.timer} pass at {p.started:.0f}s: traceback ({last[:160]})")
        elif p.rc not in OK_EXITS and "slurmgpu: error:" not in p.stderr and not p.stalled:
            bad.append(
                f"{p.timer} pass at {p.started:.0f}s: exit {p.rc}: {p.stderr.strip()[-160:]}"
            )
    n = len(soak.passes)
    return [
        Invariant("no timer pass stalled past its limit", not stalled, n, stalled),
        Invariant(
            "every failed pass says why in a `slurmgpu: error:` line, no traceback", not bad, n, bad
        ),
    ]


def check_nodes(soak: Soak) -> Invariant:
    evidence = []
    names = soak.cluster.node_names
    for name in names:
        rec = soak.cluster.node_record(name)
        state = rec.get("State", "")
        if any(s in state for s in ("DRAIN", "DOWN", "INVAL", "FAIL", "NOT_RESPONDING")):
            evidence.append(f"{name}: {state} reason={rec.get('Reason', '')}")
    return Invariant("no node left drained, down or invalid", not evidence, len(names), evidence)


def check_disk(soak: Soak) -> Invariant:
    evidence, checked = [], 0
    roots = [soak.state, soak.work / "spool", *soak.work.glob("collect-*.json")]
    for root in roots:
        files = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]
        for path in files:
            checked += 1
            if TEMP_NAME.search(path.name) or path.name == "soak-filler":
                evidence.append(f"{path}: left behind ({path.stat().st_size} bytes)")
            elif path.suffix == ".json":
                try:
                    json.loads(path.read_text())
                except ValueError as exc:
                    evidence.append(f"{path}: not JSON ({exc})")
            elif path.suffix == ".jsonl":
                for n, line in enumerate(path.read_text().splitlines(), 1):
                    try:
                        json.loads(line)
                    except ValueError:
                        evidence.append(f"{path}:{n}: not a JSON line: {line[:80]!r}")
    return Invariant(
        "nothing partial on disk (no temp files; JSON and journals parse)",
        not evidence,
        checked,
        evidence,
    )
