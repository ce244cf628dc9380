"""`advise --store`: the plan (and its calibration) of the store equals that of the dump."""

import json

from click.testing import CliRunner

from slurmgpu.cli import main

CAP = ["--capacity", "burst=96", "--capacity", "big=64", "--capacity", "idle=64"]


def test_advise_store_equals_advise_of_the_dump(month_file, tmp_path):
    s = str(tmp_path / "s")
    run = CliRunner().invoke
    assert run(main, ["ingest", "--store", s, "--sacct-file", str(month_file)]).exit_code == 0
    args = [*CAP, "--candidate", "move:idle:big:16", "--processes", "1", "--format", "json"]
    text = run(main, ["advise", "--sacct-file", str(month_file), *args])
    mine = run(main, ["advise", "--store", s, *args])
    assert text.exit_code == 0 and mine.exit_code == 0, (text.output, mine.output)
    doc = json.loads(mine.output)
    assert doc == json.loads(text.output)
    assert doc["fidelity"]["by_partition"]
