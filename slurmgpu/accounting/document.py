"""The analysis document: what `analyze()` returns and every renderer reads.

`to_dict()` is the JSON contract (docs/accounting.md, "The JSON document"): no NaN/inf
(unknown is null), numpy scalars turned into Python numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 2


@dataclass
class AnalysisResult:
    """What `analyze` found: the JSON-ready document and the per-run frame it came from."""

    document: dict[str, Any]
    frame: Any  # pandas.DataFrame (normalized allocation rows, pyarrow dtypes)
    load: Any = field(repr=False, default=None)  # accounting.load.LoadResult

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract (no NaN/inf: unknown is None)."""
        return json_safe(self.document)

    to_json = to_dict


def json_safe(value: Any) -> Any:
    """Recursively turn numpy scalars into Python ones and NaN/inf into None."""
    import numpy as np

    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
