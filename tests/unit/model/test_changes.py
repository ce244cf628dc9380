"""Change strings: parse -> dataclass -> format round trip, and one clear error each."""

import pytest

from slurmgpu.errors import UsageError
from slurmgpu.model.changes import Carve, Move, Shard, TierChange, format_change, parse_change


@pytest.mark.parametrize(
    "text, expected",
    [
        ("move:infer:train:16", Move("infer", "train", 16)),
        ("carve:infer:8:1g.10gb=7", Carve("infer", 8, (("1g.10gb", 7),))),
        ("carve:gpu:4:3g.40gb=1,2g.20gb=1,1g.10gb=2",
         Carve("gpu", 4, (("3g.40gb", 1), ("2g.20gb", 1), ("1g.10gb", 2)))),
        ("shard:infer:8:4", Shard("infer", 8, 4)),
        ("tier:p2:grace_s=300,mode=requeue", TierChange("p2", grace_s=300, mode="requeue")),
        ("tier:p0:priority=1000,preempts=p1+p2", TierChange("p0", 1000, ("p1", "p2"))),
        ("tier:p0:preempts=none", TierChange("p0", preempts=())),
    ],
)  # fmt: skip
def test_parse_and_format_round_trip(text, expected):
    change = parse_change(text)
    assert change == expected
    assert format_change(change) == text
    assert parse_change(format_change(change)) == change


@pytest.mark.parametrize(
    "text, says",
    [
        ("move:a:a:8", "same partition"),
        ("move:a:b:0", "GPUS '0'"),
        ("move:a:b", "use move:FROM:TO:GPUS"),
        ("carve:a:8:7g=1", "not PROFILE=COUNT"),
        ("carve:a:8:1g.10gb=2,1g.10gb=1", "listed twice"),
        ("shard:a:8:1", "N '1'"),
        ("tier:p0:colour=red", "unknown key 'colour'"),
        ("tier:p0:mode=suspend", "mode must be one of"),
        ("tier:p0:grace_s=-5", "grace_s '-5'"),
        ("grow:a:8", "use move:FROM:TO:GPUS"),
        ("move:a;rm:b:8", "not a Slurm name"),
    ],
)
def test_bad_changes_are_one_line_usage_errors(text, says):
    with pytest.raises(UsageError) as err:
        parse_change(text)
    assert says in str(err.value)
    assert "\n" not in str(err.value)


def test_changes_together_are_one_scenario_and_round_trip():
    from slurmgpu.model.changes import Together

    text = "carve:gpu:4:1g.10gb=7 + carve:gpu:2:3g.40gb=2 + tier:p2:preempts=p1+p3"
    change = parse_change(text)
    assert isinstance(change, Together) and len(change.changes) == 3
    assert change.changes[2].preempts == ("p1", "p3")  # `+` inside a change is not a join
    assert change.format() == text
    assert parse_change(change.format()) == change
    for bad in ("carve:gpu:4:1g.10gb=7 + ", "move:a:b:8 +  + move:a:c:8"):
        with pytest.raises(UsageError):
            parse_change(bad)


def test_a_recommendations_changes_replay_as_one_scenario():
    from slurmgpu.replay.cluster import apply_change, from_capacity

    model = from_capacity({"gpu": 16}, gpu_types={"gpu": "nvidia_a100-sxm4-80gb"})
    both = apply_change(model, parse_change("carve:gpu:4:1g.10gb=7 + carve:gpu:2:3g.40gb=2"))
    part = both.partition("gpu")
    assert part.whole_gpus == 10 and [p.gpus for p in part.slices] == [4, 2]
