"""A sweep of candidate changes run as ONE Slurm job array on the site's own cluster.

Why this shape: a sweep of twenty candidates over a year of history is twenty replays of
minutes each, which the site's own compute nodes run side by side better than a login node.

1. The gatherer (`replay_via_slurm`) loads the sacct dumps once, checks every change fits the
   cluster model, and writes a run directory under `workdir` (which must be on a file system
   the compute nodes share): `trace.npz` (the normalized trace, `trace_file.py`), `spec.json`
   (the cluster model, scheduler settings, the comparison window and the candidates) and
   `task.sh`.
2. It submits `sbatch --parsable --array=0-(N-1) [--partition] [--time] task.sh`; task `i`
   runs `python -m slurmgpu replay-task RUN_DIR` (`replay_task`), which replays candidate `i`
   and writes `results/i.json` atomically. Meanwhile the gatherer replays the baseline.
3. It polls `squeue` until no task is left, reads each task's end from `sacct`, and builds
   the same `ReplayReport` as the in-process sweep (the same function computes each scenario,
   so the numbers are equal). A task without a result is a `FailedTask` (its job id, state,
   exit code and the last line of its log): never silently dropped.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from slurmgpu.errors import SlurmCommandError, UsageError
from slurmgpu.model.changes import format_change, parse_change
from slurmgpu.replay import (
    ReplayOptions,
    ReplayReport,
    _gpus_by_partition,
    _scenario,
    build_model,
    check_changes,
    load_for_replay,
)
from slurmgpu.replay.cluster import QosSpec
from slurmgpu.replay.engine import SchedConfig
from slurmgpu.replay.engine import replay as run_engine
from slurmgpu.replay.jobs import ReplayTrace
from slurmgpu.replay.results import (
    PartitionResult,
    ResultBlock,
    TierResult,
    Waits,
    Window,
    block_from_outcome,
    recorded_block,
    window_of,
)
from slurmgpu.replay.trace_file import load_trace_file, save_trace

SPEC_FORMAT = "slurmgpu-sweep/1"
SPEC, TRACE, SCRIPT, RESULTS, LOGS = "spec.json", "trace.npz", "task.sh", "results", "logs"
INVENTORY = "inventory"  # copies of --inventory snapshots
# after squeue forgets the tasks, slurmdbd may take a moment to record their ends
SACCT_SETTLE_S = 60.0
SQUEUE_TRIES = 5  # consecutive failed squeue polls before the gatherer gives up
_NOT_OVER = {"PENDING", "RUNNING", "REQUEUED", "SUSPENDED", "COMPLETING", "RESIZING"}


@dataclass(frozen=True)
class SlurmSweepOptions:
    """How the array is submitted (the CLI's --workdir and --slurm-* options)."""

    workdir: Path = Path("slurmgpu-sweep")  # must be readable and writable by the nodes
    partition: str | None = None
    time_limit: str | None = None  # sbatch --time per task (e.g. 1:00:00)
    sbatch_args: tuple[str, ...] = ()  # more sbatch options (--account=ops, --mem=16G)
    python: str = field(default_factory=lambda: sys.executable)  # as the nodes see it
    poll_s: float = 5.0
    timeout_s: float | None = None  # give up (and scancel) after this long; None: wait
    env: Mapping[str, str] | None = None  # for sbatch/squeue/sacct (SLURM_CONF...)
    progress: Callable[[str], None] | None = None  # told the job id once it is submitted


@dataclass(frozen=True)
class FailedTask:
    """A candidate whose task left no result."""

    index: int
    change: str
    job_id: str  # JOBID_TASK
    state: str
    exit_code: str
    log: Path
    last_log_line: str = ""

    def message(self) -> str:
        said = f": {self.last_log_line}" if self.last_log_line else ""
        where = f"log: {self.log}"
        if not self.log.exists():
            # the task's log is written on the node: absent here, the directory is not shared
            where = f"no log at {self.log}: is --workdir on a file system the nodes share?"
        return (
            f"sweep task {self.job_id} ({self.change}) ended {self.state}, exit code "
            f"{self.exit_code}, no result{said} ({where})"
        )


@dataclass(frozen=True)
class SweepResult:
    """The gathered report (baseline and the candidates that finished) and what failed."""

    report: ReplayReport
    job_id: str
    run_dir: Path
    changes: tuple[str, ...]
    failed: tuple[FailedTask, ...]


# -- the run directory ---------------------------------------------------------------------


def write_run(
    trace: ReplayTrace,
    options: ReplayOptions,
    window: Window,
    workdir: str | os.PathLike[str],
) -> Path:
    """A new run directory under `workdir` holding everything a task needs."""
    base = Path(workdir)
    try:
        base.mkdir(parents=True, exist_ok=True)
        run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=base)).resolve()
        os.chmod(run_dir, 0o755)  # tasks may run as another user than the one who submits
        (run_dir / RESULTS).mkdir()
        (run_dir / LOGS).mkdir()
    except OSError as exc:
        raise UsageError(f"--workdir {os.fspath(base)}: {exc.strerror or exc}") from None
    save_trace(trace, run_dir / TRACE)
    inventories = _copy_inventories(options.inventories, run_dir)
    spec = {
        "format": SPEC_FORMAT,
        "changes": [format_change(c) for c in options.what_if],
        "window": [window.since_s, window.until_s],
        "capacity": dict(options.capacity),
        "inventories": inventories,
        "gpus_per_node": dict(options.gpus_per_node),
        "gpu_types": dict(options.gpu_types),
        "gpu_memory_mib": dict(options.gpu_memory_mib),
        "qos": [asdict(q) for q in options.qos],
        "baseline_changes": [format_change(c) for c in options.baseline_changes],
        "config": asdict(options.config),
    }
    (run_dir / SPEC).write_text(json.dumps(spec, indent=1) + "\n", encoding="utf-8")
    return run_dir


