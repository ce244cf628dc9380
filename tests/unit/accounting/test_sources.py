"""Live-source helpers that need no cluster: the sacct command line, --json mapping, pyslurm."""

import sys
from datetime import UTC, datetime

import pytest

from slurmgpu.accounting.load import load_records
from slurmgpu.sources.pyslurm_db import pyslurm_decision
from slurmgpu.sources.sacct import DELIMITER, SACCT_FIELDS, json_records, sacct_argv


def test_sacct_argv_always_has_window_and_flags():
    argv = sacct_argv(datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 8, tzinfo=UTC))
    assert argv[:7] == ["sacct", "-a", "-D", "-S", "2026-01-01T00:00:00", "-E",
                        "2026-01-08T00:00:00"]  # fmt: skip
    assert "-P" in argv and f"--delimiter={DELIMITER}" in argv and "-X" not in argv
    fmt = argv[argv.index("--format") + 1].split(",")
    assert fmt == list(SACCT_FIELDS) and fmt[-1] == "JobName"


def test_json_mapping_dbv0038_shape():
    # Shape of 22.05 `sacct --json` (dbv0.0.38, facts §2.5); values chosen for the test
    doc = {
        "meta": {"Slurm": {"version": {"major": 22, "minor": 5, "micro": 8}}},
        "errors": [],
        "jobs": [
            {
                "job_id": 42, "cluster": "c", "partition": "gpu", "qos": "p1",
                "account": "ml", "user": "alice", "name": "train",
                "array": {"job_id": 40, "task_id": 2}, "het": {"job_id": 0, "job_offset": None},
                "comment": {"administrator": "slurmgpu tier=P1 kind=finetune", "job": ""},
                "state": {"current": "COMPLETED", "reason": "None"},
                "time": {"submission": 1764547200, "start": 1764547260, "end": 1764550860,
                         "elapsed": 3600, "limit": 120},
                "tres": {"allocated": [{"type": "cpu", "name": "", "count": 4},
                                       {"type": "gres", "name": "gpu", "count": 2}],
                         "requested": []},
                "steps": [
                    {"step": {"id": "42.batch", "name": "batch"},
                     "state": "COMPLETED",
                     "time": {"start": 1764547260, "end": 1764550860, "elapsed": 3600},
                     "tres": {"allocated": [],
                              "requested": {"max": [{"type": "gres", "name": "gpuutil",
                                                     "count": 70},
                                                    {"type": "gres", "name": "gpumem",
                                                     "count": 2 * 2**30}],
                                            "average": []}}},
                ],
            }
        ],
    }  # fmt: skip
    recs = list(json_records(doc))
    assert recs[0]["JobID"] == "40_2" and recs[0]["AllocTRES"] == "cpu=4,gres/gpu=2"
    assert recs[1]["JobIDRaw"] == "42.batch"
    res = load_records(recs, name="json")
    r = res.frame.iloc[0]
    assert r["gpu_hours"] == 2 and r["wait_s"] == 60 and r["kind"] == "finetune"
    assert r["gpu_util_pct"] == 70 and r["gpu_mem_used_mib"] == 2048  # bytes -> MiB
    assert res.rows_read == 2 and res.rows_rejected == 0


def test_json_mapping_v0040_wrappers():
    doc = {
        "jobs": [
            {
                "job_id": 7, "partition": "gpu", "qos": "n", "user": "u",
                "state": {"current": ["PREEMPTED"]},
                "het": {"job_id": 7, "job_offset": {"set": True, "number": 0}},
                "array": {"job_id": 0, "task_id": {"set": False, "number": 0}},
                "time": {"submission": 1764547200, "start": 1764547200, "end": 1764548200,
                         "elapsed": 1000, "limit": {"set": False, "infinite": True}},
                "tres": {"allocated": [{"type": "gres", "name": "gpu:1g.10gb", "count": 1}]},
                "steps": [],
            }
        ]
    }  # fmt: skip
    (rec,) = json_records(doc)
    assert rec["JobID"] == "7+0" and rec["State"] == "PREEMPTED"
    assert rec["TimelimitRaw"] == "UNLIMITED"
    r = load_records([rec], name="json").frame.iloc[0]
    assert r["state"] == "PREEMPTED" and r["mig_profile"] == "1g.10gb"


def test_pyslurm_not_importable_falls_back():
    d = pyslurm_decision((22, 5, 8), module_name="pyslurm_absent_for_test")
    assert not d.usable and "not importable" in d.reason


def _fake_pyslurm(tmp_path, monkeypatch, version, with_db=True):
    # a stand-in at the import boundary (pyslurm is an external C extension)
    pkg = tmp_path / "fake_pyslurm_mod.py"
    body = f"__version__ = {version!r}\n"
    if with_db:
        body += "class db:\n    class Jobs:\n        pass\n"
    pkg.write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("fake_pyslurm_mod", None)


