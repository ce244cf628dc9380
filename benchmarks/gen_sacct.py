"""Generate a realistic synthetic `sacct -a -D -P` dump (with header) for the benchmarks.

Deterministic for a given --seed, streamed to disk (constant memory whatever the size).
The shape follows the sacct facts the analyzer handles: allocation rows plus `.batch`,
`.extern` and numbered srun steps; array tasks (`123_7`, per-task JobIDRaw); het jobs
(`123+0`, `123+1`); requeued/preempted runs repeated under the same JobIDRaw (`-D`);
whole H100s (`gres/gpu:h100=N,gres/gpu=N`), MIG slices (`gres/gpu:1g.10gb=1,gres/gpu=1`),
shards (`gres/shard=N`), CPU-only jobs; `gres/gpuutil`/`gres/gpumem` on some steps (never
on MIG); pending, running and cancelled-before-start jobs; and a few malformed rows.

    python benchmarks/gen_sacct.py --jobs 1000000 --output benchmarks/out/sacct-1m.txt
    python benchmarks/gen_sacct.py --rows 5000000 --output benchmarks/out/sacct-5m-rows.txt
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import sys
import time
from pathlib import Path

FIELDS = [
    "JobIDRaw",
    "JobID",
    "Cluster",
    "Partition",
    "QOS",
    "Account",
    "User",
    "Group",
    "Submit",
    "Eligible",
    "Start",
    "End",
    "ElapsedRaw",
    "TimelimitRaw",
    "State",
    "ExitCode",
    "NNodes",
    "NCPUS",
    "ReqTRES",
    "AllocTRES",
    "NodeList",
    "TRESUsageInAve",
    "TRESUsageInMax",
    "Flags",
    "JobName",
]
N_FIELDS = len(FIELDS)
# `--lean`: the 20 columns a site typically dumps (no Group/Eligible/ExitCode/Flags/
# TRESUsageInAve) and steps as `sacct` shows them after PurgeStepAfter or with few srun
# steps: a `.batch` step for 60% of started jobs, no `.extern` (~1.6 rows per job).
LEAN_DROP = ("Group", "Eligible", "ExitCode", "Flags", "TRESUsageInAve")
LEAN_FIELDS = [f for f in FIELDS if f not in LEAN_DROP]
LEAN_INDEX = [FIELDS.index(f) for f in LEAN_FIELDS]

CLUSTER = "synth"
# Averages of the mix below (arrays of 5-60 tasks in 20% of submissions; ~2.5 steps per job),
# used only to spread submissions over the window.
JOBS_PER_CALL = 7.3
ROWS_PER_JOB = 3.4
WINDOW_END = int(dt.datetime(2026, 11, 30, tzinfo=dt.UTC).timestamp())
WINDOW_DAYS = 90

# Precomputed time text: "YYYY-MM-DD" per day and "HH:MM:SS" per second of day.
_HMS = [f"{h:02d}:{m:02d}:{s:02d}" for h in range(24) for m in range(60) for s in range(60)]
_DAYS: dict[int, str] = {}


def iso(epoch: int) -> str:
    """Epoch seconds as sacct prints them with TZ=UTC (`2026-11-03T08:15:00`)."""
    day = epoch // 86400
    text = _DAYS.get(day)
    if text is None:
        text = _DAYS[day] = dt.datetime.fromtimestamp(day * 86400, dt.UTC).strftime("%Y-%m-%d")
    return f"{text}T{_HMS[epoch % 86400]}"


def hms(seconds: int) -> str:
    """Elapsed-style `D-HH:MM:SS` / `HH:MM:SS` for the usage cpu= field."""
    d, rest = divmod(seconds, 86400)
    return f"{d}-{_HMS[rest]}" if d else _HMS[rest]


# (partition, node prefix, node count, kind of GPU request). Sized so that 1M jobs in the
# 90-day window keep the GPUs roughly 80% allocated (a large site: ~2,900 GPUs).
PARTITIONS = (
    ("gpu", "h100n", 320, "whole"),
    ("mig", "a100m", 48, "mig"),
    ("shard", "l40s", 16, "shard"),
    ("cpu", "cpun", 64, "none"),
)
PARTITION_WEIGHTS = (0.55, 0.25, 0.08, 0.12)
MIG_PROFILES = (("1g.10gb", 0.6), ("2g.20gb", 0.15), ("3g.40gb", 0.2), ("7g.80gb", 0.05))
QOS = (("p0", 0.1), ("p1", 0.5), ("p2", 0.4))
STATES = (
    ("COMPLETED", 0.76),
    ("FAILED", 0.08),
    ("CANCELLED", 0.06),
    ("TIMEOUT", 0.05),
    ("OUT_OF_MEMORY", 0.01),
    ("NODE_FAIL", 0.005),
    ("RUNNING", 0.01),
    ("PENDING", 0.015),
    ("CANCELLED-PENDING", 0.01),
)
JOB_NAMES = (
    "train",
    "finetune llama",
    "eval_ckpt",
    "infer-batch",
    "prep data",
    "sweep/lr=3e-4",
    "notebook",
    "résumé-parse",
    "bench#7",
    "a,b=c",
)


def _cumulative(pairs):
    total, out = 0.0, []
    for value, weight in pairs:
        total += weight
        out.append((total, value))
    return [(t / total, v) for t, v in out]


def _pick(table, u: float):
    for edge, value in table:
        if u <= edge:
            return value
    return table[-1][1]


_QOS = _cumulative(QOS)
_STATES = _cumulative(STATES)
_MIG = _cumulative(MIG_PROFILES)
_PART = _cumulative(list(zip(PARTITIONS, PARTITION_WEIGHTS, strict=True)))


class Generator:
    """Writes jobs one by one; `rows` and `jobs` count what was written."""

    def __init__(self, seed: int, lean: bool = False) -> None:
        self.lean = lean
        self.rng = random.Random(seed)
        self.next_id = 1_000_000
        self.rows = 0
        self.jobs = 0
        self.malformed = 0
        self.users = [f"u{i:04d}" for i in range(400)]
        self.accounts = [f"acct{i:02d}" for i in range(40)]
        self.t = WINDOW_END - WINDOW_DAYS * 86400

    # ------------------------------------------------------------------ one job

    def job(self, out: list[str], mean_gap_s: float) -> None:
        rng = self.rng
        self.t += int(rng.expovariate(1.0 / mean_gap_s))
        self.jobs += 1
        u = rng.random()
        if u < 0.20:  # an array: 5-60 tasks, JobIDRaw per task, JobID base_task
            base = self.next_id
            tasks = rng.randint(5, 60)
            self.next_id += tasks
            template = self._template()
            for k in range(tasks):
                raw = base if k == 0 else base + k
                self._allocation(out, str(raw), f"{base}_{k}", template, self.t + k)
            self.jobs += tasks - 1
        elif u < 0.22:  # a het job: two components with their own partition and TRES
            base = self.next_id
            self.next_id += 2
            first, second = self._template(), self._template()
            second["qos"], second["user"], second["account"] = (
                first["qos"],
                first["user"],
                first["account"],
            )
            self._allocation(out, str(base), f"{base}+0", first, self.t)
            self._allocation(out, str(base + 1), f"{base}+1", second, self.t)
        elif u < 0.25:  # requeued: 1-2 preempted/requeued runs, then the final run
            raw = self.next_id
            self.next_id += 1
            template = self._template(startable=True)
            submit = self.t
            for _ in range(rng.randint(1, 2)):
                end = self._allocation(
                    out,
                    str(raw),
                    str(raw),
                    template,
                    submit,
                    state=rng.choice(("PREEMPTED", "REQUEUED")),
                )
                submit = end + rng.randint(1, 30)  # Submit is reset on requeue
            self._allocation(out, str(raw), str(raw), template, submit)
        else:
            raw = self.next_id
            self.next_id += 1
            self._allocation(out, str(raw), str(raw), self._template(), self.t)
        if rng.random() < 1e-4:
            self._malformed(out)

    def _template(self, startable: bool = False) -> dict:
        rng = self.rng
        part, prefix, nodes, gpu_kind = _pick(_PART, rng.random())
        tpl = {
            "partition": part,
            "prefix": prefix,
            "nodes": nodes,
            "gpu_kind": gpu_kind,
            "qos": _pick(_QOS, rng.random()),
            "user": rng.choice(self.users),
            "name": rng.choice(JOB_NAMES),
        }
        tpl["account"] = self.accounts[int(tpl["user"][1:]) % len(self.accounts)]
        if gpu_kind == "whole":
            tpl["nnodes"] = 1 if rng.random() < 0.9 else rng.choice((2, 4))
            gpn = rng.choice((1, 1, 1, 2, 4, 8)) if tpl["nnodes"] == 1 else 8
            tpl["gpus"] = gpn * tpl["nnodes"]
            tpl["ncpus"] = 12 * tpl["gpus"]
            tpl["gres"] = f"gres/gpu:h100={tpl['gpus']},gres/gpu={tpl['gpus']}"
        elif gpu_kind == "mig":
            tpl["nnodes"], tpl["gpus"] = 1, 1
            tpl["ncpus"] = 4
            tpl["gres"] = f"gres/gpu:{_pick(_MIG, rng.random())}=1,gres/gpu=1"
        elif gpu_kind == "shard":
            tpl["nnodes"], tpl["gpus"] = 1, 0
            tpl["ncpus"] = 4
            tpl["gres"] = f"gres/shard={rng.choice((1, 2, 4, 8))}"
        else:
            tpl["nnodes"], tpl["gpus"], tpl["gres"] = 1, 0, ""
            tpl["ncpus"] = rng.choice((1, 4, 16, 64))
        tpl["mem_g"] = 8 * max(1, tpl["ncpus"] // 4)
        tpl["limit_min"] = rng.choice((30, 60, 240, 720, 1440, 2880))
        tpl["startable"] = startable
        return tpl

    def _allocation(
        self, out, raw: str, jobid: str, tpl: dict, submit: int, state: str | None = None
    ) -> int:
        rng = self.rng
        if state is None:
            state = _pick(_STATES, rng.random())
            if tpl["startable"] and state in ("PENDING", "CANCELLED-PENDING"):
                state = "COMPLETED"
            if state == "PENDING" and submit < WINDOW_END - 86400:
                state = "COMPLETED"  # only recent submissions are still pending at dump time
        wait = int(rng.lognormvariate(4.5, 2.0)) if rng.random() < 0.9 else 0
        limit_s = tpl["limit_min"] * 60
        started = state not in ("PENDING", "CANCELLED-PENDING")
        start = submit + wait
        if state == "TIMEOUT":
            elapsed = limit_s + rng.randint(0, 90)
        else:
            elapsed = min(limit_s, int(rng.lognormvariate(7.5, 1.4)) + 5)
        if state == "RUNNING" and WINDOW_END - limit_s < start < WINDOW_END:
            # still running at the dump time: End=Unknown, Elapsed grows (sacct pitfall 5)
            end_text, elapsed = "Unknown", WINDOW_END - start
        else:
            if state == "RUNNING":  # a job cannot outlive its time limit: it finished
                state = "COMPLETED"
            end_text = iso(start + elapsed)
        user = tpl["user"]
        cancel = f"CANCELLED by {1000 + int(user[1:])}"
        if not started:
            start_text = "None" if state == "CANCELLED-PENDING" else "Unknown"
            end_text = iso(submit + wait) if state == "CANCELLED-PENDING" else "Unknown"
            elapsed, alloc, nodelist = 0, "", "None assigned"
            state_text = cancel if state == "CANCELLED-PENDING" else "PENDING"
        else:
            start_text = iso(start)
            alloc = (
                f"billing={tpl['ncpus']},cpu={tpl['ncpus']},"
                + (tpl["gres"] + "," if tpl["gres"] else "")
                + f"mem={tpl['mem_g']}G,node={tpl['nnodes']}"
            )
            first = rng.randrange(1, tpl["nodes"] - tpl["nnodes"] + 2)
            if tpl["nnodes"] == 1:
                nodelist = f"{tpl['prefix']}{first:03d}"
            else:
                nodelist = f"{tpl['prefix']}[{first:03d}-{first + tpl['nnodes'] - 1:03d}]"
            state_text = cancel if state == "CANCELLED" else state
        exit_code = "0:0" if state in ("COMPLETED", "RUNNING", "PENDING") else "1:0"
        if state in ("CANCELLED", "CANCELLED-PENDING", "PREEMPTED", "REQUEUED"):
            exit_code = "0:15"
        req = (
            f"billing={tpl['ncpus']},cpu={tpl['ncpus']},"
            + (tpl["gres"].split(",")[-1] + "," if tpl["gres"] else "")
            + f"mem={tpl['mem_g']}G,node={tpl['nnodes']}"
        )
        flags = "SchedBackfill" if rng.random() < 0.3 else "SchedMain"
        out.append(
            "|".join(
                (
                    raw,
                    jobid,
                    CLUSTER,
                    tpl["partition"],
                    tpl["qos"],
                    tpl["account"],
                    user,
                    user,
                    iso(submit),
                    iso(submit),
                    start_text,
                    end_text,
                    str(elapsed),
                    str(tpl["limit_min"]),
                    state_text,
                    exit_code,
                    str(tpl["nnodes"]),
                    str(tpl["ncpus"]),
                    req,
                    alloc,
                    nodelist,
                    "",
                    "",
                    flags,
                    tpl["name"],
                )
            )
        )
        self.rows += 1
        if started:
            self._steps(out, raw, jobid, tpl, start, elapsed, state_text, end_text, alloc, nodelist)
        return start + elapsed

    def _steps(self, out, raw, jobid, tpl, start, elapsed, state, end_text, alloc, nodelist):
        rng = self.rng
        # gpuutil/gpumem exist from Slurm 23.02 and never for MIG: a third of whole-GPU jobs.
        usage_gpu = tpl["gpu_kind"] == "whole" and rng.random() < 0.33
        steps = [("batch", "batch")]
        if self.lean:
            steps = steps if rng.random() < 0.6 else []
        else:
            if rng.random() < 0.4:
                steps.append(("0", "python"))
            if rng.random() < 0.1:
                steps.append(("1", "torchrun"))
            steps.append(("extern", "extern"))
        step_start = iso(start)
        for step, name in steps:
            if step == "extern":
                ave = mx = "cpu=00:00:00,energy=0,fs/disk=5273,mem=256K,pages=0,vmem=0"
                if usage_gpu:
                    ave = mx = (
                        "cpu=00:00:00,energy=0,fs/disk=5273,gres/gpumem=0,"
                        "gres/gpuutil=0,mem=256K,pages=0,vmem=0"
                    )
            else:
                cpu = hms(int(elapsed * rng.random() * tpl["ncpus"] * 0.5))
                mem_k = rng.randint(100_000, 40_000_000)
                gpu = ""
                if usage_gpu:
                    util = rng.randint(0, 100)
                    gpu = f"gres/gpumem={rng.randint(0, 80_000)}M,gres/gpuutil={util},"
                ave = (
                    f"cpu={cpu},energy=0,fs/disk={rng.randint(0, 10**11)},{gpu}"
                    f"mem={mem_k}K,pages={rng.randint(0, 5000)},vmem={mem_k + 4096}K"
                )
                mx = ave
            step_state = state if step != "extern" else "COMPLETED"
            out.append(
                "|".join(
                    (
                        f"{raw}.{step}",
                        f"{jobid}.{step}",
                        CLUSTER,
                        "",
                        "",
                        tpl["account"],
                        "",
                        "",
                        step_start,
                        step_start,
                        step_start,
                        end_text,
                        str(elapsed),
                        "",
                        step_state,
                        "0:0",
                        str(tpl["nnodes"]),
                        str(tpl["ncpus"]),
                        "",
                        alloc,
                        nodelist,
                        ave,
                        mx,
                        "",
                        name,
                    )
                )
            )
            self.rows += 1

    def _malformed(self, out: list[str]) -> None:
        """One of the damaged rows real dumps contain (cut lines, hand edits, bad values)."""
        raw = self.next_id
        self.next_id += 1
        kind = self.malformed % 4
        good = (
            f"{raw}|{raw}|{CLUSTER}|gpu|p1|acct01|u0001|u0001|{iso(self.t)}|{iso(self.t)}|"
            f"{iso(self.t + 5)}|{iso(self.t + 65)}|60|60|COMPLETED|0:0|1|12|"
            f"billing=12,cpu=12,gres/gpu=1,mem=8G,node=1|"
            f"billing=12,cpu=12,gres/gpu:h100=1,gres/gpu=1,mem=8G,node=1|h100n001|||"
            f"SchedMain|broken"
        )
        cells = good.split("|")
        if kind == 0:
            line = "|".join(cells[:11])  # cut short (e.g. a truncated copy)
        elif kind == 1:
            cells[12] = "abc"
            line = "|".join(cells)
        elif kind == 2:
            cells[8] = "2026-13-45T99:00:00"
            line = "|".join(cells)
        else:
            cells[19] = "cpu=12,gres/gpu=x,node=1"
            line = "|".join(cells)
        out.append(line)
        self.rows += 1
        self.malformed += 1


def _lean_lines(lines: list[str]) -> list[str]:
    """Project full rows onto LEAN_FIELDS (malformed short rows keep what they have)."""
    out = []
    for line in lines:
        cells = line.split("|")
        if len(cells) == N_FIELDS:
            cells = [cells[i] for i in LEAN_INDEX]
        out.append("|".join(cells))
    return out


def generate(
    path: Path, *, jobs: int | None, rows: int | None, seed: int, lean: bool = False
) -> dict:
    """Write the dump; stop after `jobs` jobs or once `rows` rows are written."""
    gen = Generator(seed, lean=lean)
    target_jobs = jobs if jobs is not None else max(1, int((rows or 0) / ROWS_PER_JOB))
    # spread the submissions over the whole window (one call writes JOBS_PER_CALL on average)
    mean_gap = WINDOW_DAYS * 86400 * JOBS_PER_CALL / target_jobs
    buf: list[str] = []
    path.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with open(path, "w", encoding="utf-8", newline="\n", buffering=1 << 20) as fh:
        fh.write("|".join(LEAN_FIELDS if lean else FIELDS) + "\n")
        while (jobs is not None and gen.jobs < jobs) or (rows is not None and gen.rows < rows):
            gen.job(buf, mean_gap)
            if len(buf) >= 20_000:
                fh.write("\n".join(_lean_lines(buf) if lean else buf) + "\n")
                buf.clear()
        if buf:
            fh.write("\n".join(_lean_lines(buf) if lean else buf) + "\n")
    return {
        "path": str(path),
        "jobs": gen.jobs,
        "rows": gen.rows,
        "malformed_rows": gen.malformed,
        "bytes": path.stat().st_size,
        "seconds": round(time.perf_counter() - started, 1),
        "seed": seed,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--jobs", type=int, help="number of jobs (default 1000000)")
    size.add_argument("--rows", type=int, help="stop once this many rows are written")
    parser.add_argument("--seed", type=int, default=20261202)
    parser.add_argument("--output", type=Path, default=Path("benchmarks/out/sacct-1m.txt"))
    parser.add_argument("--lean", action="store_true", help="20 columns, ~1.6 rows per job")
    args = parser.parse_args(argv)
    jobs = args.jobs if args.jobs is not None or args.rows is not None else 1_000_000
    result = generate(args.output, jobs=jobs, rows=args.rows, seed=args.seed, lean=args.lean)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
