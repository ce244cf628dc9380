"""The headline allocation ratio counts only partitions whose capacity is known (#24): a
partition without capacity would add its GPU-hours but none of its GPUs."""

from __future__ import annotations

import json

from click.testing import CliRunner

from slurmgpu.cli import main

DUMP = """JobIDRaw|JobID|Cluster|Partition|QOS|Account|User|Submit|Start|End|ElapsedRaw|TimelimitRaw|State|AllocTRES|NodeList
1|1|c1|gpu|normal|a|u|2026-12-01T00:00:00|2026-12-01T00:00:00|2026-12-01T10:00:00|36000|600|COMPLETED|gres/gpu=4|n1
2|2|c1|debug|normal|a|u|2026-12-01T00:00:00|2026-12-01T00:00:00|2026-12-01T10:00:00|36000|600|COMPLETED|gres/gpu=4|n2
"""  # noqa: E501
WINDOW = ["--since", "2026-12-01T00:00:00", "--until", "2026-12-01T10:00:00"]


def analyze(tmp_path, *args):
    dump = tmp_path / "d.txt"
    dump.write_text(DUMP)
    out = CliRunner().invoke(main, ["analyze", "--sacct-file", str(dump), *WINDOW, *args])
    assert out.exit_code == 0, out.output
    return out.stdout


def test_a_partition_of_unknown_capacity_is_left_out_of_the_ratio(tmp_path):
    doc = json.loads(analyze(tmp_path, "--capacity", "gpu=8", "--format", "json"))
    t = doc["totals"]
    assert t["gpu_hours_allocated"] == 80.0 and t["capacity_gpu_hours"] == 80.0
    # 40 GPU-hours in gpu of 80: 50 %, not 100 % (debug's 40 GPU-hours have no GPUs counted)
    assert t["allocation_ratio"] == 0.5 and t["idle_gpu_hours"] == 40.0
    assert t["gpu_hours_capacity_unknown"] == 40.0
    assert t["partitions_capacity_unknown"] == ["debug"]
    assert {p["allocation_ratio"] for p in doc["timeseries"]["points"]} == {0.5}
    text = analyze(tmp_path, "--capacity", "gpu=8")
    assert (
        "80.0 of 80.0 capacity (50.0% over partitions of known capacity; 40.0 in debug left "
        "out: capacity unknown)"
    ) in text


def test_every_capacity_known_changes_nothing(tmp_path):
    doc = json.loads(
        analyze(tmp_path, "--capacity", "gpu=8", "--capacity", "debug=8", "--format", "json")
    )
    t = doc["totals"]
    assert t["allocation_ratio"] == 0.5 and t["capacity_gpu_hours"] == 160.0
    assert t["gpu_hours_capacity_unknown"] == 0.0 and t["partitions_capacity_unknown"] == []
