"""Helpers for the hostile-input suite: run the CLI both ways and demand one clean error line.

Every case here is a user mistake or an attack, never a bug: the answer must be exactly one
`slurmgpu: error: ...` line on stderr, exit 1 (2 for usage), no traceback, and no file
written or changed. Cases that need root (tmpfs mounts for a full or read-only disk) fail
without it, as integration tests do: CI runs as root (scripts/run-tests).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmgpu.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "etc" / "examples"


@dataclass(frozen=True)
class Run:
    """What one CLI run left behind."""

    code: int
    stdout: str
    stderr: str


def cli(*args: object) -> Run:
    """In-process, through click's CliRunner (the same group object the entry point runs)."""
    result = CliRunner().invoke(main, [str(a) for a in args])
    return Run(result.exit_code, result.stdout, result.stderr)


def proc(*args: object, timeout: float = 120) -> Run:
    """The real entry point in a child process (`python -m slurmgpu`)."""
    done = subprocess.run(
        [sys.executable, "-m", "slurmgpu", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        check=False,
    )
    return Run(done.returncode, done.stdout, done.stderr)


def assert_one_error(run: Run, code: int = 1, *, says: str = "") -> str:
    """Exactly one `slurmgpu: error:` line (warnings, check notes may precede it), exit `code`."""
    assert "Traceback" not in run.stderr, run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("slurmgpu: error:")]
    assert len(errors) == 1, run.stderr
    others = [
        line
        for line in run.stderr.splitlines()
        if not line.startswith(
            (
                "slurmgpu: error:",
                "slurmgpu: warning:",
                "slurmgpu: WARNING:",
                "slurmgpu: check:",
                "slurmgpu: policy:",
            )
        )
    ]
    assert others == [], run.stderr
    assert run.code == code, (run.code, run.stderr)
    assert says.lower() in errors[0].lower(), errors[0]
    return errors[0]


def example(name: str = "dgx-h100") -> dict:
    return json.loads((EXAMPLES / f"{name}.json").read_text(encoding="utf-8"))


def write_json(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@contextlib.contextmanager
def tmpfs(directory: Path, options: str) -> Iterator[Path]:
    """A small tmpfs at `directory` (root only), unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.fail("this hostile case mounts a tmpfs: run as root (sudo ./scripts/run-tests)")
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(directory)], check=True)
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=False)
