"""click number types that read ASCII digits only.

click's INT, FLOAT, IntRange and FloatRange call `int()` / `float()`, which take `٣` and `１２`
(digits of other scripts), `1_0`, ` 3`, `+3`, and for floats `nan`, `inf` and `1e999` (inf;
a FloatRange lets nan through its bounds). These subclasses check the text first
(`util.numbers`) and then behave as their click parents, with the same help and metavar.
"""

from __future__ import annotations

import math
import re
from typing import Any

import click

from slurmgpu.util import numbers

_INT = re.compile(r"-?[0-9]{1,18}")


class Int(click.types.IntParamType):
    """click.INT over ASCII digits (an optional `-`)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not _INT.fullmatch(value):
            self.fail(f"{value[:40]!r} is not a whole number in ASCII digits", param, ctx)
        return super().convert(value, param, ctx)


class IntRange(click.IntRange):
    """click.IntRange over ASCII digits (an optional `-`)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not _INT.fullmatch(value):
            self.fail(f"{value[:40]!r} is not a whole number in ASCII digits", param, ctx)
        return super().convert(value, param, ctx)


class FloatRange(click.FloatRange):
    """click.FloatRange over finite numbers in ASCII (`util.numbers.REAL`)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not (
            numbers.REAL.fullmatch(value) and len(value) <= 64 and math.isfinite(float(value))
        ):
            self.fail(f"{value[:40]!r} is not a finite number in ASCII digits", param, ctx)
        return super().convert(value, param, ctx)
