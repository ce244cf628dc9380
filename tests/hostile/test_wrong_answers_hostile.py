"""Wrong answers with exit 0 (issue #20): exit 0 must mean the output is right.

- gen-gres after one corrupted cpu entry: a node line whose Sockets x CoresPerSocket x
  ThreadsPerCore is not its CPUs (19 fuzz cases before, only `--check` caught them);
- `--capacity` read from `nan`, `1e12`, `gpu=64,mig=8` (a partition named `gpu=64,mig`) or
  `gpu=16.5` (rounded to 16 by replay); `--shards-per-gpu` 0, -4, nan; a bad `--timezone`;
- `mig plan --config-prefix` with a line break (an injected line in the mig-parted YAML).

Every form the docs allow is accepted and read as written; every near-miss is one
`slurmgpu: error:` line.
"""

from __future__ import annotations

import copy
import json
import random
import re

import pytest

from tests.hostile.conftest import EXAMPLES, ROOT, assert_one_error, cli, example, write_json

SACCT = ROOT / "tests" / "data" / "sacct" / "synthetic-mix.txt"
NODE = re.compile(
    r"CPUs=(\d+) Boards=1 SocketsPerBoard=(\d+) CoresPerSocket=(\d+) ThreadsPerCore=(\d+)"
)


def _corrupt(data: dict, rng: random.Random) -> str:
    cpus = data["host"]["cpus"]
    cpu = rng.choice(cpus)
    field = rng.choice(("core_id", "physical_package_id", "drop", "duplicate-core"))
    if field == "drop":  # (still named by its NUMA node's cpu list)
        cpus.remove(cpu)
    elif field == "duplicate-core":
        other = rng.choice(cpus)
        cpu["core_id"], cpu["physical_package_id"] = other["core_id"], other["physical_package_id"]
    else:
        cpu[field] = cpu[field] + rng.choice((1, 7, 1000))
    return field


@pytest.mark.parametrize("name", ["dgx-h100", "dgx-a100-mig", "pcie-8gpu"])
def test_one_corrupted_cpu_entry_never_gives_an_inconsistent_node_line(name, tmp_path):
    rng = random.Random(20)
    refused = 0
    for case in range(12):
        data = copy.deepcopy(example(name))
        field = _corrupt(data, rng)
        snap = write_json(tmp_path / f"{case}.json", data)
        run = cli("gen-gres", "--snapshot", snap, "--slurm-version", "22.05", "--node-line")
        if run.code == 0:
            cpus, sockets, cores, threads = map(int, NODE.search(run.stdout).groups())
            assert sockets * cores * threads == cpus, (field, run.stdout)
        else:
            assert_one_error(run, 1)
            refused += 1
    assert refused > 0  # the corruptions do break the layout; they must not pass silently


def test_a_core_with_one_thread_less_is_refused_naming_the_layout(tmp_path):
    data = example("dgx-h100")
    data["host"]["cpus"][5]["core_id"] = 999  # cpu 5 moves to a core of its own
    snap = write_json(tmp_path / "s.json", data)
    assert_one_error(
        cli("gen-gres", "--snapshot", snap, "--slurm-version", "22.05", "--node-line"),
        1,
        says="Sockets x CoresPerSocket x ThreadsPerCore",
    )


def test_numa_as_socket_needs_as_many_cores_in_every_numa_node(tmp_path):
    data = example("dgx-h100")
    nodes = data["host"]["numa_nodes"]
    assert [n["cpus"] for n in nodes] == ["0-55,112-167", "56-111,168-223"]
    # core 55 (threads 55 and 167) recorded in NUMA node 1: 55 and 57 cores, 2 x 55 x 2 != 224
    nodes[0]["cpus"], nodes[1]["cpus"] = "0-54,112-166", "55-111,167-223"
    snap = write_json(tmp_path / "s.json", data)
    run = cli("gen-gres", "--snapshot", snap, "--slurm-version", "22.05", "--numa-as-socket",
              "--node-line")  # fmt: skip
    if run.code == 0:
        cpus, sockets, cores, threads = map(int, NODE.search(run.stdout).groups())
        assert sockets * cores * threads == cpus, run.stdout
    else:
        assert_one_error(run, 1, says="not CPUs")


# -- --capacity: what the docs allow, and the near-misses ---------------------------------------
def _analyze_capacity(*args: str) -> dict[str, float]:
    run = cli("analyze", "--sacct-file", SACCT, *args, "--format", "json")
    assert run.code == 0, run.stderr
    doc = json.loads(run.stdout)
    window_h = (_ts(doc["window"]["until"]) - _ts(doc["window"]["since"])) / 3600
    return {
        p["partition"]: round(p["capacity_gpu_hours"] / window_h, 6)
        for p in doc["by_partition"]
        if p.get("capacity_gpu_hours") is not None
    }


