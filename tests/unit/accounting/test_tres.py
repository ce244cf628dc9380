"""AllocTRES / TRESUsageIn* parsing (vectorized) on the shapes in the sacct facts."""

import numpy as np
import pyarrow as pa
import pytest

from slurmgpu.accounting.tres import parse_alloc_tres, parse_usage_tres


def alloc(*values):
    return parse_alloc_tres(pa.array(list(values), pa.string()))


def test_generic_count_wins_over_typed_entry_beside_it():
    r = alloc("billing=8,cpu=8,gres/gpu:a100=2,gres/gpu=2,mem=64G,node=1")
    assert r.gpu_count[0] == 2 and r.gpu_equiv[0] == 2
    assert r.gpu_type[0] == "a100"
    assert r.billing[0] == 8 and r.cpus[0] == 8 and r.nodes[0] == 1
    assert r.mem_mib[0] == 64 * 1024


def test_typed_entries_summed_only_when_generic_absent():
    r = alloc("gres/gpu:a100=3", "gres/gpu:a100=1,gres/gpu:h100=2")
    assert list(r.gpu_count) == [3, 3]
    assert r.gpu_type[1] == "a100"  # the first typed entry names the type


@pytest.mark.parametrize(
    ("text", "equiv", "profile"),
    [
        ("gres/gpu:1g.10gb=1,gres/gpu=1", 1 / 7, "1g.10gb"),
        ("gres/gpu:3g.40gb=2,gres/gpu=2", 6 / 7, "3g.40gb"),
        ("gres/gpu:nvidia_a100_2g.20gb=1", 2 / 7, "2g.20gb"),
        ("gres/gpu:1g.10gb+me=1", 1 / 7, "1g.10gb+me"),
        ("gres/gpu:7g.80gb=1,gres/gpu=1", 1.0, "7g.80gb"),
        # A30: 4 compute slices, so 1g is a quarter and 2g half a GPU (by profile or prefix)
        ("gres/gpu:1g.6gb=1,gres/gpu=1", 1 / 4, "1g.6gb"),
        ("gres/gpu:nvidia_a30_2g.12gb=2,gres/gpu=2", 1.0, "2g.12gb"),
    ],
)
def test_mig_profiles_count_as_fractions(text, equiv, profile):
    r = alloc(text)
    assert r.gpu_equiv[0] == pytest.approx(equiv)
    assert r.mig_profile[0] == profile
    assert r.gpu_type[0] is None


def test_mig_next_to_whole_gpus():
    # Slurm counts each slice as a GPU: generic 3 = 2 slices of 3g + 1 whole GPU
    r = alloc("gres/gpu:3g.40gb=2,gres/gpu:h100=1,gres/gpu=3")
    assert r.gpu_equiv[0] == pytest.approx(1 + 6 / 7)
    assert r.mig_slices[0] == 2


def test_gpumem_and_gpuutil_are_not_gpus():
    r = alloc("cpu=1,gres/gpumem=40G,gres/gpuutil=100,node=1")
    assert np.isnan(r.gpu_count[0])
    assert r.errors == {}


def test_shards_are_kept_apart():
    r = alloc("cpu=1,gres/shard=4,node=1", "gres/shard:h100=2")
    assert list(r.shards) == [4, 2]
    assert np.isnan(r.gpu_equiv).all()


def test_empty_and_null_mean_no_gpus():
    r = alloc("", None, "cpu=8,mem=100G,node=1")
    assert np.isnan(r.gpu_count).all()
    assert r.errors == {}


@pytest.mark.parametrize(
    "text", ["gres/gpu=two", "gres/gpu", "mem=12Q,cpu=1", "billing=1.5", "gres/shard=x"]
)
def test_bad_elements_are_errors_with_the_text(text):
    r = alloc("cpu=1", text)
    assert list(r.errors) == [1]
    assert "bad TRES element" in r.errors[1]


def test_usage_from_curc_sample():
    # CU Boulder CURC TRESUsageInMax (sacct-formats facts §2.8), with and without --noconvert
    r = parse_usage_tres(
        pa.array(
            [
                "cpu=00:56:24,energy=0,fs/disk=350130624578,gres/gpumem=38888M,"
                "gres/gpuutil=100,mem=10372780K,pages=3465,vmem=10194376K",
                "cpu=00:56:24,energy=0,fs/disk=350130624578,gres/gpumem=40777023488,"
                "gres/gpuutil=100,mem=10621726720,pages=3465,vmem=10439041024",
                "cpu=00:00:00,energy=0,fs/disk=5273,gres/gpumem=0,gres/gpuutil=0,mem=256K",
                "cpu=00:00:11,energy=0,fs/disk=87613,mem=628748K,pages=0,vmem=0",
            ]
        )
    )
    assert list(r.gpu_util_pct[:3]) == [100, 100, 0]
    assert r.gpu_mem_mib[0] == 38888
    assert r.gpu_mem_mib[1] == pytest.approx(40777023488 / 2**20)
    assert r.gpu_mem_mib[2] == 0  # reported zero stays zero ...
    assert np.isnan(r.gpu_util_pct[3]) and np.isnan(r.gpu_mem_mib[3])  # ... absent is unknown


def test_usage_gres_shtml_example():
    r = parse_usage_tres(
        pa.array(
            [
                "cpu=00:00:22,energy=0,fs/disk=175227,gres/gpumem=72532M,gres/gpuutil=200,"
                "mem=1257496K,pages=0,vmem=0"
            ]
        )
    )
    assert r.gpu_util_pct[0] == 200 and r.gpu_mem_mib[0] == 72532
