"""Inventory snapshots: versioned JSON that round-trips exactly, validated field by field.

`save`/`dumps` write the model as JSON (schema in docs/snapshot.md); `load`/`loads` are the
only place that accepts untrusted shapes, and fail with one line naming the field, e.g.
`gpus[3].pci_bus_id: expected a string, got 7`. Sets of cpu ids are written in Slurm's range
syntax (`"0-55,112-167"`), so snapshots stay readable.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Union

from slurmgpu.errors import SnapshotError, UsageError
from slurmgpu.model.inventory import SCHEMA_VERSION, Inventory
from slurmgpu.model.validate import problems
from slurmgpu.util.hostlist import format_id_list, parse_id_list

# -- model -> plain data -----------------------------------------------------------------------


def _is_id_tuple(tp: Any) -> bool:
    return typing.get_origin(tp) is tuple and typing.get_args(tp) == (int, Ellipsis)


# fields added by schema 2 (other vendors): written only when they differ from their default,
# so an NVIDIA-only snapshot keeps its schema-1 shape (and old readers' field list)
_SCHEMA2_FIELDS = frozenset(
    {"vendor", "peer_links", "compute_partition", "memory_partition", "partition_id", "drivers"}
)


def _at_default(f: dataclasses.Field, value: Any) -> bool:
    if f.default is not dataclasses.MISSING:
        return value == f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return value == f.default_factory()  # type: ignore[misc]
    return False


def _to_plain(obj: Any, tp: Any = None) -> Any:
    if dataclasses.is_dataclass(obj):
        hints = typing.get_type_hints(type(obj))
        return {
            f.name: _to_plain(getattr(obj, f.name), hints[f.name])
            for f in dataclasses.fields(obj)
            if not (f.name in _SCHEMA2_FIELDS and _at_default(f, getattr(obj, f.name)))
        }
    if tp is not None and _is_id_tuple(tp):
        return format_id_list(obj)
    if isinstance(obj, tuple | list):
        args = typing.get_args(tp) if tp is not None else ()
        item_tp = args[0] if args else None
        return [_to_plain(x, item_tp) for x in obj]
    if isinstance(obj, dict):
        return {str(k): v for k, v in obj.items()}
    return obj


def to_dict(inventory: Inventory) -> dict[str, Any]:
    """The snapshot as plain JSON-able data (schema_version first)."""
    data = _to_plain(inventory)
    return {"schema_version": data.pop("schema_version"), **data}


def canonical_json(inventory: Inventory) -> str:
    """Key-sorted, whitespace-free JSON: what the gres.conf header's sha256 is taken over."""
    return json.dumps(to_dict(inventory), sort_keys=True, separators=(",", ":"))


def inventory_sha256(inventory: Inventory) -> str:
    return hashlib.sha256(canonical_json(inventory).encode("utf-8")).hexdigest()


