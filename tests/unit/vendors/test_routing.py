"""Routing across vendors (`submit --accel`): the smallest fitting device among MIG slices,
AMD partitions, Ascend NPUs and whole GPUs, limited by vendor and the kind's classes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmgpu.errors import UsageError
from slurmgpu.model.accel import devices, parse_request, route
from slurmgpu.model.slicing import NodeGres
from slurmgpu.sources.cluster_gres import cache_path, format_cache
from slurmgpu.sources.policy_file import load_policy
from tests.unit.tiers.lua_env import EXAMPLE

ROOT = Path(__file__).resolve().parents[3]
NODES = [
    NodeGres("dgx01", (("gpu", "h100", 8),)),
    NodeGres("dgx02", (("gpu", "3g.40gb", 2), ("gpu", "1g.10gb", 7))),
    NodeGres("atlas01", (("npu", "910b", 8),)),
    NodeGres("mi01", (("gpu", "mi300x_cpx", 64),)),
    NodeGres("mixed01", (("gpu", "rtx4090", 4), ("npu", "910b4", 4))),
]


@pytest.mark.parametrize(
    ("spec", "gres"),
    [
        # inference classes: an NPU or a GPU slice, whichever is smallest
        ("mem>=40G,class=npu|gpu-slice", "npu:910b:1"),
        ("mem>=20G,class=npu|gpu-slice", "gpu:mi300x_cpx:1"),
        ("mem>=8G,class=npu|gpu-slice", "gpu:1g.10gb:1"),
        ("mem>=30G,class=npu|gpu-slice", "npu:910b4:1"),
        # vendor limits
        ("mem>=20G,class=gpu-slice,vendor=nvidia", "gpu:3g.40gb:1"),
        ("mem>=20G,vendor=ascend", "npu:910b4:1"),
        ("mem>=100G,vendor=amd", None),
        # training: whole GPUs on linked boards only (the RTX 4090s are PCIe)
        ("mem>=100G,class=linked-gpu", "gpu:h100:2"),
        ("mem>=20G,class=linked-gpu", "gpu:h100:1"),
        ("mem>=20G,class=gpu", "gpu:rtx4090:1"),
    ],
)
def test_route_picks_the_smallest_fitting_device(spec, gres):
    request = parse_request(spec)
    if gres is None:
        with pytest.raises(UsageError, match=r"no device .*vendor amd"):
            route(NODES, request)
    else:
        assert route(NODES, request).gres == gres


def test_devices_know_class_vendor_and_memory():
    by_gres = {d.gres: d for d in devices(NODES, 0)}
    assert by_gres["npu:910b:1"].accel_class == "npu" and by_gres["npu:910b:1"].vendor == "ascend"
    cpx = by_gres["gpu:mi300x_cpx:1"]
    assert (cpx.accel_class, cpx.vendor, cpx.memory_mib) == ("gpu-slice", "amd", 196608 / 8)
    assert by_gres["gpu:h100:1"].accel_class == "linked-gpu"
    assert by_gres["gpu:rtx4090:1"].accel_class == "gpu"
    assert by_gres["gpu:3g.40gb:1"].isolation == "mig"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("vendor=amd", "give the memory"),
        ("mem>=lots", "not a memory size"),
        ("mem>=10G,vendor=intel", "use mem>=SIZE"),
        ("mem>=10G,class=tpu", "use mem>=SIZE"),
        ("mem>=70G,class=npu", "largest single device is Ascend NPU"),
    ],
)
def test_bad_or_unfittable_requests_say_why(spec, message):
    with pytest.raises(UsageError, match=message):
        route(NODES, parse_request(spec))


def test_policy_kinds_carry_accelerator_classes():
    policy = load_policy(EXAMPLE)
    assert policy.kind("inference").accel == ("npu", "gpu-slice")
    assert policy.kind("training").accel == ("linked-gpu",)
    assert policy.kind("finetune").accel == ()


def _submit(*args, env):
    return subprocess.run(
        [sys.executable, "-m", "slurmgpu", "submit", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        cwd=ROOT,
        timeout=60,
    )


def test_wrapper_routes_inference_to_an_npu_and_training_to_linked_gpus(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "SLURM_CONF": str(tmp_path / "slurm.conf")}
    path = Path(cache_path(env))
    path.parent.mkdir(parents=True)
    path.write_text(format_cache(NODES, time.time()))
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    common = ["--policy", str(EXAMPLE), "--dry-run"]
    result = _submit(
        "--kind", "inference", "--accel", "mem>=40G", *common, "--", str(script), env=env
    )
    assert result.returncode == 0, result.stderr
    assert "--gres=npu:910b:1" in result.stdout and "kind=inference" in result.stdout
    result = _submit(
        "--kind", "training", "--accel", "mem>=300G", *common, "--", str(script), env=env
    )
    assert result.returncode == 0, result.stderr
    assert "--gres=gpu:h100:4" in result.stdout
    # an explicit class overrides the kind's
    result = _submit(
        "--kind",
        "inference",
        "--accel",
        "mem>=20G,vendor=amd",
        *common,
        "--",
        str(script),
        env=env,
    )
    assert "--gres=gpu:mi300x_cpx:1" in result.stdout, result.stderr
    result = _submit("--accel", "mem>=2T", *common, "--", str(script), env=env)
    assert result.returncode == 2
    assert result.stderr.startswith("slurmgpu: error: no device holds 2048 GiB")
    assert result.stderr.count("\n") == 1
