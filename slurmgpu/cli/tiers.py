"""`slurmgpu policy check`, `slurmgpu qos plan|apply`, `slurmgpu gen-job-submit`."""

from __future__ import annotations

import click

from slurmgpu.cli.emit_options import emit_options, exit_with

WARNING = "slurmgpu: warning: "
POLICY_OPTION = click.option(
    "--policy",
    "policy_path",
    metavar="FILE",
    help="Site policy TOML (default: $SLURMGPU_POLICY, else /etc/slurmgpu/slurmgpu.toml).",
)


def _load(policy_path: str | None):
    from slurmgpu.sources.policy_file import default_policy_path, load_policy

    return load_policy(policy_path or default_policy_path())


@click.group()
def policy() -> None:
    """Check the site policy file (tiers, job kinds, partitions)."""


@policy.command("check")
@POLICY_OPTION
def policy_check(policy_path: str | None) -> None:
    """Validate the policy; print a summary, or every problem with its file:line."""
    from slurmgpu.model.policy import slice_gpu_fraction

    pol = _load(policy_path)
    click.echo(f"{pol.source}: OK: {len(pol.tiers)} tiers, {len(pol.kinds)} job kinds")
    for t in pol.tiers:
        who = ", ".join([*(f"account {a}" for a in t.accounts), *(f"user {u}" for u in t.users)])
        pre = f", preempts {', '.join(t.preempts)}" if t.preempts else ""
        default = " (default)" if t.name == pol.default_tier else ""
        requeued = ""
        if pol.requeued_when_preempted(t):
            grace = max(p.grace_time_s for p in pol.preemptors(t))
            requeued = f"; requeued when preempted, {grace} s grace (KillWait)"
        click.echo(
            f"  tier {t.name}{default}: QOS {t.qos}, priority {t.priority}{pre}; "
            f"{who or 'everyone'}{requeued}"
        )
    for k in pol.kinds:
        frac = slice_gpu_fraction(k.slice, pol.shards_per_gpu)
        share = f" = {frac:g} GPU" if frac is not None else ""
        click.echo(
            f"  kind {k.name}: {k.slice.describe()}{share} (--gres={k.slice.gres}), "
            f"partition {k.partition or '-'}, time limit {k.time_limit_min or '-'} min"
        )
    if pol.idle is not None:
        from slurmgpu.views.idle import describe_policy

        for line in describe_policy(pol.idle):
            click.echo(f"  {line}")


@click.group()
def qos() -> None:
    """Bring the tier QOS and association QOS lists in slurmdbd to the policy."""


def _plan(policy_path: str | None, prune: bool):
    from slurmgpu.fleet.qos import plan

    return plan(_load(policy_path), prune)


def _print_plan(plan) -> None:
    from slurmgpu.render.qos import format_command

    click.echo("# slurm.conf settings the policy needs:")
    for s in plan.settings:
        click.echo(f"{s.key}={s.value}")
    for w in plan.warnings:
        click.secho(f"slurmgpu: warning: {w}", err=True, fg="yellow")
    for n in plan.notes:
        click.echo(f"# note: {n}")
    if plan.nothing_to_do:
        click.echo("# sacctmgr: nothing to do")
        return
    click.echo(f"# sacctmgr commands ({len(plan.commands)}):")
    for cmd in plan.commands:
        click.echo(format_command(cmd))


@qos.command("plan")
@POLICY_OPTION
@click.option("--prune", is_flag=True, help="Also delete slurmgpu's stale QOS that jobs still use.")
def qos_plan(policy_path: str | None, prune: bool) -> None:
    """Print the sacctmgr commands that bring slurmdbd to the policy (changes nothing).

    Exit 0: nothing to do; 3: there are commands to run (docs/acting.md, exit codes)."""
    from slurmgpu.util.emit import changed_status

    plan = _plan(policy_path, prune)
    _print_plan(plan)
    exit_with(changed_status(not plan.nothing_to_do))


