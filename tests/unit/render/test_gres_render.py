"""gres.conf and node line per example machine, expected values worked out from the facts.

DGX A100 (NPS4): NUMA node n holds OS cpus 16n..16n+15 (+128 siblings), i.e. package n//4,
so its Slurm abstract cores are 16n..16n+15; sockets are 0-63 / 64-127. GPUs sit on NUMA
3,3,1,1,7,7,5,5. Every GPU has 12 active links to the 6 NVSwitches: 12 to every other GPU.
DGX H100: NUMA 0 = socket 0 = cores 0-55, NUMA 1 = 56-111; 18 links per GPU.
PCIe 4090: no NVLink; minors 1,0,3,2,5,4,7,6; NUMA 0 for GPUs 0-3.
"""

import dataclasses
import re

import pytest

from slurmgpu.errors import InventoryError, UsageError
from slurmgpu.model.inventory import SkippedGpu
from slurmgpu.render import gres
from slurmgpu.sources import snapshot
from tests.doubles.machines import EXAMPLES


def load(name):
    return snapshot.load(EXAMPLES / f"{name}.json")


def conf(inv, **opts):
    options = gres.GresOptions(**opts)
    return gres.render_gres_conf(inv, options, inventory_sha256="f" * 64)


def records(text, name="gpu"):
    out = []
    for line in text.splitlines():
        if line.startswith(f"Name={name} "):
            out.append(dict(kv.split("=", 1) for kv in line.split()))
    return out


A100_NUMA = [3, 3, 1, 1, 7, 7, 5, 5]


def cap(gpu_minor, gi, ci=None):
    minor = 3 + 135 * gpu_minor + 9 * gi + (0 if ci is None else 1 + ci)
    return f"/dev/nvidia-caps/nvidia-cap{minor}"


def test_dgx_a100_mig_mixed_22_05():
    text = conf(load("dgx-a100-mig"), slurm_version=(22, 5, 8))
    assert "AutoDetect=off" in text.splitlines()
    recs = records(text)
    assert len(recs) == 7 + 2 + 3 + 5
    # MIG devices first, in GPU order; MultipleFiles = GPU file + GI access + CI access
    mig_expect = [(0, "1g.5gb", gi) for gi in range(7, 14)]
    mig_expect += [(1, "3g.20gb", 1), (1, "3g.20gb", 2)]
    mig_expect += [(2, "4g.20gb", 1), (2, "2g.10gb", 5), (2, "1g.10gb", 6)]
    for pos, (gpu, profile, gi) in enumerate(mig_expect):
        rec = recs[pos]
        assert rec["Type"] == profile
        assert rec["MultipleFiles"] == f"/dev/nvidia{gpu},{cap(gpu, gi)},{cap(gpu, gi, 0)}"
        n = A100_NUMA[gpu]
        assert rec["Cores"] == f"{16 * n}-{16 * n + 15}"
        links = [int(v) for v in rec["Links"].split(",")]
        assert links == [-1 if j == pos else 0 for j in range(17)]
    assert recs[0]["MultipleFiles"].endswith("nvidia-cap66,/dev/nvidia-caps/nvidia-cap67")
    # whole GPUs 3..7 at positions 12..16: 12 links to each other, 0 to MIG devices
    for pos, gpu in zip(range(12, 17), range(3, 8), strict=True):
        rec = recs[pos]
        assert rec["Type"] == "a100" and rec["File"] == f"/dev/nvidia{gpu}"
        n = A100_NUMA[gpu]
        assert rec["Cores"] == f"{16 * n}-{16 * n + 15}"
        expect = [0] * 12 + [12] * 5
        expect[pos] = -1
        assert [int(v) for v in rec["Links"].split(",")] == expect


@pytest.mark.parametrize("version", [(24, 5, 5), (25, 5, 0), (25, 11, 0)])
def test_dgx_a100_cores_widened_to_sockets_on_newer_slurm(version):
    text = conf(load("dgx-a100-mig"), slurm_version=version)
    whole = records(text)[12:]
    # GPU 3 (NUMA 1) -> socket 0; GPUs 4,5 (NUMA 7) and 6,7 (NUMA 5) -> socket 1
    assert [r["Cores"] for r in whole] == ["0-63", "64-127", "64-127", "64-127", "64-127"]
    assert "rejects" in text and "_check_core_range_matches_sock" in text
    assert "affinity cores 16-31 widened to 0-63" in text


def test_dgx_a100_numa_as_socket_needs_no_widening():
    inv = load("dgx-a100-mig")
    text = conf(inv, slurm_version=(24, 5, 5), numa_as_socket=True)
    whole = records(text)[12:]
    assert [r["Cores"] for r in whole] == ["16-31", "112-127", "112-127", "80-95", "80-95"]
    assert "widened" not in text
    line = gres.node_line(inv, gres.GresOptions(numa_as_socket=True))
    assert "SocketsPerBoard=8 CoresPerSocket=16 ThreadsPerCore=2" in line


def test_dgx_a100_node_line():
    inv = load("dgx-a100-mig")
    line = gres.node_line(inv, gres.GresOptions())
    assert line == (
        "NodeName=dgxa100 CPUs=256 Boards=1 SocketsPerBoard=2 CoresPerSocket=64 "
        "ThreadsPerCore=2 RealMemory=1031702 Gres=gpu:1g.5gb:7,gpu:3g.20gb:2,gpu:4g.20gb:1,"
        "gpu:2g.10gb:1,gpu:1g.10gb:1,gpu:a100:5"
    )


def test_full_type_names():
    text = conf(load("dgx-a100-mig"), gpu_types="full", mig_types="full")
    types = [r["Type"] for r in records(text)]
    assert types[0] == "nvidia_a100_1g.5gb" and types[-1] == "nvidia_a100-sxm4-40gb"


