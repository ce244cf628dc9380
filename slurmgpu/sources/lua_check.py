"""Checking a rendered job_submit.lua before it is installed: `luac5.1 -p` and a dry run.

slurmctld fatals at start-up on a broken job_submit.lua (and keeps the previous one when a
reload fails), so a script must compile under Lua 5.1, the Lua Debian's Slurm 22.05 links,
and survive a call of both entry points before it replaces the installed one.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

from slurmgpu.errors import ConfigCheckError
from slurmgpu.util.proc import run

# The subset of the `slurm` table 22.05's job_submit/lua registers that the template uses
# (values from slurm.h: NO_VAL = 0xfffffffe, INFINITE = 0xffffffff).
SLURM_STUB = """
local msgs = {}
slurm = {
  SUCCESS = 0, ERROR = -1, FAILURE = -1,
  ESLURM_ACCESS_DENIED = 2002, ESLURM_INVALID_ACCOUNT = 2045,
  NO_VAL = 4294967294, NO_VAL16 = 65534, NO_VAL64 = 18446744073709551614,
  INFINITE = 4294967295, INFINITE16 = 65535,
  log_user = function(fmt, ...) msgs[#msgs + 1] = string.format(fmt, ...) end,
  log_info = function(fmt, ...) string.format(fmt, ...) end,
  log_error = function(fmt, ...) msgs[#msgs + 1] = "ERROR " .. string.format(fmt, ...) end,
  log_debug = function(fmt, ...) end, log_verbose = function(fmt, ...) end,
}
slurm_stub_messages = msgs
"""


def luac_available() -> str | None:
    """Path of `luac5.1` (or `luac`) when installed."""
    return shutil.which("luac5.1") or shutil.which("luac")


def luac_check(path: Path) -> None:
    """Compile-check with luac (`-p`: parse only); raises ConfigCheckError with its message."""
    luac = luac_available()
    if luac is None:
        return
    proc = run([luac, "-p", str(path)], check=False, timeout=30)
    if proc.returncode != 0:
        raise ConfigCheckError(f"luac rejected the script: {(proc.stderr or proc.stdout).strip()}")


def lupa_available(runtime: str = "lua51") -> bool:
    """Whether lupa (a test dependency, optional at run time) offers that Lua runtime."""
    import importlib.util

    try:
        return importlib.util.find_spec(f"lupa.{runtime}") is not None
    except ImportError:
        return False


def dry_run(text: str, tags: Iterable[str] = ("",), runtime: str = "lua51") -> list[str]:
    """Load the script in lupa and call both entry points once per comment in `tags`.

    Returns the messages the script gave (log_user / log_error); raises ConfigCheckError
    when it does not load, an entry point is missing, or a call returns no number.
    """
    try:
        import importlib

        lupa = importlib.import_module(f"lupa.{runtime}")
    except ImportError:
        return []
    lua = lupa.LuaRuntime(unpack_returned_tuples=True)
    lua.execute(SLURM_STUB)
    try:
        lua.execute(text)
    except lupa.LuaError as exc:
        raise ConfigCheckError(f"the script does not load in {runtime}: {exc}") from exc
    g = lua.globals()
    for name in ("slurm_job_submit", "slurm_job_modify"):
        if g[name] is None:
            raise ConfigCheckError(f"the script defines no {name}()")
    nil = None
    for comment in tags:
        job = lua.table_from(
            {"comment": comment or nil, "time_limit": 4294967294, "user_name": "nobody"}
        )
        rc = g.slurm_job_submit(job, lua.table(), 65534)
        rc2 = g.slurm_job_modify(lua.table_from({"comment": comment or nil}), job, lua.table(), 0)
        for value in (rc, rc2):
            if not isinstance(value, int | float):
                raise ConfigCheckError(f"an entry point returned {value!r}, not a Slurm code")
    messages = g.slurm_stub_messages
    out = [messages[i] for i in range(1, len(messages) + 1)]
    errors = [m for m in out if m.startswith("ERROR ")]
    if errors:
        raise ConfigCheckError(f"dry run in {runtime}: {errors[0][6:]}")
    return out
