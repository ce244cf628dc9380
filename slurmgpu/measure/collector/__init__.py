"""`slurmgpu collect`: the node agent for sites with neither jobstats nor DCGM.

A pass (`collect`, run by a systemd timer every 30-60 s) samples NVML, maps each GPU process
to its Slurm job through /proc/PID/cgroup, adds the sample to the per-job running summaries
in the state file and writes a Prometheus textfile. At job end, the Epilog (`collect
--epilog`) takes the job's summary out of the state and stores it as `SG1:` in the job's
AdminComment (merged with what is there) and/or in a spool directory. The epilog never
fails the job or drains the node: every error is logged and it returns 0.
"""

from __future__ import annotations

import logging
import os
import random
import re
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from slurmgpu.errors import InventoryError, SlurmgpuError
from slurmgpu.measure.collector.cgroup import ProcessMapper
from slurmgpu.measure.collector.nvml import NodeSample
from slurmgpu.measure.collector.state import attribute, job_summary, locked_state, update
from slurmgpu.measure.collector.textfile import render_textfile
from slurmgpu.measure.collector.vendors import sample_accelerators
from slurmgpu.measure.summary import JobSummary, encode, write_spool
from slurmgpu.util.atomic import write_atomic

log = logging.getLogger("slurmgpu.collect")


@dataclass(frozen=True)
class CollectOptions:
    """Where the collector reads and writes (every path a site may move)."""

    state: Path
    node: str
    cluster: str = ""
    host_root: Path = Path("/")
    textfile: Path | None = None
    spool: Path | None = None
    admin_comment: bool = True
    slurm_timeout_s: float = 20.0


@dataclass
class CollectResult:
    """What one pass saw: devices, jobs, and the problems (also logged)."""

    devices: int = 0
    without_utilization: int = 0  # devices NVML gives no utilization for (MIG)
    jobs: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def collect(options: CollectOptions, sample: NodeSample | None = None) -> CollectResult:
    """One pass: sample, attribute, update the state, write the textfile."""
    now = int(time.time())
    sample = sample if sample is not None else sample_accelerators(options.host_root)
    if not sample.devices and sample.errors:
        raise InventoryError("; ".join(sample.errors))
    problems = list(sample.errors)
    mapper = ProcessMapper(options.host_root, lambda: job_sluids(options, problems))
    rows = attribute(sample, mapper)
    if mapper.unresolved:
        problems.append(
            "job cgroups named by SLUID that Slurm did not map to a job id (kept under the "
            f"SLUID): {', '.join(sorted(mapper.unresolved))}"
        )
    try:
        with locked_state(options.state, problems) as state:
            update(state, rows, now, sample.energy)
        if options.textfile is not None:
            text = render_textfile(options.node, rows, errors=len(sample.errors), now=now)
            options.textfile.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(options.textfile, text, mode=0o644, backup=False)
    except OSError as exc:  # a path the site chose cannot be written: one line, not a trace
        raise SlurmgpuError(f"{exc.filename or options.state}: {exc.strerror}") from exc
    for problem in problems:
        log.warning("%s", problem)
    jobs = sorted({r.owner.job_id for r in rows if r.owner}, key=lambda j: (len(j), j))
    blind = sum(1 for d in sample.devices if d.util_pct is None)
    return CollectResult(len(sample.devices), blind, jobs, problems)


def setup_logging(log_file: Path | None = None) -> None:
    """Log lines to stderr and, when given, to `log_file` (an Epilog's stderr is discarded)."""
    fmt = logging.Formatter("%(asctime)s slurmgpu collect: %(levelname)s: %(message)s")
    handlers: list[logging.Handler] = [logging.StreamHandler()]
    if log_file is not None:
        try:
            handlers.append(logging.FileHandler(log_file))
        except OSError as exc:
            print(f"slurmgpu collect: cannot log to {log_file}: {exc.strerror}", file=sys.stderr)
    for handler in handlers:
        handler.setFormatter(fmt)
        log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False


