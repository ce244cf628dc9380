"""`slurmgpu replay`: re-schedule a site's own sacct history on its cluster and on what-ifs."""

from __future__ import annotations

import click

from slurmgpu.util import strict

WORKDIR_DEFAULT = "slurmgpu-sweep"


@click.command("replay")
@click.option(
    "--sacct-file",
    "sacct_files",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="Saved `sacct -P` output with its header (plain or gzip); repeatable.",
)
@click.option(
    "--store",
    type=click.Path(),
    help="Instead of --sacct-file: the runs of an accounting store (`slurmgpu ingest`).",
)
@click.option(
    "--cluster",
    "clusters",
    multiple=True,
    help="With --store: only this cluster of the store (repeatable).",
)
@click.option(
    "--capacity",
    multiple=True,
    metavar="PARTITION=GPUS",
    help="Whole GPUs in a partition (repeatable); the cluster model.",
)
@click.option(
    "--inventory",
    "inventories",
    multiple=True,
    metavar="PARTITION=SNAPSHOT",
    help="A node's inventory snapshot (or a directory of them) in a partition; repeatable. "
    "The partition's nodes, GPU type and MIG layout come from the snapshots.",
)
@click.option(
    "--gpus-per-node",
    "per_node",
    multiple=True,
    metavar="[PARTITION=]N",
    help="GPUs per node (default 8).",
)
@click.option(
    "--gpu-type",
    "gpu_types",
    multiple=True,
    metavar="PARTITION=TYPE",
    help="GPU type of a partition (e.g. gpu=h100): memory and MIG profiles.",
)
@click.option(
    "--gpu-memory",
    "gpu_memory",
    multiple=True,
    metavar="TYPE=SIZE",
    help="Memory of a GPU type's GPUs (or of a partition's), e.g. t4=16G; a bare number is "
    "MiB. Overrides the catalogue; as analyze's --gpu-memory.",
)
@click.option(
    "--shards-per-gpu",
    "shards",
    multiple=True,
    metavar="[PARTITION=]N",
    help="Shards per GPU, to read gres/shard jobs.",
)
@click.option(
    "--policy",
    type=click.Path(exists=True, dir_okay=False),
    help="Site policy: QOS priorities, preemption and grace times, tiers (default: "
    "$SLURMGPU_POLICY when set).",
)
@click.option(
    "--slurm-conf",
    type=click.Path(exists=True, dir_okay=False),
    help="slurm.conf whose priority weights and backfill settings to use.",
)
@click.option(
    "--live",
    is_flag=True,
    help="Read capacity (unless --capacity), QOS and settings from the live cluster.",
)
@click.option(
    "--baseline",
    "baseline",
    multiple=True,
    metavar="CHANGE",
    help="A change already in effect today (e.g. a MIG carving); repeatable.",
)
@click.option(
    "--what-if",
    "what_if",
    multiple=True,
    metavar="CHANGE",
    help="move:FROM:TO:GPUS, carve:P:GPUS:PROFILE=N[,..], shard:P:GPUS:N, "
    "tier:QOS:KEY=VALUE[,..]; repeatable.",
)
@click.option(
    "--sweep",
    type=click.Path(dir_okay=False),
    help="File of candidate changes (one a line), replayed in parallel processes.",
)
@click.option(
    "--processes",
    type=strict.IntRange(min=1),
    default=None,
    help="Parallel replays (default: the CPUs, at most one per change).",
)
@click.option(
    "--via-slurm",
    is_flag=True,
    help="Run the candidates as one Slurm job array (a task each) and gather the results.",
)
@click.option(
    "--workdir",
    type=click.Path(file_okay=False),
    default=WORKDIR_DEFAULT,
    show_default=True,
    help="With --via-slurm: where the run's trace, tasks and results go; it must be on a "
    "file system the compute nodes share.",
)
@click.option("--slurm-partition", help="With --via-slurm: the partition the tasks run in.")
@click.option("--slurm-time", help="With --via-slurm: each task's time limit (sbatch --time).")
@click.option(
    "--slurm-option",
    "slurm_options",
    multiple=True,
    metavar="OPTION",
    help="With --via-slurm: another sbatch option (e.g. --slurm-option=--mem=16G); repeatable.",
)
@click.option(
    "--slurm-python",
    help="With --via-slurm: the Python the tasks run, as the nodes see it (default: this one).",
)
@click.option(
    "--timezone", "tz", default="UTC", show_default=True, help="Zone of ISO times in the dumps."
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json", "html"]),
    default="text",
    show_default=True,
)
@click.option(
    "--calibrate",
    is_flag=True,
    help="Only compare the baseline replay with the recorded history, per partition "
    "(allocation, mean and p95 wait, start order); the policy's [objective] sets the tolerance.",
)
@click.option(
    "--inferred-load",
    is_flag=True,
    help="With --calibrate (and in advise): hold the GPU-time each uncalibrated partition's "
    "explanation infers (held outside the model) as background load in the baseline; its "
    "partitions are then marked 'calibrated on inferred load'.",
)
@click.option(
    "--compile-only",
    is_flag=True,
    help="Only compile the replay engine into this install's cache (or find it there) and "
    "replay nothing: a step for the installer, so that no first replay pays for it.",
)
@click.option("--output", "-o", default="-", show_default=True, help="File to write, or -.")
def replay(sacct_files: tuple[str, ...], fmt: str, output: str, **params: object) -> None:
    """Predict a change's effect: replay the history (baseline) and each what-if side by side."""
    if params.pop("compile_only"):
        _compile_only()
        return
    from slurmgpu.replay import replay as run_replay
    from slurmgpu.views.replay import render_replay

    warn_engine()
    inferred = params.pop("inferred_load")
    if params.pop("calibrate"):
        _write(_calibrate(list(sacct_files), params, fmt, inferred), output)
        return
    if inferred:
        from slurmgpu.errors import UsageError

        raise UsageError("--inferred-load goes with --calibrate (or slurmgpu advise)")
    slurm = sweep_options(params)
    if slurm is None:
        report = run_replay(list(sacct_files), replay_options(params))
        _write(render_replay(report.to_dict(), fmt), output)
        return
    from slurmgpu.replay.sweep import replay_via_slurm

    result = replay_via_slurm(list(sacct_files), replay_options(params), slurm)
    _write(render_replay(result.report.to_dict(), fmt), output)
    _fail_on_failed_tasks(result)


