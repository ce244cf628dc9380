"""`slurmgpu autopilot`: one pass of forecast -> advise -> guardrails -> act -> record
(docs/autopilot.md); `slurmgpu autopilot approve ID` approves a proposal."""

from __future__ import annotations

import click

from slurmgpu.cli.advise import SHARED
from slurmgpu.cli.advise import advise as _advise_command
from slurmgpu.cli.replay import replay as _replay_command
from slurmgpu.util import strict

DEFAULT_STATE_DIR = "/var/lib/slurmgpu/autopilot"  # = slurmgpu.autopilot.DEFAULT_STATE_DIR
DEFAULT_REBALANCE_LOG = "/var/lib/slurmgpu/rebalance.jsonl"  # = `rebalance apply --log`'s


@click.group("autopilot", invoke_without_command=True)
@click.option("--sacct-file", "sacct_files", multiple=True, type=click.Path(dir_okay=False),
              help="Saved `sacct -P` output (the history); repeatable. Or --since.")  # fmt: skip
@click.option("--policy", metavar="FILE",
              help="Site policy: tiers, [objective], [autopilot] guardrails.")  # fmt: skip
@click.option("--since", help="Without --sacct-file: sacct from then (ISO UTC or age: 7d).")
@click.option("--state-dir", default=DEFAULT_STATE_DIR, show_default=True,
              help="Change log, proposals, MIG journals, textfile.")  # fmt: skip
@click.option("--rebalance-log", type=click.Path(dir_okay=False),
              help="The node-move journal shared with `rebalance apply --log` (its moves count "
              "for the daily budget, undo sees both). Default: /var/lib/slurmgpu/rebalance.jsonl "
              "with the default --state-dir, else STATE_DIR/rebalance.jsonl.")  # fmt: skip
@click.option("--mode", type=click.Choice(["propose", "apply"]), default=None,
              help="propose: write the plan for approval; apply: act. Default: the "
              "policy's [autopilot] mode (propose).")  # fmt: skip
@click.option("--dry-run", is_flag=True, help="Decide and print; write and change nothing.")
@click.option("--partitions-conf", type=click.Path(dir_okay=False),
              help="The slurm.conf include file rebalance owns (durable moves).")  # fmt: skip
@click.option("--transient", is_flag=True,
              help="Without --partitions-conf: apply node moves in slurmctld's memory only "
              "(the next `scontrol reconfigure` undoes them); apply mode needs one of the "
              "two to move nodes.")  # fmt: skip
@click.option("--no-forecast", is_flag=True, help="Skip the demand forecast.")
@click.option(
    "--mig-partition",
    "mig_partitions",
    multiple=True,
    metavar="NAME",
    help="Decide MIG layouts from the forecast for this partition (repeatable).",
)
@click.option(
    "--mig-snapshot-dir",
    type=click.Path(file_okay=False),
    help="Node inventory snapshots (default: this host, read live).",
)
@click.option(
    "--mig-keep-whole",
    type=strict.IntRange(min=0),
    default=0,
    show_default=True,
    help="GPUs per node mig plan leaves whole.",
)
@click.option(
    "--mig-forecast-high",
    is_flag=True,
    help="Carve for the top of the forecast's interval, not its point.",
)
@click.option(
    "--mig-gres-conf",
    default="/etc/slurm/gres.conf",
    show_default=True,
    help="mig apply: the gres.conf to rewrite.",
)
@click.option("--mig-slurm-conf", default=None, help="mig apply: slurm.conf with the node line.")
@click.option("--mig-host-root", default="/", show_default=True, help="mig apply: host tree.")
@click.option(
    "--mig-drain-timeout",
    type=strict.FloatRange(min=0),
    default=3600.0,
    show_default=True,
    help="mig apply: seconds to wait for the node's jobs.",
)
@click.option("--mig-stop-slurmd", default="systemctl stop slurmd", show_default=True)
@click.option("--mig-start-slurmd", default="systemctl start slurmd", show_default=True)
@click.option(
    "--mig-restart-slurmctld",
    default="",
    help="mig apply: command restarting slurmctld (else scontrol reconfigure).",
)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True)  # fmt: skip
@click.pass_context
def autopilot(ctx: click.Context, fmt: str, **params: object) -> None:
    """One pass: verify the last change, then advise, check the guardrails, propose or act.

    Exit 3: the pass changed the cluster (nodes moved or carved, a change rolled back, a
    killed pass's change finished or undone; with --dry-run: it would); 0: it changed
    nothing (held, waiting, proposed, verified, kill switch); 1: an error (docs/acting.md)."""
    if ctx.invoked_subcommand is not None:
        return
    from slurmgpu.autopilot import autopilot as run_pass
    from slurmgpu.cli.emit_options import exit_with
    from slurmgpu.util.emit import changed_status
    from slurmgpu.views.autopilot import render_autopilot

    result = run_pass(autopilot_options(params))
    click.echo(render_autopilot(result.to_dict(), fmt), nl=False)
    exit_with(changed_status(result.changed))