def test_pyslurm_version_mismatch_falls_back(tmp_path, monkeypatch):
    _fake_pyslurm(tmp_path, monkeypatch, "25.11.2")
    d = pyslurm_decision((22, 5, 8), module_name="fake_pyslurm_mod")
    assert not d.usable and d.reason == "pyslurm 25.11.2 does not match Slurm 22.05"


def test_pyslurm_matching_is_used(tmp_path, monkeypatch):
    _fake_pyslurm(tmp_path, monkeypatch, "22.5.1")
    d = pyslurm_decision((22, 5, 8), module_name="fake_pyslurm_mod")
    assert d.usable and d.module is not None


def test_pyslurm_without_db_api(tmp_path, monkeypatch):
    _fake_pyslurm(tmp_path, monkeypatch, "22.5.0", with_db=False)
    d = pyslurm_decision((22, 5, 8), module_name="fake_pyslurm_mod")
    assert not d.usable and "no db.Jobs" in d.reason


def test_pyslurm_unknown_slurm_version(tmp_path, monkeypatch):
    _fake_pyslurm(tmp_path, monkeypatch, "22.5.0")
    assert not pyslurm_decision(None, module_name="fake_pyslurm_mod").usable


def test_recorded_2205_json_agrees_with_recorded_text():
    import json
    from pathlib import Path

    from slurmgpu.accounting.load import load_files

    data = Path(__file__).resolve().parents[2] / "data" / "sacct"
    doc = json.loads((data / "slurm-22.05-harness.json").read_text())
    js = load_records(json_records(doc), name="json")
    txt = load_files([data / "slurm-22.05-harness.txt"])
    cols = ["job_id", "job_id_raw", "state", "gpu_count", "elapsed_s", "gpu_hours", "wait_s",
            "submit", "start", "end", "kind", "partition", "qos", "account", "user"]  # fmt: skip
    a = js.frame[cols].sort_values("job_id").reset_index(drop=True)
    b = txt.frame[cols].sort_values("job_id").reset_index(drop=True)
    assert a.astype(str).to_numpy().tolist() == b.astype(str).to_numpy().tolist()
    assert (js.rows_read, js.step_rows, js.rows_rejected) == (12, 6, 0)
    assert (txt.rows_read, txt.step_rows, txt.rows_rejected) == (12, 6, 0)
    cancelled = txt.frame[txt.frame["job_id"] == "3"].iloc[0]
    assert cancelled["state"] == "CANCELLED" and cancelled["cancelled_by_uid"] == 0
    assert set(txt.frame["job_id"]) == {"1", "2_0", "2_1", "2_2", "3", "4"}


@pytest.mark.parametrize(
    ("release", "schema"), [("22.05", "dbv0.0.38"), ("24.11", "v0.0.42"), ("25.11", "v0.0.44")]
)
def test_each_releases_recorded_json_agrees_with_its_text(release, schema):
    """sacct --json of the same jobs on each release's real test cluster (22.05 openapi
    dbv0.0.38, 24.11 data_parser v0.0.42, 25.11 v0.0.44) reads as that release's text."""
    import json
    from pathlib import Path

    from slurmgpu.accounting.load import load_files
    from slurmgpu.sources.sacct import JSON_SCHEMAS_CHECKED, json_schema

    data = Path(__file__).resolve().parents[2] / "data" / "sacct"
    doc = json.loads((data / f"slurm-{release}-harness.json").read_text())
    assert json_schema(doc) == schema and schema in JSON_SCHEMAS_CHECKED
    js = load_records(json_records(doc), name="json")
    txt = load_files([data / f"slurm-{release}-harness.txt"])
    cols = ["job_id", "job_id_raw", "state", "gpu_count", "elapsed_s", "gpu_hours", "wait_s",
            "submit", "start", "end", "kind", "partition", "qos", "account", "user"]  # fmt: skip
    a = js.frame[cols].sort_values("job_id").reset_index(drop=True)
    b = txt.frame[cols].sort_values("job_id").reset_index(drop=True)
    assert a.astype(str).to_numpy().tolist() == b.astype(str).to_numpy().tolist()
    assert set(txt.frame["job_id"]) == {"1", "2_0", "2_1", "2_2", "3", "4"}
    assert js.rows_rejected == txt.rows_rejected == 0
    cancelled = txt.frame[txt.frame["job_id"] == "3"].iloc[0]
    assert cancelled["state"] == "CANCELLED"
    assert sorted(txt.frame["gpu_count"].astype(int)) == [1, 1, 1, 1, 1, 2]
