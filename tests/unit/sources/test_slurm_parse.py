"""Parsing what Slurm's tools print: GRES strings and `scontrol show -o` records."""

from __future__ import annotations

import pytest

from slurmgpu.sources.slurm import GresItem, parse_gres_string, parse_scontrol_record


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", []),
        ("(null)", []),
        ("gpu:h100:8(S:0-1)", [GresItem("gpu", "h100", 8, "0-1")]),
        ("gpu:8", [GresItem("gpu", None, 8)]),
        ("gpu", [GresItem("gpu", None, 1)]),
        ("gpu:a100", [GresItem("gpu", "a100", 1)]),
        ("gres:gpu:2", [GresItem("gpu", None, 2)]),
        ("gres/gpu:h100:4", [GresItem("gpu", "h100", 4)]),
        (
            "gpu:h100:8(S:0-1),shard:32",
            [GresItem("gpu", "h100", 8, "0-1"), GresItem("shard", None, 32)],
        ),
        (
            "gpu:1g.10gb:7(S:0),gpu:3g.40gb:2(S:1)",
            [GresItem("gpu", "1g.10gb", 7, "0"), GresItem("gpu", "3g.40gb", 2, "1")],
        ),
    ],
)
def test_parse_gres_string(text: str, expected: list[GresItem]) -> None:
    assert parse_gres_string(text) == expected


@pytest.mark.parametrize("bad", ["gpu:h100:8:9", "gpu h100", ":8"])
def test_parse_gres_string_rejects(bad: str) -> None:
    with pytest.raises(ValueError, match="unrecognised GRES element"):
        parse_gres_string(bad)


# a line as Debian's scontrol 22.05.8 printed it for the harness's node
NODE_LINE = (
    "NodeName=gpu01 Arch=x86_64 CoresPerSocket=8 CPUAlloc=2 CPUEfctv=16 CPUTot=16 "
    "CPULoad=0.25 AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:h100:8(S:0-1) "
    "NodeAddr=localhost NodeHostName=localhost Version=22.05.8 "
    "OS=Linux 6.1.0 #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01) "
    "RealMemory=64000 AllocMem=2000 FreeMem=23086 Sockets=2 Boards=1 State=MIXED "
    "ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu "
    "CfgTRES=cpu=16,mem=62.50G,billing=16,gres/gpu=8 "
    "AllocTRES=cpu=2,mem=2000M,gres/gpu=2 CapWatts=n/a"
)


def test_parse_scontrol_node_record() -> None:
    rec = parse_scontrol_record(NODE_LINE)
    assert rec["NodeName"] == "gpu01"
    assert rec["Gres"] == "gpu:h100:8(S:0-1)"
    assert rec["State"] == "MIXED"
    # values with spaces stay whole; values with '=' inside stay whole
    assert rec["OS"] == "Linux 6.1.0 #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01)"
    assert rec["CfgTRES"] == "cpu=16,mem=62.50G,billing=16,gres/gpu=8"
    assert rec["AllocTRES"] == "cpu=2,mem=2000M,gres/gpu=2"
    assert rec["AvailableFeatures"] == "(null)"
    assert rec["CapWatts"] == "n/a"


def test_parse_scontrol_job_record() -> None:
    line = (
        "JobId=42 JobName=train UserId=root(0) GroupId=root(0) Priority=1 QOS=p1 "
        "JobState=RUNNING Reason=None Command=(null) TRES_PER_NODE=gres:gpu:2 "
        "Comment=tier P1 kind finetune"
    )
    rec = parse_scontrol_record(line)
    assert rec["JobId"] == "42"
    assert rec["UserId"] == "root(0)"
    assert rec["TRES_PER_NODE"] == "gres:gpu:2"
    assert rec["Comment"] == "tier P1 kind finetune"
    assert parse_gres_string(rec["TRES_PER_NODE"]) == [GresItem("gpu", None, 2)]


def test_parse_scontrol_empty_value_and_empty_line() -> None:
    assert parse_scontrol_record("A= B=2") == {"A": "", "B": "2"}
    assert parse_scontrol_record("") == {}


def test_scontrol_record_keeps_lowercase_tags_inside_free_text() -> None:
    # the wrapper's `tier=P1 kind=finetune` tags live in Comment=; scontrol's keys are CamelCase
    line = (
        "JobId=5 JobName=x UserId=root(0) Comment=tier=P1 kind=finetune note QOS=p1 "
        "AdminComment=slurmgpu tier=P1 kind=finetune TRES=cpu=1,gres/gpu=1 Socks/Node=*"
    )
    record = parse_scontrol_record(line)
    assert record["Comment"] == "tier=P1 kind=finetune note"
    assert record["AdminComment"] == "slurmgpu tier=P1 kind=finetune"
    assert record["QOS"] == "p1"
    assert record["TRES"] == "cpu=1,gres/gpu=1"
    assert "tier" not in record and "kind" not in record
