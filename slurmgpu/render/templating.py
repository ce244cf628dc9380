"""The one Jinja2 environment every renderer uses, over the top-level `templates/` directory."""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path

import jinja2

from slurmgpu.render.lua import lua_string


def templates_dir() -> Path:
    """The installed `slurmgpu/templates` (wheel), else the source checkout's `templates/`."""
    installed = resources.files("slurmgpu") / "templates"
    if installed.is_dir():
        return Path(str(installed))
    return Path(__file__).resolve().parents[2] / "templates"


@functools.cache
def environment() -> jinja2.Environment:
    """Strict (undefined names fail), deterministic, no autoescape: outputs are config files.

    HTML templates escape explicitly with `|e`; Lua templates quote every site string with
    `|lua` (see `slurmgpu.render.lua`).
    """
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["lua"] = lua_string
    return env


def render(template_name: str, **context: object) -> str:
    """Render `templates/<template_name>` with `context`."""
    return environment().get_template(template_name).render(**context)
