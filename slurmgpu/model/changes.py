"""What-if changes: the machine-readable `change` strings `replay --what-if` accepts.

Each change is a frozen dataclass with `parse` (from its string) and `format` (back to the same
string), so `analyze` recommendations can emit them and `replay` can read them back unchanged:

    move:FROM:TO:GPUS                          whole nodes' GPUs from partition FROM to TO
    carve:PARTITION:GPUS:PROFILE=COUNT[,...]   GPUS whole GPUs become MIG slices (per GPU)
    shard:PARTITION:GPUS:N                     GPUS whole GPUs become N shards each
    tier:QOS:KEY=VALUE[,KEY=VALUE]             a QOS's priority / preemption / grace time
                                               (keys: priority, preempts (QOS+QOS or "none"),
                                               grace_s, mode (requeue|cancel|off))
    idle:FILE                                  jobs the idle policy flagged end at their
                                               action time (FILE: `slurmgpu idle --format
                                               json`)
    CHANGE + CHANGE                            several together, one scenario (a
                                               recommendation's `changes`)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from slurmgpu.errors import UsageError
from slurmgpu.util import numbers

_NAME = re.compile(r"[A-Za-z0-9_.+-]+")
_PROFILE = re.compile(r"[0-9]{1,2}g\.[0-9]{1,4}gb(\+me)?")  # ASCII digits (`\d` takes `٣`)
# the largest count a change takes: GPUs, MIG instances, shards; a QOS priority or grace time
# is a uint32 in Slurm
MAX_COUNT = 1_000_000
MAX_UINT32 = 2**32 - 1
PREEMPT_MODES = ("requeue", "cancel", "off")


def _name(text: str, what: str, change: str) -> str:
    if not _NAME.fullmatch(text):
        raise UsageError(f"change {change!r}: {what} {text!r} is not a Slurm name")
    return text


def _count(text: str, what: str, change: str, minimum: int = 1, maximum: int = MAX_COUNT) -> int:
    """ASCII digits (`util.numbers.whole`: not `٨`, `²`, `1_0`, `+1`), minimum..maximum."""
    try:
        return numbers.whole(text, minimum, maximum, what)
    except ValueError:
        raise UsageError(
            f"change {change!r}: {what} {text[:40]!r} must be a whole number from {minimum} "
            f"to {maximum} in ASCII digits"
        ) from None


@dataclass(frozen=True)
class Move:
    """Move `gpus` GPUs (whole nodes) from partition `source` to partition `target`."""

    source: str
    target: str
    gpus: int

    def format(self) -> str:
        return f"move:{self.source}:{self.target}:{self.gpus}"


@dataclass(frozen=True)
class Carve:
    """Carve `gpus` whole GPUs of `partition` into MIG instances; `layout` is per GPU."""

    partition: str
    gpus: int
    layout: tuple[tuple[str, int], ...]

    def format(self) -> str:
        body = ",".join(f"{p}={n}" for p, n in self.layout)
        return f"carve:{self.partition}:{self.gpus}:{body}"


@dataclass(frozen=True)
class Shard:
    """Share `gpus` whole GPUs of `partition` as `per_gpu` Slurm shards each."""

    partition: str
    gpus: int
    per_gpu: int

    def format(self) -> str:
        return f"shard:{self.partition}:{self.gpus}:{self.per_gpu}"


@dataclass(frozen=True)
class TierChange:
    """Change one QOS: None leaves a setting as it is."""

    qos: str
    priority: int | None = None
    preempts: tuple[str, ...] | None = None
    grace_s: int | None = None
    mode: str | None = None

    def format(self) -> str:
        parts = []
        if self.priority is not None:
            parts.append(f"priority={self.priority}")
        if self.preempts is not None:
            parts.append("preempts=" + ("+".join(self.preempts) or "none"))
        if self.grace_s is not None:
            parts.append(f"grace_s={self.grace_s}")
        if self.mode is not None:
            parts.append(f"mode={self.mode}")
        return f"tier:{self.qos}:" + ",".join(parts)


@dataclass(frozen=True)
class IdleReclaim:
    """The idle policy on: each run `slurmgpu idle` flagged (the JSON file at `path`) ends at
    its `action_at` instead of its recorded end (its work shrinks by end - action_at)."""

    path: str

    def format(self) -> str:
        return f"idle:{self.path}"


@dataclass(frozen=True)
class Together:
    """Several changes applied together as one scenario, in order (`A + B`): what a
    recommendation's `changes` list is (a carve in two layouts)."""

    changes: tuple[Move | Carve | Shard | TierChange | IdleReclaim, ...]

    def format(self) -> str:
        return TOGETHER.join(c.format() for c in self.changes)