def _dump(value: Any, level: int) -> str:
    """JSON with objects and lists of objects indented, and flat objects/lists on one line."""
    pad, inner = "  " * level, "  " * (level + 1)
    flat = isinstance(value, dict) and all(not isinstance(v, dict | list) for v in value.values())
    flat_list = isinstance(value, list) and all(not isinstance(v, dict | list) for v in value)
    if isinstance(value, dict) and value and not (flat and level > 1):
        items = [f"{inner}{json.dumps(k)}: {_dump(v, level + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(value, list) and value and not flat_list:
        items = [f"{inner}{_dump(v, level + 1)}" for v in value]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return json.dumps(value, separators=(", ", ": "))


def dumps(inventory: Inventory) -> str:
    """The snapshot file text (deterministic: same inventory, same bytes)."""
    return _dump(to_dict(inventory), 0) + "\n"


def save(inventory: Inventory, path: str | os.PathLike[str]) -> None:
    from slurmgpu.util.atomic import write_atomic

    write_atomic(path, dumps(inventory), backup=False)


# -- plain data -> model (validated) --------------------------------------------------------------


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__.replace("str", "string")


def _fail(path: str, expected: str, value: Any) -> typing.NoReturn:
    shown = json.dumps(value) if not isinstance(value, dict | list) else _kind(value)
    if len(shown) > 40:
        shown = shown[:37] + "..."
    raise SnapshotError(f"{path or 'snapshot'}: expected {expected}, got {shown}")


def _from_plain(value: Any, tp: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _from_plain(value, inner, path)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            _fail(path, "an object", value)
        hints = typing.get_type_hints(tp)
        names = {f.name for f in dataclasses.fields(tp)}
        unknown = sorted(set(value) - names)
        if unknown:
            raise SnapshotError(f"{_join(path, unknown[0])}: unknown field")
        kwargs = {}
        for f in dataclasses.fields(tp):
            sub = _join(path, f.name)
            if f.name not in value:
                if (
                    f.default is not dataclasses.MISSING
                    or f.default_factory is not dataclasses.MISSING
                ):  # type: ignore[misc]
                    continue
                raise SnapshotError(f"{sub}: missing")
            kwargs[f.name] = _from_plain(value[f.name], hints[f.name], sub)
        return tp(**kwargs)
    if _is_id_tuple(tp):
        if not isinstance(value, str):
            _fail(path, 'a cpu list string such as "0-3,8"', value)
        try:
            return tuple(parse_id_list(value))
        except ValueError:
            _fail(path, 'a cpu list string such as "0-3,8"', value)
    if origin is tuple:
        if not isinstance(value, list):
            _fail(path, "a list", value)
        (item_tp, _ellipsis) = typing.get_args(tp)
        return tuple(_from_plain(v, item_tp, f"{path}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            _fail(path, "an object", value)
        for k, v in value.items():
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                _fail(f"{path}.{k}", "a non-negative integer", v)
        return dict(value)
    if tp is bool:
        if not isinstance(value, bool):
            _fail(path, "true or false", value)
        return value
    if tp is int:
        if not isinstance(value, int) or isinstance(value, bool):
            _fail(path, "an integer", value)
        return value
    if tp is str:
        if not isinstance(value, str):
            _fail(path, "a string", value)
        return value
    raise SnapshotError(f"{path}: unsupported type {tp!r}")  # a bug in the model, not the file


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def from_dict(data: Any) -> Inventory:
    """Validate plain data and build the Inventory; `SnapshotError` names the first bad field."""
    if not isinstance(data, dict):
        _fail("", "a JSON object", data)
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        _fail("schema_version", "an integer", version)
    if version > SCHEMA_VERSION:
        raise SnapshotError(
            f"schema_version: {version} is newer than this slurmgpu reads ({SCHEMA_VERSION}); "
            "upgrade slurmgpu"
        )
    if version < 1:
        raise SnapshotError(f"schema_version: {version} is not a valid version")
    if version == 1:
        _no_schema2_fields(data)
    inventory = _from_plain(data, Inventory, "")
    _check_semantics(inventory)
    return inventory


def _no_schema2_fields(data: dict) -> None:
    """A version-1 file is NVIDIA-only: a schema-2 field in it is a mislabelled file."""
    if "drivers" in data:
        raise SnapshotError("drivers: a schema 2 field in a schema_version 1 snapshot")
    gpus = data.get("gpus")
    for i, gpu in enumerate(gpus if isinstance(gpus, list) else []):
        if isinstance(gpu, dict):
            for name in sorted(_SCHEMA2_FIELDS & set(gpu)):
                raise SnapshotError(
                    f"gpus[{i}].{name}: a schema 2 field in a schema_version 1 snapshot"
                )


def _check_semantics(inv: Inventory) -> None:
    """The rules of `slurmgpu.model.validate` (character sets, ranges, uniqueness)."""
    found = problems(inv)
    if found:
        more = f" (and {len(found) - 1} more problem(s))" if len(found) > 1 else ""
        raise SnapshotError(found[0] + more)


def loads(text: str, *, source: str = "snapshot") -> Inventory:
    text = text.removeprefix("\ufeff")  # a UTF-8 byte order mark (Windows editors write one)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SnapshotError(f"{source}: not JSON: {exc.msg} at line {exc.lineno}") from exc
    except RecursionError:
        raise SnapshotError(f"{source}: not a snapshot: JSON nested too deeply") from None
    except ValueError as exc:  # e.g. a 5000-digit number (int max str digits)
        raise SnapshotError(f"{source}: not a snapshot: {exc}") from None
    try:
        return from_dict(data)
    except SnapshotError as exc:
        raise SnapshotError(f"{source}: {exc}") from None


def load(path: str | os.PathLike[str]) -> Inventory:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise SnapshotError(f"{p}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise SnapshotError(f"{p}: not UTF-8 text (byte {exc.start}): not a snapshot") from None
    return loads(text, source=str(p))


# the name slurmgpu.cli.topology reads node snapshots with
load_snapshot = load


def load_many(
    paths: Sequence[str | os.PathLike[str]] = (),
    directory: str | os.PathLike[str] | None = None,
) -> list[Inventory]:
    """The snapshots named, then every `*.json` of `directory` (sorted), loaded in that order
    (`--snapshot A --snapshot B` / `--snapshot-dir DIR`); a bad one stops everything with an
    error naming its file."""
    files = [Path(p) for p in paths]
    if directory is not None:
        d = Path(directory)
        if not d.is_dir():
            raise UsageError(f"--snapshot-dir {d}: not a directory")
        found = sorted(d.glob("*.json"))
        if not found:
            raise UsageError(f"--snapshot-dir {d}: no *.json snapshot in it")
        files += found
    return [load(f) for f in files]
