"""jobstats `JS1:` summaries in AdminComment -> measures."""

import base64
import gzip
from datetime import datetime

import pytest

from slurmgpu.measure.jobstats import JobstatsFormatError, JobstatsSource, decode, find_token
from slurmgpu.model.measure import RunRef
from tests.unit.measure.jobstats_fixture import gpu_node, jobstats_value

A100_80 = 85899345920  # bytes, as nvidia_gpu_memory_total_bytes reports an A100 80GB
GIB = 2**30


def run(job_id: str, comment: str, gpus: float = 2) -> RunRef:
    return RunRef(
        job_id=job_id,
        cluster="della",
        start=datetime(2026, 1, 5, 10, 0),
        end=datetime(2026, 1, 5, 11, 0),
        nodes="della-l01",
        gpus=gpus,
        admin_comment=comment,
    )


def two_gpu_value() -> str:
    node = gpu_node(
        {"0": 92.3, "3": 41},
        {"0": 30 * GIB, "3": 9 * GIB},
        {"0": A100_80, "3": A100_80},
    )
    return jobstats_value({"della-l01": node}, 3600, 2)


def test_decodes_per_node_gpu_maps_keyed_by_minor():
    summary = decode(two_gpu_value())
    assert summary is not None
    assert summary.gpus_allocated == 2 and summary.total_time_s == 3600
    assert [(g.node, g.minor, g.util_pct) for g in summary.gpus] == [
        ("della-l01", "0", 92.3),
        ("della-l01", "3", 41.0),
    ]


def test_measure_carries_the_gpu_size_and_the_highest_memory():
    source = JobstatsSource()
    [m] = source.measures([run("7", two_gpu_value())])
    assert m.source == "jobstats" and m.job_id == "7" and m.gpus_measured == 2
    assert m.util_mean_pct == pytest.approx((92.3 + 41) / 2, abs=0.01)
    assert m.mem_used_max_mib == 30 * 1024
    assert m.gpu_memory_mib == 81920
    assert m.start == datetime(2026, 1, 5, 10, 0) and m.cluster == "della"


def test_multi_node_jobs_merge_their_gpus():
    nodes = {
        "n1": gpu_node({"0": 10}, {"0": GIB}, {"0": A100_80}),
        "n2": gpu_node({"1": 30}, {"1": 5 * GIB}, {"1": A100_80}),
    }
    [m] = JobstatsSource().measures([run("8", jobstats_value(nodes, 100, 2))])
    assert m.gpus_measured == 2 and m.util_mean_pct == 20 and m.mem_used_max_mib == 5 * 1024


def test_mig_node_without_utilization_still_gives_memory():
    node = gpu_node({}, {"0": 3 * GIB}, {"0": 10 * GIB})
    del node["gpu_utilization"]
    [m] = JobstatsSource().measures([run("9", jobstats_value({"mig1": node}, 900, 1))])
    assert m.util_mean_pct is None and m.mem_used_max_mib == 3072 and m.gpu_memory_mib == 10240


def test_short_forms_are_counted_not_measured():
    source = JobstatsSource()
    out = source.measures([run("1", "JS1:Short"), run("2", "JS1:None"), run("3", "")])
    assert out == [] and source.short == 2 and source.warnings == []


def test_token_found_after_a_tier_record():
    comment = "slurmgpu tier=P1 kind=finetune " + two_gpu_value()
    assert find_token(comment) == two_gpu_value()
    assert len(JobstatsSource().measures([run("4", comment)])) == 1


def test_broken_token_is_a_warning_naming_the_job():
    source = JobstatsSource()
    assert source.measures([run("5", "JS1:H4sIAAAAnotgzip")]) == []
    [w] = source.warnings
    assert w.kind == "undecodable" and w.job_ids == ("5",) and "jobstats" in str(w)


def test_wrong_shapes_are_format_errors():
    not_a_map = "JS1:" + base64.b64encode(gzip.compress(b"[1]")).decode()
    with pytest.raises(JobstatsFormatError, match="nodes"):
        decode(not_a_map)
    bad = jobstats_value({"n": {"gpu_utilization": [1, 2]}}, 1, 1)
    with pytest.raises(JobstatsFormatError, match="not a map"):
        decode(bad)


def test_lower_cased_tokens_are_reported_not_skipped():
    # what jobstats' epilog leaves on Slurm 22.05: sacctmgr lower-cased the whole value
    source = JobstatsSource()
    assert source.measures([run("6", two_gpu_value().lower()), run("7", "js1:short")]) == []
    [w] = source.warnings
    assert w.job_ids == ("6",) and "lower-cased" in w.message
    assert source.short == 1  # "js1:short" is still the short form
