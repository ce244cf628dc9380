"""`slurmgpu advise`: the best plan of changes the calibrated replay proves, under the site's
objective (the policy's `[objective]`)."""

from __future__ import annotations

import click

from slurmgpu.cli.replay import replay as _replay_command
from slurmgpu.util import strict

# the cluster-model options advise shares with replay (same names, same meaning)
SHARED = ("sacct_files", "store", "clusters", "capacity", "inventories", "per_node",
          "gpu_types", "gpu_memory", "shards", "policy", "slurm_conf", "live", "baseline",
          "processes", "tz", "via_slurm", "workdir", "slurm_partition", "slurm_time",
          "slurm_options", "slurm_python")  # fmt: skip


@click.command("advise")
@click.option(
    "--candidate",
    "candidates",
    multiple=True,
    metavar="CHANGE",
    help="Try only these changes (repeatable; default: moves of every size, carves, shards, "
    "grace times generated from the history).",
)
@click.option(
    "--max-changes",
    type=strict.IntRange(min=1, max=10),
    default=3,
    show_default=True,
    help="Changes in the plan at most (greedy: one more each step while it helps).",
)
@click.option(
    "--seed",
    type=strict.Int(),
    default=0,
    show_default=True,
    help="Seed of the perturbed replays.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json", "html"]),
    default="text",
    show_default=True,
)
@click.option("--output", "-o", default="-", show_default=True, help="File to write, or -.")
def advise(fmt: str, output: str, **params: object) -> None:
    """Search changes with the calibrated replay as the judge; print the best plan."""
    from slurmgpu.advice.optimize import advise as run_advise
    from slurmgpu.cli.replay import _write, warn_engine
    from slurmgpu.views.advise import render_advice

    warn_engine()
    sacct_files, options = advise_options(params)
    _write(render_advice(run_advise(sacct_files, options).to_dict(), fmt), output)


# --inferred-load is advise's and replay --calibrate's only: not in SHARED, so that autopilot
# (which takes SHARED) can never advise, and act, on inferred load
advise.params[:0] = [
    p for p in _replay_command.params if p.name in SHARED or p.name == "inferred_load"
]


def advise_options(params: dict):
    """(sacct files, `AdviseOptions`) from the command's options."""
    from dataclasses import replace

    from slurmgpu.advice.optimize import AdviseOptions
    from slurmgpu.cli.replay import replay_options, sweep_options
    from slurmgpu.model.policy import Objective

    shared = {k: params[k] for k in SHARED if k != "sacct_files"}
    slurm = sweep_options(shared)  # removes the --via-slurm options from `shared`
    ropts = replay_options({**shared, "what_if": (), "sweep": None})
    if not params["processes"]:
        import os

        ropts = replace(ropts, processes=os.cpu_count() or 1)
    policy = ropts.tiers
    objective = policy.objective if policy is not None else Objective()
    top = max(policy.tiers, key=lambda t: t.priority).qos if policy and policy.tiers else None
    return list(params["sacct_files"]), AdviseOptions(
        replay=ropts,
        objective=objective,
        max_changes=int(params["max_changes"]),
        top_tier=_tier_label(policy, top),
        candidates=tuple(params["candidates"]) or None,
        seed=int(params["seed"]),
        slurm=slurm,
        # autopilot builds its options here without it: it never acts on inferred load
        inferred_load=bool(params.get("inferred_load", False)),
    )


def _tier_label(policy, qos: str | None) -> str | None:
    """The name the replay's by_tier uses for the top tier (the policy's tier name)."""
    if policy is None or qos is None:
        return None
    tier = policy.tier_for_qos(qos)
    return tier.name if tier else qos
