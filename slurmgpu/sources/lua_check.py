"""Checking a rendered job_submit.lua before it is installed: `luac5.1 -p` and a dry run
(lupa's Lua 5.1/5.4 when installed, else the standalone `lua5.1`).

slurmctld fatals at start-up on a broken job_submit.lua (and keeps the previous one when a
reload fails), so a script must compile under Lua 5.1, the Lua Debian's Slurm 22.05 links,
and survive a call of both entry points before it replaces the installed one.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from dataclasses import dataclass
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


def lua_interpreter() -> str | None:
    """Path of the standalone `lua5.1` (Debian package lua5.1) when installed."""
    return shutil.which("lua5.1")


def _entry_names(module: bool) -> tuple[str, str]:
    return ("job_submit", "job_modify") if module else ("slurm_job_submit", "slurm_job_modify")


def _check_messages(out: list[str], where: str) -> list[str]:
    errors = [m for m in out if m.startswith("ERROR ")]
    if errors:
        raise ConfigCheckError(f"dry run in {where}: {errors[0][6:]}")
    return out


def dry_run(
    text: str, tags: Iterable[str] = ("",), runtime: str = "lua51", *, module: bool = False
) -> list[str]:
    """Load the script in lupa and call both entry points once per comment in `tags`.

    With `module`, the script is a module (`gen-job-submit --module`): its returned table's
    `job_submit` / `job_modify` are called. Returns the messages the script gave (log_user /
    log_error); raises ConfigCheckError when it does not load, an entry point is missing, or
    a call returns no number. Callers check `lupa_available(runtime)` first.
    """
    import importlib

    lupa = importlib.import_module(f"lupa.{runtime}")
    lua = lupa.LuaRuntime(unpack_returned_tuples=True)
    lua.execute(SLURM_STUB)
    try:
        returned = lua.execute(text)
    except lupa.LuaError as exc:
        raise ConfigCheckError(f"the script does not load in {runtime}: {exc}") from exc
    g = lua.globals()
    table = returned if module else g
    if module and lupa.lua_type(returned) != "table":
        raise ConfigCheckError("the module returns no table")
    submit_name, modify_name = _entry_names(module)
    submit, modify = table[submit_name], table[modify_name]
    for name, fn in ((submit_name, submit), (modify_name, modify)):
        if fn is None:
            raise ConfigCheckError(f"the script defines no {name}()")
    nil = None
    for comment in tags:
        job = lua.table_from(
            {"comment": comment or nil, "time_limit": 4294967294, "user_name": "nobody"}
        )
        rc = submit(job, lua.table(), 65534)
        rc2 = modify(lua.table_from({"comment": comment or nil}), job, lua.table(), 0)
        for value in (rc, rc2):
            if not isinstance(value, int | float):
                raise ConfigCheckError(f"an entry point returned {value!r}, not a Slurm code")
    messages = g.slurm_stub_messages
    return _check_messages([messages[i] for i in range(1, len(messages) + 1)], runtime)


# The driver `dry_run_lua` runs in the standalone interpreter: arg[1] the script, arg[2]
# "module" or "file", arg[3..] the comments to try. It prints MSG/FAIL lines, one each.
_DRIVER = r"""
local function fail(text)
  io.write("FAIL\t", (string.gsub(tostring(text), "\n", " ")), "\n")
  os.exit(1)
end
local path, module = arg[1], arg[2] == "module"
local chunk, err = loadfile(path)
if chunk == nil then fail("the script does not load in lua5.1: " .. tostring(err)) end
local ok, returned = pcall(chunk)
if not ok then fail("the script does not load in lua5.1: " .. tostring(returned)) end
local submit, modify, names
if module then
  if type(returned) ~= "table" then fail("the module returns no table") end
  submit, modify, names = returned.job_submit, returned.job_modify, { "job_submit", "job_modify" }
else
  submit, modify = slurm_job_submit, slurm_job_modify
  names = { "slurm_job_submit", "slurm_job_modify" }
