"""Every number a command line takes is read in ASCII digits only (slurmgpu/util/strict.py).

click's own INT, FLOAT, IntRange and FloatRange call int()/float(), which take `٣`, `１２`,
`1_0`, ` 3` and (floats) `nan`, `inf`, `1e999`. This walks every command and subcommand and
fails on an option or argument whose type is one of click's number types rather than the
strict subclass, so a new option cannot bring the lenient parse back.
"""

from __future__ import annotations

import click
import pytest

from slurmgpu.cli import LAZY_COMMANDS, main
from slurmgpu.util import strict

LENIENT = (click.types.IntParamType, click.types.FloatParamType)
STRICT = (strict.Int, strict.IntRange, strict.FloatRange)


def _commands(command: click.Command, path: str):
    yield path, command
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None:
                yield from _commands(sub, f"{path} {name}")


def _lenient_params() -> list[str]:
    found = []
    ctx = click.Context(main)
    for name in LAZY_COMMANDS:
        command = main.get_command(ctx, name)
        if command is None:
            continue
        for path, cmd in _commands(command, name):
            for param in cmd.params:
                if isinstance(param.type, LENIENT) and not isinstance(param.type, STRICT):
                    found.append(f"{path} {param.opts[0]} ({type(param.type).__name__})")
    return found


def test_every_number_option_reads_ascii_digits_only():
    assert _lenient_params() == []


@pytest.mark.parametrize(
    "argv",
    [
        ["replay", "--compile-only", "--processes", "٣"],
        ["job", "--idle-min", "nan", "1"],
    ],
)
def test_the_fixed_options_refuse_other_digits(argv):
    from click.testing import CliRunner

    res = CliRunner().invoke(main, argv)
    assert res.exit_code == 2, res.output
    assert "ASCII" in res.output
