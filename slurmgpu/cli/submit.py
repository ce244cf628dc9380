"""`slurmgpu submit`: sbatch with a tier, a job kind and a GPU-memory ask turned into a slice
(the planning is `slurmgpu.configure.submit.submit`).

Start-up matters here (it runs on every submission): this module imports only click at top
level, and the path it runs never imports pandas, pynvml or jinja2.
"""

from __future__ import annotations

import click

USAGE = (
    "Usage: slurmgpu submit [--tier T] [--kind K] [--gpu-mem SIZE] [--accel SPEC] [--policy FILE] "
    "[--dry-run] [SBATCH OPTIONS...] -- SCRIPT [ARGS...]"
)
HELP = f"""{USAGE}

  Submit a batch job through sbatch in a priority tier with a fitting GPU slice.

  --tier T         tier from the site policy (P0, P1, P2 ...): adds --qos and a tier=T tag
  --kind K         job kind (inference, finetune, training ...): adds a kind=K tag, and the
                   kind's GPU slice, partition and time limit where the job sets none
  --gpu-mem SIZE   GPU memory the job needs (10G): the smallest slice that holds it among
                   the cluster's GPU types (sinfo, cached 60 s) or the policy's slices
  --accel SPEC     mem>=SIZE[,vendor=amd|nvidia|ascend][,class=npu|gpu-slice|gpu|linked-gpu]:
                   the smallest fitting device across vendors (MIG slices, AMD partitions,
                   Ascend NPUs, whole GPUs); the classes default to the kind's `accel`
  --policy FILE    site policy (default: $SLURMGPU_POLICY, else /etc/slurmgpu/slurmgpu.toml)
  --dry-run        print the sbatch command instead of running it

  Every other option goes to sbatch unchanged; #SBATCH lines in the script keep working
  (the wrapper only adds what neither they nor the command line set).
"""


class RawArgsCommand(click.Command):
    """A command that receives its arguments verbatim (`--`, `-p gpu`, `--time=10` included).

    click's own parser would drop a `--` or regroup options; sbatch options must pass through
    exactly as typed, so parsing is `split_args`'s job.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.params["args"] = tuple(args)
        return []

    def get_help(self, ctx: click.Context) -> str:
        """What `slurmgpu submit --help` prints (for the CLI reference, docs/cli.md)."""
        return HELP.rstrip("\n")


@click.command("submit", cls=RawArgsCommand, add_help_option=False)
def submit(args: tuple[str, ...]) -> None:
    """Submit a batch job with a tier, job kind and GPU slice (run `submit --help`)."""
    import os
    import shlex

    from slurmgpu.configure.submit import submit as plan
    from slurmgpu.errors import UsageError

    arglist = list(args)
    if arglist[:1] in (["--help"], ["-h"]) or not arglist:
        click.echo(HELP)
        return
    planned = plan(arglist)
    if planned.dry_run:
        click.echo(shlex.join(planned.argv))
        return
    try:
        os.execvp(planned.argv[0], planned.argv)
    except OSError as exc:
        raise UsageError(f"cannot run {planned.argv[0]}: {exc.strerror}") from exc