def epilog(options: CollectOptions, env: Mapping[str, str] | None = None) -> int:
    """Store the ending job's summary; always 0 (an Epilog's failure would drain the node)."""
    env = os.environ if env is None else env
    try:
        _epilog(options, env)
    except Exception as exc:  # an epilog must not fail: log everything, return 0
        log.error("epilog for job %s failed: %s", env.get("SLURM_JOB_ID", "?"), exc)
    return 0


def _epilog(options: CollectOptions, env: Mapping[str, str]) -> None:
    job_id = env.get("SLURM_JOB_ID", "").strip()
    if not job_id.isdigit():
        log.error("epilog: SLURM_JOB_ID is %r, not a job id; nothing stored", job_id)
        return
    cluster = options.cluster or env.get("SLURM_CLUSTER_NAME", "")
    problems: list[str] = []
    with locked_state(options.state, problems) as state:
        summary = job_summary(
            state,
            job_id,
            node=options.node,
            cluster=cluster,
            allocated_minors=allocated_gpus(env.get("SLURM_JOB_GPUS", "")),
        )
        state.jobs.pop(job_id, None)
    for problem in problems:
        log.warning("%s", problem)
    if summary is None:
        log.info("epilog: no sample saw job %s on %s; nothing stored", job_id, options.node)
        return
    stored = False
    if options.spool is not None:
        try:
            path = write_spool(options.spool, summary)
            log.info("epilog: job %s summary stored in %s", job_id, path)
            stored = True
        except OSError as exc:
            log.error("epilog: job %s: spool %s: %s", job_id, options.spool, exc)
    if options.admin_comment:
        try:
            store_admin_comment(summary, timeout_s=options.slurm_timeout_s)
            log.info("epilog: job %s summary stored in AdminComment", job_id)
            stored = True
        except SlurmgpuError as exc:
            log.error("epilog: job %s: AdminComment not updated: %s", job_id, exc)
    if not stored:
        # the state entry is gone: the log is the last place the summary can be recovered from
        log.error("epilog: job %s summary stored nowhere; it was: %s", job_id, encode(summary))


def allocated_gpus(text: str) -> tuple[int, ...]:
    """SLURM_JOB_GPUS (`0,3` or `0-3`): the job's GPU indices; nothing for anything else."""
    from slurmgpu.util.hostlist import parse_id_list

    try:
        return tuple(parse_id_list(text)) if text.strip() else ()
    except ValueError:
        return ()


def store_admin_comment(
    summary: JobSummary, *, timeout_s: float = 20.0, tries: int = 5, settle_s: float = 1.5
) -> None:
    """Merge the summary into the job's AdminComment, keeping what is there (the tier
    decision record), and read it back (another node's epilog may race us).

    Read-merge-write is not atomic: the epilogs of a multi-node job's other nodes may read
    before our write and write after it, dropping our token. So the check reads back only
    after `settle_s` (plus jitter, so racing nodes do not stay in step) -- longer than
    another node's read-merge-write takes -- and merges again while our token is missing.

    `scontrol update JobId=N AdminComment=...` cannot do it: an Epilog runs after the job
    ended, and slurmctld 22.05 answers "Job has already finished" (seen on the test
    cluster). So the record is changed in the accounting database with `sacctmgr modify
    job`, as jobstats' epilog does (root is always a slurmdbd administrator).

    One record only: sacct and sacctmgr read `JobID=N` as "job N, and every task of the
    array N" -- the raw id of an array's last task is the array's id -- so writing by the
    raw id changed every task of the array (issue #20). The record is named the way sacct
    shows it (`ARRAY_TASK`, e.g. `41_7`; a plain job's `N`), found by its JobIDRaw.
    """
    from slurmgpu.errors import SlurmCommandError
    from slurmgpu.measure.summary import merge_admin_comment

    failed: SlurmCommandError | None = None
    # a node stays COMPLETING while its Epilog runs: failures are retried for 3 command
    # timeouts at most, then the summary goes to the log (see `_epilog`)
    give_up = time.monotonic() + 3 * timeout_s
    for _ in range(tries):
        try:
            shown, current = _stored_admin_comment(summary, timeout_s)
            if _holds(current, summary):
                return
            merged = merge_admin_comment(current, summary)
            where = [f"JobID={shown}"]
            if summary.cluster:
                where.append(f"Cluster={summary.cluster}")
            argv = ["sacctmgr", "-i", "modify", "job", "where", *where]
            _run([*argv, "set", f"AdminComment={merged}"], timeout_s)
            time.sleep(settle_s + random.uniform(0, settle_s))
            if _holds(_stored_admin_comment(summary, timeout_s)[1], summary):
                return
        except SlurmCommandError as exc:
            # a busy munged or slurmdbd ("If munged is up, restart with --num-threads=10",
            # seen when 20 epilogs end at once): wait and try again, the summary is not lost
            failed = exc
            if time.monotonic() > give_up:
                break
            log.warning("epilog: job %s: %s; trying again", summary.job, exc)
            time.sleep(settle_s + random.uniform(0, 2 * settle_s))
    if failed is not None:
        raise failed
    raise SlurmCommandError(f"AdminComment of job {summary.job} did not keep the summary")


