"""`analyze` and `report` never print a recommendation on a partition the replay cannot
reproduce without saying so, in `advise`'s words (issue 34 item 4)."""

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from slurmgpu.accounting import AnalysisOptions
from slurmgpu.accounting.document import AnalysisDocument
from slurmgpu.advice import analyze
from slurmgpu.cli import main
from tests.unit.advice.helios_month import sacct_text
from tests.unit.advice.test_cli import CAP

CAPACITY = {"burst": 96, "big": 64, "idle": 64}


@pytest.fixture(scope="module")
def late_burst(month_jobs, tmp_path_factory):
    """The generated month whose record started every burst job 15 minutes later than the
    reference scheduler did (held by something the dump does not show): burst's baseline
    replay waits a seventh of the record, burst is not calibrated; big and idle are."""
    jobs = [
        replace(j, start=j.start + 900) if j.partition == "burst" and j.start is not None else j
        for j in month_jobs
    ]
    path = tmp_path_factory.mktemp("late") / "late-burst.sacct"
    path.write_text(sacct_text(jobs), encoding="utf-8")
    return path


def _run(*args):
    res = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.output


def test_a_recommendation_on_an_uncalibrated_partition_says_so_in_advises_words(late_burst):
    doc = analyze(AnalysisOptions(files=[str(late_burst)], capacity=CAPACITY)).document
    recs = [r for r in doc.recommendations if r.replayed is not None and r.change]
    on_burst = [r for r in recs if r.change.startswith("move:burst:")]
    assert on_burst, [r.change for r in recs]
    for rec in recs:
        fid = {f["partition"]: f for f in rec.replayed.to_json()["fidelity"]}
        touches_burst = "burst" in fid
        assert touches_burst == rec.change.startswith("move:burst:"), (rec.change, fid)
        for name, f in fid.items():
            assert f["calibrated"] == (name != "burst"), (rec.change, f)
            assert (f["note"] is None) == f["calibrated"]
    rec = on_burst[0]
    [burst] = [f for f in rec.replayed.to_json()["fidelity"] if f["partition"] == "burst"]
    assert burst["note"].startswith(
        "not advised: partition burst's baseline is off by more than the policy's tolerance "
        "(baseline mean wait "
    )
    assert burst["explanation"]["cause"] in {"unseen-work", "account-limit", "user-limit"}
    # advise rejects the same change with the same words (one function words both)
    advice = json.loads(_run("advise", "--sacct-file", str(late_burst), *CAP, "--processes",
                             "1", "--candidate", rec.change, "--format", "json"))  # fmt: skip
    [rejected] = advice["rejected"]
    assert rejected["why"] == burst["note"]
    assert any(n.startswith(f"{len(on_burst)} of ") and "(burst)" in n for n in doc.notes)
    # the note survives the JSON contract
    again = AnalysisDocument.from_json(json.loads(json.dumps(doc.to_json())))
    assert again == doc


def test_analyze_and_report_print_the_fidelity_note(late_burst, tmp_path):
    text = _run("analyze", "--sacct-file", str(late_burst), *CAP)
    lines = text.splitlines()
    k = next(i for i, ln in enumerate(lines) if "from burst to big" in ln and ". " in ln[:6])
    assert "[not advised: the replay does not reproduce its partition]" in lines[k]
    assert (
        lines[k + 1]
        .strip()
        .startswith(
            "not advised: partition burst's baseline is off by more than the policy's tolerance"
        )
    )
    assert "why it misses: " in lines[k + 1]
    # a recommendation on calibrated partitions carries no such note
    other = [ln for ln in lines if "from idle to big" in ln and ". " in ln[:6]]
    assert other and "does not reproduce" not in other[0]
    out = tmp_path / "r.html"
    _run("report", "--sacct-file", str(late_burst), *CAP, "--format", "html", "--output",
         str(out))  # fmt: skip
    html = out.read_text()
    assert "not advised: partition burst&#39;s baseline is off by more than" in html
    out = tmp_path / "r.json"
    _run("report", "--sacct-file", str(late_burst), *CAP, "--format", "json", "--output",
         str(out))  # fmt: skip
    recs = json.loads(out.read_text())["recommendations"]
    replays = [r["estimated_effect"].get("replay") or {} for r in recs]
    notes = [f["note"] for r in replays for f in r.get("fidelity", []) if f["note"]]
    assert notes and all("partition burst's baseline is off" in n for n in notes)
