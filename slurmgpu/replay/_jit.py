"""The replay engine's one compile switch: numba's `njit` where numba imports, else nothing.

Why this shape: the engine (`state`, `profile`, `nodes`, `queues`, `runs`, `preempt`,
`backfill`, `loop`) is written once, as plain functions over numpy arrays and tuples of them,
in the subset of Python that numba compiles. With numba (the `analysis` extra) it runs as
machine code; without it (or with `NUMBA_DISABLE_JIT=1`) the same functions run as Python
and give the same schedules, ~150x slower (~10x slower than the engine's earlier Python
form, which was written for the interpreter). `COMPILED` says which; `replay` says so once
on stderr when numba did not import (`engine.engine_warnings`).

Only the entry points are cached on disk (`cached`): numba keys a cache by the entry's own
source and bytecode, not by the functions it calls, so the key also carries a digest of
every engine module's source (a change to any of them compiles anew).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

# the modules whose source the compiled engine is made of (the cache key's digest)
ENGINE_MODULES = ("_jit", "state", "profile", "nodes", "queues", "runs", "preempt", "backfill",
                  "loop")  # fmt: skip

# numba's own switch: the engine as plain Python on purpose (tests, debugging): no warning
DISABLED = os.environ.get("NUMBA_DISABLE_JIT", "0") not in ("", "0")
WHY_NOT = ""  # why numba did not import, when it did not
numba: Any = None
if not DISABLED:
    try:
        import numba
    except Exception as exc:  # missing, or broken (an llvmlite that does not load)
        numba = None
        WHY_NOT = str(exc) if isinstance(exc, ImportError) else f"{type(exc).__name__}: {exc}"

COMPILED = numba is not None


def njit(fn: Callable) -> Callable:
    """Compile `fn` on first call (numba), or leave it a Python function."""
    if numba is None:
        return fn
    return numba.njit(fn)


def inline(fn: Callable) -> Callable:
    """`njit` for a small function called in the engine's inner loops: numba inlines it into
    each caller (no call, and the array reference counts of the call are optimised away)."""
    if numba is None:
        return fn
    return numba.njit(inline="always")(fn)


def _digest() -> int:
    here = Path(__file__).parent
    h = hashlib.sha256()
    for name in ENGINE_MODULES:
        h.update((here / f"{name}.py").read_bytes())
    return int(h.hexdigest()[:15], 16) or 1


SOURCE_DIGEST = _digest() if COMPILED else 1


def as_struct(cls: type) -> Callable:
    """A function for compiled code that turns an instance of the named tuple `cls` into a
    numba StructRef with the same fields (without numba: a SimpleNamespace). Its fields may
    be set (an array that grows is replaced by a larger one).

    Why: numba passes a tuple of arrays as all of its arrays' fields, one by one, to every
    function it calls (a few hundred values for `Parts`), which costs compile time and calls;
    a StructRef is one pointer. The entry points take the tuples (one call from Python) and
    hand structs to the rest."""
    if numba is None:
        return _namespace
    from numba.core.extending import overload
    from numba.experimental import structref

    def convert(record):  # pragma: no cover - replaced by the overload in compiled code
        return record

    @overload(convert, jit_options={"cache": False})
    def _convert(record):
        kind = _Struct([(f, t) for f, t in zip(cls._fields, record.types, strict=True)])
        body = "".join(f"    s.{f} = record.{f}\n" for f in cls._fields)
        scope = {"new": structref.new, "kind": kind}
        exec(f"def impl(record):\n    s = new(kind)\n{body}    return s\n", scope)
        return scope["impl"]

    return convert


def _namespace(record: Any) -> Any:
    return SimpleNamespace(**record._asdict())


if numba is not None:
    from numba.core import types as _types
    from numba.experimental import structref as _structref

    @_structref.register
    class _Struct(_types.StructRef):
        """The StructRef type of one named tuple's fields."""

        def preprocess_fields(self, fields):
            return tuple((name, _types.unliteral(t)) for name, t in fields)


@contextlib.contextmanager
def compile_lock() -> Iterator[None]:
    """Held while a process compiles or loads the engine, so that processes starting at once
    on a cold cache (pytest-xdist workers, a sweep's tasks) compile it once: the first one
    compiles and saves, the others wait and load it from the cache. Per host and user."""
    path = Path(tempfile.gettempdir()) / f"slurmgpu-replay-{os.getuid()}-{SOURCE_DIGEST:x}.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:  # no writable temp dir: compile unlocked
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def cached(make: Callable[[int], Callable]) -> Callable:
    """An entry point: `make(digest)` returns the Python function (a closure over the digest,
    which numba's cache key hashes); compiled with an on-disk cache (`__pycache__`, or numba's
    user-wide cache dir where that is read-only)."""
    fn = make(SOURCE_DIGEST)
    if numba is None:
        return fn
    return numba.njit(cache=True)(fn)