def _ts(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _replay_capacity(*args: str) -> dict[str, int]:
    run = cli("replay", "--sacct-file", SACCT, *args, "--format", "json")
    assert run.code == 0, run.stderr
    doc = json.loads(run.stdout)
    return {p["partition"]: p["gpus"] for p in doc["baseline"]["by_partition"] if p["gpus"]}


def test_the_capacity_forms_the_docs_allow_are_read_as_written():
    assert _analyze_capacity("--capacity", "gpu=16") == {"gpu": 16}
    assert _analyze_capacity("--capacity", "gpu=16", "--capacity", "mig=1.5") == {
        "gpu": 16, "mig": 1.5,
    }  # fmt: skip
    assert _replay_capacity("--capacity", "gpu=16") == {"gpu": 16}
    assert _replay_capacity("--capacity", "gpu=16", "--capacity", "mig=8") == {"gpu": 16, "mig": 8}


BAD_CAPACITY = [
    "gpu=nan", "gpu=inf", "gpu=-inf", "gpu=1e12", "gpu=1e1", "gpu=999999999", "gpu=-8",
    "gpu=0", "gpu=", "gpu", "=16", "gpu=16,mig=8", "gpu=16 mig=8", "gpu=0x10", "gpu=1_6",
    "gpu= 16", "gpu=16G", "a=b=16", "gpu:16", "gp u=16", "gpu\n=16", "gpu=١٦",
]  # fmt: skip


@pytest.mark.parametrize("command", ["analyze", "report", "replay"])
@pytest.mark.parametrize("value", BAD_CAPACITY)
def test_a_capacity_near_miss_is_one_usage_line(command, value):
    assert_one_error(cli(command, "--sacct-file", SACCT, "--capacity", value), 2, says="--capacity")


@pytest.mark.parametrize("command", ["analyze", "replay"])
def test_a_partition_given_twice_is_refused(command):
    run = cli(command, "--sacct-file", SACCT, "--capacity", "gpu=16", "--capacity", "gpu=32")
    assert_one_error(run, 2, says="twice")


def test_replay_takes_whole_gpus_only():
    # before: 16.5 was rounded to 16 without a word
    run = cli("replay", "--sacct-file", SACCT, "--capacity", "gpu=16.5")
    assert_one_error(run, 2, says="whole")


@pytest.mark.parametrize("command", ["analyze", "report", "replay"])
@pytest.mark.parametrize("value", ["0", "-4", "nan", "inf", "1e12", "2.5", "gpu=0", "gpu=nan",
                                   "gpu=8,mig=4", ""])  # fmt: skip
def test_shards_per_gpu_near_misses_are_one_usage_line(command, value):
    capacity = ("--capacity", "gpu=16") if command == "replay" else ()
    run = cli(command, "--sacct-file", SACCT, *capacity, "--shards-per-gpu", value)
    assert_one_error(run, 2, says="--shards-per-gpu")


@pytest.mark.parametrize("command", ["analyze", "report", "replay"])
@pytest.mark.parametrize("value", ["0", "-4", "nan", "1e12"])
def test_gpus_per_node_near_misses_are_one_usage_line(command, value):
    capacity = ("--capacity", "gpu=16") if command == "replay" else ()
    run = cli(command, "--sacct-file", SACCT, *capacity, "--gpus-per-node", value)
    assert_one_error(run, 2, says="--gpus-per-node")


@pytest.mark.parametrize("command", ["analyze", "report", "replay"])
@pytest.mark.parametrize("zone", ["Nowhere/City", "+05:00", "UTC+5", "../../etc/passwd", "",
                                  "Etc/GMT+99", "Europe/Paris\n"])  # fmt: skip
def test_a_bad_timezone_is_one_usage_line(command, zone):
    capacity = ("--capacity", "gpu=16") if command == "replay" else ()
    run = cli(command, "--sacct-file", SACCT, *capacity, "--timezone", zone)
    assert_one_error(run, 2, says="time zone")


@pytest.mark.parametrize("command", ["analyze", "replay"])
def test_a_real_timezone_is_taken(command):
    capacity = ("--capacity", "gpu=16") if command == "replay" else ()
    run = cli(command, "--sacct-file", SACCT, *capacity, "--timezone", "Europe/Paris",
              "--format", "json")  # fmt: skip
    assert run.code == 0, run.stderr


# -- mig plan --config-prefix ----------------------------------------------------------------
@pytest.mark.parametrize(
    "prefix",
    ["x\nevil: {}", "x:\n  - devices: all", "a b", "a#b", "a:b", "x\r", "\u2028", "x" * 65],
)
def test_a_config_prefix_that_would_add_yaml_lines_is_refused(prefix):
    mig = EXAMPLES / "dgx-a100-mig.json"
    run = cli("mig", "plan", "--snapshot", mig, "--demand", "3g.20gb=2",
              "--config-prefix", prefix)  # fmt: skip
    assert_one_error(run, 2, says="--config-prefix")


def test_a_plain_config_prefix_names_the_config():
    mig = EXAMPLES / "dgx-a100-mig.json"
    run = cli("mig", "plan", "--snapshot", mig, "--demand", "3g.20gb=2", "--config-prefix",
              "site.a_1-")  # fmt: skip
    assert run.code == 0, run.stderr
    assert "site.a_1-" in run.stdout
