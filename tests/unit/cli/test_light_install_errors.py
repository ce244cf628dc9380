"""A command that needs the analysis extra, run without it: one line naming the extra."""

from __future__ import annotations

import sys

import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from slurmgpu.util.extras import missing_extra


@pytest.mark.parametrize("module", ["pandas", "pyarrow", "numpy"])
def test_missing_analysis_module_is_one_line(monkeypatch, module, tmp_path):
    # a None entry in sys.modules makes `import X` raise ModuleNotFoundError(name=X)
    for name in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, module, None)
    for name in [m for m in sys.modules if m.startswith("slurmgpu.accounting")]:
        monkeypatch.delitem(sys.modules, name)
    sacct = tmp_path / "s.txt"
    sacct.write_text("JobID|State\n1|COMPLETED\n")
    out = CliRunner().invoke(main, ["analyze", "--sacct-file", str(sacct)])
    assert out.exit_code == 1, out.output
    assert out.stderr == (
        "slurmgpu: error: analyze needs the analysis extra: pip install 'slurmgpu[analysis]'\n"
    )


def test_other_missing_modules_stay_bugs():
    assert missing_extra(ModuleNotFoundError("No module named 'x'", name="x")) is None
    assert missing_extra(ModuleNotFoundError("No module named 'pandas.io'", name="pandas.io"))
    assert missing_extra(ValueError("pandas")) is None
