"""Plans checked against NVIDIA's placement rules, hand-coded here from the MIG User Guide.

This test deliberately does not use the catalogue's placement tables or slurmgpu.model.mig_layout's
rules: the tables below are typed in from the guide's "Supported MIG Profiles" figures
(A100 40/80 GB, H100, H200: 7 compute x 8 memory slices; A30: 4 x 4), so a wrong placement
in gpus.toml or a bug in the layout code fails here.
"""

from __future__ import annotations

import pytest

from slurmgpu.mig.demand import parse_demand
from slurmgpu.mig.plan import plan
from slurmgpu.model.catalog import resolve
from slurmgpu.model.mig_layout import Layout, Placement, layouts
from tests.unit.mig.conftest import node_of

# name: (compute slices, memory slots wide, max instances, allowed start slots)
G7 = {
    "1": (1, 1, 7, {0, 1, 2, 3, 4, 5, 6}),
    "1x2": (1, 2, 4, {0, 2, 4, 6}),
    "2": (2, 2, 3, {0, 2, 4}),
    "3": (3, 4, 2, {0, 4}),
    "4": (4, 4, 1, {0}),
    "7": (7, 8, 1, {0}),
}
NAMES7 = {
    "a100-sxm4-40gb": ["1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"],
    "a100-sxm4-80gb": ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
    "h100-sxm5-80gb": ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
    "h200-sxm5-141gb": ["1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"],
}
RULES = {key: (7, 8, dict(zip(names, G7.values(), strict=True))) for key, names in NAMES7.items()}
RULES["a30"] = (
    4,
    4,
    {"1g.6gb": (1, 1, 4, {0, 1, 2, 3}), "2g.12gb": (2, 2, 2, {0, 2}), "4g.24gb": (4, 4, 1, {0})},
)
NVML_NAMES = {
    "a100-sxm4-40gb": "NVIDIA A100-SXM4-40GB",
    "a100-sxm4-80gb": "NVIDIA A100-SXM4-80GB",
    "h100-sxm5-80gb": "NVIDIA H100 80GB HBM3",
    "h200-sxm5-141gb": "NVIDIA H200",
    "a30": "NVIDIA A30",
}


def check(model_key: str, instances: list[tuple[str, int]]) -> str | None:
    """NVIDIA's rules for (profile, start) instances on one GPU; None when valid."""
    compute_total, slots_total, table = RULES[model_key]
    taken: set[int] = set()
    compute = 0
    counts: dict[str, int] = {}
    for name, start in instances:
        if name not in table:
            return f"{name}: not a {model_key} profile"
        g, width, most, starts = table[name]
        if start not in starts:
            return f"{name} at {start}: not an allowed start"
        slots = set(range(start, start + width))
        if slots & taken or max(slots) >= slots_total:
            return f"{name} at {start}: overlaps or leaves the grid"
        taken |= slots
        compute += g
        counts[name] = counts.get(name, 0) + 1
        if counts[name] > most:
            return f"too many {name}"
    return None if compute <= compute_total else "too many compute slices"


def as_instances(layout: Layout) -> list[tuple[str, int]]:
    return [(p.profile.name, p.start) for p in layout.placements]


def test_the_checker_itself_rejects_bad_layouts() -> None:
    assert check("a100-sxm4-40gb", [("4g.20gb", 0), ("3g.20gb", 4)]) is None
    assert check("a100-sxm4-40gb", [("3g.20gb", 2)]) is not None
    assert check("a100-sxm4-40gb", [("1g.5gb", 7)]) is not None
    assert check("h100-sxm5-80gb", [("4g.40gb", 0), ("2g.20gb", 2)]) is not None
    assert check("a30", [("2g.12gb", 0), ("2g.12gb", 2), ("1g.6gb", 3)]) is not None


@pytest.mark.parametrize("model_key", sorted(RULES))
def test_every_layout_the_planner_may_pick_passes(model_key: str) -> None:
    found = layouts(model_key)
    assert found
    for lay in found:
        assert check(model_key, as_instances(lay)) is None, lay.label


DEMANDS = {
    "a100-sxm4-40gb": [["1g.5gb=9", "3g=2"], ["2g=5", "1g.10gb=3"], ["4g=2", "3g=2", "1g=6"]],
    "a100-sxm4-80gb": [["1g.10gb=12", "2g.20gb=2"], ["3g.40gb=3", "1g.20gb=5"]],
    "h100-sxm5-80gb": [["1g=15", "3g=1"], ["7g=1", "4g=2", "2g=3"]],
    "h200-sxm5-141gb": [["1g.18gb=7", "1g.35gb=4", "3g.71gb=2"], ["2g=4", "1g=3"]],
    "a30": [["1g=5", "2g=3"], ["4g=1", "1g.6gb=2"]],
}


@pytest.mark.parametrize(
    "model_key,demand", [(k, d) for k, ds in DEMANDS.items() for d in ds], ids=str
)
def test_plans_pass_the_independent_check(model_key: str, demand: list[str]) -> None:
    node = node_of(NVML_NAMES[model_key])
    result = plan([node], parse_demand(demand), keep_whole=2)
    assert result.met, result.unmet
    carved = [g for g in result.nodes[0].gpus if g.layout is not None]
    assert carved
    for gp in carved:
        assert gp.model.key == model_key
        assert check(model_key, as_instances(gp.layout)) is None, gp.layout.label
    # and the plan serves the demand as counted independently of the planner
    have: dict[str, int] = {}
    for gp in carved:
        for name, _ in as_instances(gp.layout):
            have[name] = have.get(name, 0) + 1
    for item in demand:
        what, n = item.split("=")
        table = RULES[model_key][2]
        if what in table:
            assert have.get(what, 0) >= int(n)
        else:  # a slice size: any of the smallest-memory profiles of that size
            size = int(what[:-1])
            smallest = min(
                (name for name, rule in table.items() if rule[0] == size),
                key=lambda name: table[name][1],
            )
            assert have.get(smallest, 0) >= int(n)


def test_a_plan_with_a_moved_placement_fails_the_check() -> None:
    model = resolve("a100")
    bad = Layout(model.key, (Placement(2, model.profile("3g.20gb")),))
    assert check("a100-sxm4-40gb", as_instances(bad)) is not None