end
if type(submit) ~= "function" then fail("the script defines no " .. names[1] .. "()") end
if type(modify) ~= "function" then fail("the script defines no " .. names[2] .. "()") end
for i = 3, #arg do
  local comment = arg[i]
  if comment == "" then comment = nil end
  local job = { comment = comment, time_limit = 4294967294, user_name = "nobody" }
  local rc = submit(job, {}, 65534)
  local rc2 = modify({ comment = comment }, job, {}, 0)
  if type(rc) ~= "number" then
    fail("an entry point returned " .. tostring(rc) .. ", not a Slurm code")
  end
  if type(rc2) ~= "number" then
    fail("an entry point returned " .. tostring(rc2) .. ", not a Slurm code")
  end
end
for _, m in ipairs(slurm_stub_messages) do
  io.write("MSG\t", (string.gsub(m, "\n", " ")), "\n")
end
"""


def dry_run_lua(
    path: Path, tags: Iterable[str] = ("",), *, module: bool = False, interpreter: str | None = None
) -> list[str]:
    """The same dry run as `dry_run`, in the standalone `lua5.1` (no lupa needed).

    Each comment in `tags` is tried; returns the script's messages, raises ConfigCheckError
    as `dry_run` does (with the interpreter's message), or when lua5.1 is missing.
    """
    lua = interpreter or lua_interpreter()
    if lua is None:
        raise ConfigCheckError("no lua5.1 interpreter for the dry run")
    import tempfile

    with tempfile.TemporaryDirectory(prefix="slurmgpu-lua-") as tmp:
        driver = Path(tmp) / "dry_run.lua"
        driver.write_text(SLURM_STUB + _DRIVER, encoding="utf-8")
        argv = [lua, str(driver), str(path), "module" if module else "file", *tags]
        proc = run(argv, check=False, timeout=30, input_text="")
    lines = proc.stdout.splitlines()
    failed = [line[5:] for line in lines if line.startswith("FAIL\t")]
    if failed:
        raise ConfigCheckError(failed[0])
    if proc.returncode != 0:
        raise ConfigCheckError(f"lua5.1 failed: {(proc.stderr or proc.stdout).strip()[-400:]}")
    out = [line[4:] for line in lines if line.startswith("MSG\t")]
    return _check_messages(out, "lua5.1")


@dataclass(frozen=True)
class ScriptCheck:
    """What `check_script` ran (`done`) and what it could not run, with why (`skipped`)."""

    done: tuple[str, ...]
    skipped: tuple[str, ...]
    messages: tuple[str, ...] = ()

    def describe(self) -> str:
        """`checked: luac5.1 -p, dry run in lua51` / `NOT checked: ...` for the CLI's line."""
        parts = []
        if self.done:
            parts.append("checked: " + ", ".join(self.done))
        if self.skipped:
            lead = "skipped: " if self.done else "NOT checked: "
            parts.append(lead + "; ".join(self.skipped))
        return "; ".join(parts)


def check_script(path: Path, tags: Iterable[str] = ("",), *, module: bool = False) -> ScriptCheck:
    """Compile `path` with luac5.1 and dry-run it in every Lua at hand: lupa's 5.1 and 5.4,
    else the standalone lua5.1. Raises ConfigCheckError on the first failure; says exactly
    what ran, so nothing claims a check that did not happen."""
    tags = list(tags)
    done: list[str] = []
    skipped: list[str] = []
    if luac_available() is None:
        skipped.append("no luac5.1 for the compile check")
    else:
        luac_check(path)
        done.append("luac5.1 -p")
    text = path.read_text(encoding="utf-8")
    messages: list[str] = []
    runtimes = [r for r in ("lua51", "lua54") if lupa_available(r)]
    for runtime in runtimes:
        messages = dry_run(text, tags, runtime, module=module)
        done.append(f"dry run in {runtime} (lupa)")
    if not runtimes:
        if lua_interpreter() is not None:
            messages = dry_run_lua(path, tags, module=module)
            done.append("dry run in lua5.1")
        else:
            skipped.append("neither lupa nor lua5.1 for the dry run")
    return ScriptCheck(tuple(done), tuple(skipped), tuple(messages))
