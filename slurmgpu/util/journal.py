"""The one journal of commands that change a live cluster: typed records, sealed, validated.

A command that changes a cluster (`mig apply`, `rebalance apply`, `qos apply`) records what
it did, and what undoing it needs, as frozen or plain dataclasses. This module is their only
way to and from disk:

- `write_record` / `read_record`: one JSON object in one file (a run's state: `mig apply`'s
  journal, rewritten atomically after every step);
- `append_record` / `read_records`: JSON lines, one record each, appended and fsynced (a
  change log: `rebalance`'s moves and undos, `qos apply`'s commands).

Every record carries `sha256`, the digest of its own canonical JSON: a journal cut short, a
bit flip or a hand edit is found before anything is done from it. Read back, a record is
checked field by field against its dataclass (types, nested records) and then by its own
`check()` (the states and steps that make sense together); any problem is one
`JournalError` naming the file (and line) - never a traceback, never a guess.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from slurmgpu.errors import SlurmgpuError

T = TypeVar("T")
SEAL = "sha256"


class JournalError(SlurmgpuError):
    """A journal or change log that cannot be trusted (unreadable, corrupted, nonsense)."""


def _digest(obj: Mapping[str, Any]) -> str:
    body = {k: v for k, v in obj.items() if k != SEAL}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def sealed(record: Any) -> dict[str, Any]:
    """The record as a JSON object with its digest."""
    obj = dataclasses.asdict(record)
    obj[SEAL] = _digest(obj)
    return obj


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _convert(value: Any, tp: Any, where: str) -> Any:
    """`value` (from JSON) as type `tp`, or JournalError."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        for option in args:
            try:
                return _convert(value, option, where)
            except JournalError:
                continue
        raise JournalError(f"{where}: {value!r:.60} is not {' or '.join(map(_type_name, args))}")
    if tp is type(None):
        if value is None:
            return None
        raise JournalError(f"{where}: expected null")
    if dataclasses.is_dataclass(tp):
        return from_json(tp, value, where)
    if tp is bool or tp is str:
        if type(value) is not tp:
            raise JournalError(f"{where}: {value!r:.60} is not {tp.__name__}")
        return value
    if tp is int:
        if type(value) is not int:
            raise JournalError(f"{where}: {value!r:.60} is not an integer")
        return value
    if tp is float:
        if type(value) not in (int, float):
            raise JournalError(f"{where}: {value!r:.60} is not a number")
        return float(value)
    if origin in (list, tuple):
        if not isinstance(value, list):
            raise JournalError(f"{where}: {value!r:.60} is not a list")
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(value) != len(args):
                raise JournalError(f"{where}: expected {len(args)} items, got {len(value)}")
            pairs = enumerate(zip(value, args, strict=True))
            return tuple(_convert(v, a, f"{where}[{i}]") for i, (v, a) in pairs)
        item = args[0] if args else Any
        out = [_convert(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(out) if origin is tuple else out
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise JournalError(f"{where}: {value!r:.60} is not an object")
        key_t, val_t = args or (Any, Any)
        return {
            _convert(k, key_t, f"{where} key"): _convert(v, val_t, f"{where}.{k}")
            for k, v in value.items()
        }
    raise JournalError(f"{where}: cannot read a {_type_name(tp)}")  # a slurmgpu bug


def from_json(cls: type[T], obj: Any, where: str) -> T:
    """A `cls` from a JSON object: every field present (or defaulted) and of its type."""
    if not isinstance(obj, dict):
        raise JournalError(f"{where}: not a JSON object but {type(obj).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(obj) - set(fields) - {SEAL})
    if unknown:
        raise JournalError(f"{where}: unknown field(s) {', '.join(map(str, unknown))[:80]}")
    kwargs = {}
    for name, f in fields.items():
        if name in obj:
            kwargs[name] = _convert(obj[name], hints[name], f"{where}: {name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise JournalError(f"{where}: field {name} missing")
    record = cls(**kwargs)
    check = getattr(record, "check", None)
    if check is not None:
        problem = check()
        if problem:
            raise JournalError(f"{where}: {problem}")
    return record


def _unseal(obj: Any, where: str) -> Any:
    if isinstance(obj, dict) and SEAL in obj and obj[SEAL] != _digest(obj):
        raise JournalError(f"{where}: its checksum does not match (corrupted or edited)")
    return obj


def write_record(path: Path, record: Any) -> None:
    """Write one record as the whole file, atomically."""
    from slurmgpu.util.atomic import write_atomic

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(sealed(record), indent=1) + "\n", backup=False, mode=0o600)


def read_record(path: Path, cls: type[T], *, sealed_only: bool = False) -> T:
    """The record in `path`, validated; `sealed_only`: refuse one without a checksum."""
    where = f"journal {path}"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise JournalError(f"cannot read the {where}: {getattr(exc, 'strerror', exc)}") from None
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise JournalError(f"{where}: not JSON ({exc}); it cannot be trusted") from None
    if sealed_only and isinstance(obj, dict) and SEAL not in obj:
        raise JournalError(f"{where}: no checksum; it cannot be trusted")
    return from_json(cls, _unseal(obj, where), where)


def append_record(path: Path, record: Any) -> None:
    """Append one record as a JSON line and fsync it before returning."""
    path = Path(path)
    line = json.dumps(sealed(record), sort_keys=True) + "\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise JournalError(f"cannot write the change log {path}: {exc.strerror}") from None


def read_records(
    path: Path, cls: type[T], *, sealed_only: bool | Callable[[T], bool] = False
) -> list[T]:
    """Every record of a JSON-lines change log (none yet: []), each line validated.
    `sealed_only`: refuse a line without its checksum (True: any line; a predicate: the
    records it names, e.g. those a command would act from)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise JournalError(f"cannot read the change log {path}: {reason}") from None
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise JournalError(f"{where}: not a JSON line ({exc})") from None
        record = from_json(cls, _unseal(obj, where), where)
        if sealed_only and SEAL not in obj and (sealed_only is True or sealed_only(record)):
            raise JournalError(f"{where}: no checksum; it cannot be trusted")
        out.append(record)
    return out
