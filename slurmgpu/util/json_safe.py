"""`json_safe`: any result's JSON form made plain (numpy scalars, tuples, NaN/inf handled)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def json_safe(value: Any) -> Any:
    """Recursively turn numpy scalars into Python ones, tuples into lists, NaN/inf into None."""
    if isinstance(value, dict | Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    if type(value).__module__ == "numpy":
        import numpy as np

        if isinstance(value, np.generic):
            return json_safe(value.item())
    return value
