"""Slurm's range syntax, done once: hostlists (`gpu[01-04],dgx7`) and id lists (`0-3,8`).

Every renderer and parser that meets `a[1-3]` or `0-55,112-167` goes through here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_BRACKET = re.compile(r"^(?P<prefix>[^\[\]]*)\[(?P<body>[^\[\]]+)\](?P<suffix>.*)$")


def parse_id_list(text: str) -> list[int]:
    """`"0-3,8,10-11"` -> `[0, 1, 2, 3, 8, 10, 11]` (sorted, unique). Empty text -> []."""
    out: set[int] = set()
    text = text.strip()
    if not text:
        return []
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise ValueError(f"empty element in id list {text!r}")
        if "-" in part:
            lo_s, hi_s = part.split("-", 1)
            lo, hi = int(lo_s), int(hi_s)
            if hi < lo:
                raise ValueError(f"descending range {part!r} in id list {text!r}")
            out.update(range(lo, hi + 1))
        else:
            out.add(int(part))
    return sorted(out)


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


def expand_hostlist(text: str) -> list[str]:
    """`"gpu[01-03,07],dgx"` -> `["gpu01", "gpu02", "gpu03", "gpu07", "dgx"]` (order kept).

    Zero padding follows the range's lower bound, as Slurm does (`[01-10]` -> `01`..`10`).
    Nested brackets repeat (`r[1-2]n[1-2]`).
    """
    names: list[str] = []
    for item in _split_top_level(text.strip()):
        names.extend(_expand_one(item))
    return names


def _expand_one(item: str) -> list[str]:
    m = _BRACKET.match(item)
    if not m:
        if "[" in item or "]" in item:
            raise ValueError(f"malformed hostlist element {item!r}")
        return [item]
    prefix, body, suffix = m.group("prefix"), m.group("body"), m.group("suffix")
    out: list[str] = []
    for rng in body.split(","):
        rng = rng.strip()
        if "-" in rng:
            lo_s, hi_s = rng.split("-", 1)
            if not (lo_s.isdigit() and hi_s.isdigit()) or int(hi_s) < int(lo_s):
                raise ValueError(f"malformed range {rng!r} in {item!r}")
            width = len(lo_s)
            seq = [f"{n:0{width}d}" for n in range(int(lo_s), int(hi_s) + 1)]
        else:
            if not rng.isdigit():
                raise ValueError(f"malformed range {rng!r} in {item!r}")
            seq = [rng]
        for s in seq:
            out.extend(_expand_one(prefix + s + suffix) if "[" in suffix else [prefix + s + suffix])
    return out


_TAIL_NUM = re.compile(r"^(?P<prefix>.*?)(?P<num>\d+)(?P<suffix>\D*)$")


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
