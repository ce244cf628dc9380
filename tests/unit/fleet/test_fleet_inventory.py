"""Splitting one srun step's labelled output into per-node snapshots and errors."""

from __future__ import annotations

import base64

from slurmgpu.sources.fleet_inventory import _collect, remote_argv, srun_argv
from tests.doubles.machines import EXAMPLES


def labelled(rank: int, node: str, text: str) -> list[str]:
    encoded = base64.encodebytes(text.encode()).decode().splitlines()
    return [f"{rank}: slurmgpu-node {node}"] + [f"{rank}: {line}" for line in encoded]


def test_each_rank_is_matched_to_its_node_by_its_header():
    h100 = (EXAMPLES / "dgx-h100.json").read_text()
    pcie = (EXAMPLES / "pcie-8gpu.json").read_text()
    a, b = labelled(1, "gpu02", h100), labelled(0, "gpu01", pcie)
    stdout = "\n".join(x for pair in zip(a, b, strict=False) for x in pair) + "\n"
    stdout += "\n".join(a[len(b) :] + b[len(a) :])  # interleaved, as srun delivers them
    results = _collect(["gpu01", "gpu02"], stdout, "", 0)
    assert results["gpu01"].ok and results["gpu01"].inventory.gpus[0].name.endswith("4090")
    assert results["gpu02"].ok and results["gpu02"].inventory.gpus[0].name.endswith("HBM3")


def test_a_failed_task_is_reported_with_its_stderr_and_others_are_kept():
    stdout = "\n".join(labelled(0, "gpu01", (EXAMPLES / "dgx-h100.json").read_text()))
    stdout += "\n1: slurmgpu-node gpu02\n"
    stderr = (
        "1: slurmgpu: error: NVML cannot start: Driver Not Loaded\n"
        "srun: error: gpu02: task 1: Exited with exit code 1\n"
    )
    results = _collect(["gpu01", "gpu02", "gpu03"], stdout, stderr, 1)
    assert results["gpu01"].ok
    assert results["gpu02"].error == (
        "Exited with exit code 1: slurmgpu: error: NVML cannot start: Driver Not Loaded"
    )
    assert results["gpu03"].error.startswith("no answer from its task")


def test_garbage_instead_of_base64_is_an_error_not_a_crash():
    results = _collect(["n1"], "0: slurmgpu-node n1\n0: {not base64}\n", "", 0)
    assert not results["n1"].ok and "base64" in results["n1"].error


def test_the_step_is_one_task_per_named_node():
    argv = srun_argv(["gpu01", "gpu02", "gpu04"], remote_argv(["slurmgpu"], "/"), ["-p", "x"])
    assert argv[:4] == ["srun", "--nodes=3", "--ntasks-per-node=1", "--nodelist=gpu[01-02,04]"]
    assert "--label" in argv and argv[-4:] == ["slurmgpu", "inventory", "--host-root", "/"]
