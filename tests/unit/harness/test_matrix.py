"""docs/testing.md's module x release matrix is what the markers make a run do.

`python -m tests.harness.matrix --check` collects tests/integration (nothing runs) and compares
the table it renders with the page: a marker added or removed without `--write` fails here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.debian_root import SlurmRelease
from tests.harness.matrix import Cell, render
from tests.harness.releases import why_left_out

REPO = Path(__file__).resolve().parents[3]


def test_the_page_matches_the_markers() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.harness.matrix", "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


def test_render_counts_and_names_what_is_left_out() -> None:
    cells = [
        Cell("test_a.py", "t1", "22.05", None),
        Cell("test_a.py", "t1", "24.11", None),
        Cell("test_a.py", "t1", "25.11", None),
        Cell("test_a.py", "t2", "22.05", "topology.yaml is 25.05+"),
        Cell("test_a.py", "t2", "24.11", "topology.yaml is 25.05+"),
        Cell("test_a.py", "t2", "25.11", None),
    ]
    text = render(cells)
    assert "| test_a.py | 2 | 1 of 2 | 1 of 2 | all |" in text
    assert "- `test_a.py` on 22.05, 24.11: `t2`: topology.yaml is 25.05+" in text


class _Item:
    """The two things why_left_out reads from a pytest item."""

    def __init__(self, *marks: pytest.Mark) -> None:
        self.marks = marks
        self.nodeid = "tests/integration/test_x.py::t"

    def iter_markers(self, name: str):
        return (m for m in self.marks if m.name == name)

    def get_closest_marker(self, name: str):
        return next(self.iter_markers(name), None)


def test_markers_name_a_release_and_a_fact() -> None:
    host, root = SlurmRelease("22.05"), SlurmRelease("25.11", suite="resolute")
    fact = pytest.mark.slurm_not("22.05", fact="no SLUID on 22.05").mark
    assert why_left_out(_Item(fact), host) == "no SLUID on 22.05"
    assert why_left_out(_Item(fact), root) is None
    only_host = pytest.mark.slurm_only("host", reason="no Slurm daemons").mark
    assert why_left_out(_Item(only_host), host) is None
    assert why_left_out(_Item(only_host), root) == "only on host: no Slurm daemons"
    # a typo in a release, or no fact, must not drop a test quietly
    for bad in (
        pytest.mark.slurm_not("25.1", fact="x").mark,
        pytest.mark.slurm_not("24.11").mark,
        pytest.mark.slurm_only("roots", reason="x").mark,
    ):
        with pytest.raises(pytest.UsageError, match="needs releases among"):
            why_left_out(_Item(bad), host)
