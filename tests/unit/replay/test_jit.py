"""The compile switch (`replay/_jit.py`): the engine without numba gives the same schedule,
`replay` says once that it runs without it, and numba's cache key covers every compiled
module."""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from slurmgpu.cli import main
from slurmgpu.replay import _jit
from slurmgpu.replay.engine import SchedConfig, replay
from tests.unit.replay.backlog_trace import backlog
from tests.unit.replay.test_cli import BASE

ROOT = Path(__file__).resolve().parents[3]
REPLAY = ROOT / "slurmgpu" / "replay"

WITHOUT_NUMBA = """
import json, sys
sys.modules["numba"] = None  # as if it were not installed: its import fails
from slurmgpu.replay import _jit
from slurmgpu.replay.engine import SchedConfig, engine_warnings, replay
from tests.unit.replay.backlog_trace import backlog
trace, model = backlog(jobs=400, gpus=96, load=1.5, seed=7, mixed=True)
out = replay(trace, model, SchedConfig())
print(json.dumps({"compiled": _jit.COMPILED, "warnings": engine_warnings(),
                  "start": [s if s < 1e300 else None for s in out.start_s.tolist()],
                  "runs": [out.runs.job, out.runs.start, out.runs.end, out.runs.equiv],
                  "preemptions": out.preemptions, "reasons": out.unrunnable_reasons}))
"""


def test_without_numba_the_same_schedule_as_compiled():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_DISABLE_JIT"}
    proc = subprocess.run([sys.executable, "-c", WITHOUT_NUMBA], capture_output=True,
                          text=True, check=True, cwd=ROOT, env=env)  # fmt: skip
    plain = json.loads(proc.stdout)
    assert plain["compiled"] is False
    assert len(plain["warnings"]) == 1 and "without its compiled engine" in plain["warnings"][0]
    trace, model = backlog(jobs=400, gpus=96, load=1.5, seed=7, mixed=True)
    out = replay(trace, model, SchedConfig())
    assert out.preemptions > 0 and out.unrunnable_reasons  # preemption and cancels happened
    assert plain["start"] == [s if s < 1e300 else None for s in out.start_s.tolist()]
    assert plain["runs"] == [out.runs.job, out.runs.start, out.runs.end, out.runs.equiv]
    assert (plain["preemptions"], plain["reasons"]) == (out.preemptions, out.unrunnable_reasons)


def test_replay_says_once_that_it_runs_without_the_compiled_engine(monkeypatch):
    monkeypatch.setattr(_jit, "COMPILED", False)
    monkeypatch.setattr(_jit, "DISABLED", False)
    monkeypatch.setattr(_jit, "WHY_NOT", "No module named 'numba'")
    res = CliRunner().invoke(main, [*BASE, "--format", "json"])
    assert res.exit_code == 0, res.output
    lines = [line for line in res.stderr.splitlines() if "compiled engine" in line]
    assert len(lines) == 1 and lines[0].startswith("slurmgpu: warning: replay runs without")
    json.loads(res.stdout)  # the report itself is unchanged


def test_cache_key_digest_covers_every_compiled_module():
    """A module with compiled functions must be in `ENGINE_MODULES`: numba keys its cache by
    the entry point's own file only, so a change elsewhere would load stale machine code."""
    compiled = set()
    for path in REPLAY.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                 and node.module == "slurmgpu.replay._jit" for alias in node.names}  # fmt: skip
        if names & {"njit", "inline", "cached", "as_struct"} or path.stem == "_jit":
            compiled.add(path.stem)
    # (state.py holds the layout the compiled functions read)
    assert compiled | {"state"} == set(_jit.ENGINE_MODULES)
