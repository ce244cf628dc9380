"""Line numbers for TOML keys: tomllib gives none, so messages find them in the source text.

The lookup is textual (a key at the start of a line, inside the right table header), which is
enough to point a person at the line; a key that cannot be found gives line None.
"""

from __future__ import annotations

import re


def _table_header(line: str) -> tuple[str, bool] | None:
    """`[a.b]` -> ("a.b", False); `[[a]]` -> ("a", True); anything else -> None."""
    m = re.match(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$", line)
    if not m:
        return None
    name = ".".join(part.strip().strip('"').strip("'") for part in m.group(2).split("."))
    return name, m.group(1) == "[["


def find_key_line(text: str, table: str, key: str | None = None, index: int = 0) -> int | None:
    """1-based line of `key` inside table `table` (the `index`-th one if it is an array table).

    `table=""` means the top level. With `key=None` the table header's own line is returned.
    """
    lines = text.splitlines()
    current, seen, header_line = "", -1, None
    key_re = re.compile(rf"^\s*[\"']?{re.escape(key)}[\"']?\s*=") if key else None
    in_target = table == "" and index == 0
    if in_target and key_re is None:
        return 1
    for lineno, line in enumerate(lines, start=1):
        header = _table_header(line)
        if header is not None:
            current = header[0]
            if current == table:
                seen += 1
                in_target = seen == index
                header_line = lineno
                if in_target and key_re is None:
                    return header_line
            else:
                in_target = False
            continue
        if in_target and key_re is not None and key_re.match(line):
            return lineno
    return header_line if in_target else None


_KEY = re.compile(r"^\s*[\"']?([A-Za-z0-9_-]+)[\"']?\s*=")


class KeyLines:
    """Every key's line in one pass, for files with thousands of tables (a 3000-switch file:
    calling `find_key_line` per switch would rescan the text each time, O(n^2))."""

    def __init__(self, text: str) -> None:
        self._lines: dict[tuple[str, int, str | None], int] = {("", 0, None): 1}
        seen: dict[str, int] = {}
        current = ("", 0)
        for lineno, line in enumerate(text.splitlines(), start=1):
            header = _table_header(line)
            if header is not None:
                index = seen[header[0]] = seen.get(header[0], -1) + 1
                current = (header[0], index)
                self._lines.setdefault((*current, None), lineno)
                continue
            m = _KEY.match(line)
            if m:
                self._lines.setdefault((*current, m.group(1)), lineno)

    def find(self, table: str, key: str | None = None, index: int = 0) -> int | None:
        """Like `find_key_line`: the key's line, else its table's header line, else None."""
        line = self._lines.get((table, index, key))
        return line if line is not None else self._lines.get((table, index, None))
