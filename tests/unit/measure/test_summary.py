"""The collector's `SG1:` summary: encoding, AdminComment merge, spool, CollectorSource."""

from datetime import datetime

import pytest

from slurmgpu.measure.summary import (
    CollectorSource,
    GpuSummary,
    JobSummary,
    decode,
    encode,
    merge_admin_comment,
    spool_path,
    write_spool,
)
from slurmgpu.model.measure import RunRef

T0 = 1767607200  # 2026-01-05 10:00:00 UTC


def gpu(minor: int, util: float | None, mem: float, total: float = 81559.0, gi=None, profile=None):
    return GpuSummary(minor, gi, profile, f"GPU-{minor}", total, mem, util, 10, 10)


def summary(job="42", node="gpu01", first=T0 + 30, gpus=None) -> JobSummary:
    gpus = gpus or (gpu(0, 80.0, 20480.0), gpu(1, 40.0, 1024.0))
    return JobSummary(job, "c1", node, first, first + 3000, 10, tuple(gpus))


def run(job="42", comment="", start=datetime(2026, 1, 5, 10, 0), end=datetime(2026, 1, 5, 11, 0)):
    return RunRef(job, "c1", start, end, "gpu01", 2, comment)


def test_round_trip_and_deterministic():
    s = summary()
    assert decode(encode(s)) == s
    assert encode(s) == encode(s) and encode(s).startswith("SG1:")
    assert decode(encode(s).lower()) == s  # sacctmgr 22.05 lower-cases AdminComment


@pytest.mark.parametrize("bad", ["SG1:###", "SG1:AAAAAAAA", "JS1:abc"])
def test_decode_rejects_garbage(bad):
    with pytest.raises(ValueError):
        decode(bad)


def test_merge_keeps_the_tier_record_and_replaces_only_the_same_node():
    tier = "slurmgpu tier=P1 kind=finetune"
    once = merge_admin_comment(tier, summary(node="gpu01"))
    assert once.startswith(tier + " SG1:")
    twice = merge_admin_comment(once, summary(node="gpu02"))
    again = merge_admin_comment(twice, summary(node="gpu01", gpus=(gpu(0, 1.0, 1.0),)))
    words = again.split()
    assert words[:3] == tier.split() and len(words) == 5
    nodes = sorted(decode(w).node for w in words[3:])
    assert nodes == ["gpu01", "gpu02"]
    assert decode(words[-1]).gpus == (gpu(0, 1.0, 1.0),)


def test_source_reads_admin_comment_tokens_of_all_nodes():
    comment = merge_admin_comment("slurmgpu tier=P2", summary(node="a"))
    comment = merge_admin_comment(comment, summary(node="b", gpus=(gpu(3, None, 9000.0),)))
    [m] = CollectorSource().measures([run(comment=comment)])
    assert m.source == "collector" and m.gpus_measured == 3
    assert m.util_mean_pct == 60.0  # the MIG-like GPU without utilization is not averaged in
    assert m.mem_used_max_mib == 20480.0 and m.gpu_memory_mib == 81559.0


def test_source_reads_the_spool_and_tells_requeued_runs_apart(tmp_path):
    first = write_spool(tmp_path, summary(first=T0 + 30))
    second = write_spool(tmp_path, summary(first=T0 + 7200 + 30, gpus=(gpu(5, 5.0, 5.0),)))
    assert first != second and first.parent == tmp_path / "c1"
    runs = [run(), run(start=datetime(2026, 1, 5, 12, 0), end=datetime(2026, 1, 5, 13, 0))]
    a, b = CollectorSource(tmp_path).measures(runs)
    assert (a.gpus_measured, a.util_mean_pct) == (2, 60.0)
    assert (b.gpus_measured, b.util_mean_pct, b.start) == (1, 5.0, datetime(2026, 1, 5, 12, 0))


def test_spool_garbage_is_a_warning(tmp_path):
    path = spool_path(tmp_path, summary())
    path.parent.mkdir(parents=True)
    path.write_text("SG1:nonsense\n")
    source = CollectorSource(tmp_path)
    assert source.measures([run()]) == []
    [w] = source.warnings
    assert w.kind == "undecodable" and w.job_ids == ("42",)


def test_spool_names_cannot_escape_the_directory(tmp_path):
    s = JobSummary("../../etc", "../x", "n/../../y", T0, T0, 1, ())
    path = spool_path(tmp_path, s)
    assert tmp_path in path.parents and ".." not in path.relative_to(tmp_path).parts
