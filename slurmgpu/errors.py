"""Domain exceptions. Each carries what the user needs to fix the problem (GPU, key, line).

The CLI turns any `SlurmgpuError` into one line on stderr and an exit code; a traceback is
only ever a bug in slurmgpu, never a user mistake.
"""

from __future__ import annotations


class SlurmgpuError(Exception):
    """Base of every error a user can cause or fix. `exit_code` is what the CLI returns."""

    exit_code = 1


class UsageError(SlurmgpuError):
    """A request that cannot be satisfied as asked (bad option value, no slice fits)."""

    exit_code = 2


class ParameterError(UsageError):
    """A bad value of one library parameter, named as the library names it (`parameter`).

    `message` holds `{flag}` once where the parameter's name goes (plain text, not a format
    string: quoted input may hold braces): `str()` (a library user's view) says
    `keep_whole: must be 0 or more`; the CLI's error path (`cli/errorpath.py`) puts the
    command's option there instead: `--keep-whole: must be 0 or more`."""

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(message.replace("{flag}", parameter, 1))
        self.parameter = parameter
        self.template = message

    def for_flag(self, flag: str) -> str:
        """The message with `flag` (the command's option) in the parameter's place."""
        return self.template.replace("{flag}", flag, 1)


class InventoryError(SlurmgpuError):
    """NVML or the host could not be read, or a GPU is unhealthy."""


class SnapshotError(SlurmgpuError):
    """A saved inventory snapshot is malformed or of an unsupported version."""


class PolicyError(SlurmgpuError):
    """The site policy file is invalid; the message names the file, key and line.

    Several problems are one line each in the message; `problems` holds them apart, so that a
    one-line error report can list them joined by "; " (each problem's own text still shown
    with its control characters escaped)."""

    def __init__(self, message: str, problems: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.problems = problems or (message,)


class ConfigCheckError(SlurmgpuError):
    """Slurm's own parser (or Lua) rejected a generated file."""


class SlurmCommandError(SlurmgpuError):
    """A Slurm command-line tool failed, timed out or is missing."""


class SacctParseError(SlurmgpuError):
    """Accounting input cannot be used at all (a missing required column, unreadable file)."""


class StoreError(SlurmgpuError):
    """The accounting store cannot be used (not a directory, a corrupt manifest, a missing
    partition file)."""


class TopologyError(SlurmgpuError):
    """The switch / NVLink-domain description is inconsistent."""


class OutputError(SlurmgpuError):
    """An output file cannot be written where asked (missing directory, read-only, full disk)."""


class LimitError(SlurmgpuError):
    """Input asks for more than slurmgpu will expand (a hostlist of a hundred million names)."""