def test_dgx_h100_links_and_cores():
    text = conf(load("dgx-h100"), slurm_version=(24, 5, 5))
    recs = records(text)
    for i, rec in enumerate(recs):
        assert rec["File"] == f"/dev/nvidia{i}"
        assert rec["Cores"] == ("0-55" if i < 4 else "56-111")
        assert rec["Links"] == ",".join("-1" if j == i else "18" for j in range(8))
    assert "widened" not in text  # one NUMA node = one whole socket


def test_pcie_compressed_no_links_minor_files_and_shards():
    inv = load("pcie-8gpu")
    opts = gres.GresOptions(shards_per_gpu=4)
    text = gres.render_gres_conf(inv, opts, inventory_sha256="0" * 64)
    recs = records(text)
    assert recs == [
        {"Name": "gpu", "Type": "rtx4090", "File": "/dev/nvidia[0-3]", "Cores": "0-55"},
        {"Name": "gpu", "Type": "rtx4090", "File": "/dev/nvidia[4-7]", "Cores": "56-111"},
    ]
    shards = records(text, "shard")
    assert [s["File"] for s in shards] == [f"/dev/nvidia{i}" for i in range(8)]
    assert {s["Count"] for s in shards} == {"4"}
    assert gres.node_line(inv, opts).endswith("Gres=gpu:rtx4090:8,shard:32")
    assert gres.gres_types(opts) == "gpu,shard"


def test_output_is_deterministic_and_names_the_inventory():
    inv = load("dgx-h100")
    sha = snapshot.inventory_sha256(inv)
    opts = gres.GresOptions()
    a = gres.render_gres_conf(inv, opts, inventory_sha256=sha)
    b = gres.render_gres_conf(load("dgx-h100"), opts, inventory_sha256=sha)
    assert a == b
    assert f"snapshot sha256 {sha}" in a and "host dgxh100" in a and "slurmgpu 0.1.0" in a
    header = [line for line in a.splitlines() if line.startswith("#")]
    assert not any(re.search(r"\b20\d\d-\d\d-\d\d\b|\bUTC\b", line) for line in header)


def test_shards_with_mig_refused():
    with pytest.raises(UsageError, match="shards-per-gpu cannot be combined with MIG"):
        conf(load("dgx-a100-mig"), shards_per_gpu=2)


def test_partial_inventory_needs_allow_partial_and_says_so():
    inv = load("dgx-h100")
    partial = dataclasses.replace(
        inv,
        gpus=inv.gpus[:3] + inv.gpus[4:],
        skipped_gpus=(SkippedGpu(3, "00000000:5D:00.0", "GPU is lost"),),
    )
    with pytest.raises(InventoryError, match=r"GPU 3 \(00000000:5D:00.0\): GPU is lost"):
        conf(partial)
    text = conf(partial, allow_partial=True)
    assert "# !!! PARTIAL" in text and "left out GPU 3" in text
    recs = records(text)
    assert len(recs) == 7 and "/dev/nvidia3" not in [r["File"] for r in recs]
    assert all(len(r["Links"].split(",")) == 7 for r in recs)


def test_mig_enabled_without_devices_gets_no_phantom_line():
    inv = load("dgx-h100")
    gpus = list(inv.gpus)
    gpus[5] = dataclasses.replace(gpus[5], mig_mode_current=True, mig_mode_pending=True)
    text = conf(dataclasses.replace(inv, gpus=tuple(gpus)))
    assert "/dev/nvidia5" not in text.split("AutoDetect=off")[1].replace("# ", "#")
    assert "GPU 5 (00000000:AB:00.0): MIG is enabled but no MIG devices exist" in text
    assert len(records(text)) == 7


def test_missing_caps_minor_is_an_error_naming_the_gpu():
    inv = load("dgx-a100-mig")
    gpus = list(inv.gpus)
    migs = list(gpus[1].mig_devices)
    migs[0] = dataclasses.replace(migs[0], ci_access_minor=None)
    gpus[1] = dataclasses.replace(gpus[1], mig_devices=tuple(migs))
    broken = dataclasses.replace(inv, gpus=tuple(gpus))
    with pytest.raises(InventoryError, match=r"GPU 1 \(00000000:0F:00.0\): MIG device gi1/ci0"):
        conf(broken)
    assert len(records(conf(broken, allow_partial=True))) == 16


def test_too_old_slurm_refused():
    assert gres.format_version((24, 5, 5)) == "24.05.5"
    with pytest.raises(UsageError, match="MultipleFiles"):
        gres.GresOptions(slurm_version=(20, 2, 0))


def test_node_name_hostlist_prefixes_every_line():
    inv = load("pcie-8gpu")
    opts = gres.GresOptions(node_name="pcie[01-04]", shards_per_gpu=2)
    text = gres.render_gres_conf(inv, opts, inventory_sha256="0" * 64)
    device_lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert device_lines[0] == "AutoDetect=off"
    assert all(ln.startswith("NodeName=pcie[01-04] Name=") for ln in device_lines[1:])
    assert gres.node_line(inv, opts).startswith("NodeName=pcie[01-04] CPUs=224 ")
    # without --node-name the lines apply to every node that reads the file
    assert "NodeName=" not in conf(inv)


def test_uneven_sockets_warn():
    inv = load("dgx-h100")
    # one core (both threads) of socket 1 offline
    cpus = tuple(c for c in inv.host.cpus if c.cpu not in (111, 223))
    uneven = dataclasses.replace(inv, host=dataclasses.replace(inv.host, cpus=cpus))
    assert uneven.host.cores_per_socket == 55
    text = conf(uneven)
    assert "sockets have different online core counts ([55, 56])" in text