autopilot.params[1:1] = [
    p
    for p in _replay_command.params
    # not --store: a pass verifies its last change on sacct's newest records, which a
    # nightly-ingested store does not hold yet
    if p.name in SHARED and p.name not in ("sacct_files", "policy", "store", "clusters")
] + [p for p in _advise_command.params if p.name == "candidates"]


def autopilot_options(params: dict):
    """`AutopilotOptions` from the command's options (advise's options for the replay)."""
    from datetime import UTC, datetime
    from pathlib import Path

    from slurmgpu.accounting.when import parse_when
    from slurmgpu.autopilot import AutopilotOptions
    from slurmgpu.cli.advise import advise_options
    from slurmgpu.errors import UsageError

    if not params["policy"]:
        raise UsageError("autopilot needs --policy FILE (its [autopilot] guardrails, tiers)")
    if not params["sacct_files"] and not params["since"]:
        raise UsageError("autopilot needs --sacct-file FILE... or --since WHEN")
    now = datetime.now(UTC).replace(microsecond=0)
    since = parse_when(params["since"], now=now, option="--since") if params["since"] else None
    shared = {"store": None, "clusters": (), **{k: params[k] for k in SHARED if k in params}}
    _, advise = advise_options(
        {**shared, "max_changes": 3, "candidates": params["candidates"], "seed": 0}
    )
    conf = params["partitions_conf"]
    mig = (
        mig_site(params, advise.replay.tiers, advise.replay.env)
        if params.get("mig_partitions")
        else None
    )
    return AutopilotOptions(
        advise=advise,
        policy=advise.replay.tiers,
        state_dir=Path(str(params["state_dir"])),
        sacct_files=tuple(params["sacct_files"]),
        since=since,
        mode=params["mode"],
        dry_run=bool(params["dry_run"]),
        forecast=not params["no_forecast"],
        partitions_conf=Path(str(conf)) if conf else None,
        rebalance_log=_rebalance_log(params),
        transient=bool(params.get("transient")),
        mig=mig,
    )


def _rebalance_log(params: dict):
    """--rebalance-log, or rebalance's own default log beside the default state directory."""
    from pathlib import Path

    if params.get("rebalance_log"):
        return Path(str(params["rebalance_log"]))
    if str(params["state_dir"]) == DEFAULT_STATE_DIR:
        return Path(DEFAULT_REBALANCE_LOG)
    return None


def mig_site(params: dict, policy, env=None):
    """`autopilot.carve.MigSite` from the --mig-* options; the running jobs of the tiers the
    policy lets another tier preempt (and not protected) are requeued, the others waited for."""
    import shlex
    from pathlib import Path

    from slurmgpu.autopilot.carve import MigSite
    from slurmgpu.autopilot.guardrails import protected_qos
    from slurmgpu.cli.gres import _slurm_version
    from slurmgpu.mig.apply import ApplyOptions
    from slurmgpu.model.policy import AutopilotPolicy
    from slurmgpu.render.gres import GresOptions

    guard = policy.autopilot if policy is not None and policy.autopilot else AutopilotPolicy()
    pinned = protected_qos(policy, guard)
    preempted = {n for t in (policy.tiers if policy else ()) for n in t.preempts}
    requeue = tuple(
        t.qos for t in (policy.tiers if policy else ())
        if t.name in preempted and t.qos.lower() not in pinned
    )  # fmt: skip
    conf = params["mig_slurm_conf"]
    apply = ApplyOptions(
        node="", config_name="", config_file=Path("."),
        gres_conf=Path(params["mig_gres_conf"]),
        slurm_conf=Path(conf) if conf else None,
        host_root=params["mig_host_root"],
        drain_timeout_s=params["mig_drain_timeout"],
        poll_s=2.0,
        requeue_qos=requeue,
        stop_slurmd=tuple(shlex.split(params["mig_stop_slurmd"])),
        start_slurmd=tuple(shlex.split(params["mig_start_slurmd"])),
        restart_slurmctld=tuple(shlex.split(params["mig_restart_slurmctld"] or "")),
        gres_options=GresOptions(slurm_version=_slurm_version(None)),
        env=env,
    )  # fmt: skip
    snap = params["mig_snapshot_dir"]
    return MigSite(
        partitions=tuple(params["mig_partitions"]),
        apply=apply,
        snapshot_dir=Path(snap) if snap else None,
        keep_whole=params["mig_keep_whole"],
        use="high" if params["mig_forecast_high"] else "gpus",
    )


@autopilot.command("approve")
@click.argument("proposal_id")
@click.option("--state-dir", default=DEFAULT_STATE_DIR, show_default=True)
def approve(proposal_id: str, state_dir: str) -> None:
    """Approve a proposal; the next pass applies it (after the guardrails again)."""
    import getpass
    from pathlib import Path

    from slurmgpu.autopilot import approve as approve_proposal

    path = approve_proposal(Path(state_dir), proposal_id, getpass.getuser())
    click.echo(f"approved {proposal_id}: {path}; the next pass applies it")
