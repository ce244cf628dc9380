"""Partition GPU capacity from scontrol records, and the tier adapters of analyze()."""

import pytest

from slurmgpu.accounting import AnalysisOptions
from slurmgpu.accounting.capacity import capacity_from_scontrol, parse_capacity_options
from slurmgpu.errors import UsageError
from slurmgpu.sources.slurm import parse_scontrol_record


def _tier_function(tiers):
    return AnalysisOptions(tiers=tiers).tier_function()


NODES = [
    "NodeName=dgx01 Arch=x86_64 CoresPerSocket=56 Gres=gpu:h100:8(S:0-1) State=IDLE",
    "NodeName=dgx02 Arch=x86_64 Gres=gpu:1g.10gb:14(S:0),gpu:h100:6(S:0-1) State=MIXED",
    "NodeName=pcie01 Gres=gpu:rtx4090:8(S:0-1),shard:64 State=IDLE",
    "NodeName=cpu01 Gres=(null) State=IDLE",
]
PARTITIONS = [
    "PartitionName=gpu AllowGroups=ALL Nodes=dgx0[1-2] State=UP",
    "PartitionName=all Nodes=dgx[01-02],pcie01,cpu01 State=UP",
    "PartitionName=share Nodes=pcie01 State=UP",
    "PartitionName=empty Nodes=(null) State=UP",
]


def cap():
    return capacity_from_scontrol(
        [parse_scontrol_record(x) for x in NODES], [parse_scontrol_record(x) for x in PARTITIONS]
    )


def test_partition_gpus_with_mig_slices_as_fractions():
    c = cap()
    assert c.partition_gpus["gpu"] == pytest.approx(8 + 14 / 7 + 6)
    assert c.partition_gpus["all"] == pytest.approx(16 + 8)
    assert c.partition_gpus["empty"] == 0
    assert c.total_gpus == pytest.approx(24)  # a node in two partitions counts once


def test_shards_per_gpu_types_and_gpus_per_node():
    c = cap()
    assert c.shards_per_gpu == {"all": 8.0, "share": 8.0}  # over the nodes with shards
    assert c.gpu_types["share"] == "rtx4090" and c.gpu_types["gpu"] == "h100"
    assert c.gpus_per_node["gpu"] == pytest.approx(8)


def test_capacity_options():
    assert parse_capacity_options(["gpu=64", "mig=1.5"]) == {"gpu": 64.0, "mig": 1.5}
    for bad in ("gpu", "=3", "gpu=-1", "gpu=x"):
        with pytest.raises(UsageError, match="PARTITION=GPUS"):
            parse_capacity_options([bad])


class _Tier:
    def __init__(self, name):
        self.name = name


class _PolicyLike:
    """The contract of slurmgpu.model.policy.Policy that analyze() relies on."""

    def tier_for_qos(self, qos):
        return {"p0": _Tier("P0")}.get(qos)


def test_tier_adapters():
    assert _tier_function(_PolicyLike())("p0") == "P0"
    assert _tier_function(_PolicyLike())("other") is None
    assert _tier_function({"q": "T"})("q") == "T"
    assert _tier_function(str.upper)("p1") == "P1"
    assert _tier_function(None) is None


def test_a30_slices_are_quarters_of_a_gpu():
    from slurmgpu.accounting.capacity import node_gpus

    # an A30 node: 2 GPUs as 4x 1g.6gb, 2 as 2x 2g.12gb (A30 has 4 compute slices, not 7)
    equiv, physical, shards, _ = node_gpus("gpu:a30_1g.6gb:8,gpu:a30_2g.12gb:4")
    assert equiv == pytest.approx(8 / 4 + 4 * 2 / 4) and physical == 0 and shards == 0
