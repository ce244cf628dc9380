"""The options `slurmgpu analyze` and `slurmgpu report` share, and their translation into one
`AnalysisOptions` (one place, so the two commands never drift)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import click

from slurmgpu.util import strict

MAX_SHARDS_PER_GPU = 65_536
MAX_GPUS_PER_NODE = 1_024

_OPTIONS = [
    click.option(
        "--store",
        type=click.Path(),
        help="Read an accounting store (`slurmgpu ingest`) instead of dumps or the live cluster.",
    ),
    click.option(
        "--cluster",
        "clusters",
        multiple=True,
        help="With --store: analyze only this cluster of the store (repeatable).",
    ),
    click.option(
        "--policy",
        type=click.Path(exists=True, dir_okay=False),
        help="Site policy: maps QOS to tiers (default: $SLURMGPU_POLICY when set).",
    ),
    click.option(
        "--inventory",
        "inventories",
        multiple=True,
        type=click.Path(dir_okay=False),
        help="`slurmgpu inventory` snapshot: measured GPU memory per type (repeatable).",
    ),
    click.option(
        "--tier",
        "tier_pairs",
        multiple=True,
        metavar="QOS=TIER",
        help="Map a QOS to a tier (repeatable; overrides --policy).",
    ),
    click.option(
        "--capacity",
        multiple=True,
        metavar="PARTITION=GPUS",
        help="GPUs in a partition (repeatable); overrides scontrol. Needed for capacity and "
        "allocation ratio with --sacct-file.",
    ),
    click.option(
        "--accel-capacity",
        "accel_capacity",
        multiple=True,
        metavar="GRES=DEVICES",
        help="Devices of an accelerator kind (e.g. npu:910b=16, gpu:mi300x_cpx=64; "
        "repeatable) for by_accelerator's allocation share; overrides scontrol.",
    ),
    click.option(
        "--gpu-type",
        "gpu_types",
        multiple=True,
        metavar="PARTITION=TYPE",
        help="GPU type of a partition (e.g. gpu=h100) for GPU memory.",
    ),
    click.option(
        "--gpu-memory",
        "gpu_memory",
        multiple=True,
        metavar="TYPE=SIZE",
        help="Memory of one GPU of a type the catalogue does not know (e.g. t4=16G), or "
        "PARTITION=SIZE: the GPUs of that partition when their type is unknown; "
        "repeatable; also `[gpu_memory]` in the site policy.",
    ),
    click.option(
        "--slurm-version",
        metavar="X.Y",
        help="Slurm version that wrote the dump (24.05+ sums gres/gpuutil over a step's GPUs).",
    ),
    click.option(
        "--chunk-hours",
        type=strict.FloatRange(min=0, min_open=True),
        default=24.0,
        show_default=True,
        help="Live text query: one sacct call per this many hours (bounds memory).",
    ),
    click.option(
        "--shards-per-gpu",
        "shards",
        multiple=True,
        metavar="[PARTITION=]N",
        help="Shards per GPU, to count gres/shard jobs as GPU fractions.",
    ),
    click.option(
        "--gpus-per-node",
        "gpus_per_node",
        multiple=True,
        metavar="[PARTITION=]N",
        help="GPUs in one node of a partition (all partitions without PARTITION=), so node "
        "moves are counted in whole nodes of that size; live clusters know it from scontrol.",
    ),
    click.option(
        "--backend",
        type=click.Choice(["auto", "sacct", "sacct-json", "pyslurm"]),
        default="auto",
        show_default=True,
        help="Live source: pyslurm if it matches Slurm, else sacct text.",
    ),
    click.option(
        "--timezone",
        "tz",
        default="UTC",
        show_default=True,
        help="Zone of ISO times in --sacct-file dumps (sacct prints local time).",
    ),
    click.option("--freq", type=click.Choice(["1h", "1D"]), help="Time-series bucket."),
    click.option(
        "--replay-effects",
        type=click.Choice(["auto", "always", "never"]),
        default="auto",
        show_default=True,
        help="Replay each recommendation's change on the window's runs (needs the capacity); "
        "auto: up to 100,000 runs.",
    ),
]

ANALYSIS_PARAMS = (
    "store",
    "clusters",
    "policy",
    "inventories",
    "tier_pairs",
    "capacity",
    "accel_capacity",
    "gpu_types",
    "gpu_memory",
    "slurm_version",
    "chunk_hours",
    "shards",
    "gpus_per_node",
    "backend",
    "tz",
    "freq",
    "replay_effects",
)


def analysis_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add the shared analysis options (and the measure sources' options) to a command."""
    from slurmgpu.measure.options import measure_options

    for option in reversed(_OPTIONS):
        command = option(command)
    return measure_options(command)


