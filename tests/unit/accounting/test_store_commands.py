"""`replay` and `forecast --store`: the same documents as from the dumps ingested
(`advise --store`: tests/unit/advice/test_store_advise.py)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from slurmgpu.cli import main

DATA = Path(__file__).resolve().parents[2] / "data" / "sacct"
MIX = str(DATA / "synthetic-mix.txt")
REPLAY = ["--capacity", "gpu=16", "--capacity", "mig=1", "--gpu-type", "gpu=h100",
          "--gpu-type", "mig=h100", "--baseline", "carve:mig:1:1g.10gb=7"]  # fmt: skip
HEADER = (
    "JobIDRaw|JobID|Cluster|Partition|QOS|Account|User|State|Submit|Start|End|ElapsedRaw"
    "|AllocTRES|ReqTRES"
)
T0 = 1764547200  # 2025-12-01T00:00:00Z


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _ingested(tmp_path, *files) -> str:
    s = tmp_path / "s"
    for f in files:
        r = run("ingest", "--store", s, "--sacct-file", f)
        assert r.exit_code == 0, r.output
    return str(s)


def test_replay_store_equals_replay_of_the_dump(tmp_path):
    s = _ingested(tmp_path, MIX)
    args = [*REPLAY, "--what-if", "move:gpu:spare:8", "--format", "json"]
    text = run("replay", "--sacct-file", MIX, *args)
    mine = run("replay", "--store", s, *args)
    assert text.exit_code == 0 and mine.exit_code == 0, (text.output, mine.output)
    assert json.loads(mine.output) == json.loads(text.output)
    assert json.loads(text.output)["baseline"]["gpu_hours_allocated"] > 0
    cal = [run("replay", "--calibrate", src, *REPLAY, "--format", "json").output
           for src in (f"--sacct-file={MIX}", f"--store={s}")]  # fmt: skip
    assert json.loads(cal[0]) == json.loads(cal[1])


def test_replay_store_usage_errors(tmp_path):
    s = _ingested(tmp_path, MIX)
    both = run("replay", "--store", s, "--sacct-file", MIX, *REPLAY)
    assert both.exit_code == 2 and "give one of them" in both.output
    neither = run("replay", *REPLAY)
    assert neither.exit_code == 2 and "--sacct-file or --store" in neither.output
    cl = run("replay", "--sacct-file", MIX, "--cluster", "c1", *REPLAY)
    assert cl.exit_code == 2 and "only with --store" in cl.output
    nope = run("replay", "--store", s, "--cluster", "nope", *REPLAY)
    assert nope.exit_code == 1 and nope.output.startswith("slurmgpu: error: ")
    missing = run("replay", "--store", tmp_path / "none", *REPLAY)
    assert missing.exit_code == 1 and "no such store" in missing.output


def _days(tmp_path: Path, days: int, name: str, first: int = 1) -> Path:
    def row(jid: int, start: int, gpus: int) -> str:
        end = start + 7200
        return (f"{jid}|{jid}|c1|gpu|normal|ml|alice|COMPLETED|{start}|{start}|{end}|7200"
                f"|gres/gpu={gpus}|gres/gpu={gpus}")  # fmt: skip

    rows = []
    for d in range(days):
        for hh in range(0, 24, 3):
            rows.append(row(first + len(rows), T0 + d * 86400 + hh * 3600, 1 + hh % 4))
    path = tmp_path / name
    path.write_text("\n".join([HEADER, *rows]) + "\n")
    return path


def test_forecast_store_equals_forecast_of_the_dumps(tmp_path):
    whole = _days(tmp_path, 10, "whole.txt")
    s = _ingested(tmp_path, whole)
    args = ["--train-until", "2025-12-10T00:00", "--horizon", "1d", "--format", "json"]
    text = run("forecast", "--sacct-file", whole, *args)
    mine = run("forecast", "--store", s, *args)
    assert text.exit_code == 0 and mine.exit_code == 0, (text.output, mine.output)
    assert json.loads(mine.output) == json.loads(text.output)
    assert len(json.loads(mine.output)["by_partition"][0]["points"]) == 24
