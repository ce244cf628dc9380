"""The floors of `slurmgpu/`: the import graph read with `ast`, checked against the table in
docs/architecture.md ("Floors and import rules"), which this test parses (the doc is the data:
they cannot disagree).

Fails on: a package (or top-level module) of `slurmgpu/` without a row in the table (a new
package must be placed on a floor), a row whose "never" is not exactly every other package
(so the doc says the whole rule), an import the row does not allow, a "may import" that is not
on a lower or the same floor, and a cycle, at file level and at package level.

Every `import` / `from ... import` counts, also those inside functions (the lazy CLI imports
there) and under `if TYPE_CHECKING:`. An edge goes to the module named: `from a.b import c`
is an edge to `a.b.c` when that is a module, else to `a.b` (the parent packages' `__init__`
that Python runs on the way are not counted as edges).
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
SECTION = "## Floors and import rules"


# --------------------------------------------------------------------------- the graph


def modules(root: Path, top: str = "slurmgpu") -> dict[str, Path]:
    """{dotted module name: file} for every .py file of the package `top` under `root`."""
    out = {}
    for path in sorted((root / top).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def package_of(module: str) -> str:
    """The floor-table name of a module: `slurmgpu.accounting.load` -> `accounting`,
    `slurmgpu.errors` -> `errors`, the package's own `__init__` -> `slurmgpu`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(root: Path = ROOT, top: str = "slurmgpu") -> dict[str, dict[str, int]]:
    """{module: {imported module of the package: first line importing it}}."""
    known = modules(root, top)
    graph: dict[str, dict[str, int]] = {}
    for module, path in known.items():
        edges: dict[str, int] = {}
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: from the module's own package
                    base = module.split(".") if is_package else module.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    full = ".".join(base + ([node.module] if node.module else []))
                else:
                    full = node.module or ""
                targets = [
                    f"{full}.{a.name}" if f"{full}.{a.name}" in known else full for a in node.names
                ]
            for target in targets:
                if target != top and not target.startswith(top + "."):
                    continue
                hit = _resolve(target, known)
                if hit and hit != module:
                    edges.setdefault(hit, node.lineno)
        graph[module] = edges
    return graph


