"""Library errors name the library's parameter; the CLI's error path shows the command's flag."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from slurmgpu.accounting.capacity import parse_capacity_options
from slurmgpu.cli import SlurmgpuGroup, main
from slurmgpu.cli.errorpath import FLAGS
from slurmgpu.errors import ParameterError, UsageError
from slurmgpu.mig.plan import plan


def _group(raise_for: str) -> click.Group:
    group = SlurmgpuGroup(name="slurmgpu")

    @group.command("try")
    @click.option("--gpus-wanted", "wanted", default=1)
    def attempt(wanted: int) -> None:
        raise ParameterError(raise_for, "{flag}: " + "{not a format} too many")

    return group


def test_the_library_names_its_parameter():
    with pytest.raises(ParameterError) as got:
        parse_capacity_options(["gpu"])
    assert (
        str(got.value)
        == "capacity 'gpu': no PARTITION= before the value; use PARTITION=GPUS, e.g. gpu=64"
    )
    assert got.value.parameter == "capacity" and isinstance(got.value, UsageError)
    with pytest.raises(ParameterError, match=r"^keep_whole: must be 0 or more$"):
        plan([], None, keep_whole=-1)


def test_the_cli_shows_the_commands_flag():
    res = CliRunner().invoke(main, ["analyze", "--sacct-file", "x", "--capacity", "gpu"])
    assert res.exit_code == 2
    assert (
        "slurmgpu: error: --capacity 'gpu': no PARTITION= before the value; use PARTITION=GPUS"
        in res.output
    )


def test_the_option_of_the_parameters_name_is_found_by_click():
    res = CliRunner().invoke(_group("wanted"), ["try"])
    assert res.exit_code == 2
    assert res.output.strip() == "slurmgpu: error: --gpus-wanted: {not a format} too many"


def test_an_override_per_command_and_the_fallback(monkeypatch):
    monkeypatch.setitem(FLAGS, ("slurmgpu try", "limit"), "--max")
    res = CliRunner().invoke(_group("limit"), ["try"])
    assert res.output.strip() == "slurmgpu: error: --max: {not a format} too many"
    res = CliRunner().invoke(_group("per_node"), ["try"])
    assert res.output.strip() == "slurmgpu: error: --per-node: {not a format} too many"
