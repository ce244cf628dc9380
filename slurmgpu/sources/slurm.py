"""Slurm's command-line tools as a source: version, `scontrol show`, GRES strings.

Only argument lists through `slurmgpu.util.proc.run`; the Slurm configuration in use is the
one `SLURM_CONF` (inherited from the environment, or passed in `env`) points at.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from slurmgpu.errors import SlurmCommandError, UsageError
from slurmgpu.util.proc import run

_VERSION = re.compile(r"slurm(?:-wlm)?\s+(\d+)\.(\d+)\.(\d+)")
# a `Key=` that starts a new field in `scontrol show -o` output (values may contain spaces).
# scontrol's keys are CamelCase, so a lowercase `tier=P1` inside a Comment= value stays part
# of the value rather than starting a field.
_FIELD = re.compile(r"(?:^|\s)([A-Z][A-Za-z0-9_:/.]*)=")


def slurm_version(env: Mapping[str, str] | None = None) -> tuple[int, int, int]:
    """The installed Slurm release (e.g. `slurm 22.05.8` -> (22, 5, 8)).

    `sinfo --version` (and `sacct -V`) need a reachable configuration on 22.05 and fail
    without one, so `slurmd -V`, which prints the version without reading slurm.conf, is
    tried after it (it is on GPU nodes, where gen-gres runs).
    """
    outputs = []
    for argv in (["sinfo", "--version"], ["slurmd", "-V"]):
        try:
            proc = run(argv, env=env, timeout=15, check=False)
        except SlurmCommandError as exc:
            outputs.append(str(exc))
            continue
        m = _VERSION.search(proc.stdout + proc.stderr)
        if m:
            return int(m.group(1)), int(m.group(2)), int(m.group(3))
        outputs.append(f"{argv[0]}: {(proc.stdout + proc.stderr).strip()[:120]}")
    raise SlurmCommandError("cannot read the Slurm version: " + "; ".join(outputs))


def parse_scontrol_record(line: str) -> dict[str, str]:
    """One line of `scontrol show -o node|partition|job` -> {key: value}."""
    matches = list(_FIELD.finditer(line))
    record: dict[str, str] = {}
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        record[m.group(1)] = line[m.end() : end].strip()
    return record


def scontrol_show(kind: str, name: str | None = None, env: Mapping[str, str] | None = None):
    """`scontrol show -o KIND [NAME]` as a list of records (dicts)."""
    argv = ["scontrol", "show", "-o", kind] + ([name] if name else [])
    out = run(argv, env=env, timeout=30).stdout
    return [parse_scontrol_record(line) for line in out.splitlines() if line.strip()]


def scontrol_show_config(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`scontrol show config` as {Key: Value} (the live controller's settings)."""
    out = run(["scontrol", "show", "config"], env=env, timeout=30).stdout
    config: dict[str, str] = {}
    for line in out.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            config[key.strip()] = value.strip()
    return config


@dataclass(frozen=True)
class GresItem:
    """One element of a node's Gres string: `gpu:h100:8(S:0-1)` -> name, type, count."""

    name: str
    type: str | None
    count: int
    sockets: str | None = None


_GRES_ITEM = re.compile(
    r"^(?P<name>[A-Za-z0-9_]+)(?::(?P<type>[^:(]+))?(?::(?P<count>\d+))?(?:\((?P<extra>[^)]*)\))?$"
)


def parse_gres_string(text: str) -> list[GresItem]:
    """`gpu:h100:8(S:0-1),shard:32` -> [GresItem(gpu, h100, 8, "0-1"), GresItem(shard, None, 32)].

    Handles the forms Slurm prints for nodes (Gres=, GresUsed= without IDX) and jobs
    (`gres:gpu:2` in TRES_PER_NODE). `(null)` and empty text give [].
    """
    text = text.strip()
    if not text or text == "(null)":
        return []
    items: list[GresItem] = []
    depth, cur, parts = 0, [], []
    for ch in text:  # split on commas outside parentheses
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    for raw in parts:
        raw = raw.strip()
        if raw.startswith("gres:") or raw.startswith("gres/"):
            raw = raw[5:]
        m = _GRES_ITEM.match(raw)
        if not m:
            raise ValueError(f"unrecognised GRES element {raw!r} in {text!r}")
        gtype, count = m.group("type"), m.group("count")
        if count is None and gtype is not None and gtype.isdigit():
            gtype, count = None, gtype  # `gpu:8` has no type
        extra = m.group("extra") or ""
        sockets = extra[2:] if extra.startswith("S:") else None
        items.append(GresItem(m.group("name"), gtype, int(count) if count else 1, sockets))
    return items


def parse_slurm_version(text: str) -> tuple[int, int, int]:
    """`"24.05"` -> (24, 5, 0), `"24.05.5"` -> (24, 5, 5); a `--slurm-version` option value."""
    m = re.fullmatch(r"\s*(\d{2})\.(\d{1,2})(?:\.(\d{1,4}))?\s*", text, re.ASCII)  # not `٢٤`
    if not m:
        raise UsageError(f"not a Slurm version: {text!r} (use e.g. 22.05 or 24.05.5)")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def target_slurm_version(
    option: str | None, default: tuple[int, int, int] = (22, 5, 0)
) -> tuple[tuple[int, int, int], str]:
    """The Slurm release to generate for, and where that came from (for headers/messages).

    An explicit option wins; else the installed Slurm (`sinfo --version`); else `default`.
    """
    if option is not None:  # an explicit empty --slurm-version= is a mistake, not "detect"
        return parse_slurm_version(option), "--slurm-version"
    try:
        return slurm_version(), "installed Slurm"
    except SlurmCommandError:
        return default, "default (no Slurm found here; pass --slurm-version)"
