"""No function in `slurmgpu/` is over MAX_LINES lines, except at most ALLOWED of them, each
with a docstring saying why (a paragraph starting "Why it is long:")."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 80
ALLOWED = 3
REASON = "Why it is long:"


def long_functions(root: Path = ROOT) -> list[tuple[str, int, str | None]]:
    """(`file:line name`, lines, docstring) of every function longer than MAX_LINES lines
    (decorators not counted, docstring and body counted), longest first."""
    out = []
    for path in sorted((root / "slurmgpu").rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_LINES:
                    where = f"{path.relative_to(root)}:{node.lineno} {node.name}"
                    out.append((where, lines, ast.get_docstring(node)))
    return sorted(out, key=lambda t: -t[1])


def test_at_most_three_long_functions():
    found = long_functions()
    listing = "\n".join(f"  {lines} lines: {where}" for where, lines, _ in found)
    assert len(found) <= ALLOWED, (
        f"{len(found)} functions over {MAX_LINES} lines in slurmgpu/ (at most {ALLOWED}): "
        f"split them\n{listing}"
    )


def test_each_long_function_says_why():
    for where, lines, doc in long_functions():
        assert doc and REASON in doc, f"{where} ({lines} lines): no '{REASON}' in its docstring"


def test_the_count_can_fail(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    (tmp_path / "slurmgpu").mkdir()
    (tmp_path / "slurmgpu" / "m.py").write_text(
        f'def short():\n    return 1\n\n\ndef long():\n    """{REASON} a test."""\n{body}\n'
    )
    found = long_functions(tmp_path)
    assert [(w, n) for w, n, _ in found] == [("slurmgpu/m.py:5 long", MAX_LINES + 2)]
    assert REASON in found[0][2]
