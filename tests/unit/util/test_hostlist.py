"""Slurm range syntax: hostlists and id lists, both directions."""

from __future__ import annotations

import pytest

from slurmgpu.util.hostlist import (
    compress_hostlist,
    expand_hostlist,
    format_id_list,
    parse_id_list,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", []),
        ("3", [3]),
        ("0-3,8", [0, 1, 2, 3, 8]),
        ("8,0-1,1", [0, 1, 8]),
        (" 0-1 , 4 ", [0, 1, 4]),
        ("0-55,112-113", [*range(56), 112, 113]),
    ],
)
def test_parse_id_list(text: str, expected: list[int]) -> None:
    assert parse_id_list(text) == expected


@pytest.mark.parametrize("bad", ["3-1", "1,,2", "a", "1-b"])
def test_parse_id_list_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_id_list(bad)


@pytest.mark.parametrize(
    ("ids", "expected"),
    [
        ([], ""),
        ([5], "5"),
        ([3, 0, 1, 2, 8], "0-3,8"),
        ([1, 1, 2], "1-2"),
        ([0, 2, 4], "0,2,4"),
    ],
)
def test_format_id_list(ids: list[int], expected: str) -> None:
    assert format_id_list(ids) == expected


def test_id_list_round_trip() -> None:
    ids = [0, 1, 2, 3, 7, 9, 10, 11, 100]
    assert parse_id_list(format_id_list(ids)) == ids


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gpu01", ["gpu01"]),
        ("gpu[01-03]", ["gpu01", "gpu02", "gpu03"]),
        ("gpu[01-02,07],dgx", ["gpu01", "gpu02", "gpu07", "dgx"]),
        ("n[8-10]", ["n8", "n9", "n10"]),
        ("n[08-10]", ["n08", "n09", "n10"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        ("/dev/nvidia[0-2]", ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2"]),
        ("a[1-2]-ib", ["a1-ib", "a2-ib"]),
    ],
)
def test_expand_hostlist(text: str, expected: list[str]) -> None:
    assert expand_hostlist(text) == expected


@pytest.mark.parametrize("bad", ["gpu[01-03", "gpu01]", "gpu[3-1]", "gpu[a-b]", "gpu[x]"])
def test_expand_hostlist_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        expand_hostlist(bad)


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (["gpu01", "gpu02", "gpu03", "dgx"], "dgx,gpu[01-03]"),
        (["gpu03", "gpu01"], "gpu[01,03]"),
        (["gpu07"], "gpu07"),
        (["a1-ib", "a2-ib"], "a[1-2]-ib"),
        ([], ""),
    ],
)
def test_compress_hostlist(names: list[str], expected: str) -> None:
    assert compress_hostlist(names) == expected


def test_hostlist_round_trip_is_order_independent() -> None:
    names = ["dgx12", "dgx01", "dgx02", "dgx03", "login", "dgx10"]
    text = compress_hostlist(names)
    assert text == compress_hostlist(reversed(names))
    assert sorted(expand_hostlist(text)) == sorted(names)


def test_compress_hostlist_folds_unpadded_numbers_like_slurm() -> None:
    # `scontrol show hostlist n9,n10,n11` prints n[9-11]: unpadded numbers share a range
    text = compress_hostlist(["n9", "n10", "n11"])
    assert text == "n[9-11]"
    assert expand_hostlist(text) == ["n9", "n10", "n11"]
    # zero padding is kept, and an unpadded number of the padded width joins that range
    assert compress_hostlist(["gpu01", "gpu02", "gpu10"]) == "gpu[01-02,10]"
    assert compress_hostlist(["a001", "a002", "a1"]) == "a1,a[001-002]"
