"""A Helios-Earth-shaped month (May 2020, 16 virtual clusters) as sacct dumps, rebuilt from the
real per-minute sequences of that very month: each job's arrival, start and end, the starts
made to fit the VC's GPUs (or scheduled again by an independent per-node scheduler); see
docs/advise.md, "A Helios-Earth-shaped month".

The data is not in this repository; it is read from `--helios-dir DIR`:
`earth-<vc>-sequence.csv`, copies of "analysis/2_cluster
characterization/Earth_vcs/<vc>/cluster_sequence_vc.csv" of
https://github.com/S-Lab-System-Group/HeliosArtifact (per minute: running and pending jobs and
GPUs, split by jobs of >= 8 GPUs and < 8; the VC's GPUs). Nothing derived from it is committed.

**The jobs (`rebuild`)**: per VC and per size class (< 8 GPUs, >= 8), the sequences give, minute
by minute, the jobs and GPUs running and pending. The fewest events that explain a minute's
change are taken: A = max(0, dN, dP) arrivals, D = A - dN ends, S = A - dP starts (N jobs in the
system, P pending). Ends are chosen among the running jobs (the one whose size makes the
running GPUs match the sequence, the youngest half the time, else any), starts from the
pending ones in submit order (skipping those too big for the GPUs the sequence says started),
and the arrivals' sizes split the pending GPUs that appeared (1-7 GPUs in the small class,
multiples of 8 in the big one). The targets are taken against the rebuilt levels, not the real
deltas, so an error of one minute is corrected in the next. Each job thus gets an arrival, a
start (the real scheduler's, to the minute) and an end; times are spread uniformly inside
their minute. What a minute's snapshot cannot see (a job submitted, run and ended between two
snapshots) is not there: the job counts are lower bounds (vchbv: 30,570 jobs against the
issue's 28,841 small ones plus the big).

Inside a minute the ends are placed in its first half and the starts in its second (what
ended freed what started). The two size classes are rebuilt apart and a minute's ends are
picked by size, so the rebuilt running GPUs still stray from the sequence's by a few GPUs and
at times exceed the VC's (vchbv: up to 120 of 64): **`make_feasible`** then delays, in the
order of the rebuilt starts, each start whose GPUs are not free for its whole run to the
first second they are (it prints how many moved: vchbv 8,657 of 30,738, vc6YE 553 of 1,571).
The record is thus itself partly a scheduler's output (a greedy one, later jobs may go
first), not Helios' own to the second.

**Recorded** (`--recorded real`, the default): those rebuilt, feasible starts (what Helios'
own scheduler did, to the minute, where the rebuild could follow it). `--recorded reference`:
the month's arrivals, sizes and durations scheduled again by the per-node reference scheduler
of `tests/unit/advice/helios_month.py` (`reference_schedule`: priority order, main pass
stopping at a partition's first job that does not fit, a backfill pass every 30 s reserving
particular whole nodes for each job's time limit), on 8-GPU nodes (minutes of CPU for all 16
VCs).

**Dumps** (`--out DIR`):

- `earth-helios.sacct`: the likely conversion of a Helios log (job_id, user, vc, gpu_num,
  state, submit/start/end, duration): QOS `normal` for all, **no Timelimit and no NodeList**
  columns;
- `earth-full.sacct`: the same jobs with `TimelimitRaw` (1 day for 70 % of jobs, 3 days for
  the rest, raised to 7 days or whole days when a job ran longer) and a `NodeList`;
- `capacity.txt`: the `--capacity VC=GPUS` options; `compare.json`: per VC, the rebuilt and
  the recorded (reference) allocation and pending GPUs against the real sequence, and the
  waits.

    python benchmarks/helios_earth.py --helios-dir D [--out DIR] [--vcs vchbv,vc6YE,...]
                                      [--seed 1] [--recorded real|reference]

then `slurmgpu replay --calibrate --sacct-file DIR/earth-helios.sacct $(cat DIR/capacity.txt)`
and `slurmgpu advise ...` the same way (docs/advise.md, "A Helios-Earth-shaped month").
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(ROOT))

from tests.unit.advice.helios_month import GenJob, reference_schedule  # noqa: E402

DAY = 86400
PER_NODE = 8
EPOCH = 1_588_291_200  # 2020-05-01 00:00 UTC: the month's first minute
STATES = (("COMPLETED", 0.735), ("FAILED", 0.129), ("CANCELLED by 1000", 0.136))  # Helios GPU


@dataclass
class Sequence:
    vc: str
    gpus: int
    # per minute, per class (0: < 8 GPUs, 1: >= 8): running / pending jobs and GPUs
    run_jobs: np.ndarray  # shape (2, T)
    pend_jobs: np.ndarray
    run_gpus: np.ndarray
    pend_gpus: np.ndarray


def read_sequences(helios_dir: str, vcs: list[str] | None = None) -> list[Sequence]:
    import csv

    out = []
    for path in sorted(glob.glob(os.path.join(helios_dir, "earth-*-sequence.csv"))):
        vc = os.path.basename(path)[len("earth-") : -len("-sequence.csv")]
        if vcs and vc not in vcs:
            continue
        with open(path, newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))

        def col(name: str, rows: list = rows) -> np.ndarray:
            return np.array([int(float(r[name])) for r in rows], dtype=np.int64)

        def pair(what: str) -> np.ndarray:
            return np.stack([col(f"{what}_less_8"), col(f"{what}_noless_8")])

        out.append(
            Sequence(
                vc,
                int(col("total_gpu_num").max()),
                pair("running_job_num"),
                pair("pending_job_num"),
                pair("running_gpu_num"),
                pair("pending_gpu_num"),
            )
        )
    return out


# ------------------------------------------------------------------ rebuilding the jobs
@dataclass
class Rebuilt:
    vc: str
    arrive_min: int  # minute of the first snapshot that shows it (-1: before the month)
    start_min: int | None  # first snapshot showing it running (None: never)
    end_min: int | None  # first snapshot without it (None: still there at the end)
    gpus: int


def _split(total: int, count: int, big: bool) -> list[int]:
    """`count` job sizes summing to about `total` GPUs: 1..7 each, or multiples of 8."""
    if count <= 0:
        return []
    unit = PER_NODE if big else 1
    units = max(count, round(total / unit))
    base, extra = divmod(units, count)
    sizes = [(base + (k < extra)) * unit for k in range(count)]
    return sizes if big else [min(7, s) for s in sizes]


def _rebuild_class(seq: Sequence, c: int, rng: np.random.Generator) -> list[Rebuilt]:
    rj, pj, rg, pg = seq.run_jobs[c], seq.pend_jobs[c], seq.run_gpus[c], seq.pend_gpus[c]
    big = c == 1
    jobs: list[Rebuilt] = []
    running: list[int] = []  # job indexes, in start order
    pending: list[int] = []  # in arrival order

    def new(arrive: int, gpus: int) -> int:
        jobs.append(Rebuilt(seq.vc, arrive, None, None, gpus))
        return len(jobs) - 1

    for g in _split(int(rg[0]), int(rj[0]), big):
        k = new(-1, g)
        jobs[k].start_min = -1
        running.append(k)
    pending += [new(-1, g) for g in _split(int(pg[0]), int(pj[0]), big)]
    for t in range(1, len(rj)):
        dn = int(rj[t] + pj[t]) - (len(running) + len(pending))
        dp = int(pj[t]) - len(pending)
        if dn == 0 and dp == 0 and rg[t] == rg[t - 1] and pg[t] == pg[t - 1]:
            continue
        arrivals = max(0, dn, dp)
        ends, starts = arrivals - dn, arrivals - dp
        run_g = sum(jobs[k].gpus for k in running)
        pend_g = sum(jobs[k].gpus for k in pending)
        # ends: the running GPUs should come to rg[t] (known exactly when nothing starts)
        target = run_g - int(rg[t]) if starts == 0 else None
        later = max(0, ends - len(running))  # started and ended between two snapshots
        for n in range(ends - later, 0, -1):
            want = None if target is None else target / n
            if want is not None:
                best = min(abs(jobs[k].gpus - want) for k in running)
                cands = [k for k in running if abs(jobs[k].gpus - want) == best]
            else:
                cands = running
            k = cands[-1] if rng.random() < 0.5 else cands[int(rng.integers(len(cands)))]
            running.remove(k)
            jobs[k].end_min = t
            run_g -= jobs[k].gpus
            if target is not None:
                target -= jobs[k].gpus
        # arrivals: the pending GPUs that appeared (after the starts take theirs)
        start_g = int(rg[t]) - run_g
        sizes = _split(int(pg[t]) - pend_g + start_g, arrivals, big)
        pending += [new(t, g) for g in sizes]
        # starts: in submit order, skipping a job too big for what is left to start
        left = start_g
        for n in range(starts, 0, -1):
            fit = [k for k in pending if jobs[k].gpus <= max(left - (n - 1), 1)]
            k = fit[0] if fit else pending[0]
            pending.remove(k)
            jobs[k].start_min = t
            running.append(k)
            left -= jobs[k].gpus
        for k in running[len(running) - later :]:
            running.remove(k)
            jobs[k].end_min = t
    return jobs


def rebuild(seq: Sequence, rng: np.random.Generator) -> list[Rebuilt]:
    return _rebuild_class(seq, 0, rng) + _rebuild_class(seq, 1, rng)


# ------------------------------------------------------------------ the month's jobs
@dataclass
class MonthJob:
    gen: GenJob  # submit, duration, limit, gpus; .start: the recorded start
    real_start: float | None  # the rebuilt real start (Helios' own scheduler)
    state: str


def month_jobs(seqs: list[Sequence], seed: int = 1) -> list[MonthJob]:
    """Every VC's rebuilt jobs that started, in submit order, as the reference scheduler
    takes them (job ids in submit order, times in seconds from the month's start)."""
    rng = np.random.default_rng(seed)
    out: list[MonthJob] = []
    end_of_month = max(seq.run_jobs.shape[1] for seq in seqs) * 60
    for seq in seqs:
        users = [f"{seq.vc[2:].lower()}u{k}" for k in range(int(rng.integers(8, 40)))]
        weights = 1.0 / np.arange(1, len(users) + 1)
        weights /= weights.sum()
        last_user: dict[int, str] = {}
        vc_jobs: list[MonthJob] = []
        for r in rebuild(seq, rng):
            if r.start_min is None:
                continue  # still pending when the month ends: not in a finished-jobs log
            if r.arrive_min < 0:  # there before the month began
                sub = -float(rng.uniform(600, 6 * 3600)) if r.start_min < 0 else -60.0
            else:
                sub = (r.arrive_min - 1) * 60 + float(rng.uniform(0, 60))
            # inside a minute the ends come first (the first half) and the starts after them
            # (the second): what ended frees the GPUs what started took, so the rebuilt
            # schedule never holds more GPUs than the VC has (it would, were both spread
            # over the whole minute, and no scheduler could then reproduce its waits)
            if r.start_min < 0:
                start = sub + float(rng.uniform(0, 60))
            else:
                start = max(sub, (r.start_min - 1) * 60 + float(rng.uniform(30, 60)))
            if r.end_min is None:  # still running at the month's end
                end = end_of_month + float(np.clip(rng.lognormal(8.5, 1.5), 60, 7 * DAY))
            elif r.end_min == r.start_min:  # started and ended between two snapshots
                end = start + float(rng.uniform(1, max(1.0, r.end_min * 60 - start)))
            else:
                end = max(start + 1, (r.end_min - 1) * 60 + float(rng.uniform(0, 30)))
            sub, start, end = np.floor(sub), np.floor(start), np.floor(end)
            dur = max(1.0, end - start)
            limit = float(rng.choice([DAY, 3 * DAY], p=[0.7, 0.3]))
            if dur > limit:
                limit = 7 * DAY if dur <= 7 * DAY else float(np.ceil(dur / DAY) * DAY)
            # a sweep: the jobs arriving in one minute in one VC are one user's
            minute = r.arrive_min
            user = last_user.get(minute) or users[int(rng.choice(len(users), p=weights))]
            last_user = {minute: user}
            state = STATES[int(rng.choice(len(STATES), p=[p for _, p in STATES]))][0]
            gen = GenJob(0, seq.vc, "normal", user, float(sub), dur, limit, r.gpus)
            vc_jobs.append(MonthJob(gen, float(start), state))
        delayed = make_feasible(vc_jobs, seq.gpus)
        print(f"{seq.vc}: {delayed} of {len(vc_jobs):,} rebuilt starts delayed to fit "
              f"{seq.gpus} GPUs", file=sys.stderr)  # fmt: skip
        out += vc_jobs
    out.sort(key=lambda m: (m.gen.submit, m.gen.partition))
    for k, m in enumerate(out, 1):
        m.gen.job_id = k
    return out


SLOT = 30  # seconds: the occupancy's step (a minute's ends in its first half, starts in its second)


def make_feasible(jobs: list[MonthJob], gpus: int) -> int:
    """Delay the rebuilt starts that do not fit the VC's 8-GPU nodes; how many moved.

    The two size classes are rebuilt apart and a minute's ends are picked by size, so the
    rebuilt running GPUs stray from the sequence's by a few GPUs (vchbv: up to 23) and at
    times exceed the VC: a schedule no scheduler could follow. In the order of the rebuilt
    starts each job is placed as Slurm places it, a job of 1-7 GPUs on one node (the fullest
    that holds it), a bigger one on whole idle nodes, at its start if they are free for its
    whole run, else at the first 30-s step after that they are (later jobs may go first)."""
    if not jobs:
        return 0
    t0 = int(min(m.real_start for m in jobs))
    # the run's span and 30 days more: room for the starts it delays
    slots = (int(max(m.real_start + m.gen.duration for m in jobs)) - t0 + 30 * DAY) // SLOT
    nodes = max(1, gpus // PER_NODE)
    used = np.zeros((nodes, slots), dtype=np.int16)
    moved = 0
    for m in sorted(jobs, key=lambda m: m.real_start):
        g = m.gen.gpus
        whole = -(-g // PER_NODE)
        if whole > nodes:
            continue  # bigger than the VC: left as it is (the replay says it cannot run)
        s = (int(m.real_start) - t0) // SLOT
        n = -(-(int(m.real_start) - t0 + int(m.gen.duration)) // SLOT) - s
        at, chosen = _place(used, s, max(n, 1), g, whole)
        if at != s:
            moved += 1
            m.real_start = float(t0 + at * SLOT + (int(m.real_start) - t0) % SLOT)
        for k in chosen:
            used[k, at : at + max(n, 1)] += PER_NODE if whole > 1 else g
    return moved


def _place(used: np.ndarray, s: int, n: int, g: int, whole: int) -> tuple[int, list[int]]:
    """The first step >= s at which the job fits for n steps, and its nodes."""
    need = PER_NODE if whole > 1 else g
    t = s
    while True:
        if t + n > used.shape[1]:
            return t, []  # past the end of the occupancy: nothing left to collide with
        window = used[:, t : t + n]
        fits = (window.max(axis=1) + need) <= PER_NODE
        if whole > 1:
            fits &= window.max(axis=1) == 0
        ok = np.flatnonzero(fits)
        if len(ok) >= whole:
            if whole == 1:  # best fit: the fullest node now
                return t, [int(ok[np.argmax(used[ok, t])])]
            return t, [int(k) for k in ok[:whole]]
        # the next step any node could change: after the first step at which each node that
        # does not fit is over (its earliest possible fit)
        nxt = []
        for k in np.flatnonzero(~fits):
            over = np.flatnonzero(window[k] + need > PER_NODE if whole == 1 else window[k] > 0)
            nxt.append(t + int(over[-1]) + 1)
        t = min(nxt) if nxt else t + 1


# ------------------------------------------------------------------ dumps
FULL = ("JobIDRaw|JobID|Cluster|Partition|QOS|Account|User|Submit|Start|End|ElapsedRaw|"
        "TimelimitRaw|State|NNodes|ReqTRES|AllocTRES|NodeList")  # fmt: skip
HELIOS = "JobIDRaw|JobID|Partition|QOS|User|Submit|Start|End|ElapsedRaw|State|AllocTRES"


def sacct_lines(jobs: list[MonthJob], full: bool, recorded: str = "real"):
    yield FULL if full else HELIOS
    for m in jobs:
        j = m.gen
        start = j.start if recorded == "reference" else m.real_start
        if start is None:
            continue
        nodes = max(1, -(-j.gpus // PER_NODE))
        tres = f"billing={j.gpus},cpu={j.gpus * 4},gres/gpu={j.gpus},mem=32G,node={nodes}"
        sub, st = int(EPOCH + j.submit), int(EPOCH + start)
        en = int(st + j.duration)
        if full:
            node_list = f"{j.partition}-n[1-{nodes}]" if nodes > 1 else f"{j.partition}-n1"
            yield (f"{j.job_id}|{j.job_id}|earth|{j.partition}|normal|{j.user}|{j.user}|{sub}|"
                   f"{st}|{en}|{int(j.duration)}|{int(j.limit // 60)}|{m.state}|{nodes}|{tres}|"
                   f"{tres}|{node_list}")  # fmt: skip
        else:
            yield (f"{j.job_id}|{j.job_id}|{j.partition}|normal|{j.user}|{sub}|{st}|{en}|"
                   f"{int(j.duration)}|{m.state}|{tres}")  # fmt: skip


# ------------------------------------------------------------------ comparison
def occupancy(jobs: list[MonthJob], vc: str, minutes: int, which: str) -> tuple:
    """(running GPUs, pending GPUs) at each minute's snapshot, from the jobs' starts."""
    run = np.zeros(minutes + 1)
    pend = np.zeros(minutes + 1)
    for m in jobs:
        j = m.gen
        if j.partition != vc:
            continue
        start = j.start if which == "reference" else m.real_start
        if start is None:
            continue

        def at(s: float) -> int:  # the first snapshot at or after s
            return int(np.clip(np.ceil(s / 60), 0, minutes))

        a, b, c = at(j.submit), at(start), at(start + j.duration)
        pend[a] += j.gpus
        pend[b] -= j.gpus
        run[b] += j.gpus
        run[c] -= j.gpus
    return np.cumsum(run)[:minutes], np.cumsum(pend)[:minutes]


def _waits(jobs: list[MonthJob], vc: str, which: str) -> dict:
    w = []
    for m in jobs:
        if m.gen.partition != vc:
            continue
        start = m.gen.start if which == "reference" else m.real_start
        if start is not None and m.gen.submit >= 0:
            w.append(start - m.gen.submit)
    if not w:
        return {"jobs": 0, "mean": None, "p95": None}
    a = np.array(w)
    return {"jobs": len(a), "mean": float(a.mean()), "p95": float(np.percentile(a, 95))}


def compare(seqs: list[Sequence], jobs: list[MonthJob]) -> list[dict]:
    out = []
    for seq in seqs:
        minutes = seq.run_jobs.shape[1]
        real_run, real_pend = seq.run_gpus.sum(0), seq.pend_gpus.sum(0)
        row = {"vc": seq.vc, "gpus": seq.gpus,
               "jobs": sum(1 for m in jobs if m.gen.partition == seq.vc)}  # fmt: skip
        sides = {"real": (real_run, real_pend)}
        for which in ("rebuilt", "reference"):
            sides[which] = occupancy(jobs, seq.vc, minutes, "real" if which == "rebuilt" else which)
        hours = minutes // 60
        for name, (run, pend) in sides.items():
            hr = run[: hours * 60].reshape(hours, 60).mean(1)
            hp = pend[: hours * 60].reshape(hours, 60).mean(1)
            row[name] = {
                "allocation": float(run.mean() / seq.gpus),
                "pending_gpus_mean": float(pend.mean()),
                "pending_gpus_p95": float(np.percentile(pend, 95)),
                "minutes_pending": float((pend > 0).mean()),
                "hourly": (hr, hp),
            }
        real_hr, real_hp = row["real"].pop("hourly")
        for name in ("rebuilt", "reference"):
            hr, hp = row[name].pop("hourly")
            row[name]["hourly_running_corr"] = _corr(hr, real_hr)
            row[name]["hourly_pending_corr"] = _corr(hp, real_hp)
        row["rebuilt"]["waits"] = _waits(jobs, seq.vc, "real")
        row["reference"]["waits"] = _waits(jobs, seq.vc, "reference")
        out.append(row)
    return out


def _corr(a: np.ndarray, b: np.ndarray) -> float | None:
    if a.std() == 0 or b.std() == 0:
        return None
    return float(np.corrcoef(a, b)[0, 1])


def table(rows: list[dict]) -> str:
    head = (f"{'vc':7} {'gpus':>4} {'jobs':>6} | {'alloc real/rebuilt/ref':>22} | "
            f"{'pending GPUs real/rebuilt/ref':>29} | {'run corr':>8} {'pend corr':>9} | "
            f"{'wait mean real/ref s':>20} | {'p95 real/ref s':>16}")  # fmt: skip
    lines = [head]
    for r in rows:
        a, b, c = r["real"], r["rebuilt"], r["reference"]
        wb, wc = b["waits"], c["waits"]

        def f(x: float | None, fmt: str = ".0f") -> str:
            return "-" if x is None else format(x, fmt)

        lines.append(
            f"{r['vc']:7} {r['gpus']:>4} {r['jobs']:>6} | "
            f"{a['allocation']:>6.2f} {b['allocation']:>6.2f} {c['allocation']:>6.2f}     | "
            f"{a['pending_gpus_mean']:>8.1f} {b['pending_gpus_mean']:>8.1f} "
            f"{c['pending_gpus_mean']:>8.1f}    | "
            f"{f(c['hourly_running_corr'], '.2f'):>8} {f(c['hourly_pending_corr'], '.2f'):>9} | "
            f"{f(wb['mean']):>9} {f(wc['mean']):>9}  | {f(wb['p95']):>7} {f(wc['p95']):>7}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--helios-dir", required=True, help="the earth-<vc>-sequence.csv files")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "helios-earth"))
    ap.add_argument("--vcs", default="", help="comma-separated VCs (default: all 16)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--recorded", choices=("real", "reference"), default="real")
    args = ap.parse_args(argv)
    vcs = [v for v in args.vcs.split(",") if v] or None
    seqs = read_sequences(args.helios_dir, vcs)
    if not seqs:
        print(f"no earth-*-sequence.csv in {args.helios_dir}", file=sys.stderr)
        return 1
    t0 = time.process_time()
    jobs = month_jobs(seqs, args.seed)
    t1 = time.process_time()
    parts = {s.vc: (s.gpus // PER_NODE, PER_NODE) for s in seqs}
    if args.recorded == "reference":  # (slow on all 16 VCs: minutes; not needed for real)
        reference_schedule([m.gen for m in jobs], parts)
    t2 = time.process_time()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, full in (("earth-helios.sacct", False), ("earth-full.sacct", True)):
        (out / name).write_text("\n".join(sacct_lines(jobs, full, args.recorded)) + "\n")
    caps = " ".join(f"--capacity {s.vc}={s.gpus}" for s in seqs)
    (out / "capacity.txt").write_text(caps + "\n")
    rows = compare(seqs, jobs)
    (out / "compare.json").write_text(json.dumps(rows, indent=1))
    print(table(rows))
    print(f"{len(jobs):,} jobs; rebuilt in {t1 - t0:.1f} s, reference-scheduled in "
          f"{t2 - t1:.1f} s of CPU; dumps in {out}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
