"""Load and validate the site policy TOML (`etc/slurmgpu.toml`) into a `Policy`.

Every problem is reported as `FILE:LINE: dotted.key: what is wrong`, all of them at once,
and nothing is returned from an invalid file. `tomllib` gives values but no positions, so
the line of each key is found by scanning the source text once (`key_lines`): it follows
`[table]` / `[[array]]` headers and `key =` / `dotted.key =` assignments at the start of a
line, skips comments and multi-line strings, and maps every dotted key path to its line.
A key inside an inline table (`x = {a = 1}`) gets the line of `x`.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from typing import Any

from slurmgpu.errors import PolicyError
from slurmgpu.model.catalog import GPU_MODELS, model_for_type
from slurmgpu.model.policy import (
    IDLE_ACTIONS,
    IDLE_RULE_KEYS,
    PREEMPT_MODES,
    SLICE_GPU,
    SLICE_MIG,
    SLICE_SHARD,
    IdlePolicy,
    IdleRule,
    JobKind,
    Partition,
    Policy,
    Slice,
    Tier,
    models_offering,
)

# Where `--policy` points when not given: $SLURMGPU_POLICY, else this.
DEFAULT_POLICY_PATH = "/etc/slurmgpu/slurmgpu.toml"

# Tier, kind and QOS names travel in `key=value` tags and Slurm lists: keep them plain.
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
# Accounts, users, partitions: Slurm names; no separators that would split sacctmgr lists,
# no control characters (a NUL ends a C string: getpwnam and argv refuse it).
_SLURM_NAME = re.compile(r"^[^\s,=\x00-\x1f\x7f]+$")
# Control characters no policy string may hold; free text (descriptions) may have tabs and
# newlines, one-line values (GPU model, slice) may not.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_CONTROL_ONE_LINE = re.compile(r"[\x00-\x1f\x7f]")
# Slurm keeps these numbers in uint32 fields where 0xfffffffe/0xffffffff mean NO_VAL/INFINITE.
MAX_U32 = 0xFFFFFFFD
# KillWait, which carries a requeued tier's grace, may not exceed 65533 (slurm.conf(5)).
MAX_GRACE_S = 65533
# Arrays/tables nested deeper than this are no policy (and would exhaust tomllib's recursion).
MAX_NESTING = 64

_TOP_KEYS = {
    "autopilot",
    "objective",
    "gpu_memory",
    "default_tier",
    "default_kind",
    "shards_per_gpu",
    "priority_weight_qos",
    "tiers",
    "kinds",
    "partitions",
    "idle",
    "energy",
}
_IDLE_KEYS = {
    *IDLE_RULE_KEYS,
    "exempt_tiers",
    "exempt_interactive",
    "exempt_users",
    "exempt_accounts",
    "exempt_partitions",
    "exempt_reasons",
    "max_gap_s",
    "max_actions_per_run",
    "min_notice_min",
    "tiers",
    "partitions",
    "mail_from",
    "mail_domain",
    "admin_mail",
}
_TIER_KEYS = {
    "qos",
    "priority",
    "preempts",
    "grace_time_s",
    "preempt_mode",
    "max_gpus_per_user",
    "max_gpus_per_account",
    "accounts",
    "users",
    "description",
}
_KIND_KEYS = {
    "slice",
    "gpu_model",
    "gres_type",
    "partition",
    "time_limit_min",
    "description",
    "accel",
}
_ACCEL_CLASS = re.compile(r"npu|gpu-slice|gpu|linked-gpu")
_PARTITION_KEYS = {"description"}
# `[objective]`: number keys -> (lowest, highest) allowed
_OBJECTIVE_NUMBERS = {
    "default_mean_wait": (0.0, 1e6),
    "default_p95_wait": (0.0, 1e6),
    "max_wait_growth": (0.0, 1e6),
    "max_wait_growth_s": (0.0, 1e9),
    "p0_max_wait_s": (0.0, 1e9),
    "min_useful_gpu_hours": (0.0, 1.0),
    "calibration_wait_factor": (1.0, 1e6),
    "calibration_allocation_points": (0.0, 100.0),
    "perturb_duration": (0.0, 2.0),
    "perturb_submit_s": (0.0, 1e7),
}
_OBJECTIVE_KEYS = {*_OBJECTIVE_NUMBERS, "uncertainty_replays", "tiers", "partitions"}
_WEIGHT_KEYS = {"mean_wait", "p95_wait", "max_wait_growth"}

# The key-line scanner's patterns (compiled on first use: only error messages need them).
_HEADER_RE = r"^\s*(\[\[?)\s*(?P<path>[^\]]+?)\s*\]\]?\s*(?:#.*)?$"
_KEY_PART = r"""(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')"""
_ASSIGN_RE = rf"^\s*(?P<path>{_KEY_PART}(?:\s*\.\s*{_KEY_PART})*)\s*="
_PART_RE = r"""\s*(?:([A-Za-z0-9_-]+)|"([^"]*)"|'([^']*)')\s*(?:\.|$)"""


def default_policy_path() -> str:
    """`$SLURMGPU_POLICY` or the system-wide default."""
    return os.environ.get("SLURMGPU_POLICY") or DEFAULT_POLICY_PATH


def _split_path(text: str) -> tuple[str, ...]:
    parts = re.findall(_PART_RE, text)
    return tuple(_unescape(b) if b else a or c for a, b, c in parts)


def _unescape(quoted_body: str) -> str:
    """The value of a basic (double-quoted) TOML key: `P\\n2` -> 'P\n2'."""
    if "\\" not in quoted_body:
        return quoted_body
    try:
        return tomllib.loads(f'k = "{quoted_body}"')["k"]
    except tomllib.TOMLDecodeError:
        return quoted_body


def key_lines(source: str) -> dict[tuple[str, ...], int]:
    """Map each dotted key path (tables and keys) to its 1-based line in `source`."""
    lines: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    in_multiline: str | None = None
    for number, line in enumerate(source.splitlines(), start=1):
        if in_multiline:
            if line.count(in_multiline) % 2 == 1:
                in_multiline = None
            continue
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        header = re.match(_HEADER_RE, line)
        if header and not re.match(_ASSIGN_RE, line):
            table = _split_path(header.group("path"))
            lines.setdefault(table, number)
            continue
        assign = re.match(_ASSIGN_RE, line)
        if assign:
            path = table + _split_path(assign.group("path"))
            for i in range(len(table) + 1, len(path) + 1):
                lines.setdefault(path[:i], number)
            rest = line[assign.end() :]
            for quote in ('"""', "'''"):
                if rest.count(quote) % 2 == 1:
                    in_multiline = quote
    return lines


class _Checker:
    """Collects `file:line: key: message` errors while a policy is built."""

    def __init__(self, path: str, source: str) -> None:
        self.path = path
        self.source = source
        self._lines: dict[tuple[str, ...], int] | None = None
        self.errors: list[str] = []

    def line(self, keys: tuple[str, ...]) -> int:
        if self._lines is None:  # scanned only when there is something to report
            self._lines = key_lines(self.source)
        for i in range(len(keys), 0, -1):
            if keys[:i] in self._lines:
                return self._lines[keys[:i]]
        return 1

    def error(self, keys: tuple[str, ...], message: str) -> None:
        dotted = ".".join(_show_key(k) for k in keys) if keys else "(top level)"
        self.errors.append(f"{self.path}:{self.line(keys)}: {dotted}: {message}")

    def unknown_keys(self, keys: tuple[str, ...], table: dict, allowed: set[str]) -> None:
        for key in table:
            if key not in allowed:
                import difflib  # only on the error path: the wrapper loads policies per job

                close = difflib.get_close_matches(key, sorted(allowed), n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                allowed_list = ", ".join(sorted(allowed))
                self.error((*keys, key), f"unknown key{hint}; allowed: {allowed_list}")

    def table(self, keys: tuple[str, ...], value: object) -> dict:
        if not isinstance(value, dict):
            self.error(keys, f"must be a table, not {_type_name(value)}")
            return {}
        return value

    def string(
        self, keys, value, *, pattern: re.Pattern[str] | None = None, free_text: bool = False
    ) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str) or not value:
            self.error(keys, f"must be a non-empty string, not {_type_name(value)}")
            return None
        control = (_CONTROL if free_text else _CONTROL_ONE_LINE).search(value)
        if control is not None:
            self.error(keys, f"{value!r}: contains the control character U+{ord(control[0]):04X}")
            return None
        if pattern is not None and not pattern.match(value):
            self.error(keys, f"{value!r}: {_pattern_hint(pattern)}")
            return None
        return value

    def integer(
        self, keys, value, *, minimum: int | None = None, maximum: int = MAX_U32
    ) -> int | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(keys, f"must be an integer, not {_type_name(value)}")
            return None
        if minimum is not None and value < minimum:
            what = "negative" if minimum == 0 else f"less than {minimum}"
            self.error(keys, f"{_show_int(value)} is {what} (must be >= {minimum})")
            return None
        if value > maximum:
            self.error(keys, f"{_show_int(value)} is too large (must be <= {maximum})")
            return None
        return value

    def number(
        self, keys, value, *, minimum: float = 0.0, maximum: float | None = None, above=False
    ) -> float | None:
        """An integer or float; `above`: strictly greater than `minimum`."""
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.error(keys, f"must be a number, not {_type_name(value)}")
            return None
        if isinstance(value, float) and not math.isfinite(value):
            self.error(keys, f"{value}: must be a finite number")
            return None
        low = value <= minimum if above else value < minimum
        if low:
            self.error(keys, f"{value} must be {'>' if above else '>='} {minimum:g}")
            return None
        if maximum is not None and value > maximum:
            self.error(keys, f"{value} must be <= {maximum:g}")
            return None
        return float(value)

    def boolean(self, keys, value, default: bool) -> bool:
        if value is None:
            return default
        if not isinstance(value, bool):
            self.error(keys, f"must be true or false, not {_type_name(value)}")
            return default
        return value

    def names(self, keys, value, *, pattern: re.Pattern[str]) -> tuple[str, ...]:
        if value is None:
            return ()
        if not isinstance(value, list):
            self.error(keys, f"must be a list of strings, not {_type_name(value)}")
            return ()
        out: list[str] = []
        for item in value:
            checked = self.string(keys, item, pattern=pattern)
            if checked is not None:
                out.append(checked)
        return tuple(out)


def _show_key(key: str) -> str:
    """A key as TOML writes it, on one line: bare when plain, else quoted with escapes."""
    if re.fullmatch(r"[A-Za-z0-9_-]+", key):
        return key
    import json  # only on the error path

    return json.dumps(key)  # ASCII with \n, \u0000 ... escapes: never more than one line


def _show_int(value: int) -> str:
    """A number for a message: huge ones by their size, not thousands of digits."""
    return str(value) if abs(value) < 10**30 else f"a {len(str(abs(value)))}-digit number"


def _type_name(value: object) -> str:
    return {dict: "a table", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )


def _pattern_hint(pattern: re.Pattern[str]) -> str:
    if pattern is _NAME:
        return "use only letters, digits, '_', '.' and '-'"
    return "must not contain spaces, ',' or '='"


def load_policy(path: str | os.PathLike[str]) -> Policy:
    """Read and validate a policy file; raises `PolicyError` listing every problem."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read the policy file: {exc.strerror}") from exc
    raw = raw.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte order mark: not part of the TOML
    try:
        source = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise PolicyError(
            f"{path}:{line}: (file): not UTF-8 text: byte 0x{raw[exc.start]:02x} at column "
            f"{column} (TOML files are UTF-8)"
        ) from exc
    return parse_policy(source, str(path))


def _toml_error(path: str, source: str, exc: Exception) -> PolicyError:
    """`FILE:LINE: (syntax): what` from tomllib's `what (at line L, column C)`."""
    text = str(exc)
    m = re.match(r"^(.*?)\s*\(at line (\d+), column (\d+)\)$", text)
    if m:
        return PolicyError(f"{path}:{m[2]}: (syntax): {m[1]} (column {m[3]}): not valid TOML")
    m = re.match(r"^(.*?)\s*\(at end of document\)$", text)
    if m:
        line = max(1, len(source.splitlines()))
        return PolicyError(f"{path}:{line}: (syntax): {m[1]} (at the end): not valid TOML")
    return PolicyError(f"{path}:1: (syntax): {text}: not valid TOML")


def _too_deep(source: str) -> int | None:
    """The line where brackets/braces nest deeper than MAX_NESTING, else None.

    Counted on the raw text (strings included), which only errs on the side of a clear
    message: a real policy nests two or three levels.
    """
    depth = 0
    for number, line in enumerate(source.splitlines(), start=1):
        for ch in line:
            if ch in "[{":
                depth += 1
                if depth > MAX_NESTING:
                    return number
            elif ch in "]}":
                depth = max(0, depth - 1)
    return None


def parse_policy(source: str, path: str = "<policy>") -> Policy:
    """Validate TOML text into a `Policy` (`path` names the file in messages)."""
    deep = _too_deep(source)
    if deep is not None:
        raise PolicyError(
            f"{path}:{deep}: (syntax): arrays or tables nested more than {MAX_NESTING} deep"
        )
    try:
        data = tomllib.loads(source)
    except tomllib.TOMLDecodeError as exc:
        raise _toml_error(path, source, exc) from exc
    except RecursionError as exc:  # nesting the pre-check did not count (it never should)
        raise PolicyError(f"{path}:1: (syntax): nested too deeply") from exc
    check = _Checker(path, source)
    check.unknown_keys((), data, _TOP_KEYS)

    shards_per_gpu = check.integer(("shards_per_gpu",), data.get("shards_per_gpu"), minimum=1)
    weight = check.integer(("priority_weight_qos",), data.get("priority_weight_qos"), minimum=1)

    partitions = _partitions(check, data.get("partitions", {}))
    tiers = _tiers(check, data.get("tiers"))
    kinds = _kinds(check, data.get("kinds", {}), partitions, shards_per_gpu)

    tier_names = {t.name for t in tiers}
    for tier in tiers:
        for target in tier.preempts:
            if target not in tier_names:
                known = ", ".join(sorted(tier_names))
                check.error(
                    ("tiers", tier.name, "preempts"),
                    f"unknown tier '{target}' (tiers: {known})",
                )
            elif target == tier.name:
                check.error(("tiers", tier.name, "preempts"), "a tier cannot preempt itself")
    _check_cycles(check, tiers)
    for victim in tiers:
        # Slurm applies PreemptMode per victim QOS: its preemptors must agree on it.
        by = [t for t in tiers if victim.name in t.preempts and t.name != victim.name]
        if len({t.preempt_mode for t in by}) > 1:
            modes = ", ".join(f"{t.name}={t.preempt_mode}" for t in by)
            check.error(
                ("tiers", by[-1].name, "preempt_mode"),
                f"tiers preempting {victim.name} disagree on preempt_mode ({modes}): "
                "Slurm applies one mode per preempted QOS",
            )
    qos_seen: dict[str, str] = {}
    for tier in tiers:
        other = qos_seen.setdefault(tier.qos.lower(), tier.name)
        if other != tier.name:
            check.error(("tiers", tier.name, "qos"), f"QOS '{tier.qos}' is also tier {other}'s")

    default_tier = check.string(("default_tier",), data.get("default_tier"), pattern=_NAME)
    if "default_tier" not in data:
        check.error(("default_tier",), "missing: name the tier for jobs that ask for none")
    elif default_tier is not None and default_tier not in tier_names and tiers:
        check.error(("default_tier",), f"unknown tier '{default_tier}'")
    default_kind = check.string(("default_kind",), data.get("default_kind"), pattern=_NAME)
    if default_kind is not None and default_kind not in {k.name for k in kinds}:
        check.error(("default_kind",), f"unknown job kind '{default_kind}'")

    gpu_memory = _gpu_memory(check, data.get("gpu_memory", {}))
    objective = _objective(check, data.get("objective", {}), tier_names)
    optional = _optional_tables(check, data, tier_names, {p.name for p in partitions})
    if check.errors:
        raise PolicyError("\n".join(check.errors), tuple(check.errors))
    return Policy(
        objective=objective,
        gpu_memory_mib=gpu_memory,
        tiers=tiers,
        kinds=kinds,
        partitions=partitions,
        default_tier=default_tier or "",
        default_kind=default_kind,
        shards_per_gpu=shards_per_gpu,
        priority_weight_qos=weight or 10000,
        source=path,
        **optional,
    )


def _optional_tables(
    check: _Checker, data: dict, tier_names: set[str], partitions: set[str]
) -> dict[str, Any]:
    """`idle`, `autopilot`, `energy` (the `Policy` fields of these tables): each None when
    the policy has no such table."""
    return {
        "idle": _idle(check, data["idle"], tier_names, partitions) if "idle" in data else None,
        "autopilot": _autopilot(check, data["autopilot"], tier_names)
        if "autopilot" in data
        else None,
        "energy": _energy(check, data["energy"]) if "energy" in data else None,
    }


_ENERGY_NUMBERS = {  # key -> (lowest, highest)
    "pue": (1.0, 5.0),
    "price_per_kwh": (0.0, 100.0),
    "gco2_per_kwh": (0.0, 2000.0),
}
_CURRENCY = re.compile(r"[A-Za-z$\u20ac\u00a3\u00a5]{1,8}")


def _energy(check: _Checker, raw: object):
    """`[energy]`: price per kWh, PUE and grams of CO2 per kWh (`model.policy.EnergyPolicy`,
    docs/energy.md)."""
    from slurmgpu.model.policy import EnergyPolicy

    keys = ("energy",)
    table = check.table(keys, raw)
    check.unknown_keys(keys, table, {*_ENERGY_NUMBERS, "currency"})
    values: dict[str, object] = {}
    for key, (low, high) in _ENERGY_NUMBERS.items():
        if key in table:
            got = _number(check, (*keys, key), table[key], low, high)
            if got is not None:
                values[key] = got
    currency = check.string((*keys, "currency"), table.get("currency"))
    if currency is not None and not _CURRENCY.fullmatch(currency):
        check.error((*keys, "currency"), f"{currency!r}: 1 to 8 letters or a sign ($, EUR, CHF)")
    elif currency is not None:
        values["currency"] = currency
    return EnergyPolicy(**values)  # type: ignore[arg-type]


_AUTOPILOT_INTS = {"max_nodes_per_pass": 1000, "max_nodes_per_day": 10000}
_AUTOPILOT_NUMBERS = {  # key -> highest allowed (lowest 0)
    "min_gain": 10.0,
    "cooldown_h": 24.0 * 365,
    "verify_after_min": 7 * 24 * 60.0,
    "rollback_tolerance": 100.0,
    "rollback_slack_s": 1e7,
}
_AUTOPILOT_KEYS = {
    *_AUTOPILOT_INTS, *_AUTOPILOT_NUMBERS, "mode", "allowed_hours", "kill_switch", "protect_tiers"
}  # fmt: skip


def _autopilot(check: _Checker, raw: object, tier_names: set[str]):
    """`[autopilot]`: the guardrails of `slurmgpu autopilot` (`model.policy.AutopilotPolicy`,
    docs/autopilot.md)."""
    from slurmgpu.model.policy import AutopilotPolicy

    keys = ("autopilot",)
    table = check.table(keys, raw)
    check.unknown_keys(keys, table, _AUTOPILOT_KEYS)
    values: dict[str, object] = {}
    for key, high in _AUTOPILOT_INTS.items():
        got = check.integer((*keys, key), table.get(key), minimum=0, maximum=high)
        if got is not None:
            values[key] = got
    for key, top in _AUTOPILOT_NUMBERS.items():
        if key in table:
            got = _number(check, (*keys, key), table[key], 0.0, top)
            if got is not None:
                values[key] = got
    mode = check.string((*keys, "mode"), table.get("mode"))
    if mode is not None and mode not in ("propose", "apply"):
        check.error((*keys, "mode"), f"{mode!r}: must be propose or apply")
    elif mode is not None:
        values["mode"] = mode
    hours = table.get("allowed_hours")
    if hours is not None:
        ok = isinstance(hours, list) and len(hours) == 2
        ok = ok and all(type(h) is int and 0 <= h <= 24 for h in hours)
        if not ok:
            check.error((*keys, "allowed_hours"), "must be [START, END]: two hours from 0 to 24")
        else:
            values["allowed_hours"] = (hours[0], hours[1])
    switch = check.string((*keys, "kill_switch"), table.get("kill_switch"))
    if switch is not None and not switch.startswith("/"):
        check.error((*keys, "kill_switch"), f"{switch!r}: must be an absolute path")
    elif switch is not None:
        values["kill_switch"] = switch
    protect = check.names((*keys, "protect_tiers"), table.get("protect_tiers"), pattern=_NAME)
    for name in protect:
        if tier_names and name not in tier_names:
            known = ", ".join(sorted(tier_names))
            check.error((*keys, "protect_tiers"), f"unknown tier '{name}' (tiers: {known})")
    values["protect_tiers"] = protect
    return AutopilotPolicy(**values)  # type: ignore[arg-type]


def _number(check: _Checker, keys: tuple[str, ...], value: object, low: float, high: float):
    """A finite number (int or float) in [low, high], or None (an error is recorded)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        check.error(keys, f"must be a number, not {_type_name(value)}")
        return None
    if value != value or not low <= value <= high:
        shown = _show_int(value) if isinstance(value, int) else repr(value)
        check.error(keys, f"{shown} is out of range (must be from {low:g} to {high:g})")
        return None
    return float(value)


def _objective(check: _Checker, raw: object, tier_names: set[str]):
    """`[objective]`: what `slurmgpu advise` optimizes and the limits of a plan
    (`model.policy.Objective`; docs/policy.md)."""
    from slurmgpu.model.policy import Objective, WaitWeight

    table = check.table(("objective",), raw)
    check.unknown_keys(("objective",), table, _OBJECTIVE_KEYS)
    values: dict[str, object] = {}
    for key, (low, high) in _OBJECTIVE_NUMBERS.items():
        if key in table:
            got = _number(check, ("objective", key), table[key], low, high)
            if got is not None:
                values[key] = got
    if "uncertainty_replays" in table:
        got = check.integer(
            ("objective", "uncertainty_replays"), table["uncertainty_replays"], maximum=64
        )
        if got is not None and got < 0:
            check.error(("objective", "uncertainty_replays"), "must be >= 0")
        elif got is not None:
            values["uncertainty_replays"] = got

    def weights(group: str) -> tuple:
        out = []
        for name, body in check.table(("objective", group), table.get(group, {})).items():
            keys = ("objective", group, name)
            if group == "tiers" and tier_names and name not in tier_names:
                known = ", ".join(sorted(tier_names))
                check.error(keys, f"unknown tier '{name}' (tiers: {known})")
                continue
            body = check.table(keys, body)
            check.unknown_keys(keys, body, _WEIGHT_KEYS)
            got = {
                k: _number(check, (*keys, k), body[k], 0.0, 1e6) for k in _WEIGHT_KEYS if k in body
            }
            if group == "tiers" and "max_wait_growth" in got:
                check.error((*keys, "max_wait_growth"), "is a partition's limit, not a tier's")
                continue
            if any(v is None for v in got.values()):
                continue
            out.append(WaitWeight(name, **got))
        return tuple(out)

    return Objective(tiers=weights("tiers"), partitions=weights("partitions"), **values)


def _gpu_memory(check: _Checker, raw: object) -> tuple[tuple[str, float], ...]:
    """`[gpu_memory]` `t4 = "16G"`: sizes of GPU types the catalogue does not know (for
    `slurmgpu analyze`); the same as `--gpu-memory TYPE=SIZE`."""
    from slurmgpu.util.units import parse_size_mib

    out = []
    for name, value in check.table(("gpu_memory",), raw).items():
        try:
            out.append((name, parse_size_mib(str(value))))
        except ValueError as exc:
            check.error(("gpu_memory", name), str(exc))
    return tuple(out)


def _partitions(check: _Checker, raw: object) -> tuple[Partition, ...]:
    table = check.table(("partitions",), raw)
    out = []
    for name, value in table.items():
        keys = ("partitions", name)
        if check.string(keys, name, pattern=_SLURM_NAME) is None:
            continue
        body = check.table(keys, value)
        check.unknown_keys(keys, body, _PARTITION_KEYS)
        description = (
            check.string((*keys, "description"), body.get("description"), free_text=True) or ""
        )
        out.append(Partition(name=name, description=description))
    return tuple(out)


def _tiers(check: _Checker, raw: object) -> tuple[Tier, ...]:
    if raw is None:
        check.error(("tiers",), "missing: define at least one tier ([tiers.P0] ...)")
        return ()
    table = check.table(("tiers",), raw)
    if not table and isinstance(raw, dict):
        check.error(("tiers",), "empty: define at least one tier")
    out = []
    for name, value in table.items():
        keys = ("tiers", name)
        if check.string(keys, name, pattern=_NAME) is None:
            continue
        body = check.table(keys, value)
        check.unknown_keys(keys, body, _TIER_KEYS)
        qos = check.string((*keys, "qos"), body.get("qos", name.lower()), pattern=_NAME)
        if "priority" not in body:
            check.error((*keys, "priority"), "missing: the QOS priority (an integer >= 0)")
        priority = check.integer((*keys, "priority"), body.get("priority"), minimum=0)
        grace = check.integer(
            (*keys, "grace_time_s"), body.get("grace_time_s", 0), minimum=0, maximum=MAX_GRACE_S
        )
        mode = body.get("preempt_mode", "requeue")
        if not isinstance(mode, str) or mode.lower() not in PREEMPT_MODES:
            check.error((*keys, "preempt_mode"), f"{mode!r}: use one of {', '.join(PREEMPT_MODES)}")
            mode = "requeue"
        out.append(
            Tier(
                name=name,
                qos=qos or name.lower(),
                priority=priority or 0,
                preempts=check.names((*keys, "preempts"), body.get("preempts"), pattern=_NAME),
                grace_time_s=grace or 0,
                preempt_mode=mode.lower(),
                max_gpus_per_user=check.integer(
                    (*keys, "max_gpus_per_user"), body.get("max_gpus_per_user"), minimum=1
                ),
                max_gpus_per_account=check.integer(
                    (*keys, "max_gpus_per_account"), body.get("max_gpus_per_account"), minimum=1
                ),
                accounts=check.names(
                    (*keys, "accounts"), body.get("accounts"), pattern=_SLURM_NAME
                ),
                users=check.names((*keys, "users"), body.get("users"), pattern=_SLURM_NAME),
                description=check.string(
                    (*keys, "description"), body.get("description"), free_text=True
                )
                or "",
            )
        )
    return tuple(out)


def _check_cycles(check: _Checker, tiers: tuple[Tier, ...]) -> None:
    graph = {t.name: [p for p in t.preempts if p != t.name] for t in tiers}
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    reported: set[frozenset[str]] = set()

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        path.append(node)
        for nxt in graph.get(node, ()):
            if state.get(nxt) == 1:
                cycle = [*path[path.index(nxt) :], nxt]
                key = frozenset(cycle)
                if key not in reported:
                    reported.add(key)
                    check.error(
                        ("tiers", cycle[0], "preempts"),
                        f"preemption cycle: {' -> '.join(cycle)}",
                    )
            elif nxt in graph and state.get(nxt) is None:
                visit(nxt, path)
        path.pop()
        state[node] = 2

    for name in graph:
        if state.get(name) is None:
            visit(name, [])


def _kinds(
    check: _Checker, raw: object, partitions: tuple[Partition, ...], shards_per_gpu: int | None
) -> tuple[JobKind, ...]:
    table = check.table(("kinds",), raw)
    part_names = {p.name for p in partitions}
    out = []
    for name, value in table.items():
        keys = ("kinds", name)
        if check.string(keys, name, pattern=_NAME) is None:
            continue
        body = check.table(keys, value)
        check.unknown_keys(keys, body, _KIND_KEYS)
        if "slice" not in body:
            check.error((*keys, "slice"), "missing: e.g. 'mig:3g.40gb', 'shard:2' or 'gpu:1'")
            continue
        sl = _slice(check, keys, body, shards_per_gpu)
        partition = check.string((*keys, "partition"), body.get("partition"), pattern=_SLURM_NAME)
        if partition is not None and partitions and partition not in part_names:
            check.error(
                (*keys, "partition"),
                f"unknown partition '{partition}' (partitions: {', '.join(sorted(part_names))})",
            )
        time_limit = check.integer((*keys, "time_limit_min"), body.get("time_limit_min"), minimum=1)
        accel = check.names((*keys, "accel"), body.get("accel"), pattern=_ACCEL_CLASS)
        if sl is not None:
            out.append(
                JobKind(
                    name=name,
                    slice=sl,
                    partition=partition,
                    time_limit_min=time_limit,
                    description=check.string(
                        (*keys, "description"), body.get("description"), free_text=True
                    )
                    or "",
                    accel=accel,
                )
            )
    return tuple(out)


def _slice(
    check: _Checker, keys: tuple[str, ...], body: dict, shards_per_gpu: int | None
) -> Slice | None:
    skeys = (*keys, "slice")
    text = body.get("slice")
    gres_type = check.string((*keys, "gres_type"), body.get("gres_type"), pattern=_NAME)
    gpu_model_text = check.string((*keys, "gpu_model"), body.get("gpu_model"))
    model = None
    if gpu_model_text is not None:
        model = next((m for m in GPU_MODELS if m.key == gpu_model_text), None) or model_for_type(
            gpu_model_text
        )
        if model is None:
            known = ", ".join(m.key for m in GPU_MODELS)
            check.error((*keys, "gpu_model"), f"unknown GPU model '{gpu_model_text}' ({known})")
            return None
    if not isinstance(text, str) or ":" not in text or _CONTROL_ONE_LINE.search(text):
        check.error(skeys, f"{text!r}: use 'mig:PROFILE', 'shard:N' or 'gpu:N'")
        return None
    kind, _, arg = text.partition(":")
    kind = kind.strip().lower()
    arg = arg.strip()
    if kind == SLICE_MIG:
        offering = models_offering(arg)
        if model is not None:
            offering = [(m, p) for m, p in offering if m.key == model.key]
        if not offering:
            where = f"the {model.key}" if model else "any GPU model in the catalogue"
            known = sorted({p.name for m in GPU_MODELS for p in m.mig_profiles})
            if model is not None:
                known = [p.name for p in model.mig_profiles]
            check.error(
                skeys,
                f"MIG profile '{arg}' is not offered by {where} (profiles: {', '.join(known)})",
            )
            return None
        if gres_type is None:
            # The type `slurmgpu gen-gres` writes by default (--mig-types short): the profile.
            gres_type = arg
        # gpu_model only when known: it decides the memory the wrapper counts on
        known_model = model.key if model is not None else None
        if known_model is None and len({m.key for m, _ in offering}) == 1:
            known_model = offering[0][0].key
        return Slice(SLICE_MIG, 1, mig_profile=arg, gres_type=gres_type, gpu_model=known_model)
    if kind in (SLICE_SHARD, SLICE_GPU):
        # ASCII digits only: str.isdigit() also accepts '²', which int() refuses
        if not re.fullmatch(r"[0-9]{1,10}", arg) or not 1 <= int(arg) <= MAX_U32:
            check.error(
                skeys,
                f"{text!r}: the count after '{kind}:' must be an integer from 1 to {MAX_U32}",
            )
            return None
        count = int(arg)
        if kind == SLICE_SHARD:
            if shards_per_gpu is None:
                check.error(skeys, "shard slices need the top-level shards_per_gpu")
                return None
            if count > shards_per_gpu:
                check.error(
                    skeys,
                    f"{count} shards is more than one GPU offers (shards_per_gpu = "
                    f"{shards_per_gpu}): use gpu:N for whole GPUs",
                )
                return None
        if model is not None and gres_type is None and kind == SLICE_GPU:
            gres_type = model.short_type
        return Slice(
            kind, count, gres_type=gres_type, gpu_model=model.key if model is not None else None
        )
    check.error(skeys, f"{text!r}: unknown slice kind '{kind}' (use mig, shard or gpu)")
    return None


def _idle(
    check: _Checker, raw: object, tier_names: set[str], partition_names: set[str]
) -> IdlePolicy:
    """`[idle]`: the idle-GPU rule (docs/idle.md), its exemptions and overrides."""
    keys = ("idle",)
    body = check.table(keys, raw)
    check.unknown_keys(keys, body, _IDLE_KEYS)
    rule = _idle_rule(check, keys, body, IdleRule())

    def known_tiers(k: tuple[str, ...], names: tuple[str, ...]) -> tuple[str, ...]:
        for name in names:
            if tier_names and name not in tier_names:
                check.error(k, f"unknown tier '{name}' (tiers: {', '.join(sorted(tier_names))})")
        return names

    def overrides(table: str, known: set[str], what: str) -> tuple[tuple[str, IdleRule], ...]:
        out = []
        for name, value in check.table((*keys, table), body.get(table, {})).items():
            k = (*keys, table, name)
            if known and name not in known:
                check.error(k, f"unknown {what} '{name}' ({what}s: {', '.join(sorted(known))})")
                continue
            sub = check.table(k, value)
            check.unknown_keys(k, sub, set(IDLE_RULE_KEYS))
            out.append((name, _idle_rule(check, k, sub, rule)))
        return tuple(out)

    gap = check.number((*keys, "max_gap_s"), body.get("max_gap_s"), above=True)
    actions = check.integer(
        (*keys, "max_actions_per_run"), body.get("max_actions_per_run"), minimum=0
    )
    notice = check.number((*keys, "min_notice_min"), body.get("min_notice_min"))
    mail_from = check.string((*keys, "mail_from"), body.get("mail_from")) or ""
    domain = check.string((*keys, "mail_domain"), body.get("mail_domain"), pattern=_SLURM_NAME)
    return IdlePolicy(
        rule=rule,
        exempt_tiers=known_tiers(
            (*keys, "exempt_tiers"),
            check.names((*keys, "exempt_tiers"), body.get("exempt_tiers"), pattern=_NAME),
        ),
        exempt_interactive=check.boolean(
            (*keys, "exempt_interactive"), body.get("exempt_interactive"), True
        ),
        exempt_users=check.names(
            (*keys, "exempt_users"), body.get("exempt_users"), pattern=_SLURM_NAME
        ),
        exempt_accounts=check.names(
            (*keys, "exempt_accounts"), body.get("exempt_accounts"), pattern=_SLURM_NAME
        ),
        exempt_partitions=check.names(
            (*keys, "exempt_partitions"), body.get("exempt_partitions"), pattern=_SLURM_NAME
        ),
        exempt_reasons=check.names(
            (*keys, "exempt_reasons"), body.get("exempt_reasons"), pattern=_NAME
        ),
        max_gap_s=300.0 if gap is None else gap,
        max_actions_per_run=10 if actions is None else actions,
        min_notice_min=15.0 if notice is None else notice,
        tiers=overrides("tiers", tier_names, "tier"),
        partitions=overrides("partitions", partition_names, "partition"),
        mail_from=mail_from,
        mail_domain=domain or "",
        admin_mail=check.names((*keys, "admin_mail"), body.get("admin_mail"), pattern=_SLURM_NAME),
    )


def _idle_rule(check: _Checker, keys: tuple[str, ...], body: dict, base: IdleRule) -> IdleRule:
    """The rule keys of one table, on top of `base` (the default rule for an override)."""
    window = check.number((*keys, "window_min"), body.get("window_min"), above=True)
    util = check.number((*keys, "util_pct"), body.get("util_pct"), maximum=100.0)
    window = base.window_min if window is None else window
    warn = base.warn_after_min
    if "warn_after_min" in body:
        raw = body["warn_after_min"]
        if not isinstance(raw, list):
            check.error((*keys, "warn_after_min"), f"must be a list, not {_type_name(raw)}")
        else:
            values = [check.number((*keys, "warn_after_min"), v, above=True) for v in raw]
            warn = tuple(v for v in values if v is not None)
    if list(warn) != sorted(set(warn)) or any(w >= window for w in warn):
        check.error(
            (*keys, "warn_after_min"),
            f"{list(warn)}: must rise, each below window_min = {window:g} (the action comes "
            "after the last warning)",
        )
    action = body.get("action", base.action)
    if action not in IDLE_ACTIONS:
        check.error((*keys, "action"), f"{action!r}: use one of {', '.join(IDLE_ACTIONS)}")
        action = base.action
    memory = base.memory_held_mib
    if "memory_held_mib" in body:
        memory = check.number((*keys, "memory_held_mib"), body["memory_held_mib"], above=True)
    return IdleRule(
        window_min=window,
        util_pct=base.util_pct if util is None else util,
        warn_after_min=warn,
        action=action,
        memory_held_mib=memory,
    )