def _compile_only() -> None:
    """`replay --compile-only`: the engine compiled (or found) in this install's cache."""
    from slurmgpu.errors import UsageError
    from slurmgpu.replay.engine import compile_ahead

    ctx = click.get_current_context()
    given = [
        p.opts[0]
        for p in ctx.command.params
        if p.name != "compile_only"
        and ctx.get_parameter_source(p.name or "") is click.core.ParameterSource.COMMANDLINE
    ]
    if given:  # never silently ignored
        raise UsageError(f"--compile-only replays nothing: drop {given[0]}")
    warn_engine()
    done = compile_ahead()
    if not done.compiled:
        click.echo("replay engine: runs as Python here (numba off or missing): nothing to compile")
    elif done.cache is None:  # another process held the lock past its bound (said above)
        from slurmgpu.errors import SlurmgpuError

        raise SlurmgpuError("replay engine: compiled, but not saved: run --compile-only again")
    elif done.now:
        click.echo(f"replay engine: compiled in {done.seconds:.1f} s, saved in {done.cache}")
    else:
        click.echo(f"replay engine: already compiled for this install, in {done.cache}")


def warn_engine() -> None:
    """Say once, before a long run, when the replay engine runs without numba."""
    from slurmgpu.replay.engine import engine_warnings

    for warning in engine_warnings():
        click.secho(f"slurmgpu: warning: {warning}", fg="yellow", err=True)


