"""Memory sizes as Slurm and users write them (`10G`, `8000M`, `38888M`, `1.5T`)."""

from __future__ import annotations

import re

# ASCII digits and spaces only (re.ASCII: `\d` would also take `٣` or `３`, issue #33)
_SIZE = re.compile(
    r"\s*(?P<num>\d{1,12}(?:\.\d{1,6})?)\s*(?P<unit>[KMGTP]?)(?:i?B)?\s*", re.IGNORECASE | re.ASCII
)
_MIB_PER = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}


def parse_size_mib(text: str, *, default_unit: str = "M") -> float:
    """`"10G"` -> 10240.0 MiB; a bare number is in `default_unit` (Slurm's default is MiB).

    Raises ValueError with the text for anything else.
    """
    m = _SIZE.fullmatch(str(text))
    if not m:
        raise ValueError(f"not a memory size: {text!r} (use e.g. 10G, 8000M)")
    unit = m.group("unit").upper() or default_unit.upper()
    return float(m.group("num")) * _MIB_PER[unit]
