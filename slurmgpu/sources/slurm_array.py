"""A Slurm job array as a source: submit it, watch it, and read how each task ended.

Used by `replay --via-slurm` (one task per candidate change). Only argument lists through
`slurmgpu.util.proc.run`; the cluster is the one `SLURM_CONF` (inherited or in `env`) names.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slurmgpu.errors import SlurmCommandError
from slurmgpu.util.proc import run

# sacct prints an array task as JOBID_TASK (and a pending remainder as JOBID_[2-5])
_TASK = re.compile(r"^(\d+)_(\d+)$")


@dataclass(frozen=True)
class TaskState:
    """How one array task ended, as sacct tells it."""

    task: int
    job_id: str  # `JOBID_TASK`, what an admin types to `sacct -j` / `scontrol show job`
    state: str  # COMPLETED, FAILED, CANCELLED, TIMEOUT, OUT_OF_MEMORY, NODE_FAIL...
    exit_code: str  # `CODE:SIGNAL`


def submit_array(
    script: str | os.PathLike[str],
    tasks: int,
    sbatch_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> str:
    """`sbatch --parsable --array=0-(tasks-1) ARGS SCRIPT`; the array's job id."""
    argv = ["sbatch", "--parsable", f"--array=0-{tasks - 1}", *sbatch_args, os.fspath(script)]
    out = run(argv, env=env, timeout=60).stdout.strip()
    job_id = out.split(";")[0]  # `JOBID;CLUSTER` on a multi-cluster setup
    if not job_id.isdigit():
        raise SlurmCommandError(f"sbatch printed {out!r}, not a job id")
    return job_id


def active_tasks(job_id: str, env: Mapping[str, str] | None = None) -> int:
    """Tasks of the array slurmctld still holds pending, running or completing."""
    proc = run(["squeue", "-h", "-r", "-j", job_id, "-o", "%i %T"], env=env, timeout=60,
               check=False)  # fmt: skip
    if proc.returncode != 0:
        # squeue refuses a job id it no longer knows (older releases): nothing is active
        if "Invalid job id" in proc.stderr:
            return 0
        raise SlurmCommandError(f"squeue -j {job_id} exited {proc.returncode}: "
                                f"{proc.stderr.strip()[-300:]}")  # fmt: skip
    done = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
            "PREEMPTED", "BOOT_FAIL", "DEADLINE"}  # fmt: skip
    states = [line.split()[-1] for line in proc.stdout.splitlines() if line.strip()]
    return sum(1 for state in states if state not in done)


def task_states(job_id: str, env: Mapping[str, str] | None = None) -> dict[int, TaskState]:
    """Each task's final state from `sacct -X` (tasks sacct does not know yet are absent)."""
    argv = ["sacct", "-n", "-X", "-P", "-D", "-j", job_id, "--format=JobID,State,ExitCode"]
    out = run(argv, env=env, timeout=60).stdout
    states: dict[int, TaskState] = {}
    for line in out.splitlines():
        parts = line.split("|")
        m = _TASK.match(parts[0]) if len(parts) >= 3 else None
        if m and m.group(1) == job_id:
            task = int(m.group(2))
            # `CANCELLED by 0` -> CANCELLED; a requeued task's last line is its last run
            states[task] = TaskState(task, parts[0], parts[1].split()[0], parts[2])
    return states


def cancel(job_id: str, env: Mapping[str, str] | None = None) -> None:
    """`scancel JOBID` (every task of the array); failures are ignored (it may be over)."""
    with contextlib.suppress(SlurmCommandError):
        run(["scancel", job_id], env=env, timeout=30, check=False)
