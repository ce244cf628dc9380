"""Which optional extra (pyproject `[project.optional-dependencies]`) provides a module.

The light install (`pip install slurmgpu`) runs the node-side commands (submit, collect,
gen-gres, check, inventory); the analysis commands need `slurmgpu[analysis]` (pandas,
pyarrow, numpy). A command that imports one of these without it fails with one line naming
the extra, never a traceback.
"""

from __future__ import annotations

# top-level module name -> the extra that installs it
EXTRA_OF: dict[str, str] = {
    "pandas": "analysis",
    "pyarrow": "analysis",
    "numpy": "analysis",
    "pyslurm": "pyslurm",
}


def missing_extra(exc: BaseException) -> str | None:
    """The extra whose absence raised `exc` (a ModuleNotFoundError), else None."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    return EXTRA_OF.get(exc.name.split(".")[0])


def install_hint(extra: str) -> str:
    return f"pip install 'slurmgpu[{extra}]'"