def _calibrate(sacct_files: list[str], params: dict, fmt: str, inferred: bool = False) -> str:
    """`replay --calibrate`: the calibration document, rendered."""
    from slurmgpu.advice.calibrate import Tolerance, calibrate
    from slurmgpu.errors import UsageError
    from slurmgpu.views.advise import render_calibration

    given = [k for k in ("what_if", "sweep", "via_slurm") if params.get(k)]
    if given:  # never silently ignored
        raise UsageError(
            f"--calibrate replays the baseline only: drop --{given[0].replace('_', '-')}"
        )
    sweep_options(params)
    options = replay_options(params)
    obj = getattr(options.tiers, "objective", None)
    tol = (
        Tolerance(obj.calibration_wait_factor, allocation_points=obj.calibration_allocation_points)
        if obj is not None
        else Tolerance()
    )
    cal = calibrate(sacct_files, options, tol, inferred_load=inferred)
    return render_calibration({"fidelity": cal.to_dict()}, fmt)


def _write(text: str, output: str) -> None:
    from slurmgpu.util.atomic import write_atomic

    if output == "-":
        click.echo(text, nl=False)
        return
    try:
        write_atomic(output, text, backup=False)
    except OSError as exc:
        from slurmgpu.errors import UsageError

        raise UsageError(f"--output {output}: {exc.strerror or exc}") from None


def _fail_on_failed_tasks(result) -> None:
    """One error line per failed task, then exit 1 (the report holds those that finished)."""
    from slurmgpu.cli.errorpath import one_line
    from slurmgpu.errors import SlurmgpuError

    if not result.failed:
        return
    for task in result.failed:
        click.echo(f"slurmgpu: error: {one_line(task.message())}", err=True)
    raise SlurmgpuError(
        f"{len(result.failed)} of {len(result.changes)} sweep tasks of array job "
        f"{result.job_id} failed; the report holds the other candidates (run: {result.run_dir})"
    )


def sweep_options(params: dict):
    """The --via-slurm options as `SlurmSweepOptions` (None without --via-slurm); they are
    removed from `params` either way."""
    from pathlib import Path

    keys = ("via_slurm", "workdir", "slurm_partition", "slurm_time", "slurm_options",
            "slurm_python")  # fmt: skip
    got = {k: params.pop(k) for k in keys}
    if not got["via_slurm"]:
        given = [k for k in keys[2:] if got[k]]
        if got["workdir"] != WORKDIR_DEFAULT:
            given.insert(0, "workdir")
        if given:  # never silently ignored
            from slurmgpu.errors import UsageError

            raise UsageError(f"--{given[0].rstrip('s').replace('_', '-')} needs --via-slurm")
        return None
    from slurmgpu.replay.sweep import SlurmSweepOptions

    extra = {"python": got["slurm_python"]} if got["slurm_python"] else {}
    return SlurmSweepOptions(
        workdir=Path(got["workdir"]),
        partition=got["slurm_partition"],
        time_limit=got["slurm_time"],
        sbatch_args=tuple(got["slurm_options"]),
        progress=lambda line: click.echo(f"slurmgpu: replay: {line}", err=True),
        **extra,
    )


@click.command("replay-task", hidden=True)
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--index", type=strict.IntRange(min=0), help="Default: $SLURM_ARRAY_TASK_ID.")
def replay_task(run_dir: str, index: int | None) -> None:
    """One task of a `replay --via-slurm` sweep: replay one candidate, write its result."""
    from slurmgpu.replay.sweep import replay_task as run_task

    run_task(run_dir, index)


