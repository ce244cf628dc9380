"""`slurmgpu analyze` on a dump of a 22.05 site running jobstats: the summaries in
AdminComment give utilization and fit shares (Slurm itself measured nothing)."""

import json

import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from tests.unit.measure.jobstats_fixture import gpu_node, jobstats_value

GIB = 2**30
HEADER = (
    "JobID|JobIDRaw|Cluster|Partition|QOS|User|Account|State|Submit|Start|End|Elapsed|"
    "Timelimit|AllocTRES|NodeList|AdminComment"
)


def dump(tmp_path, comments: list[str]):
    rows = [HEADER]
    for i, comment in enumerate(comments, start=1):
        rows.append(
            f"{i}|{i}|c1|gpu|normal|u|a|COMPLETED|2026-01-05T09:00:00|2026-01-05T10:00:00|"
            f"2026-01-05T11:00:00|01:00:00|02:00:00|billing=1,cpu=1,gres/gpu=1,mem=1G,node=1|"
            f"n1|{comment}"
        )
    path = tmp_path / "dump.txt"
    path.write_text("\n".join(rows) + "\n")
    return path


def test_jobstats_summaries_give_utilization_and_fit(tmp_path):
    used = {1: 5, 2: 30, 3: 70}  # GiB used of an 80 GiB GPU (the size the summary carries)
    comments = [
        jobstats_value({"n1": gpu_node({"0": 10.0 * i}, {"0": used[i] * GIB}, {"0": 80 * GIB})},
                       3600, 1)
        for i in (1, 2, 3)
    ]  # fmt: skip
    comments.append("JS1:Short")  # too short to measure: not a warning
    path = dump(tmp_path, comments)
    result = CliRunner().invoke(
        main, ["analyze", "--sacct-file", str(path), "--format", "json", "--capacity", "gpu=8"]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["utilization_basis"] == {"collector": 0, "jobstats": 3, "slurm_gpuutil": 0}
    assert doc["totals"]["gpu_util_mean"] == pytest.approx(20.0)  # (10 + 20 + 30) / 3
    fit = doc["fit_fraction"]
    assert fit["basis_counts"]["measured_gpumem"] == 3
    assert fit["unknown_runs"] == 1  # the JS1:Short run: need unknown, not "does not fit"
    assert fit["1/2"]["jobs"] == pytest.approx(2 / 3)  # 5 and 30 of 80 GiB fit half; 70 not
    assert doc["measure_warnings"] == []


def test_an_undecodable_summary_is_reported_not_dropped(tmp_path):
    path = dump(tmp_path, ["JS1:H4sInotbase64"])
    result = CliRunner().invoke(main, ["analyze", "--sacct-file", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    [warning] = json.loads(result.output)["measure_warnings"]
    assert (warning["source"], warning["kind"], warning["job_ids"]) == (
        "jobstats",
        "undecodable",
        ["1"],
    )
