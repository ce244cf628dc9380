"""Strict reading of the numbers a user types in `[PARTITION=]N` options.

Python's `float()` reads `nan`, `inf`, `1e12`, `1_000` and ` 64 `, and `str.rpartition("=")`
reads `gpu=64,mig=8` as 8 GPUs of a partition named `gpu=64,mig`: options parsed that way
took nonsense silently (issue #20). Here a count is plain decimal digits, within stated
bounds; a partition name is a word Slurm takes; a name given twice is refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

WHOLE = re.compile(r"[0-9]{1,12}")
DECIMAL = re.compile(r"[0-9]{1,12}(\.[0-9]{1,6})?")
# a Slurm partition name (no `=`, `,`, space or `:`; `*` is the every-partition default)
PARTITION = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def whole(text: str, low: int, high: int, what: str) -> int:
    """A whole number written in decimal digits, low <= n <= high; ValueError saying so."""
    if not WHOLE.fullmatch(text) or not low <= int(text) <= high:
        raise ValueError(f"{what} must be a whole number from {low} to {high}, not {text!r}")
    return int(text)


def decimal(text: str, low: float, high: float, what: str) -> float:
    """A decimal number (`8`, `2.5`; no exponent, nan or inf), low <= x <= high."""
    if not DECIMAL.fullmatch(text) or not low <= float(text) <= high:
        raise ValueError(f"{what} must be a number from {low:g} to {high:g}, not {text!r}")
    return float(text)


def partition_pairs(
    values: Iterable[str], *, default_key: str | None = None
) -> list[tuple[str, str]]:
    """`PARTITION=VALUE` texts (or `VALUE` alone for `default_key`) -> [(partition, value)];
    ValueError for a malformed one or a partition named twice."""
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for text in values:
        key, sep, value = text.partition("=")
        if not sep:
            if default_key is None:
                raise ValueError(f"{text!r}: no PARTITION= before the value")
            key, value = default_key, text
        elif not PARTITION.fullmatch(key):
            raise ValueError(f"{text!r}: {key!r} is not a partition name")
        if key in seen:
            raise ValueError(f"{text!r}: {key} is given twice")
        seen.add(key)
        out.append((key, value))
    return out