def _pairs(values: tuple[str, ...], option: str, convert=str, default_key: str | None = None):
    """`KEY=VALUE` options -> {key: converted value}; `VALUE` alone is `default_key`'s."""
    from slurmgpu.errors import UsageError

    out = {}
    for text in values:
        key, sep, value = text.rpartition("=")
        if not sep and default_key is not None:
            key = default_key
        try:
            if not key or not value:
                raise ValueError
            out[key] = convert(value)
        except ValueError:
            form = "[PARTITION=]VALUE" if default_key else "PARTITION=VALUE"
            raise UsageError(f"{option} {text!r}: use {form}") from None
    return out


def _inventories(values: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """`--inventory PARTITION=SNAPSHOT` values, in order (a partition may take several)."""
    from slurmgpu.errors import UsageError

    out = []
    for text in values:
        part, sep, path = text.partition("=")
        if not sep or not part or not path:
            raise UsageError(f"--inventory {text!r}: use PARTITION=SNAPSHOT")
        out.append((part, path))
    return tuple(out)


def replay_options(params: dict):
    """The command's options as a `ReplayOptions` (bad values are one-line usage errors)."""
    import os

    from slurmgpu.accounting.capacity import parse_capacity_options
    from slurmgpu.accounting.options import check_timezone
    from slurmgpu.cli.analysis_options import (
        MAX_GPUS_PER_NODE,
        MAX_SHARDS_PER_GPU,
        _numbers_by_partition,
        gpu_memory_option,
        policy_from_environment,
    )
    from slurmgpu.replay import ReplayOptions, parse_change, read_sweep
    from slurmgpu.replay.cluster import qos_from_policy
    from slurmgpu.replay.engine import SchedConfig
    from slurmgpu.replay.slurm_config import parse_slurm_conf, sched_config

    config = SchedConfig()
    qos: tuple = ()
    policy = None
    policy_path = params["policy"] or policy_from_environment()
    if policy_path:
        from slurmgpu.sources.policy_file import load_policy

        policy = load_policy(policy_path)
        qos = qos_from_policy(policy)
        config = SchedConfig(priority_weight_qos=policy.priority_weight_qos)
    if params["slurm_conf"]:
        with open(params["slurm_conf"], encoding="utf-8") as fh:
            config = sched_config(parse_slurm_conf(fh.read()), config)
    what_if = tuple(parse_change(c) for c in params["what_if"])
    if params["sweep"]:
        what_if += read_sweep(params["sweep"])
    per_node = {
        k: int(v)
        for k, v in _numbers_by_partition(
            params["per_node"], "--gpus-per-node", MAX_GPUS_PER_NODE
        ).items()
    }
    default_per_node = per_node.pop("*", None)
    capacity = parse_capacity_options(params["capacity"], whole=True)
    if default_per_node:
        per_node = {p: per_node.get(p, default_per_node) for p in capacity} | per_node
    processes = params["processes"] or min(os.cpu_count() or 1, max(len(what_if), 1))
    return ReplayOptions(
        capacity=capacity,
        inventories=_inventories(params["inventories"]),
        gpus_per_node=per_node,
        gpu_types=_pairs(params["gpu_types"], "--gpu-type"),
        gpu_memory_mib=gpu_memory_option(params["gpu_memory"], policy),
        shards_per_gpu=_numbers_by_partition(
            params["shards"], "--shards-per-gpu", MAX_SHARDS_PER_GPU
        ),
        qos=qos,
        tiers=policy,
        baseline_changes=tuple(parse_change(c) for c in params["baseline"]),
        what_if=what_if,
        config=config,
        timezone=check_timezone(str(params["tz"])),
        processes=processes,
        live=bool(params["live"]),
        **_store_fields(params),
    )


def _store_fields(params: dict) -> dict:
    """--store and --cluster as `ReplayOptions` fields (--cluster only with --store)."""
    from slurmgpu.errors import UsageError

    store, clusters = params.get("store"), tuple(params.get("clusters") or ())
    if clusters and not store:
        raise UsageError("--cluster: only with --store (a dump's clusters are all replayed)")
    return {"store": str(store) if store else None, "clusters": clusters}
