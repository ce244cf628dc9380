"""The `slurmgpu` command: a thin click layer over the library.

Subcommands live in sibling modules and are imported only when invoked, so that a fast path
such as `slurmgpu submit` never pays for pandas or pynvml. Each module imports only click at
top level and does its heavy imports inside the command function.
"""

from __future__ import annotations

import importlib

import click

from slurmgpu import __version__
from slurmgpu.cli.errorpath import handled_errors

# command name -> "module:attribute" (a click.Command or click.Group)
LAZY_COMMANDS: dict[str, str] = {
    "inventory": "slurmgpu.cli.gres:inventory",
    "gen-gres": "slurmgpu.cli.gres:gen_gres",
    "gen-topology": "slurmgpu.cli.topology:gen_topology",
    "policy": "slurmgpu.cli.tiers:policy",
    "qos": "slurmgpu.cli.tiers:qos",
    "gen-job-submit": "slurmgpu.cli.tiers:gen_job_submit",
    "submit": "slurmgpu.cli.submit:submit",
    "analyze": "slurmgpu.cli.accounting:analyze",
    "report": "slurmgpu.cli.report:report",
    "ingest": "slurmgpu.cli.store:ingest",
    "store": "slurmgpu.cli.store:store",
    "collect": "slurmgpu.cli.collect:collect",
    "mig": "slurmgpu.cli.mig:mig",
    "check": "slurmgpu.cli.fleet:check",
    "rebalance": "slurmgpu.cli.fleet:rebalance",
    "replay": "slurmgpu.cli.replay:replay",
    "advise": "slurmgpu.cli.advise:advise",
    "idle": "slurmgpu.cli.idle:idle",
    "job": "slurmgpu.cli.job:job",
    "forecast": "slurmgpu.cli.forecast:forecast",
    "autopilot": "slurmgpu.cli.autopilot:autopilot",
    "replay-task": "slurmgpu.cli.replay:replay_task",  # hidden: a task of replay --via-slurm
    "install-units": "slurmgpu.cli.ops:install_units",
}


# every command's help option; a context made without the group's (a test's
# `cmd.make_context`) must pass them, as click caches a command's help option when first made
HELP_OPTION_NAMES = ["-h", "--help"]


class SlurmgpuGroup(click.Group):
    """A group that loads subcommands lazily and owns the one error path of every command."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        available = [name for name in LAZY_COMMANDS if self._load(name) is not None]
        return sorted(set(super().list_commands(ctx)) | set(available))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return super().get_command(ctx, cmd_name) or self._load(cmd_name)

    @staticmethod
    def _load(name: str) -> click.Command | None:
        target = LAZY_COMMANDS.get(name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:  # that command is not built yet
                return None
            raise
        return getattr(module, attr, None)

    def make_context(self, info_name, args, parent=None, **extra):  # type: ignore[override]
        # options of the group itself (`slurmgpu --bogus`) are parsed here, outside invoke()
        with handled_errors():
            return super().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx: click.Context):  # type: ignore[override]
        with handled_errors():
            return super().invoke(ctx)


@click.group(cls=SlurmgpuGroup, context_settings={"help_option_names": HELP_OPTION_NAMES})
@click.version_option(__version__, "-V", "--version", prog_name="slurmgpu")
def main() -> None:
    """Generated Slurm GPU configs, priority tiers with preemption, and GPU accounting reports.

    Run `slurmgpu COMMAND --help` for the options of each command.
    """
