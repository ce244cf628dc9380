"""Layouts on one GPU: the catalogue's placement rules, enumeration and placing counts."""

from __future__ import annotations

import pytest

from slurmgpu.model.catalog import resolve
from slurmgpu.model.mig_layout import Placement, fits, layouts, maximal_layouts, place

A100 = resolve("a100")
H100 = resolve("h100")
A30 = resolve("a30")


def pl(model, name, start):
    return Placement(start, model.profile(name))


def test_fits_explains_each_rule() -> None:
    assert fits(A100, [pl(A100, "4g.20gb", 0), pl(A100, "3g.20gb", 4)]) is None
    assert "overlaps" in fits(A100, [pl(A100, "4g.20gb", 0), pl(A100, "2g.10gb", 2)])
    assert "cannot start at slot 2" in fits(A100, [pl(A100, "3g.20gb", 2)])
    one_me = [pl(A100, "1g.5gb+me", 0), pl(A100, "1g.5gb+me", 1)]
    assert "more than 1 x 1g.5gb+me" in fits(A100, one_me)
    assert "+me" in fits(A30, [pl(A30, "1g.6gb+me", 0), pl(A30, "2g.12gb+me", 2)])
    assert "not a a100-sxm4-40gb profile" in fits(A100, [pl(H100, "1g.10gb", 0)])


def test_seven_small_slices_use_slots_0_to_6() -> None:
    lay = place(H100, {"1g.10gb": 7})
    assert [p.start for p in lay.placements] == [0, 1, 2, 3, 4, 5, 6]
    assert place(H100, {"1g.10gb": 8}) is None
    assert lay.label == "1g.10gb x7"


def test_place_backtracks_to_a_valid_arrangement() -> None:
    # 3g must go to slot 4 so that the four 1g fit at 0-3 (1g cannot start at 7)
    lay = place(A100, {"3g.20gb": 1, "1g.5gb": 4})
    assert {(p.profile.name, p.start) for p in lay.placements} == {
        ("3g.20gb", 4),
        ("1g.5gb", 0),
        ("1g.5gb", 1),
        ("1g.5gb", 2),
        ("1g.5gb", 3),
    }
    assert place(A100, {"4g.20gb": 1, "3g.20gb": 1, "1g.5gb": 1}) is None
    assert place(A100, {"9g.1gb": 1}) is None


def test_enumeration_counts() -> None:
    # distinct sets of instances (by profile counts), media-extension profiles left out
    assert len(layouts("a30")) == 9
    assert {lay.label for lay in maximal_layouts("a30")} == {
        "1g.6gb x4",
        "2g.12gb + 1g.6gb x2",
        "2g.12gb x2",
        "4g.24gb",
    }
    a100 = {lay.label for lay in maximal_layouts("a100")}
    assert {
        "7g.40gb",
        "4g.20gb + 3g.20gb",
        "3g.20gb x2",
        "1g.5gb x7",
        "2g.10gb x3 + 1g.5gb",
    } <= a100
    assert "3g.20gb + 1g.5gb x3" not in a100  # a fourth 1g still fits: not maximal
    assert layouts("t4") == ()


@pytest.mark.parametrize("key", ["a100", "a100_80gb", "h100", "h200", "b200", "a30"])
def test_every_enumerated_layout_fits(key: str) -> None:
    model = resolve(key)
    for lay in layouts(key, media_extensions=True):
        assert fits(model, lay.placements) is None, lay.label
        assert lay.compute_slices_used <= model.compute_slices
