"""Helpers to use the recorded machines: install the pynvml double, build host trees, variants.

Only the GPU hardware is faked: `install_double` puts tests/doubles/pynvml in
`sys.modules["pynvml"]` (in-process), `subprocess_env` does the same for a child process
(PYTHONPATH + SLURMGPU_FAKE_NVML_MACHINE).
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from tests.doubles.hosttree import build_host_tree

DOUBLES = Path(__file__).resolve().parent
ROOT = DOUBLES.parents[1]
MACHINES = ROOT / "tests" / "data" / "machines"
EXAMPLES = ROOT / "etc" / "examples"
NAMES = ("dgx-a100-mig", "dgx-h100", "pcie-8gpu")


def load_double(name: str = "pynvml"):
    """A fresh copy of a vendor library's double (`pynvml`, `amdsmi`), with its own state."""
    spec = importlib.util.spec_from_file_location(name, DOUBLES / name / "__init__.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def install_double(monkeypatch):
    module = load_double()
    monkeypatch.setitem(sys.modules, "pynvml", module)
    return module


def machine(name: str) -> dict:
    return json.loads((MACHINES / f"{name}.json").read_text(encoding="utf-8"))


def variant(tmp_path: Path, name: str, change: Callable[[dict], None]) -> Path:
    """Write a changed copy of a recorded machine (e.g. a GPU that is lost) and return it."""
    data = copy.deepcopy(machine(name))
    change(data)
    path = tmp_path / f"{name}-variant.json"
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    return path


def setup_machine(nvml, tmp_path: Path, name: str, *, change=None, drop_minors=()):
    """Serve machine `name` (optionally changed) and build its host tree; return the root."""
    path = variant(tmp_path, name, change) if change else MACHINES / f"{name}.json"
    nvml.use_machine(path)
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return build_host_tree(data, tmp_path / "host", drop_minors=drop_minors)


def subprocess_env(machine_file: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(DOUBLES), str(ROOT)])
    env["SLURMGPU_FAKE_NVML_MACHINE"] = str(machine_file)
    return env
