"""A small live world for `idle --live` unit tests: fake `scontrol` and `scancel` on PATH
that keep Slurm's addressing rules, a Prometheus stand-in serving given samples, and a
webhook that keeps what it is sent. All real processes and sockets on loopback.

The fake Slurm reads and writes `jobs.json` (a list of `scontrol show -o job` records) and
logs every call to `calls.log`. It targets a job id as Slurm 22.05 does (docs: wave-4 facts):
`A_T` one array task, `H+O` one het component, a bare id that is an array's id every task of
that array, a het leader's id every component, another array task's raw id nothing (slurmctld
refuses it, and scancel still exits 0). With `refuse` in the world's directory, scancel and
requeue do nothing and exit 0 (what slurmctld refusing looks like to the caller).
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer, ThreadingHTTPServer
from pathlib import Path

FAKE_SLURM = r"""#!{python}
import json, os, sys
from pathlib import Path
root = Path({root!r})
name, args = os.path.basename(sys.argv[0]), sys.argv[1:]
with open(root / "calls.log", "a") as log:
    log.write(" ".join([name, *args]) + "\n")
jobs = json.loads((root / "jobs.json").read_text())

def line(rec):
    return " ".join(f"{{k}}={{v}}" for k, v in rec.items())

def targets(job_id):
    if "_" in job_id:
        a, t = job_id.split("_")
        return [r for r in jobs if r.get("ArrayJobId") == a and r.get("ArrayTaskId") == t]
    if "+" in job_id:
        h, o = job_id.split("+")
        return [r for r in jobs if r.get("HetJobId") == h and r.get("HetJobOffset") == o]
    array = [r for r in jobs if r.get("ArrayJobId") == job_id]
    if array:
        return array  # the array's id: every task
    het = [r for r in jobs if r.get("HetJobId") == job_id]
    if het:
        return het  # the leader's id: every component
    return [r for r in jobs if r["JobId"] == job_id and "ArrayJobId" not in r]

def save():
    (root / "jobs.json").write_text(json.dumps(jobs))

if name == "scontrol" and args[:2] == ["show", "-o"] and args[2] == "job":
    if len(args) == 3:
        print("\n".join(line(r) for r in jobs))
        sys.exit(0)
    asked = args[3]
    if "_" in asked or "+" in asked:
        found = targets(asked)
    else:
        found = [r for r in jobs if asked in (r["JobId"], r.get("ArrayJobId"), r.get("HetJobId"))]
    if not found:
        print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr)
        sys.exit(1)
    print("\n".join(line(r) for r in found))
    sys.exit(0)
refuse = (root / "refuse").exists()
if name == "scancel":
    for r in [] if refuse else targets(args[0]):
        r["JobState"] = "CANCELLED"
    save()
    if (root / "hang").exists():  # acted, then never returns (a run killed inside scancel)
        (root / "hanging").write_text(str(os.getpid()))
        import time
        time.sleep(120)
    sys.exit(0)
if name == "scontrol" and args[0] == "requeue":
    own = [r for r in jobs if r["JobId"] == args[1]]
    if "+" in args[1] or any(r.get("HetJobOffset", "0") != "0" for r in own):
        print("Job not heterogeneous job leader", file=sys.stderr)
        sys.exit(1)
    for r in [] if refuse else targets(args[1]):
        r["JobState"] = "PENDING"
        r["Restarts"] = str(int(r.get("Restarts", "0")) + 1)
    save()
    sys.exit(0)
print("fake slurm: unexpected " + " ".join(sys.argv), file=sys.stderr)
sys.exit(2)
"""

SCHEMA_LABELS = {  # schema -> (job label, utilization metric)
    "dcgm": ("hpc_job", "DCGM_FI_DEV_GPU_UTIL"),
    "jobstats": ("jobid", "nvidia_gpu_duty_cycle"),
    "slurmgpu": ("jobid", "slurmgpu_gpu_utilization_percent"),
}
_QUERY = re.compile(r'^(\w+)\{(\w+)="([^"]*)"[^}]*\}\[(\d+)s\]$')


def record(job_id: str, start: str, **extra: str) -> dict[str, str]:
    rec = {
        "JobId": job_id,
        "UserId": "bob(1001)",
        "Account": "ml",
        "QOS": "normal",
        "JobState": "RUNNING",
        "StartTime": start,
        "EndTime": "Unknown",
        "TimeLimit": "10:00:00",
        "Partition": "gpu",
        "AllocTRES": "cpu=1,gres/gpu=1",
        "NodeList": "gpu01",
        "BatchFlag": "1",
        "Comment": "(null)",
        "Restarts": "0",
    }
    rec.update(extra)
    return rec


@dataclass
class World:
    root: Path
    samples: dict[str, list[tuple[float, object]]] = field(default_factory=dict)  # job -> (t, v)
    schema: str = "dcgm"
    result_override: object = None  # a raw `result` value served instead of the samples
    delay_s: float = 0.0  # each Prometheus answer waits this long (a run that takes a while)
    hooks: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.bin = self.root / "bin"
        self.bin.mkdir(parents=True)
        for name in ("scontrol", "scancel"):
            path = self.bin / name
            path.write_text(FAKE_SLURM.format(python=sys.executable, root=str(self.root)))
            path.chmod(0o755)
        self.set_jobs([])
        self.env = {"PATH": f"{self.bin}:{os.environ['PATH']}",
                    "SLURMGPU_LOCK_DIR": str(self.root / "locks")}  # fmt: skip
        self._servers = [self._prometheus(), self._webhook()]

    # -- slurm -------------------------------------------------------------------------
    def set_jobs(self, jobs: list[dict[str, str]]) -> None:
        (self.root / "jobs.json").write_text(json.dumps(jobs))

    def jobs(self) -> dict[str, dict[str, str]]:
        return {r["JobId"]: r for r in json.loads((self.root / "jobs.json").read_text())}

    def calls(self, name: str | None = None) -> list[str]:
        path = self.root / "calls.log"
        lines = path.read_text().splitlines() if path.exists() else []
        acting = [ln for ln in lines if ln.startswith(("scancel", "scontrol requeue"))]
        return acting if name is None else [ln for ln in acting if ln.startswith(name)]

    def refuse(self, on: bool = True) -> None:
        path = self.root / "refuse"
        if on:
            path.write_text("")
        else:
            path.unlink(missing_ok=True)

    # -- prometheus and webhook -----------------------------------------------------------
    def _prometheus(self) -> HTTPServer:
        world = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                form = urllib.parse.parse_qs(self.rfile.read(length).decode())
                time.sleep(world.delay_s)
                at = float(form["time"][0])
                m = _QUERY.match(form["query"][0])
                job_label, metric = SCHEMA_LABELS[world.schema]
                result: object = []
                if world.result_override is not None:
                    result = world.result_override
                elif m and m.group(1) == metric and m.group(2) == job_label:
                    span = float(m.group(4))
                    values = [[t, str(v)] for t, v in world.samples.get(m.group(3), [])
                              if at - span < t <= at]  # fmt: skip
                    if values:
                        labels = {job_label: m.group(3), "gpu": "0", "Hostname": "gpu01",
                                  "instance": "gpu01"}  # fmt: skip
                        result = [{"metric": labels, "values": values}]
                body = json.dumps(
                    {"status": "success", "data": {"resultType": "matrix", "result": result}}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.prometheus = f"http://127.0.0.1:{server.server_port}"
        return server

    def _webhook(self) -> HTTPServer:
        hooks = self.hooks

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                hooks.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        server = HTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.webhook = f"http://127.0.0.1:{server.server_port}/hook"
        return server

    def close(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
