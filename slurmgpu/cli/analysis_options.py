"""The options `slurmgpu analyze` and `slurmgpu report` share, and their translation into
keyword arguments of `slurmgpu.accounting.analyze` (one place, so the two never drift)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

_OPTIONS = [
    click.option(
        "--policy",
        type=click.Path(exists=True, dir_okay=False),
        help="Site policy: maps QOS to tiers.",
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
        "--gpu-type",
        "gpu_types",
        multiple=True,
        metavar="PARTITION=TYPE",
        help="GPU type of a partition (e.g. gpu=h100) for GPU memory.",
    ),
    click.option(
        "--shards-per-gpu",
        "shards",
        multiple=True,
        metavar="[PARTITION=]N",
        help="Shards per GPU, to count gres/shard jobs as GPU fractions.",
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
]

ANALYSIS_PARAMS = (
    "policy",
    "inventories",
    "tier_pairs",
    "capacity",
    "gpu_types",
    "shards",
    "backend",
    "tz",
    "freq",
)


def analysis_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add the shared analysis options to a click command."""
    for option in reversed(_OPTIONS):
        command = option(command)
    return command


def _pairs(values: tuple[str, ...], option: str) -> dict[str, str]:
    from slurmgpu.errors import UsageError

    out = {}
    for text in values:
        key, sep, value = text.partition("=")
        if not sep or not key or not value:
            raise UsageError(f"{option} {text!r}: use KEY=VALUE")
        out[key] = value
    return out


def analysis_kwargs(params: dict[str, Any]) -> dict[str, Any]:
    """The shared options (popped from `params`) as keyword arguments of `analyze()`."""
    from slurmgpu.accounting.capacity import parse_capacity_options
    from slurmgpu.errors import UsageError

    opts = {name: params.pop(name) for name in ANALYSIS_PARAMS}
    tiers: Any = None
    if opts["policy"]:
        from slurmgpu.sources.policy_file import load_policy

        tiers = load_policy(opts["policy"])
    if opts["tier_pairs"]:
        mapping, base = _pairs(opts["tier_pairs"], "--tier"), tiers

        def tiers(qos: str) -> str | None:
            if qos in mapping:
                return mapping[qos]
            return getattr(base.tier_for_qos(qos), "name", None) if base is not None else None

    shard_map: dict[str, float] = {}
    for text in opts["shards"]:
        key, sep, value = text.rpartition("=")
        try:
            shard_map[key if sep else "*"] = float(value)
        except ValueError:
            raise UsageError(f"--shards-per-gpu {text!r}: use N or PARTITION=N") from None
    return {
        "backend": opts["backend"],
        "tiers": tiers,
        "capacity": parse_capacity_options(opts["capacity"]) or None,
        "shards_per_gpu": shard_map,
        "gpu_types": _pairs(opts["gpu_types"], "--gpu-type"),
        "inventories": list(opts["inventories"]),
        "timezone_name": opts["tz"],
        "freq": opts["freq"],
    }
