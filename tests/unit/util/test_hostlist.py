"""Slurm range syntax: hostlists and id lists, both directions."""

from __future__ import annotations

import pytest

from slurmgpu.errors import LimitError
from slurmgpu.util.hostlist import (
    MAX_HOSTS,
    ExpansionLimitError,
    compress_hostlist,
    count_id_list,
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


@pytest.mark.parametrize("bad", ["3-1", "1,,2", "a", "1-b", "٣", "0-３", "²"])
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


def test_expansion_limits_refuse_before_building() -> None:
    with pytest.raises(ExpansionLimitError, match="limit of 65536"):
        expand_hostlist("n[0-99999999]")
    with pytest.raises(ExpansionLimitError):
        expand_hostlist("r[0-999]n[0-999]")  # each range fits, their product does not
    with pytest.raises(ExpansionLimitError, match="300000001 ids"):
        parse_id_list("0-300000000")
    assert len(expand_hostlist(f"n[1-{MAX_HOSTS}]")) == MAX_HOSTS
    with pytest.raises(LimitError) as err:
        expand_hostlist("a[0-70000]")
    assert isinstance(err.value, ValueError)  # callers treating bad ranges as unknown still do


def test_several_bracket_groups_expand_without_recursion() -> None:
    assert expand_hostlist("r[1-2]n[1-2]x") == ["r1n1x", "r1n2x", "r2n1x", "r2n2x"]
    many = "".join(f"g{i}[1]" for i in range(5000))  # 5000 groups: no RecursionError
    assert expand_hostlist(many) == ["".join(f"g{i}1" for i in range(5000))]
    for bad in ("n[1-2", "n]1[", "n[[1]]", "n[]", "n[a-b]", "n[2-1]"):
        with pytest.raises(ValueError):
            expand_hostlist(bad)


def test_count_id_list_counts_without_expanding() -> None:
    assert count_id_list("0-300000000") == 300000001
    assert count_id_list("0-3,8") == 5
    assert count_id_list("") == 0
    with pytest.raises(ValueError):
        count_id_list("3-1")


@pytest.mark.parametrize("bad", ["gpu[٣-٥]", "gpu[0-３]", "gpu[²]"])
def test_expand_hostlist_reads_ascii_digits_only(bad: str) -> None:
    """str.isdigit takes other scripts' digits; Slurm's hostlists are ASCII."""
    with pytest.raises(ValueError):
        expand_hostlist(bad)


def test_compress_hostlist_numbers_are_ascii() -> None:
    assert compress_hostlist(["gpu٣", "gpu01", "gpu02"]) == "gpu[01-02],gpu٣"