def some_analysis_options(*names: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Only the named shared options (no measure sources), e.g. for `slurmgpu forecast`."""

    def add(command: Callable[..., Any]) -> Callable[..., Any]:
        for name, option in reversed(list(zip(ANALYSIS_PARAMS, _OPTIONS, strict=True))):
            if name in names:
                command = option(command)
        return command

    return add


def _pairs(values: tuple[str, ...], option: str, form: str = "KEY=VALUE") -> dict[str, str]:
    from slurmgpu.errors import UsageError

    out = {}
    for text in values:
        key, sep, value = text.partition("=")
        if not sep or not key or not value:
            raise UsageError(f"{option} {text!r}: use {form}")
        out[key] = value
    return out


def _numbers_by_partition(values: tuple[str, ...], option: str, high: int) -> dict[str, float]:
    """`[PARTITION=]N` values -> {partition or "*": N}: whole numbers 1..high, a partition
    once (nan, 0, -4, 1e12, `a=1,b=2` are usage errors)."""
    from slurmgpu.errors import UsageError
    from slurmgpu.util import numbers

    try:
        pairs = numbers.partition_pairs(values, default_key="*")
    except ValueError as exc:
        raise UsageError(f"{option} {exc}; use N or PARTITION=N") from None
    out: dict[str, float] = {}
    for (key, value), text in zip(pairs, values, strict=True):
        if not numbers.WHOLE.fullmatch(value):
            raise UsageError(f"{option} {text!r}: use N or PARTITION=N")
        if not 1 <= int(value) <= high:
            raise UsageError(f"{option} {text!r}: not a whole number from 1 to {high}")
        out[key] = float(value)
    return out


def gpu_memory_option(values: tuple[str, ...], policy: Any) -> dict[str, float]:
    """`--gpu-memory TYPE=SIZE` values in MiB over the policy's `[gpu_memory]` (analyze,
    report and replay read it alike)."""
    from slurmgpu.errors import UsageError
    from slurmgpu.util.units import parse_size_mib

    memory = dict(getattr(policy, "gpu_memory_mib", ()) or ())
    for name, size in _pairs(values, "--gpu-memory", "TYPE=SIZE (or PARTITION=SIZE)").items():
        try:
            memory[name] = parse_size_mib(size)
        except ValueError:
            raise UsageError(f"--gpu-memory {name}={size}: use a size such as 16G") from None
    return memory


_ACCEL_KIND = re.compile(r"^(?:(?:gpu|npu)(?::[A-Za-z0-9_.+-]+)?|shard)$")


def accel_capacity_option(values: Any) -> dict[str, float]:
    """`["npu:910b=16"]` -> {"npu:910b": 16.0}; a UsageError names the form."""
    from slurmgpu.accounting.capacity import MAX_CAPACITY_GPUS
    from slurmgpu.errors import UsageError
    from slurmgpu.util import numbers

    out: dict[str, float] = {}
    for value in values or ():
        name, _, count = str(value).partition("=")
        ok = (
            _ACCEL_KIND.fullmatch(name)
            and numbers.is_ascii_digits(count)  # not `٣`, `²` (isdigit takes them)
            and 0 < int(count) <= MAX_CAPACITY_GPUS
        )
        if not ok or name in out:
            raise UsageError(
                f"--accel-capacity {value}: use GRES=DEVICES once per kind, e.g. npu:910b=16"
            )
        out[name] = float(count)
    return out


def policy_from_environment() -> str | None:
    """$SLURMGPU_POLICY when set (what every command with a policy honours); the analysis
    commands need no policy, so without it (and without --policy) they map no tiers."""
    import os

    return os.environ.get("SLURMGPU_POLICY") or None


def analysis_options_from(params: dict[str, Any], **fields: Any) -> Any:
    """The shared options (popped from `params`) plus `fields` as one `AnalysisOptions`."""
    from slurmgpu.accounting.capacity import parse_capacity_options
    from slurmgpu.accounting.options import AnalysisOptions
    from slurmgpu.measure.options import MeasureOptions, build_measure_sources

    absent: dict[str, Any] = {"chunk_hours": 24.0, "backend": "auto", "tz": "UTC"}
    absent.update(policy=None, slurm_version=None, freq=None, replay_effects="auto", store=None)
    opts = {name: params.pop(name, absent.get(name, ())) for name in ANALYSIS_PARAMS}
    from slurmgpu.errors import UsageError

    if opts["clusters"] and not opts["store"]:
        raise UsageError("--cluster: only with --store (a dump's clusters are all analyzed)")
    if opts["store"] and fields.get("files"):
        raise UsageError("--store and --sacct-file: give one of them")
    measure_sources = build_measure_sources(MeasureOptions.from_kwargs(params))
    tiers: Any = None
    policy = None
    policy_path = opts["policy"] or policy_from_environment()
    if policy_path:
        from slurmgpu.sources.policy_file import load_policy

        tiers = policy = load_policy(policy_path)
    if opts["tier_pairs"]:
        mapping, base = _pairs(opts["tier_pairs"], "--tier"), tiers

        def tiers(qos: str) -> str | None:
            if qos in mapping:
                return mapping[qos]
            return getattr(base.tier_for_qos(qos), "name", None) if base is not None else None

    shard_map = _numbers_by_partition(opts["shards"], "--shards-per-gpu", MAX_SHARDS_PER_GPU)
    per_node = _numbers_by_partition(opts["gpus_per_node"], "--gpus-per-node", MAX_GPUS_PER_NODE)
    memory = gpu_memory_option(opts["gpu_memory"], policy)
    return AnalysisOptions(
        backend=opts["backend"],
        tiers=tiers,
        capacity=parse_capacity_options(opts["capacity"]) or None,
        accelerator_devices=accel_capacity_option(opts["accel_capacity"]),
        shards_per_gpu=shard_map,
        gpus_per_node=per_node,
        gpu_types=_pairs(opts["gpu_types"], "--gpu-type"),
        gpu_memory_mib=memory,
        inventories=list(opts["inventories"]),
        timezone=opts["tz"],
        freq=opts["freq"],
        chunk_hours=opts["chunk_hours"],
        slurm_version=opts["slurm_version"],
        replay_effects=opts["replay_effects"],
        measure_sources=measure_sources,
        store=opts["store"] or None,
        clusters=tuple(opts["clusters"]),
        energy=getattr(policy, "energy", None),
        idle_util_pct=policy.idle.rule.util_pct if policy and policy.idle else 1.0,
        **fields,
    )