@qos.command("apply")
@POLICY_OPTION
@click.option("--prune", is_flag=True, help="Also delete slurmgpu's stale QOS that jobs still use.")
@click.option("--dry-run", is_flag=True, help="Print the plan; run nothing.")
@click.option(
    "--emit",
    "emit_dir",
    type=click.Path(file_okay=False),
    help="Write the plan's sacctmgr commands as qos-apply.sh (and the steps) into this "
    "directory; run nothing.",
)
@click.option(
    "--log",
    "log_path",
    default="/var/lib/slurmgpu/qos.jsonl",
    show_default=True,
    help="Change log (JSON lines): each round's commands and the QOS before it.",
)
@click.option("--undo", is_flag=True, help="Put the QOS and associations of the last apply back.")
def qos_apply(
    policy_path: str | None,
    prune: bool,
    dry_run: bool,
    emit_dir: str | None,
    log_path: str,
    undo: bool,
) -> None:
    """Run the plan's sacctmgr commands (with -i), then check that nothing is left to do.

    Exit 0: slurmdbd already matched (nothing run); 3: it changed (with --dry-run or --emit:
    it would change); 1: an error (docs/acting.md, exit codes)."""
    from pathlib import Path

    from slurmgpu.fleet.qos import qos_apply as apply
    from slurmgpu.fleet.qos import qos_undo
    from slurmgpu.render.qos import format_command
    from slurmgpu.util.emit import changed_status

    if undo:
        ran = qos_undo(Path(log_path), on_run=lambda c: click.echo(f"ran: {format_command(c)}"))
        click.echo(f"undone with {len(ran)} command(s); slurmdbd is as before the last apply")
        exit_with(changed_status(bool(ran)))
        return

    result = apply(
        _load(policy_path),
        prune=prune,
        log=Path(log_path),
        dry_run=dry_run,
        emit_dir=Path(emit_dir) if emit_dir else None,
        on_plan=_print_plan,
        on_run=lambda cmd: click.echo(f"ran: {format_command(cmd)}"),
    )
    if result.ran:
        click.echo(f"applied {len(result.ran)} command(s); slurmdbd matches the policy")
    elif dry_run and not result.first.nothing_to_do:
        click.echo("# dry run: nothing run")
    if dry_run or emit_dir:
        exit_with(changed_status(not result.first.nothing_to_do))
    exit_with(changed_status(bool(result.ran)))


@click.command("gen-job-submit")
@POLICY_OPTION
@click.option(
    "--output",
    "-o",
    default="-",
    show_default=True,
    metavar="PATH|-",
    help="Where to write job_submit.lua (it must sit next to slurm.conf), or with --module "
    "slurmgpu_tiers.lua (next to the site's job_submit.lua).",
)
@click.option(
    "--module",
    "as_module",
    is_flag=True,
    help="Render a Lua module (slurmgpu_tiers) for the site's own job_submit.lua to require "
    "and call (docs/policy.md).",
)
@click.option(
    "--check", is_flag=True, help="Compile (luac5.1 -p) and dry-run it in Lua (lupa or lua5.1)."
)
@click.option("--slurm-version", help="Target Slurm release, e.g. 24.11 (default: installed).")
@click.option(
    "--accel-gres",
    metavar="sinfo|FILE",
    help="Route `accel=mem>=SIZE` comment tags across vendors (docs/vendors.md) over the "
    "devices the nodes offer: `sinfo` asks the cluster, FILE holds `sinfo -h -N -o '%N|%G'` "
    "lines. Regenerate when the nodes' GRES change.",
)
@emit_options
def gen_job_submit(
    policy_path: str | None,
    output: str,
    as_module: bool,
    check: bool,
    slurm_version: str | None,
    accel_gres: str | None,
    show_diff: bool,
    dry_run: bool,
    emit_dir: str | None,
) -> None:
    """Render job_submit.lua (or a module of it) from the policy; checked and installed
    atomically with -o."""
    from slurmgpu.tiers.job_submit import gen_job_submit as generate

    result = generate(
        _load(policy_path),
        output,
        module=as_module,
        check=check,
        slurm_version=slurm_version,
        diff=show_diff,
        dry_run=dry_run,
        emit_dir=emit_dir,
        accel_gres=accel_gres,
    )
    for line in result.notes:
        click.secho(line, err=True, fg="yellow" if line.startswith("slurmgpu: warning") else None)
    exit_with(result.status)
