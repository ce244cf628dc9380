"""`slurmgpu analyze`: GPU accounting analysis from sacct dumps or the live cluster."""

from __future__ import annotations

from datetime import UTC

import click


def _pairs(values: tuple[str, ...], option: str) -> dict[str, str]:
    from slurmgpu.errors import UsageError

    out = {}
    for text in values:
        key, sep, value = text.partition("=")
        if not sep or not key or not value:
            raise UsageError(f"{option} {text!r}: use KEY=VALUE")
        out[key] = value
    return out


def _load_policy(path: str):
    """The site policy through the tiers module (when this build has it)."""
    import importlib

    from slurmgpu.errors import UsageError

    for module_name in ("slurmgpu.sources.policy_file", "slurmgpu.sources.policy"):
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError:
            continue
        loader = getattr(module, "load_policy", None)
        if loader is not None:
            return loader(path)
    raise UsageError("--policy: this build has no policy support; use --tier QOS=TIER")


@click.command("analyze")
@click.option("--sacct-file", "sacct_files", multiple=True, type=click.Path(dir_okay=False),
              help="Saved `sacct -P` output with its header (plain or gzip); repeatable. "
              "Without it the live cluster is queried.")  # fmt: skip
@click.option("--since", help="Window start: ISO date/time (UTC) or age like 7d, 12h.")
@click.option("--until", help="Window end (default now for live queries).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True)  # fmt: skip
@click.option("--policy", type=click.Path(exists=True, dir_okay=False),
              help="Site policy: maps QOS to tiers.")  # fmt: skip
@click.option("--inventory", "inventories", multiple=True, type=click.Path(dir_okay=False),
              help="`slurmgpu inventory` snapshot: measured GPU memory per type.")  # fmt: skip
@click.option("--tier", "tier_pairs", multiple=True, metavar="QOS=TIER",
              help="Map a QOS to a tier (repeatable; overrides --policy).")  # fmt: skip
@click.option("--capacity", "capacity", multiple=True, metavar="PARTITION=GPUS",
              help="GPUs in a partition (repeatable); overrides scontrol.")  # fmt: skip
@click.option("--gpu-type", "gpu_types", multiple=True, metavar="PARTITION=TYPE",
              help="GPU type of a partition (e.g. gpu=h100) for GPU memory.")  # fmt: skip
@click.option("--shards-per-gpu", "shards", multiple=True, metavar="[PARTITION=]N",
              help="Shards per GPU, to count gres/shard jobs as GPU fractions.")  # fmt: skip
@click.option("--backend", type=click.Choice(["auto", "sacct", "sacct-json", "pyslurm"]),
              default="auto", show_default=True,
              help="Live source: pyslurm if it matches Slurm, else sacct text.")  # fmt: skip
@click.option("--timezone", "tz", default="UTC", show_default=True,
              help="Zone of ISO times in --sacct-file dumps (sacct prints local time).",
              )  # fmt: skip
@click.option("--chunk-hours", type=click.FloatRange(min=0, min_open=True), default=24.0,
              show_default=True,
              help="Live text query: one sacct call per this many hours.")  # fmt: skip
@click.option("--freq", type=click.Choice(["1h", "1D"]), help="Time-series bucket.")
@click.option("--output", "-o", default="-", show_default=True, help="File to write, or -.")
def analyze(sacct_files, since, until, fmt, policy, inventories, tier_pairs, capacity,
            gpu_types, shards, backend, tz, chunk_hours, freq, output) -> None:  # fmt: skip
    """GPU-hours, utilization, waits, preemption losses and partition recommendations."""
    import json
    from datetime import datetime

    from slurmgpu.accounting import analyze as run_analysis
    from slurmgpu.accounting.capacity import parse_capacity_options
    from slurmgpu.accounting.when import parse_when
    from slurmgpu.errors import UsageError
    from slurmgpu.render.accounting_text import render_text
    from slurmgpu.util.atomic import write_atomic

    now = datetime.now(UTC).replace(microsecond=0)
    t_since = parse_when(since, now=now, option="--since") if since else None
    t_until = parse_when(until, now=now, option="--until") if until else None
    tiers = _load_policy(policy) if policy else None
    if tier_pairs:
        mapping = _pairs(tier_pairs, "--tier")
        base = tiers

        def tiers(qos: str, _m=mapping, _b=base):
            if qos in _m:
                return _m[qos]
            return getattr(_b.tier_for_qos(qos), "name", None) if _b is not None else None

    shard_map: dict[str, float] = {}
    for text in shards:
        key, sep, value = text.rpartition("=")
        try:
            shard_map[key if sep else "*"] = float(value)
        except ValueError:
            raise UsageError(f"--shards-per-gpu {text!r}: use N or PARTITION=N") from None
    result = run_analysis(
        list(sacct_files),
        since=t_since,
        until=t_until,
        backend=backend,
        tiers=tiers,
        capacity=parse_capacity_options(capacity) or None,
        shards_per_gpu=shard_map,
        gpu_types=_pairs(gpu_types, "--gpu-type"),
        inventories=list(inventories),
        timezone_name=tz,
        freq=freq,
        now=now,
        live_chunk_hours=chunk_hours,
    )
    doc = result.to_dict()
    text = json.dumps(doc, indent=2, sort_keys=False) + "\n" if fmt == "json" else render_text(doc)
    if output == "-":
        click.echo(text, nl=False)
    else:
        write_atomic(output, text, backup=False)
