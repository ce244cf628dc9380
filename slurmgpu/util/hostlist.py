"""Slurm's range syntax, done once: hostlists (`gpu[01-04],dgx7`) and id lists (`0-3,8`).

Every renderer and parser that meets `a[1-3]` or `0-55,112-167` goes through here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from slurmgpu.errors import LimitError

# Limits on expansion: input names a range, slurmgpu must not build a list of a hundred
# million names from it. 65,536 is far above any node's cpu count (Linux NR_CPUS is at most
# 8,192) and any cluster slurmgpu generates for; beyond it the input is refused, not truncated.
MAX_IDS = 65_536
MAX_HOSTS = 65_536


class ExpansionLimitError(LimitError, ValueError):
    """A range expands past the limit. A ValueError too, so callers that treat a malformed
    range as 'unknown' (the accounting loader's array ranges) keep doing so."""


def _ascii_digits(text: str) -> bool:
    """`str.isdigit` takes digits of every script (`٣`, `１`, `²`); Slurm reads ASCII only."""
    return text.isascii() and text.isdigit()


def _id_ranges(text: str) -> list[tuple[int, int]]:
    """`"0-3,8"` -> [(0, 3), (8, 8)], checked but not expanded."""
    ranges = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise ValueError(f"empty element in id list {text!r}")
        lo_s, sep, hi_s = part.partition("-")
        if not _ascii_digits(lo_s.strip()) or (sep and not _ascii_digits(hi_s.strip())):
            raise ValueError(f"malformed element {part!r} in id list {text!r}")
        lo = int(lo_s)
        hi = int(hi_s) if sep else lo
        if hi < lo:
            raise ValueError(f"descending range {part!r} in id list {text!r}")
        ranges.append((lo, hi))
    return ranges


def count_id_list(text: str) -> int:
    """How many ids `"0-3,8"` names, without expanding: the sum of the range sizes (exact for
    Slurm's own output, whose ranges never overlap). For array ranges of any size."""
    text = text.strip()
    return sum(hi - lo + 1 for lo, hi in _id_ranges(text)) if text else 0


def parse_id_list(text: str, *, limit: int = MAX_IDS) -> list[int]:
    """`"0-3,8,10-11"` -> `[0, 1, 2, 3, 8, 10, 11]` (sorted, unique). Empty text -> [].

    More than `limit` ids raises `ExpansionLimitError` before anything is expanded.
    """
    text = text.strip()
    if not text:
        return []
    ranges = _id_ranges(text)
    total = sum(hi - lo + 1 for lo, hi in ranges)
    if total > limit:
        raise ExpansionLimitError(
            f"id list {_short(text)} names {total} ids, more than the limit of {limit}"
        )
    out: set[int] = set()
    for lo, hi in ranges:
        out.update(range(lo, hi + 1))
    return sorted(out)


def _short(text: str) -> str:
    return repr(text if len(text) <= 60 else text[:57] + "...")


def format_id_list(ids: Iterable[int]) -> str:
    """`[0, 1, 2, 3, 8]` -> `"0-3,8"`: sorted, unique, consecutive runs folded."""
    values = sorted(set(ids))
    runs: list[str] = []
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        runs.append(str(values[i]) if i == j else f"{values[i]}-{values[j]}")
        i = j + 1
    return ",".join(runs)


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in hostlist {text!r}")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise ValueError(f"unbalanced '[' in hostlist {text!r}")
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def expand_hostlist(text: str, *, limit: int = MAX_HOSTS) -> list[str]:
    """`"gpu[01-03,07],dgx"` -> `["gpu01", "gpu02", "gpu03", "gpu07", "dgx"]` (order kept).

    Zero padding follows the range's lower bound, as Slurm does (`[01-10]` -> `01`..`10`).
    Several bracket groups multiply (`r[1-2]n[1-2]`). More than `limit` names raises
    `ExpansionLimitError` before they are built.
    """
    items = _split_top_level(text.strip())
    groups = [_parse_item(item) for item in items]
    total = 0
    for segments in groups:
        size = 1
        for seg in segments:
            size *= len(seg) if isinstance(seg, list) else 1
            if total + size > limit:
                raise ExpansionLimitError(
                    f"hostlist {_short(text)} names more than the limit of {limit} hosts"
                )
        total += size
    names: list[str] = []
    for segments in groups:
        partial = [""]
        for seg in segments:
            choices = seg if isinstance(seg, list) else [seg]
            partial = [head + choice for head in partial for choice in choices]
        names.extend(partial)
    return names


def _parse_item(item: str) -> list[str | list[str]]:
    """`n[1-2]x[5,7]` -> ["n", ["1", "2"], "x", ["5", "7"]] (literals and choice lists)."""
    segments: list[str | list[str]] = []
    rest = item
    while rest:
        open_at = rest.find("[")
        close_at = rest.find("]")
        if open_at < 0:
            if close_at >= 0:
                raise ValueError(f"malformed hostlist element {item!r}")
            segments.append(rest)
            break
        close_at = rest.find("]", open_at)
        if close_at < 0 or "[" in rest[open_at + 1 : close_at] or "]" in rest[:open_at]:
            raise ValueError(f"malformed hostlist element {item!r}")
        segments.append(rest[:open_at])
        segments.append(_bracket_choices(rest[open_at + 1 : close_at], item))
        rest = rest[close_at + 1 :]
    return segments


def _bracket_choices(body: str, item: str) -> list[str]:
    if not body.strip():
        raise ValueError(f"empty brackets in {item!r}")
    choices: list[str] = []
    for rng in body.split(","):
        rng = rng.strip()
        lo_s, sep, hi_s = rng.partition("-")
        if not _ascii_digits(lo_s) or (sep and not _ascii_digits(hi_s)):
            raise ValueError(f"malformed range {rng!r} in {item!r}")
        if not sep:
            choices.append(rng)
            continue
        lo, hi = int(lo_s), int(hi_s)
        if hi < lo:
            raise ValueError(f"malformed range {rng!r} in {item!r}")
        if hi - lo + 1 + len(choices) > MAX_HOSTS:
            raise ExpansionLimitError(
                f"hostlist range {rng!r} in {_short(item)} names more than the limit of "
                f"{MAX_HOSTS} hosts"
            )
        width = len(lo_s)
        choices.extend(f"{n:0{width}d}" for n in range(lo, hi + 1))
    return choices


_TAIL_NUM = re.compile(r"^(?P<prefix>.*?)(?P<num>[0-9]+)(?P<suffix>[^0-9]*)$")


def compress_hostlist(names: Iterable[str]) -> str:
    """`["gpu01", "gpu02", "gpu03", "dgx"]` -> `"dgx,gpu[01-03]"`.

    Groups by (prefix, suffix) around the last number in each name, as Slurm does: unpadded
    numbers of any length share one range (`n[9-11]`); zero-padded ones keep their width
    (`gpu[01-10]`), and an unpadded number joins a padded range of its own length. Output is
    sorted, so it is deterministic for the same set of names.
    """
    by_affix: dict[tuple[str, str], list[str]] = {}
    plain: set[str] = set()
    for name in names:
        m = _TAIL_NUM.match(name)
        if not m:
            plain.add(name)
            continue
        by_affix.setdefault((m.group("prefix"), m.group("suffix")), []).append(m.group("num"))
    parts: list[tuple[str, str]] = [(p, p) for p in plain]
    for (prefix, suffix), digits in by_affix.items():
        padded_widths = {len(d) for d in digits if len(d) > 1 and d.startswith("0")}
        groups: dict[int, set[int]] = {}
        for d in digits:
            width = len(d) if len(d) in padded_widths else 0
            groups.setdefault(width, set()).add(int(d))
        for width, nums in groups.items():
            text = _format_range(prefix, suffix, width, sorted(nums))
            parts.append((f"{prefix}\0{width:04d}\0{suffix}", text))
    return ",".join(text for _, text in sorted(parts))


def _format_range(prefix: str, suffix: str, width: int, ordered: list[int]) -> str:
    if len(ordered) == 1:
        return f"{prefix}{ordered[0]:0{width}d}{suffix}"
    runs = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        lo, hi = ordered[i], ordered[j]
        runs.append(f"{lo:0{width}d}" if i == j else f"{lo:0{width}d}-{hi:0{width}d}")
        i = j + 1
    return f"{prefix}[{','.join(runs)}]{suffix}"