Change = Move | Carve | Shard | TierChange | IdleReclaim | Together
TOGETHER = " + "  # spaces required: `preempts=p1+p2` is one change


def parse_change(text: str) -> Change:
    """One change string -> its dataclass; UsageError naming the string when it is malformed.

    `A + B` (spaces around the `+`) is the changes A and B together, one scenario."""
    if re.search(r"\s\+\s", text):
        parts = [p.strip() for p in re.split(r"\s+\+\s+", text.strip())]
        parsed = []
        for part in parts:
            if not part:
                raise UsageError(f"change {text!r}: an empty change around ' + '")
            parsed.append(parse_change(part))
        return Together(tuple(parsed))  # type: ignore[arg-type]
    kind, _, rest = text.strip().partition(":")
    fields = rest.split(":")
    if kind == "move" and len(fields) == 3:
        src, dst = _name(fields[0], "partition", text), _name(fields[1], "partition", text)
        if src == dst:
            raise UsageError(f"change {text!r}: FROM and TO are the same partition")
        return Move(src, dst, _count(fields[2], "GPUS", text))
    if kind == "carve" and len(fields) == 3:
        layout = []
        for item in fields[2].split(","):
            profile, sep, count = item.partition("=")
            if not sep or not _PROFILE.fullmatch(profile):
                raise UsageError(f"change {text!r}: {item!r} is not PROFILE=COUNT (1g.10gb=7)")
            layout.append((profile, _count(count, f"count of {profile}", text)))
        names = [p for p, _ in layout]
        if len(set(names)) != len(names):
            raise UsageError(f"change {text!r}: a profile is listed twice")
        part = _name(fields[0], "partition", text)
        return Carve(part, _count(fields[1], "GPUS", text), tuple(layout))
    if kind == "shard" and len(fields) == 3:
        part = _name(fields[0], "partition", text)
        return Shard(part, _count(fields[1], "GPUS", text), _count(fields[2], "N", text, 2))
    if kind == "idle":
        if not rest.strip() or any(c in rest for c in "\n\r\x00"):
            raise UsageError(f"change {text!r}: use idle:FILE (the JSON of `slurmgpu idle`)")
        return IdleReclaim(rest.strip())
    if kind == "tier" and len(fields) == 2:
        return _parse_tier(_name(fields[0], "QOS", text), fields[1], text)
    raise UsageError(
        f"change {text!r}: use move:FROM:TO:GPUS, carve:PARTITION:GPUS:PROFILE=COUNT[,...], "
        "shard:PARTITION:GPUS:N, tier:QOS:KEY=VALUE[,...] or idle:FILE"
    )


def _parse_tier(qos: str, body: str, text: str) -> TierChange:
    values: dict[str, object] = {}
    for item in body.split(","):
        key, sep, value = item.partition("=")
        if not sep or key in values:
            raise UsageError(f"change {text!r}: {item!r} is not a new KEY=VALUE")
        if key == "priority":
            values[key] = _count(value, "priority", text, 0, MAX_UINT32)
        elif key == "grace_s":
            values[key] = _count(value, "grace_s", text, 0, MAX_UINT32)
        elif key == "preempts":
            names = () if value == "none" else tuple(value.split("+"))
            values[key] = tuple(_name(n, "QOS", text) for n in names)
        elif key == "mode":
            if value not in PREEMPT_MODES:
                raise UsageError(f"change {text!r}: mode must be one of {', '.join(PREEMPT_MODES)}")
            values[key] = value
        else:
            raise UsageError(
                f"change {text!r}: unknown key {key!r} (priority, preempts, grace_s, mode)"
            )
    return TierChange(qos, **values)  # type: ignore[arg-type]


def format_change(change: Change) -> str:
    """The change's string (what `parse_change` reads back to an equal dataclass)."""
    return change.format()
