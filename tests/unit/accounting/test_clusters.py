"""A dump holding several clusters: partitions per (cluster, partition), never merged."""

from datetime import UTC, datetime

import pytest

from slurmgpu.accounting import AnalysisOptions, analyze
from slurmgpu.errors import UsageError

from .sacct_text import HEADER, job


def clustered(rows_by_cluster):
    """sacct -P text with a Cluster column: {cluster: [job(...) line lists]}."""
    lines = [HEADER + "|Cluster"]
    for cluster, rows in rows_by_cluster.items():
        lines += [f"{line}|{cluster}" for r in rows for line in r]
    return "\n".join(lines) + "\n"


def run(tmp_path, rows_by_cluster, analysis=analyze, **kw):
    path = tmp_path / "dump.txt"
    path.write_text(clustered(rows_by_cluster))
    return analysis(AnalysisOptions(files=[path], **kw)).to_json()


DAY = {"since": datetime(2025, 12, 1, 2, tzinfo=UTC), "until": datetime(2025, 12, 2, tzinfo=UTC)}


def busy(first_id, part):
    """8 GPUs busy from 02:00 to 24:00, each job waiting 2 h."""
    return [
        job(first_id + i, part, (i - 1) * 3600 - 7200, (i - 1) * 3600, i * 3600, "gres/gpu=8")
        for i in range(3, 25)
    ]


def test_same_named_partitions_of_two_clusters_stay_apart(tmp_path):
    # both clusters have an 8-GPU partition v100, each 100% allocated (merged: 200% of 8)
    doc = run(tmp_path, {"c1": busy(0, "v100"), "c2": busy(0, "v100")},
              capacity={"c1/v100": 8, "c2/v100": 8}, **DAY)  # fmt: skip
    rows = {r["partition"]: r for r in doc["by_partition"]}
    assert set(rows) == {"c1/v100", "c2/v100"}
    for r in rows.values():
        assert r["jobs"] == 22 and r["allocation_ratio"] == pytest.approx(1.0)
    clusters = {r["cluster"]: r for r in doc["by_cluster"]}
    assert set(clusters) == {"c1", "c2"}
    assert clusters["c1"]["capacity_gpu_hours"] == pytest.approx(8 * 22)
    assert clusters["c2"]["gpu_hours_allocated"] == pytest.approx(8 * 22)
    assert doc["totals"]["jobs"] == 44  # same job ids in both clusters: both counted


def test_plain_capacity_key_is_ambiguous_across_clusters(tmp_path):
    with pytest.raises(UsageError, match="CLUSTER/PARTITION"):
        run(tmp_path, {"c1": busy(0, "v100"), "c2": busy(0, "v100")}, capacity={"v100": 8})
    # a name only one cluster has may stay plain
    doc = run(tmp_path, {"c1": busy(0, "v100"), "c2": busy(0, "a10")},
              capacity={"v100": 8, "a10": 8}, **DAY)  # fmt: skip
    ratios = {r["partition"]: r["allocation_ratio"] for r in doc["by_partition"]}
    assert ratios == {"c1/v100": pytest.approx(1.0), "c2/a10": pytest.approx(1.0)}


def test_one_cluster_keeps_plain_partition_names(tmp_path):
    doc = run(tmp_path, {"c1": busy(0, "v100")}, capacity={"v100": 8}, **DAY)
    assert [r["partition"] for r in doc["by_partition"]] == ["v100"]
    assert [r["cluster"] for r in doc["by_cluster"]] == ["c1"]
    assert doc["by_cluster"][0]["allocation_ratio"] == pytest.approx(1.0)


def test_no_node_move_across_clusters(tmp_path):
    idle = [job(100, "b", 7200, 7200, 10800, "gres/gpu=1")]
    # starved a and idle b in different clusters: no move, and the check says why
    doc = run(tmp_path, {"c1": busy(0, "a"), "c2": idle},
              capacity={"c1/a": 8, "c2/b": 32}, **DAY)  # fmt: skip
    assert not [r for r in doc["recommendations"] if r["kind"] == "move_nodes"]
    checks = " ".join(r["detail"] for r in doc["recommendations"])
    assert "no move across clusters (c2/b -> c1/a)" in checks
    # the same partitions in one cluster: the move fires
    doc = run(tmp_path, {"c1": busy(0, "a") + idle}, capacity={"a": 8, "b": 32}, **DAY)
    move = next(r for r in doc["recommendations"] if r["kind"] == "move_nodes")
    assert move["change"] == "move:b:a:16"


def test_several_clusters_are_not_replayed_and_say_so(tmp_path):
    from slurmgpu.advice import analyze as analyze_with_effects

    idle = [job(100, "b", 7200, 7200, 10800, "gres/gpu=1")]
    doc = run(tmp_path, {"c1": busy(0, "a") + idle, "c2": idle}, analysis=analyze_with_effects,
              capacity={"c1/a": 8, "c1/b": 32, "c2/b": 8}, **DAY)  # fmt: skip
    move = next(r for r in doc["recommendations"] if r["kind"] == "move_nodes")
    assert move["change"] == "move:c1/b:c1/a:16"
    assert any("not replayed: the window holds several clusters" in n for n in doc["notes"])
