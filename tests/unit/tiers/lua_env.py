"""Lua runtimes and a 22.05-shaped `slurm` table / `job_desc` for the job_submit.lua tests.

Slurm 22.05's job_submit/lua passes `job_desc` as a table whose metatable reads fields from
the C job descriptor (unset strings are nil, unset numbers NO_VAL) and writes the fields
`_set_job_req_field` knows (others are logged as "unrecognized field" and dropped). The fake
below behaves the same but *fails* on an unknown or mistyped write, so a template bug shows.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "data" / "tiers"
EXAMPLE = Path(__file__).resolve().parents[3] / "etc" / "slurmgpu.toml"

NO_VAL = 0xFFFFFFFE
INFINITE = 0xFFFFFFFF
SUCCESS, ERROR, ACCESS_DENIED = 0, -1, 2002

SLURM_TABLE = """
slurm = {
  SUCCESS = 0, ERROR = -1, FAILURE = -1,
  ESLURM_ACCESS_DENIED = 2002, ESLURM_ACCOUNTING_POLICY = 2050, ESLURM_INVALID_ACCOUNT = 2045,
  ESLURM_INVALID_TIME_LIMIT = 2051, ESLURM_MISSING_TIME_LIMIT = 2053,
  NO_VAL = 4294967294, NO_VAL16 = 65534, NO_VAL8 = 254, NO_VAL64 = 18446744073709551614,
  INFINITE = 4294967295, INFINITE16 = 65535, INFINITE64 = 18446744073709551615,
  MEM_PER_CPU = 9223372036854775808,
}
LOG = { user = {}, info = {}, error = {}, debug = {} }
local function logger(kind)
  return function(fmt, ...)
    local t = LOG[kind]
    t[#t + 1] = string.format(fmt, ...)
  end
end
slurm.log_user = logger("user")
slurm.log_info = logger("info")
slurm.log_error = logger("error")
slurm.log_debug = logger("debug")
slurm.log_verbose = function() end

-- Fields 22.05's _set_job_req_field accepts (subset) and their types.
local WRITABLE = {
  account = "string", admin_comment = "string", comment = "string", partition = "string",
  qos = "string", time_limit = "number", tres_per_node = "string", tres_per_job = "string",
  tres_per_socket = "string", tres_per_task = "string", features = "string",
  requeue = "number",
}
local NUMERIC = { time_limit = true, time_min = true, min_nodes = true, max_nodes = true }
local NUMERIC16 = { requeue = true }

function make_job_desc(fields, writes)
  local store = {}
  for k, v in pairs(fields) do store[k] = v end
  return setmetatable({}, {
    __index = function(_, k)
      if store[k] == nil and NUMERIC[k] then return slurm.NO_VAL end
      if store[k] == nil and NUMERIC16[k] then return slurm.NO_VAL16 end
      return store[k]
    end,
    __newindex = function(_, k, v)
      local want = WRITABLE[k]
      if want == nil then error("job_desc: unrecognized field: " .. tostring(k)) end
      if type(v) ~= want then error("job_desc." .. k .. ": " .. want .. " expected") end
      -- as 22.05's _set_job_req_field: an empty string unsets the field
      if v == "" then store[k] = nil else store[k] = v end
      writes[k] = v
    end,
  })
end

function exploding_job_desc()
  return setmetatable({}, { __index = function(_, k) error("boom reading " .. k) end })
end
"""


@dataclass
class Outcome:
    rc: int
    writes: dict
    user: list[str] = field(default_factory=list)
    info: list[str] = field(default_factory=list)
    error: list[str] = field(default_factory=list)


class LuaScript:
    """A rendered job_submit.lua loaded into one Lua runtime, ready to be called."""

    def __init__(self, text: str, runtime: str, *, module: bool = False) -> None:
        """`module`: `text` is `gen-job-submit --module`'s module; its table's job_submit /
        job_modify are called instead of the global entry points."""
        lupa = importlib.import_module(f"lupa.{runtime}")
        self.lupa = lupa
        self.lua = lupa.LuaRuntime(unpack_returned_tuples=True)
        self.lua.execute(SLURM_TABLE)
        returned = self.lua.execute(text)
        self.g = self.lua.globals()
        self._fill = None
        if module:
            self._submit, self._modify = returned.job_submit, returned.job_modify
            self._fill = returned.fill
        else:
            self._submit, self._modify = self.g.slurm_job_submit, self.g.slurm_job_modify

    def parts(self, partitions: dict | None):
        """part_list as 22.05+ passes it: keyed by name; `partitions` maps a name to
        (priority_tier, is_default) or (priority_tier, is_default, max_time minutes)."""
        table = self.lua.table()
        for name, (tier, default, *max_time) in (partitions or {}).items():
            part = {"name": name, "priority_tier": tier, "flag_default": 1 if default else 0}
            part["max_time"] = max_time[0] if max_time else INFINITE
            table[name] = self.lua.table_from(part)
        return table

    def _reset_log(self) -> None:
        self.lua.execute("LOG = { user = {}, info = {}, error = {}, debug = {} }")

    def _list(self, table) -> list[str]:
        return [table[i] for i in range(1, len(table) + 1)]

    def _outcome(self, rc, writes) -> Outcome:
        log = self.g.LOG
        return Outcome(
            rc=rc,
            writes=dict(writes.items()),
            user=self._list(log.user),
            info=self._list(log.info),
            error=self._list(log.error),
        )

    def submit(
        self, fields: dict, uid: int | None = 1000, partitions: dict | None = None
    ) -> Outcome:
        self._reset_log()
        writes = self.lua.table()
        job = self.g.make_job_desc(self.lua.table_from(fields), writes)
        rc = self._submit(job, self.parts(partitions), uid)
        return self._outcome(rc, writes)

    def fill(self, fields: dict, uid: int | None = 1000, partitions: dict | None = None):
        """The module's `fill` (what a site script calls before its own rules)."""
        self._reset_log()
        writes = self.lua.table()
        job = self.g.make_job_desc(self.lua.table_from(fields), writes)
        rc = self._fill(job, self.parts(partitions), uid)
        return self._outcome(rc, writes)

    def modify(
        self, fields: dict, job_rec: dict, uid: int | None = 0, partitions: dict | None = None
    ) -> Outcome:
        self._reset_log()
        writes = self.lua.table()
        job = self.g.make_job_desc(self.lua.table_from(fields), writes)
        rec = self.lua.table_from(job_rec)
        rc = self._modify(job, rec, self.parts(partitions), uid)
        return self._outcome(rc, writes)

    def submit_exploding(self) -> Outcome:
        self._reset_log()
        rc = self._submit(self.g.exploding_job_desc(), self.lua.table(), 1000)
        return self._outcome(rc, self.lua.table())


def _runtimes() -> list[str]:
    found = []
    for name in ("lua51", "lua54"):
        try:
            importlib.import_module(f"lupa.{name}")
            found.append(name)
        except ImportError:
            pass
    return found


RUNTIMES = _runtimes()
