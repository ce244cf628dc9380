"""`forecast --demand-file`: a bad demand file is one `slurmgpu: error:` line, never a
traceback (in-process and as a real process)."""

from __future__ import annotations

import pytest

from tests.hostile.conftest import ROOT, assert_one_error, cli, proc

SACCT = ROOT / "tests" / "data" / "sacct" / "synthetic-mix.txt"
GOOD = "time,partition,gpus\n" + "".join(
    f"{1762128000 + 3600 * k},gpu,{10 + k % 24}\n" for k in range(24 * 10)
)

BAD_FILES = [
    ("empty", b"", "empty"),
    ("header only", b"time,partition,gpus\n", "no demand rows"),
    ("no gpus column", b"time,partition,value\n1762128000,gpu,1\n", "no column gpus"),
    ("bad time", b"time,partition,gpus\nyesterday,gpu,1\n", "line 2: time"),
    ("time out of range", b"time,partition,gpus\n1e300,gpu,1\n", "out of range"),
    ("nan gpus", b"time,partition,gpus\n1762128000,gpu,nan\n", "line 2: gpus"),
    ("negative gpus", b"time,partition,gpus\n1762128000,gpu,-4\n", ">= 0"),
    ("text gpus", b"time,partition,gpus\n1762128000,gpu,lots\n", "not a number"),
    ("short row", b"time,partition,gpus\n1762128000,gpu\n", "2 fields"),
    ("empty partition", b"time,partition,gpus\n1762128000,,1\n", "partition"),
    ("escape in partition", b"time,partition,gpus\n1762128000,\x1b[31mx,1\n", "unprintable"),
    ("not utf-8", b"time,partition,gpus\n1762128000,\xff\xfe,1\n", ""),
    ("NUL byte", b"time,partition,gpus\n1762128000,g\x00pu,1\n", ""),
    ("binary", bytes(range(256)) * 8, ""),
    ("too little history", b"time,partition,gpus\n1762128000,gpu,1\n", "too little history"),
]


@pytest.mark.parametrize(
    ("body", "says"), [c[1:] for c in BAD_FILES], ids=[c[0] for c in BAD_FILES]
)
def test_bad_demand_file_is_one_error_line(tmp_path, body, says):
    path = tmp_path / "demand.csv"
    path.write_bytes(body)
    run = cli("forecast", "--demand-file", path, "--freq", "1h")
    code = 2 if says == "too little history" else 1
    assert_one_error(run, code, says=says)


def test_demand_file_mistakes_of_usage(tmp_path):
    path = tmp_path / "demand.csv"
    path.write_text(GOOD)
    assert_one_error(cli("forecast", "--demand-file", path, "--sacct-file", SACCT), 2,
                     says="--demand-file")  # fmt: skip
    assert_one_error(cli("forecast", "--demand-file", path, "--by", "slice"), 2, says="slice")
    assert_one_error(cli("forecast", "--demand-file", path, "--freq", "7m"), 2, says="--freq")
    missing = tmp_path / "nope.csv"
    assert_one_error(cli("forecast", "--demand-file", missing), 1, says="nope.csv")
    assert_one_error(cli("forecast", "--demand-file", tmp_path), 2)  # a directory


def test_bad_demand_file_as_a_real_process(tmp_path):
    path = tmp_path / "demand.csv"
    path.write_bytes(b"time,partition,gpus\n1762128000,gpu,inf\n")
    run = proc("forecast", "--demand-file", path)
    assert_one_error(run, 1, says="line 2: gpus")
    assert run.stdout == ""
