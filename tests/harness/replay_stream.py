"""Submit a generated job stream to a test cluster and dump its sacct, for replay fidelity.

Shared by tests/integration/test_replay_fidelity.py (the multi-node grid trace:
`grid_job_script`, `record_groups`) and test_replay_live.py (the short one-node stream on
every release: `job_script`, `record_stream`). What makes slurmctld reproduce its own start
order on such traces, each measured, is in docs/replay.md "Fidelity".
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from slurmgpu.sources.sacct import SACCT_FIELDS


def job_script(seconds: int) -> str:
    """A job of `seconds` s whose End sacct records `seconds` after its Start.

    sacct records Start and End in whole seconds: a plain `sleep N` (N + ~0.06 s) started
    late in its second is recorded as N + 1 s, and the replay then runs it a second too
    long. This job runs N s from its script's start, but ends by 0.9 s into the second
    N s after its recorded Start (`squeue`'s StartTime; a requeued job's second run has a
    new one): a job started late in its second is cut short by up to ~0.1 s. Its end stays
    tied to its start, as a plain sleep's does (a version ending every job at a fixed point
    of the wall-clock second did not reproduce: docs/replay.md, "Fidelity"). Where squeue
    cannot say, it runs N s from its own start.
    """
    return (
        "#!/bin/sh\n"
        "t0=$(date +%s.%N)\n"
        'st=$(SLURM_TIME_FORMAT=%s squeue -h -j "$SLURM_JOB_ID" -o %S 2>/dev/null)\n'
        'case "$st" in ""|*[!0-9]*) st=$t0 ;; esac\n'
        f'awk -v st="$st" -v t0="$t0" -v now="$(date +%s.%N)" \'BEGIN {{ e = t0 + {seconds};'
        f" if (e > st + {seconds} + 0.9) e = st + {seconds} + 0.9; d = e - now; if (d < 0) d = 0;"
        ' printf "%.3f\\n", d }\' | xargs sleep\n'
    )


def submit_on_grid(
    c, jobs: Sequence[tuple[Sequence[str], int]], gap_s: float, offset_s: float
) -> list[int]:
    """Submit `jobs` ((sbatch arguments, run seconds)) one per `gap_s` on a fixed grid,
    `offset_s` past the grid's points (never two in one scheduler tick); their ids."""
    ids = []
    t0 = float(int(time.time()) + 2) + offset_s
    for k, (args, secs) in enumerate(jobs):
        time.sleep(max(0.0, t0 + k * gap_s - time.time()))
        ids.append(c.sbatch(*args, script=job_script(secs)))
    return ids


def wait_all_done(c, ids: Sequence[int], timeout: float) -> None:
    """Until none of `ids` is pending, running or completing (AssertionError at `timeout`)."""
    deadline = time.monotonic() + timeout
    wanted = set(ids)
    while wanted & set(c.active_job_ids()):
        assert time.monotonic() < deadline, "the trace did not finish in time"
        time.sleep(1)


def dump_sacct(c, since: datetime, out: Path, jobs: int, timeout: float = 60) -> None:
    """The window's sacct, in the replay's own format, into `out` once `jobs` are COMPLETED."""
    until = datetime.now(UTC) + timedelta(seconds=5)
    stamp = "%Y-%m-%dT%H:%M:%S"
    argv = ["env", "TZ=UTC", "SLURM_TIME_FORMAT=%s", "sacct", "-a", "-D", "-P",
            "-S", since.strftime(stamp), "-E", until.strftime(stamp),
            "--format", ",".join(SACCT_FIELDS)]  # fmt: skip
    # sacct learns the last ends a moment after squeue forgets the jobs
    deadline = time.monotonic() + timeout
    while True:
        text = c.run(argv).stdout
        done = sum(
            1
            for ln in text.splitlines()[1:]
            if ln.split("|")[0].isdigit() and ln.split("|")[13] == "COMPLETED"
        )
        if done >= jobs or time.monotonic() > deadline:
            break
        time.sleep(1)
    out.write_text(text)


def record_stream(c, jobs, gap_s: float, offset_s: float, out: Path, timeout: float) -> list[int]:
    """Submit `jobs` on the grid, wait until all are done, write their sacct to `out`."""
    since = datetime.now(UTC) - timedelta(seconds=5)
    ids = submit_on_grid(c, jobs, gap_s, offset_s)
    wait_all_done(c, ids, timeout)
    dump_sacct(c, since, out, len(ids))
    return ids


def grid_job_script(seconds: int, origin: float, period: float, end_phase: float,
                    shift: float) -> str:  # fmt: skip
    """A job that ends on the grid trace's clock: at origin + W * period + end_phase +
    `seconds`, W = floor((its start - origin + shift) / period) (the grid window it started
    in), whatever in that window started it.

    Every start of the grid trace falls in one of two zones of its window: just after the
    window's submits (origin + W * period + ~0-2 s: the tick or backfill pass after a submit,
    a preemptor after its victims, a requeued job at its BeginTime) or just after the
    window's job ends (end_phase + ~0-1 s: the main pass run by the ends' epilog-complete
    RPCs, backfill's next pass). Ending every job at a fixed point of its window keeps each
    end `period` - ~2 s away from the next window's submits whichever trigger of slurmctld
    (tick, backfill pass, epilog) started it and with what latency: slurmctld makes the same
    decisions in every run (docs/replay.md "Fidelity on the multi-node cluster"). The script
    reads its own start from `date` (no RPC to slurmctld).
    """
    return (
        "#!/bin/sh\n"
        "now=$(date +%s.%N)\n"
        f'sleep $(awk -v now="$now" \'BEGIN {{ w = int((now - {origin:.3f} + {shift}) / {period});'
        f" d = {origin:.3f} + w * {period} + {end_phase} + {seconds} - now; if (d < 0) d = 0;"
        ' printf "%.3f", d }\')\n'
    )


def raise_priority(pids: Sequence[int], nice: int = -10) -> int:
    """Set every thread of `pids` to `nice` (Linux nice is per thread: a daemon's existing
    threads must each be set; threads they start later inherit it). The threads set."""
    done = 0
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                os.setpriority(os.PRIO_PROCESS, int(tid), nice)
                done += 1
            except OSError:
                pass
    return done


def submit_slots(
    c, slots: Sequence[tuple[float, Sequence[tuple[Sequence[str], str]]]], origin: float
) -> list[tuple[int, float, float]]:
    """Submit each slot's jobs ((sbatch arguments, script)) one after the other from origin +
    its time; (job id, slot time, seconds past origin when sbatch returned)."""
    out = []
    for at, jobs in slots:
        time.sleep(max(0.0, origin + at - time.time()))
        for args, script in jobs:
            jid = c.sbatch(*args, script=script)
            out.append((jid, at, round(time.time() - origin, 3)))
    return out