def _holds(admin_comment: str, summary: JobSummary) -> bool:
    """Whether the stored text carries this summary (compared decoded: the case may differ)."""
    from slurmgpu.measure.summary import decode, tokens

    for token in tokens(admin_comment):
        try:
            if decode(token) == summary:
                return True
        except ValueError:
            continue
    return False


def job_sluids(options: CollectOptions, problems: list[str]) -> dict[str, str]:
    """SLUID -> job id of the jobs slurmctld knows (`scontrol show job --json`), for job
    cgroups named by SLUID (26.05 without CgroupJobIdPaths=yes). The SLUID is
    `jobs[].step_id.sluid` in 25.11's v0.0.44 (seen on the test cluster) and `jobs[].sluid`
    in 26.05's v0.0.45. A failing scontrol is a problem of this pass, not a failed pass."""
    import json

    try:
        doc = json.loads(_run(["scontrol", "show", "job", "--json"], options.slurm_timeout_s))
    except (SlurmgpuError, ValueError) as exc:
        problems.append(f"scontrol show job --json (for SLUID-named cgroups): {exc}")
        return {}
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    out: dict[str, str] = {}
    for job in jobs if isinstance(jobs, list) else []:
        if not isinstance(job, dict) or job.get("job_id") is None:
            continue
        step_id = job.get("step_id") if isinstance(job.get("step_id"), dict) else {}
        sluid = job.get("sluid") or step_id.get("sluid")
        if sluid:
            out[str(sluid)] = str(job["job_id"])
    return out


def _stored_admin_comment(summary: JobSummary, timeout_s: float) -> tuple[str, str]:
    """(the record's JobID as sacct shows it, its AdminComment) as the accounting database
    has them (what `analyze` will read): the row whose JobIDRaw is the summary's job.

    `sacct -j N` lists every task of array N, so the row is picked by JobIDRaw, never by
    position. SlurmCommandError when no row has that raw id (nothing would be written)."""
    from slurmgpu.errors import SlurmCommandError

    argv = ["sacct", "-n", "-X", "-P", "-j", summary.job, "-o", "JobIDRaw,JobID,AdminComment"]
    if summary.cluster:
        argv += ["-M", summary.cluster]
    found: tuple[str, str] | None = None
    for line in _run(argv, timeout_s).splitlines():
        parts = line.split("|", 2)  # AdminComment is last: a `|` in it stays in it
        if len(parts) == 3 and parts[0].strip() == summary.job:
            found = (parts[1].strip(), parts[2].strip())  # the latest run comes last
    if found is None or not _RECORD_ID.fullmatch(found[0]):
        raise SlurmCommandError(f"sacct has no record with JobIDRaw {summary.job}")
    return found


# what sacct shows as JobID for one record: `N`, an array task `N_T`, a het component `N+K`
_RECORD_ID = re.compile(r"[0-9]+(?:_[0-9]+|\+[0-9]+)?")


def _run(argv: list[str], timeout_s: float) -> str:
    from slurmgpu.util.proc import run

    return run(argv, timeout=timeout_s).stdout
