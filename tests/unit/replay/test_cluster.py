"""The cluster model and what each change does to it (MIG layouts checked against placements)."""

import pytest

from slurmgpu.errors import UsageError
from slurmgpu.model.catalog import model_for_type
from slurmgpu.model.changes import parse_change
from slurmgpu.replay.cluster import QosSpec, apply_change, from_capacity, mig_placement


def model():
    return from_capacity(
        {"train": 32, "infer": 16},
        gpu_types={"train": "h100", "infer": "h100"},
        qos=(QosSpec("p0", 1000, ("p2",)), QosSpec("p2", 100, (), 120)),
    )


def test_capacity_becomes_nodes_of_eight():
    m = from_capacity({"gpu": 20}, gpus_per_node={"gpu": 8})
    assert m.partition("gpu").nodes == (8, 8, 4)
    assert m.total_gpus == 20


def test_move_whole_nodes_between_partitions():
    m = apply_change(model(), parse_change("move:train:infer:16"))
    assert m.partition("train").whole_gpus == 16
    assert m.partition("infer").nodes == (8, 8, 8, 8)
    assert m.total_gpus == 48


def test_move_to_a_new_partition_and_not_part_of_a_node():
    m = apply_change(model(), parse_change("move:train:debug:8"))
    assert m.partition("debug").nodes == (8,)
    with pytest.raises(UsageError, match="sum of whole nodes"):
        apply_change(model(), parse_change("move:train:infer:12"))
    with pytest.raises(UsageError, match="not in the cluster model"):
        apply_change(model(), parse_change("move:nope:infer:8"))


def test_carve_takes_whole_gpus_into_a_mig_pool():
    m = apply_change(model(), parse_change("carve:infer:8:3g.40gb=1,2g.20gb=1,1g.10gb=2"))
    infer = m.partition("infer")
    assert infer.whole_gpus == 8
    assert infer.total_gpus == 16  # carving keeps the physical GPUs
    assert infer.slices[0].instances() == {"3g.40gb": 8, "2g.20gb": 8, "1g.10gb": 16}


@pytest.mark.parametrize(
    "layout, valid",
    [
        ({"1g.10gb": 7}, True),
        ({"3g.40gb": 2}, True),
        ({"4g.40gb": 1, "3g.40gb": 1}, True),
        ({"2g.20gb": 3, "1g.10gb": 1}, True),
        ({"1g.10gb": 8}, False),  # only 7 compute slices
        ({"4g.40gb": 2}, False),  # one 4g placement per GPU
        ({"7g.80gb": 1, "1g.10gb": 1}, False),
        ({"3g.40gb": 2, "1g.10gb": 1}, False),  # 3g at 0 and 4 leave no 1g placement
    ],
)
def test_mig_layouts_follow_nvidia_placements(layout, valid):
    h100 = model_for_type("h100")
    profiles = [h100.profile(p) for p, n in layout.items() for _ in range(n)]
    assert (mig_placement(profiles) is not None) is valid


def test_bad_carvings_name_the_problem():
    with pytest.raises(UsageError, match="no valid MIG placement"):
        apply_change(model(), parse_change("carve:infer:8:1g.10gb=8"))
    with pytest.raises(UsageError, match=r"has no 1g\.5gb"):
        apply_change(model(), parse_change("carve:infer:8:1g.5gb=7"))
    with pytest.raises(UsageError, match="only 16 whole GPUs"):
        apply_change(model(), parse_change("carve:infer:24:1g.10gb=7"))
    untyped = from_capacity({"gpu": 8})
    with pytest.raises(UsageError, match="--gpu-type"):
        apply_change(untyped, parse_change("carve:gpu:8:1g.10gb=7"))


def test_shard_and_tier_changes():
    m = apply_change(model(), parse_change("shard:infer:4:4"))
    assert m.partition("infer").whole_gpus == 12
    assert m.partition("infer").shards[0].per_gpu == 4
    m = apply_change(model(), parse_change("tier:p2:grace_s=600,mode=cancel"))
    assert m.qos_spec("p2") == QosSpec("p2", 100, (), 600, "cancel")
    assert m.qos_spec("p0").preempts == ("p2",)  # others unchanged


def test_gpu_memory_is_given_per_type_under_any_of_its_names_or_per_partition():
    from slurmgpu.replay.cluster import from_capacity

    caps = {"a": 8, "b": 8, "c": 8, "d": 8}
    types = {"a": "t4", "b": "Tesla T4", "c": "mystery", "d": "t4"}
    given = {"tesla_t4": 16000.0, "mystery": 8192.0, "d": 12000.0}
    model = from_capacity(caps, gpu_types=types, gpu_memory_mib=given)
    mem = {p.name: p.gpu_memory_mib for p in model.partitions}
    assert mem == {"a": 16000.0, "b": 16000.0, "c": 8192.0, "d": 12000.0}
    # nothing given: the catalogue's size; an unknown type stays unknown
    plain = from_capacity(caps, gpu_types=types)
    assert plain.partition("a").gpu_memory_mib == 15360.0
    assert plain.partition("c").gpu_memory_mib is None


def test_an_a30_carve_is_held_to_its_four_compute_slices():
    from slurmgpu.model.catalog import model_for_type
    from slurmgpu.replay.cluster import mig_placement

    a30 = model_for_type("a30")
    one, two = a30.profile("1g.6gb"), a30.profile("2g.12gb")
    assert mig_placement([one] * 4) is not None
    assert mig_placement([two, one, one]) is not None
    assert mig_placement([one] * 5) is None  # 5 slices of a 4-slice GPU
    assert one.gpu_fraction == 0.25
