"""The last line of defence against config injection: every rendered line must be one we meant.

Validation (`slurmgpu.model.validate`) refuses hostile strings before rendering; this check
runs after it on the finished text. A line that is neither a comment, blank, nor one of the
statements the renderer produced means a string carried a newline past validation: that is
a bug in slurmgpu, so it raises `RuntimeError` (a traceback and a bug line from the CLI), and
nothing is written.
"""

from __future__ import annotations

from collections.abc import Iterable


def check_config_lines(text: str, statements: Iterable[str], what: str) -> str:
    """Return `text` if its non-comment lines are exactly `statements`, in order."""
    wanted = list(statements)
    found = [
        line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")
    ]
    if found != wanted or any(ch in text for ch in "\r\v\f\x00\x85\u2028\u2029"):
        stray = next((line for line in found if line not in wanted), "(order or count)")
        raise RuntimeError(f"{what}: rendered a statement that was not generated: {stray[:80]!r}")
    return text
