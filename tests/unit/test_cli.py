"""The `slurmgpu` group: --version / --help in-process (CliRunner) and as a real process."""

from __future__ import annotations

import subprocess
import sys

from click.testing import CliRunner

from slurmgpu import __version__
from slurmgpu.cli import main


def test_version_in_process() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"slurmgpu, version {__version__}"


def test_help_in_process() -> None:
    for flag in ("--help", "-h"):
        result = CliRunner().invoke(main, [flag])
        assert result.exit_code == 0, result.output
        assert result.output.startswith("Usage: ")
        assert "Generated Slurm GPU configs" in result.output
        assert "--version" in result.output


def test_unknown_command_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["no-such-command"])
    assert result.exit_code == 2
    assert "No such command 'no-such-command'" in result.output


def test_version_as_a_real_process() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "slurmgpu", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"slurmgpu, version {__version__}"
    assert proc.stderr == ""


def test_help_as_a_real_process() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "slurmgpu", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Usage: ")
