"""The fast split (pyarrow's CSV parser) and the general split (line by line) must agree.

The loader splits a block with pyarrow's C++ CSV parser when it can and falls back to the
general split (any delimiter, lone CR, bytes that are not UTF-8); both must give the same
frame, the same rejected lines with the same reasons and the same counts, on awkward text.
"""

from pathlib import Path

import pandas as pd
import pytest

from slurmgpu.accounting import load
from slurmgpu.accounting.load import load_text

DATA = Path(__file__).resolve().parents[2] / "data" / "sacct"
MIX = DATA / "synthetic-mix.txt"

HEADER = "JobIDRaw|JobID|Partition|QOS|User|Submit|Start|End|ElapsedRaw|State|AllocTRES|JobName"
ROW = "{id}|{id}|gpu|normal|alice|1700000000|1700000100|1700003700|3600|COMPLETED|{tres}|{name}"
TRES = "billing=8,cpu=8,gres/gpu=1,mem=8G,node=1"


def _lines() -> list[str]:
    out = [ROW.format(id=100 + i, tres=TRES, name=f"job{i}") for i in range(40)]
    out[3] = ""  # blank
    out[5] = "   \t"  # whitespace only
    out[7] = "|" * HEADER.count("|")  # every field empty: not blank, a bad JobID
    out[9] = ROW.format(id=109, tres=TRES, name="a|b")  # a `|` in the one free-text column
    out[11] = "111|111|gpu|normal"  # too short
    out[13] = ROW.format(id=113, tres=TRES, name="x") + "\r"  # a CRLF line end
    out[15] = ROW.format(id=115, tres="gres/gpu=oops", name="y")  # rejected in normalizing
    out[17] = ROW.format(id=117, tres=TRES, name="")  # an empty last field
    out[19] = ROW.format(id=100, tres=TRES, name="dup")  # a duplicate allocation row
    out[23] = "\x1f"  # whitespace (unit separator)
    out[25] = "\u3000\x0b"  # whitespace to both
    return out


def _both(text: str, monkeypatch: pytest.MonkeyPatch, **kw):
    taken: list[bool] = []
    real = load._csv_block
    with monkeypatch.context() as m:
        m.setattr(load, "_csv_block", lambda *a: taken.append(real(*a)) or taken[-1])
        fast = load_text(text, chunk_bytes=300, **kw)
    fast.fast_blocks = sum(taken)  # blocks the CSV parser split
    with monkeypatch.context() as m:
        m.setattr(load, "_csv_block", lambda *a: False)
        general = load_text(text, chunk_bytes=300, **kw)
    return fast, general


def _same(fast, general) -> None:
    pd.testing.assert_frame_equal(fast.frame, general.frame)
    assert fast.rejected == general.rejected
    for name in ("rows_read", "rows_analyzed", "rows_rejected", "step_rows", "blank_lines"):
        assert getattr(fast, name) == getattr(general, name), name
    assert fast.rejected_reasons == general.rejected_reasons


def test_awkward_lines_split_alike(monkeypatch):
    text = "\n".join(["", HEADER, *_lines()]) + "\n"
    fast, general = _both(text, monkeypatch)
    _same(fast, general)
    assert fast.fast_blocks > 10
    assert fast.blank_lines == 5  # the empty line before the header, lines 5, 7, 25, 27
    assert {r.line for r in fast.rejected} == {10, 14, 18, 22}
    assert "a|b" in set(fast.frame["job_name"].astype(str))


def test_parsable_trailing_delimiter_splits_alike(monkeypatch):
    # `sacct -p`: every line ends with `|`; one line lacks it, one has a `|` in JobName
    lines = [x + "|" if i not in (2, 21) else x for i, x in enumerate(_lines())]
    text = "\n".join([HEADER + "|", *lines])  # no newline after the last line
    fast, general = _both(text, monkeypatch)
    _same(fast, general)
    # the blank lines became `|`: no longer blank, one field short after the last `|`
    assert fast.rows_read == 40 and fast.blank_lines == 0
    assert [r.line for r in fast.rejected[:2]] == [5, 7]


def test_lone_cr_and_latin1_take_the_general_path(monkeypatch, tmp_path):
    lines = _lines()
    lines[21] = ROW.format(id=121, tres=TRES, name="in\rside")
    text = "\n".join([HEADER, *lines]) + "\n"
    _same(*_both(text, monkeypatch))
    path = tmp_path / "latin1.txt"
    path.write_bytes(text.encode("utf-8").replace(b"job30", b"j\xf6b30"))  # not UTF-8
    got = load.load_files([path], chunk_bytes=300)
    assert got.latin1_lines == 1
    assert "j\xf6b30" in set(got.frame["job_name"].astype(str))


def test_recorded_mix_splits_alike(monkeypatch):
    _same(*_both(MIX.read_text(encoding="utf-8"), monkeypatch))
