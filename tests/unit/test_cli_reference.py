"""docs/cli.md is every command's `--help` (slurmgpu/cli/reference.py); regenerate it with
`scripts/gen-cli-docs` after changing a command's options or help."""

from __future__ import annotations

import difflib
import os
import subprocess
import sys
from pathlib import Path

from slurmgpu.cli import LAZY_COMMANDS
from slurmgpu.cli.reference import COLUMNS, cli_reference, help_pages

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "cli.md"
# the console script's entry point, as a process (`python -m slurmgpu` names itself so)
RUN = "from slurmgpu.cli import main; main(prog_name='slurmgpu')"


def test_docs_cli_md_is_what_help_prints_now():
    want = cli_reference()
    have = DOC.read_text() if DOC.exists() else ""
    diff = "".join(
        difflib.unified_diff(
            have.splitlines(True), want.splitlines(True), "docs/cli.md", "--help now", n=1
        )
    )
    assert have == want, (
        "docs/cli.md differs from what --help prints now; regenerate it with "
        f"`scripts/gen-cli-docs` (or `python scripts/gen-cli-docs`):\n{diff[:4000]}"
    )


def test_each_page_is_the_real_help_output():
    """The reference's pages are what `slurmgpu ... --help` prints as a process (80 columns)."""
    env = {**os.environ, "COLUMNS": str(COLUMNS)}
    for path, text in help_pages():
        argv = [sys.executable, "-c", RUN, *path.split()[1:], "--help"]
        real = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, check=True)
        assert real.stdout.rstrip("\n") == text.rstrip("\n"), path


def test_every_visible_command_has_a_page():
    paths = [path for path, _ in help_pages()]
    top = {p.split()[1] for p in paths if len(p.split()) > 1}
    hidden = {"replay-task"}
    assert top == set(LAZY_COMMANDS) - hidden
    assert {"slurmgpu qos apply", "slurmgpu mig plan", "slurmgpu rebalance apply"} <= set(paths)
    assert len(paths) == len(set(paths))