def _copy_inventories(specs, run_dir: Path) -> list[list[str]]:
    """Copy `--inventory` snapshots into the run directory (the nodes may not see the
    originals); the spec names them relative to it."""
    import shutil

    from slurmgpu.replay.inventory import snapshot_files

    out = []
    for part, given in specs:
        for path in snapshot_files(given):
            rel = f"{INVENTORY}/{len(out)}-{path.name}"
            try:
                (run_dir / INVENTORY).mkdir(exist_ok=True)
                shutil.copyfile(path, run_dir / rel)
            except OSError as exc:
                raise UsageError(f"--inventory {part}={path}: {exc.strerror or exc}") from None
            out.append([part, rel])
    return out


def _read_spec(run_dir: Path) -> dict:
    try:
        spec = json.loads((run_dir / SPEC).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"{run_dir / SPEC}: cannot read the sweep spec ({exc})") from None
    if spec.get("format") != SPEC_FORMAT:
        raise UsageError(f"{run_dir / SPEC}: format {spec.get('format')!r}, not {SPEC_FORMAT}")
    return spec


def _options_from_spec(spec: dict, run_dir: Path) -> ReplayOptions:
    return ReplayOptions(
        capacity=spec["capacity"],
        inventories=tuple((part, os.fspath(run_dir / rel)) for part, rel in spec["inventories"]),
        gpus_per_node=spec["gpus_per_node"],
        gpu_types=spec["gpu_types"],
        gpu_memory_mib=spec["gpu_memory_mib"],
        qos=tuple(QosSpec(**{**q, "preempts": tuple(q["preempts"])}) for q in spec["qos"]),
        baseline_changes=tuple(parse_change(c) for c in spec["baseline_changes"]),
        what_if=tuple(parse_change(c) for c in spec["changes"]),
        config=SchedConfig(**spec["config"]),
    )


def write_script(run_dir: Path, python: str) -> Path:
    """`task.sh`: what each array task runs (kept in the run directory for the admin)."""
    import shlex

    script = run_dir / SCRIPT
    script.write_text(
        "#!/bin/sh\n"
        "# written by `slurmgpu replay --via-slurm`: array task i replays candidate i of\n"
        "# spec.json and writes results/i.json\n"
        f"exec {shlex.quote(python)} -m slurmgpu replay-task {shlex.quote(str(run_dir))}\n",
        encoding="utf-8",
    )
    script.chmod(0o755)
    return script


