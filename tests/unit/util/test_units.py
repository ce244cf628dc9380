"""Memory sizes as Slurm and users write them."""

from __future__ import annotations

import pytest

from slurmgpu.util.units import parse_size_mib


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10G", 10240.0),
        ("10g", 10240.0),
        ("8000M", 8000.0),
        ("8000", 8000.0),
        ("1.5T", 1.5 * 1024 * 1024),
        ("2048K", 2.0),
        ("10GiB", 10240.0),
        ("10GB", 10240.0),
        (" 40G ", 40960.0),
    ],
)
def test_parse_size_mib(text: str, expected: float) -> None:
    assert parse_size_mib(text) == expected


def test_default_unit_applies_to_bare_numbers() -> None:
    assert parse_size_mib("2", default_unit="G") == 2048.0
    assert parse_size_mib("2M", default_unit="G") == 2.0


@pytest.mark.parametrize("bad", ["", "ten", "10X", "-5G", "G"])
def test_parse_size_mib_rejects(bad: str) -> None:
    with pytest.raises(ValueError, match="not a memory size"):
        parse_size_mib(bad)
