"""The module x release matrix of docs/testing.md, computed from the tests' own markers.

`python -m tests.harness.matrix --write` collects `tests/integration` (nothing runs), decides
for every test and every release (the host's 22.05 and each root of `RELEASES`) whether it
runs there, with `releases.why_left_out` (the same function that deselects tests in a
session), and writes the table between the markers in docs/testing.md. `--check` (what
`tests/unit/harness/test_matrix.py` runs) fails when the page and the markers disagree, so
the page cannot drift from what a run does. Test code, not product code.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.harness.debian_root import HOST_SERIES, RELEASES, REPO, SlurmRelease

DOC = REPO / "docs" / "testing.md"
BEGIN = "<!-- matrix:begin (python -m tests.harness.matrix --write) -->"
END = "<!-- matrix:end -->"


@dataclass(frozen=True)
class Cell:
    """One test on one release: None when it runs there, else why it is left out."""

    module: str
    test: str
    release: str
    left_out: str | None


def matrix_releases() -> list[SlurmRelease]:
    """The columns: the host's packages (Debian 12: 22.05), then every root's release."""
    return [SlurmRelease(HOST_SERIES), *RELEASES.values()]


class _Recorder:
    def __init__(self) -> None:
        self.cells: list[Cell] = []

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, config, items) -> None:
        from tests.harness.releases import why_left_out

        for item in items:
            module = Path(str(item.path)).name
            for rel in matrix_releases():
                why = why_left_out(item, rel)
                self.cells.append(Cell(module, item.name, rel.series, why))


def collect() -> list[Cell]:
    """Every (test, release) of tests/integration, without running anything."""
    recorder = _Recorder()
    args = ["--collect-only", "-q", "-p", "no:cacheprovider", str(REPO / "tests" / "integration")]
    with contextlib.redirect_stdout(io.StringIO()):  # the collected ids: not wanted here
        code = pytest.main(args, plugins=[recorder])
    if code not in (0, 5):
        raise SystemExit(f"matrix: collecting tests/integration failed (pytest exit {code})")
    return recorder.cells


def render(cells: list[Cell]) -> str:
    """The markdown table (tests run per module and release) and what is left out, and why."""
    series = [r.series for r in matrix_releases()]
    heads = [f"{s} (host)" if s == HOST_SERIES else s for s in series]
    modules = sorted({c.module for c in cells})
    lines = [
        "| module | tests | " + " | ".join(heads) + " |",
        "|---|---|" + "---|" * len(series),
    ]
    for module in modules:
        mine = [c for c in cells if c.module == module]
        total = len({c.test for c in mine})
        row = [module, str(total)]
        for s in series:
            ran = sum(1 for c in mine if c.release == s and c.left_out is None)
            row.append("all" if ran == total else f"{ran} of {total}")
        lines.append("| " + " | ".join(row) + " |")
    left = [c for c in cells if c.left_out is not None]
    if left:
        lines += ["", "Left out (the run lists these again in its terminal summary):", ""]
        grouped: dict[tuple[str, str], list[str]] = {}
        for c in left:
            grouped.setdefault((c.left_out or "", c.module), []).append(c.release)
        for (why, module), rels in sorted(grouped.items(), key=lambda kv: kv[0][1]):
            tests = sorted({c.test for c in left if c.module == module and c.left_out == why})
            shown = ", ".join(f"`{t}`" for t in tests[:3]) + (" ..." if len(tests) > 3 else "")
            where = ", ".join(sorted(set(rels)))
            lines.append(f"- `{module}` on {where}: {shown}: {why}")
    return "\n".join(lines) + "\n"


def replace_block(doc: str, table: str) -> str:
    """`doc` with the text between BEGIN and END replaced by `table`."""
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    if not pattern.search(doc):
        raise SystemExit(f"matrix: {DOC} has no {BEGIN} ... {END} block")
    return pattern.sub(lambda m: f"{BEGIN}\n{table}{END}", doc)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.harness.matrix")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite the table in the doc")
    mode.add_argument("--check", action="store_true", help="exit 1 if the doc is out of date")
    args = parser.parse_args(argv)
    table = render(collect())
    doc = DOC.read_text(encoding="utf-8")
    new = replace_block(doc, table)
    if args.write:
        DOC.write_text(new, encoding="utf-8")
        return 0
    if new != doc:
        print(
            f"matrix: the module x release table in {DOC.relative_to(REPO)} does not match the "
            "tests' markers; run `python -m tests.harness.matrix --write`. It should read:\n"
            + table,
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