# -- the task side -------------------------------------------------------------------------


def replay_task(run_dir: str | os.PathLike[str], index: int | None = None) -> Path:
    """Replay candidate `index` (default: $SLURM_ARRAY_TASK_ID) of a run; its result file."""
    from slurmgpu.util.atomic import write_atomic

    run = Path(run_dir)
    if index is None:
        text = os.environ.get("SLURM_ARRAY_TASK_ID", "")
        if not text.isdigit():
            raise UsageError("replay-task: give --index, or run it as a Slurm array task")
        index = int(text)
    spec = _read_spec(run)
    options = _options_from_spec(spec, run)
    if not 0 <= index < len(options.what_if):
        raise UsageError(f"replay-task: index {index} is not one of the run's "
                         f"{len(options.what_if)} candidates")  # fmt: skip
    trace = load_trace_file(run / TRACE)
    window = Window(*map(float, spec["window"]))
    job = (trace, build_model(options), options.what_if[index], options.config, window)
    block = _scenario(job)  # the in-process sweep's own function: the same numbers
    target = run / RESULTS / f"{index}.json"
    write_atomic(target, json.dumps(block.to_dict()) + "\n", backup=False, mode=0o644)
    return target


_SCALARS = (
    "label", "gpus", "window_hours", "gpu_hours_allocated", "allocation_ratio",
    "useful_gpu_hours", "gpu_hours_after_window", "jobs", "jobs_started", "jobs_not_run",
    "preemptions", "gpu_hours_lost", "jobs_on_slices",
)  # fmt: skip


def _waits(d: dict) -> Waits:
    return Waits(**d)


def block_from_dict(d: dict) -> ResultBlock:
    """A `ResultBlock` back from its `to_dict()` (a task's result file)."""
    return ResultBlock(
        **{k: d[k] for k in _SCALARS},
        wait_s=_waits(d["wait_s"]),
        not_run_reasons=dict(d["not_run_reasons"]),
        by_partition=tuple(
            PartitionResult(**{**p, "wait_s": _waits(p["wait_s"])}) for p in d["by_partition"]
        ),
        by_tier=tuple(TierResult(t["tier"], _waits(t["wait_s"])) for t in d["by_tier"]),
        utilization=tuple(d.get("utilization", ())),
        change=d.get("change"),
    )


def read_result(run_dir: Path, index: int) -> ResultBlock | None:
    """Task `index`'s result, or None when it wrote none (or an unreadable one)."""
    try:
        text = (run_dir / RESULTS / f"{index}.json").read_text(encoding="utf-8")
        return block_from_dict(json.loads(text))
    except (OSError, ValueError, KeyError, TypeError):
        return None


# -- the gatherer --------------------------------------------------------------------------


def replay_via_slurm(
    sacct_files: Sequence[str | os.PathLike[str]],
    options: ReplayOptions,
    slurm: SlurmSweepOptions,
) -> SweepResult:
    """`replay()`'s sweep, each candidate a task of one Slurm job array."""
    options, trace = load_for_replay(sacct_files, options)
    return sweep_trace_via_slurm(trace, options, slurm)


