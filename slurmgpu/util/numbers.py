"""Strict reading of the numbers a user types: options, what-if changes, demand files.

Python's `int()` and `float()` read `nan`, `inf`, `1e999` (inf), `1_000`, ` 64 `, `+1` and the
digits of every script (`int("٣")` is 3, `float("３")` is 3.0), `str.isdigit()` is true for
`²` (which `int()` then refuses with a traceback), and a regex `\\d` matches Arabic-Indic and
Devanagari digits; `str.rpartition("=")` reads `gpu=64,mig=8` as 8 GPUs of a partition named
`gpu=64,mig`. Options parsed that way took nonsense silently (issues #20, #33). Every number
slurmgpu reads from a user goes through these functions: ASCII digits only, within stated
bounds, a ValueError naming the value otherwise (callers turn it into their error type). A
partition name is a word Slurm takes; a name given twice is refused.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

WHOLE = re.compile(r"[0-9]{1,12}")
WHOLE_ANY = re.compile(r"[0-9]+")
DECIMAL = re.compile(r"[0-9]{1,12}(\.[0-9]{1,6})?")
# a real number as programs write it: `12`, `12.5`, `.5`, `1e-05`, `1.2E+03`, an optional `-`
REAL = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,4})?")
# a Slurm partition name (no `=`, `,`, space or `:`; `*` is the every-partition default)
PARTITION = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def whole(text: str, low: int, high: int, what: str) -> int:
    """A whole number written in decimal digits, low <= n <= high; ValueError saying so."""
    if not WHOLE.fullmatch(text) or not low <= int(text) <= high:
        raise ValueError(f"{what} must be a whole number from {low} to {high}, not {text[:40]!r}")
    return int(text)


def decimal(text: str, low: float, high: float, what: str) -> float:
    """A decimal number (`8`, `2.5`; no exponent, nan or inf), low <= x <= high."""
    if not DECIMAL.fullmatch(text) or not low <= float(text) <= high:
        raise ValueError(f"{what} must be a number from {low:g} to {high:g}, not {text[:40]!r}")
    return float(text)


def real(text: str, low: float, high: float, what: str) -> float:
    """A finite number in ASCII (`12`, `0.25`, `1e-05`; no `nan`, `inf`, `_`, `+`, spaces or
    other scripts' digits), low <= x <= high; ValueError saying so."""
    value = float(text) if REAL.fullmatch(text) and len(text) <= 64 else math.nan
    if not math.isfinite(value) or not low <= value <= high:
        raise ValueError(f"{what} must be a number from {low:g} to {high:g}, not {text[:40]!r}")
    return value


def is_ascii_digits(text: str) -> bool:
    """Only ASCII digits, at least one (where `str.isdigit()` also takes `²`, `٣`, `３`)."""
    return bool(WHOLE_ANY.fullmatch(text))


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