def cycles(graph: dict[str, dict[str, int]] | dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # recursion depth is bounded by the package's module count
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def package_graph(graph: dict[str, dict[str, int]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for module, edges in graph.items():
        out[package_of(module)]
        for target in edges:
            if package_of(target) != package_of(module):
                out[package_of(module)].add(package_of(target))
    return dict(out)


# --------------------------------------------------------------------------- the table


def floor_table(text: str) -> dict[str, dict]:
    """{package: {"floor": int, "may": set, "never": set}} from the doc's rules table: rows
    `| \\`name\\` | floor | may import | never | what |`, names in backticks, `-` for none."""
    try:
        body = text.split(SECTION, 1)[1]
    except IndexError:
        raise AssertionError(f"docs/architecture.md has no section {SECTION!r}") from None
    body = body.split("\n## ", 1)[0]
    rows = {}
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or not cells[0].startswith("`"):
            continue
        name = re.findall(r"`([^`]+)`", cells[0])[0]
        assert name not in rows, f"docs/architecture.md: two rows for {name!r}"
        rows[name] = {
            "floor": int(cells[1]),
            "may": set(re.findall(r"`([^`]+)`", cells[2])),
            "never": set(re.findall(r"`([^`]+)`", cells[3])),
        }
    assert rows, f"docs/architecture.md {SECTION!r}: no table rows"
    return rows


@pytest.fixture(scope="module")
def table() -> dict[str, dict]:
    return floor_table(DOC.read_text())


@pytest.fixture(scope="module")
def graph() -> dict[str, dict[str, int]]:
    return import_graph()


def forbidden(graph: dict[str, dict[str, int]], table: dict[str, dict], root: Path = ROOT):
    """`file:line: a imports b (package p may not import q)` for each import against the
    table (a package missing from the table allows nothing)."""
    out = []
    for module, edges in sorted(graph.items()):
        src = package_of(module)
        may = table.get(src, {}).get("may", set())
        for target, line in sorted(edges.items()):
            dst = package_of(target)
            if dst != src and dst not in may:
                path = modules(root)[module].relative_to(root)
                out.append(f"{path}:{line}: {module} imports {target} ({src} may not import {dst})")
    return out


# --------------------------------------------------------------------------- the rules


def test_every_package_has_a_row(graph, table):
    present = {package_of(m) for m in graph}
    missing = sorted(present - set(table))
    stale = sorted(set(table) - present)
    assert not missing, (
        f"packages of slurmgpu/ without a row in docs/architecture.md {SECTION!r}: {missing} "
        "(place each on a floor: what it may import, and never)"
    )
    assert not stale, f"rows in docs/architecture.md for packages that do not exist: {stale}"


def test_each_row_says_the_whole_rule(table):
    everything = set(table)
    for name, row in sorted(table.items()):
        both = row["may"] & row["never"]
        assert not both, f"{name}: both may and never import {sorted(both)}"
        unknown = (row["may"] | row["never"]) - everything
        assert not unknown, f"{name}: names no package {sorted(unknown)}"
        left_out = everything - row["may"] - row["never"] - {name}
        assert not left_out, f"{name}: neither may nor never import {sorted(left_out)}"
        assert name not in row["may"] | row["never"], f"{name} names itself"


def test_may_import_only_its_floor_or_below(table):
    for name, row in sorted(table.items()):
        above = sorted(p for p in row["may"] if table[p]["floor"] > row["floor"])
        assert not above, f"{name} (floor {row['floor']}) may import upward: {above}"


def test_no_import_the_table_forbids(graph, table):
    bad = forbidden(graph, table)
    assert not bad, "imports docs/architecture.md forbids:\n" + "\n".join(bad)


def test_no_cycle_between_files(graph):
    found = cycles(graph)
    assert not found, "import cycles between modules of slurmgpu/:\n" + "\n".join(
        " <-> ".join(c) for c in found
    )


def test_no_cycle_between_packages(graph):
    found = cycles(package_graph(graph))
    assert not found, "import cycles between packages of slurmgpu/:\n" + "\n".join(
        " <-> ".join(c) for c in found
    )


def test_the_checks_can_fail(tmp_path):
    """On a small package with a cycle, an upward import (also a function-local one) and a
    package without a row, the checks report each."""
    pkg = tmp_path / "slurmgpu"
    for sub, text in {
        "__init__.py": "",
        "low/__init__.py": "",
        "low/a.py": "def f():\n    from slurmgpu.high import b\n",
        "high/__init__.py": "",
        "high/b.py": "from slurmgpu.low import a\n",
        "high/c.py": "from . import b\n",
        "stray/__init__.py": "",
    }.items():
        (pkg / sub).parent.mkdir(parents=True, exist_ok=True)
        (pkg / sub).write_text(text)
    g = import_graph(tmp_path)
    assert g["slurmgpu.high.c"] == {"slurmgpu.high.b": 1}
    assert cycles(g) == [["slurmgpu.high.b", "slurmgpu.low.a"]]
    assert cycles(package_graph(g)) == [["high", "low"]]
    rules = floor_table(
        f"{SECTION}\n| package | floor | may import | never | what |\n|---|---|---|---|---|\n"
        "| `slurmgpu` | 0 | - | `low`, `high` | x |\n"
        "| `low` | 1 | `slurmgpu` | `high` | x |\n"
        "| `high` | 2 | `slurmgpu`, `low` | - | x |\n"
    )
    bad = forbidden(g, rules, tmp_path)
    assert bad == [
        "slurmgpu/low/a.py:2: slurmgpu.low.a imports slurmgpu.high.b (low may not import high)"
    ]
    assert {package_of(m) for m in g} - set(rules) == {"stray"}