def sweep_trace_via_slurm(
    trace: ReplayTrace, options: ReplayOptions, slurm: SlurmSweepOptions
) -> SweepResult:
    """Submit the array for an already-loaded trace, replay the baseline, gather."""
    from slurmgpu.sources import slurm_array

    if not options.what_if:
        raise UsageError("--via-slurm needs candidate changes (--sweep FILE or --what-if)")
    model = build_model(options)
    check_changes(model, trace, options.what_if)  # before anything is submitted
    gpus = _gpus_by_partition(model)
    baseline = None
    # the window ends at the last recorded end; only a trace without any needs the baseline
    if np.isnan(trace.recorded_end_s).all():
        baseline = run_engine(trace, model, options.config)
    window = window_of(trace, baseline)
    run_dir = write_run(trace, options, window, slurm.workdir)
    script = write_script(run_dir, slurm.python)
    job_id = slurm_array.submit_array(script, len(options.what_if), _sbatch_args(run_dir, slurm),
                                      env=slurm.env)  # fmt: skip
    if slurm.progress:
        slurm.progress(f"submitted job array {job_id} ({len(options.what_if)} tasks); "
                       f"run directory {run_dir}")  # fmt: skip
    try:
        if baseline is None:  # while the tasks run
            baseline = run_engine(trace, model, options.config)
        _wait_for_array(job_id, slurm)
    except BaseException:
        slurm_array.cancel(job_id, env=slurm.env)
        raise
    return _gather(trace, options, baseline, window, gpus, run_dir, job_id, slurm)


def _sbatch_args(run_dir: Path, slurm: SlurmSweepOptions) -> list[str]:
    args = ["--job-name=slurmgpu-sweep", f"--chdir={run_dir}",
            f"--output={run_dir / LOGS}/%a.out", "--ntasks=1"]  # fmt: skip
    if slurm.partition:
        args.append(f"--partition={slurm.partition}")
    if slurm.time_limit:
        args.append(f"--time={slurm.time_limit}")
    return args + list(slurm.sbatch_args)


def _wait_for_array(job_id: str, slurm: SlurmSweepOptions) -> None:
    from slurmgpu.sources import slurm_array

    deadline = None if slurm.timeout_s is None else time.monotonic() + slurm.timeout_s
    failures = 0
    while True:
        try:
            if not slurm_array.active_tasks(job_id, env=slurm.env):
                return
            failures = 0
        except SlurmCommandError:
            # slurmctld restarting or busy: a sweep of hours is not cancelled for one
            # unanswered squeue, only when it stays unreachable
            failures += 1
            if failures >= SQUEUE_TRIES:
                raise
        if deadline is not None and time.monotonic() > deadline:
            raise SlurmCommandError(
                f"sweep array {job_id} still running after {slurm.timeout_s:g} s: cancelled"
            )
        time.sleep(slurm.poll_s)


def _final_states(job_id: str, tasks: int, slurm: SlurmSweepOptions):
    """sacct's view of every task, waiting a little for slurmdbd; {} without accounting."""
    from slurmgpu.sources import slurm_array

    deadline = time.monotonic() + SACCT_SETTLE_S
    while True:
        try:
            states = slurm_array.task_states(job_id, env=slurm.env)
        except SlurmCommandError:
            return {}
        if len(states) >= tasks and not {s.state for s in states.values()} & _NOT_OVER:
            return states
        if time.monotonic() > deadline:
            return states
        time.sleep(min(slurm.poll_s, 1.0))


def _last_line(path: Path) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines()]
    except OSError:
        return ""
    lines = [ln for ln in lines if ln]
    return lines[-1][:200] if lines else ""


def _gather(trace, options, baseline, window, gpus, run_dir, job_id, slurm) -> SweepResult:
    changes = tuple(format_change(c) for c in options.what_if)
    blocks, failed = [], []
    states: dict | None = None
    for i, change in enumerate(changes):
        block = read_result(run_dir, i)
        if block is not None:
            blocks.append(block)
            continue
        if states is None:
            states = _final_states(job_id, len(changes), slurm)
        st = states.get(i)
        log = run_dir / LOGS / f"{i}.out"
        failed.append(
            FailedTask(i, change, f"{job_id}_{i}", st.state if st else "unknown (not in sacct)",
                       st.exit_code if st else "unknown", log, _last_line(log))
        )  # fmt: skip
    report = ReplayReport(
        baseline=block_from_outcome("baseline", trace, baseline, gpus, window),
        recorded=recorded_block(trace, gpus, window),
        scenarios=tuple(blocks),
        skipped=dict(trace.skipped),
        config=options.config,
        rejected=trace.rejected,
    )
    return SweepResult(report, job_id, run_dir, changes, tuple(failed))
