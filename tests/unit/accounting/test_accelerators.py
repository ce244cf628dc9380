"""Accounting per vendor (#26): gres/npu and typed AMD GPUs in AllocTRES become rows of
`by_accelerator` with vendor, class, device-hours, capacity share and fit."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pyarrow as pa
import pytest

from slurmgpu.accounting import AnalysisOptions, analyze
from slurmgpu.accounting.capacity import capacity_from_scontrol, node_devices
from slurmgpu.accounting.document import AnalysisDocument
from slurmgpu.accounting.tres import parse_alloc_tres
from slurmgpu.views.report import render_text

from .sacct_text import job, text

SINCE, UNTIL = datetime(2025, 12, 1, 0, tzinfo=UTC), datetime(2025, 12, 1, 10, tzinfo=UTC)
H = 3600
ROWS = [
    # two Ascend jobs on 910B: 2 NPUs x 2 h and 1 NPU x 4 h = 8 NPU-hours
    job(1, "npu", 0, 0, 2 * H, "cpu=8,gres/npu=2,gres/npu:910b=2,node=1"),
    job(2, "npu", 0, 0, 4 * H, "cpu=4,gres/npu:910b=1,node=1"),
    # AMD: a whole MI300X for 5 h, and two CPX partitions (1/8 each) for 3 h = 6 device-hours
    job(3, "amd", 0, 0, 5 * H, "cpu=16,gres/gpu=1,gres/gpu:mi300x=1,node=1"),
    job(4, "amd", 0, 0, 3 * H, "cpu=4,gres/gpu=2,gres/gpu:mi300x_cpx=2,node=1"),
    # NVIDIA: a MIG slice and whole H100s
    job(5, "gpu", 0, 0, 2 * H, "cpu=2,gres/gpu=1,gres/gpu:1g.10gb=1,node=1"),
    job(6, "gpu", 0, 0, 1 * H, "cpu=2,gres/gpu=4,gres/gpu:h100=4,node=1"),
    # a mixed node's job: both a GPU and two NPUs
    job(7, "mixed", 0, 0, 1 * H, "cpu=2,gres/gpu:rtx4090=1,gres/npu:910b4=2,node=1"),
    job(8, "cpu", 0, 0, 1 * H, "cpu=2,node=1"),
]
DEVICES = {"npu:910b": 8, "gpu:mi300x": 8, "gpu:mi300x_cpx": 64, "npu:910b4": 4}


def _analyze(tmp_path, **kw):
    path = tmp_path / "dump.txt"
    path.write_text(text(ROWS))
    opts = AnalysisOptions(files=[path], since=SINCE, until=UNTIL, **kw)
    return analyze(opts).document


def test_npus_are_counted_apart_from_gpus():
    at = parse_alloc_tres(pa.array(["gres/npu=2,gres/npu:910b=2", "gres/npu:910b4=3", "cpu=1"]))
    assert at.npu_count.tolist()[:2] == [2.0, 3.0] and at.npu_type.tolist() == [
        "910b",
        "910b4",
        None,
    ]
    assert all(v != v for v in at.gpu_count)  # NaN: no GPU TRES in any row
    bad = parse_alloc_tres(pa.array(["gres/npu=two"]))
    assert bad.errors


def test_by_accelerator_rows_per_vendor_and_class(tmp_path):
    doc = _analyze(tmp_path, accelerator_devices=DEVICES)
    rows = {r.accelerator: r for r in doc.by_accelerator}
    assert set(rows) == {
        "npu:910b", "npu:910b4", "gpu:mi300x", "gpu:mi300x_cpx", "gpu:1g.10gb", "gpu:h100",
        "gpu:rtx4090",
    }  # fmt: skip
    npu = rows["npu:910b"]
    assert (npu.vendor, npu.accel_class, npu.runs) == ("ascend", "npu", 2)
    assert npu.device_hours == pytest.approx(8.0)
    assert npu.alloc_share == pytest.approx(8.0 / (8 * 10))
    # sacct records no NPU memory: their fit is unknown, never "does not fit"
    assert npu.fit.known_runs == 0 and npu.fit.unknown_runs == 2
    cpx = rows["gpu:mi300x_cpx"]
    assert (cpx.vendor, cpx.accel_class, cpx.device_hours) == ("amd", "gpu-slice", 6.0)
    assert cpx.alloc_share == pytest.approx(6.0 / (64 * 10))
    whole = rows["gpu:mi300x"]
    assert (whole.vendor, whole.accel_class, whole.device_hours) == ("amd", "linked-gpu", 5.0)
    assert rows["gpu:h100"].device_hours == pytest.approx(4.0)
    assert rows["gpu:h100"].devices is None and rows["gpu:h100"].alloc_share is None
    mig = rows["gpu:1g.10gb"]
    assert (mig.vendor, mig.accel_class) == ("nvidia", "gpu-slice")
    # a MIG slice run's need is its share of the GPU (1/7): known, and fits 1/7
    assert mig.fit.known_runs == 1 and mig.fit.share("1/7").gpu_hours == pytest.approx(1.0)
    # the mixed job counts under its GPU and under its NPUs
    assert rows["npu:910b4"].device_hours == pytest.approx(2.0)
    assert rows["gpu:rtx4090"].accel_class == "gpu"
    # sorted by device-hours
    assert [r.accelerator for r in doc.by_accelerator][:2] == ["npu:910b", "gpu:mi300x_cpx"]


def test_npu_runs_do_not_count_as_gpu_hours(tmp_path):
    doc = _analyze(tmp_path)
    # GPU-hours: MI300X 5 + CPX 2 x 1/8 x 3 + MIG 1/7 x 2 + H100 4 + RTX 1; no NPU-hours
    assert doc.totals.gpu_hours_allocated == pytest.approx(5 + 6 / 8 + 2 / 7 + 4 + 1)
    assert doc.totals.gpu_jobs == 5  # the two NPU-only jobs (and the CPU job) are not


def test_document_round_trip_and_report_table(tmp_path):
    doc = _analyze(tmp_path, accelerator_devices=DEVICES)
    data = json.loads(json.dumps(doc.to_json(), allow_nan=False))
    row = next(r for r in data["by_accelerator"] if r["accelerator"] == "npu:910b")
    assert row["vendor"] == "ascend" and row["class"] == "npu" and row["devices"] == 8
    assert AnalysisDocument.from_json(data).by_accelerator == doc.by_accelerator
    old = {k: v for k, v in data.items() if k != "by_accelerator"}
    assert AnalysisDocument.from_json(old).by_accelerator == ()
    report = render_text(doc)
    assert "By accelerator" in report
    line = next(x for x in report.splitlines() if x.lstrip().startswith("npu:910b "))
    assert "ascend" in line and "npu" in line and "10.0%" in line


def test_capacity_per_accelerator_from_node_gres():
    assert node_devices("gpu:mi300x_cpx:64(S:0-1),npu:910b:8") == {
        "gpu:mi300x_cpx": 64.0,
        "npu:910b": 8.0,
    }
    cap = capacity_from_scontrol(
        [
            {"NodeName": "a1", "Gres": "npu:910b:8(S:0-1)"},
            {"NodeName": "a2", "Gres": "npu:910b:8(S:0-1)"},
            {"NodeName": "m1", "Gres": "gpu:mi300x:8"},
        ],
        [{"PartitionName": "all", "Nodes": "a[1-2],m1"}],
    )
    assert cap.devices == {"npu:910b": 16.0, "gpu:mi300x": 8.0}


def test_cli_takes_accelerator_capacity_for_a_dump(tmp_path):
    from click.testing import CliRunner

    from slurmgpu.cli import main

    path = tmp_path / "dump.txt"
    path.write_text(text(ROWS))
    args = ["analyze", "--sacct-file", str(path), "--format", "json"]
    args += ["--since", "2025-12-01T00:00:00", "--until", "2025-12-01T10:00:00"]
    out = CliRunner().invoke(main, [*args, "--accel-capacity", "npu:910b=8"])
    assert out.exit_code == 0, out.output
    rows = {r["accelerator"]: r for r in json.loads(out.output)["by_accelerator"]}
    assert rows["npu:910b"]["alloc_share"] == pytest.approx(0.1)
    assert rows["gpu:h100"]["alloc_share"] is None
    bad = CliRunner().invoke(main, [*args, "--accel-capacity", "npu:910b=lots"])
    assert bad.exit_code == 2
    assert "--accel-capacity npu:910b=lots: use GRES=DEVICES" in bad.output
