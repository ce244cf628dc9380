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
every engine module's source (a change to any of them compiles anew). The cache is this
install's own (`cache_dirs`: the package's `__pycache__`, which every user of the install
reads, or a per-user directory), and so is the compile lock (`compile_lock`): bounded, it
names its holder, and never makes one checkout, venv or version wait for another's compile.
A compile (a cache miss) says so on stderr, once.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
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


# The compiled engine's cache and its lock (see the module's docstring).

# a cold compile of the engine on the project's 2-core machine (benchmarks/README.md), for the
# line that says it is under way
COMPILE_ABOUT_S = 40
# how long a process waits for another one compiling the engine for the same install, before
# it goes on without the lock (a compile took 30-150 s on a loaded 2-core machine)
LOCK_WAIT_S = 120.0
# a wait shorter than this (the holder only loading the cache, ~0.3 s) is not worth a line
QUIET_WAIT_S = 1.0

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class CacheDirs:
    """Where one install's compiled engine is looked for (`read`, in order) and where this
    process saves it and takes the compile lock (`write`; None: nowhere it may write)."""

    read: tuple[Path, ...]
    write: Path | None

    @property
    def lock(self) -> Path | None:
        return None if self.write is None else self.write / lock_name()


def install_tag(package_dir: Path) -> str:
    """The install's name in a shared cache directory: a digest of its package path."""
    return hashlib.sha256(str(package_dir).encode()).hexdigest()[:16]


def lock_name() -> str:
    """The compile lock's file name: the engine's source digest, Python's and numba's
    versions (the cache files differ by each)."""
    python = f"py{sys.version_info[0]}{sys.version_info[1]}"
    version = getattr(numba, "__version__", "none")
    return f"slurmgpu-engine-{SOURCE_DIGEST:x}-{python}-numba{version}.lock"


def cache_dirs(package_dir: Path = HERE, moved: str | None = None) -> CacheDirs:
    """This install's cache: under numba's `NUMBA_CACHE_DIR` (`moved`; default: numba's
    setting) when set, a directory of its own in there; else the package's `__pycache__`
    when this user may write it (every user of the install reads it: an install compiled
    ahead by its owner); else that one to read and a per-user directory
    (`$XDG_CACHE_HOME/slurmgpu`, or `~/.cache/slurmgpu`) to read and write."""
    tag = f"replay-{install_tag(package_dir)}"
    if moved is None:
        moved = getattr(getattr(numba, "config", None), "CACHE_DIR", "")
    if moved:
        own = Path(moved) / f"slurmgpu-{tag}"
        return CacheDirs((own,), own if _writable(own) else None)
    shared = package_dir / "__pycache__"
    if _writable(shared):
        return CacheDirs((shared,), shared)
    user = _user_cache() / tag
    return CacheDirs((shared, user), user if _writable(user) else None)


def _user_cache() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg):
        return Path(xdg) / "slurmgpu"
    return Path(os.path.expanduser("~")) / ".cache" / "slurmgpu"


def _writable(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError:
        return False
    return True


_DIRS: CacheDirs | None = None


def dirs() -> CacheDirs:
    """This process's `cache_dirs()`, worked out once."""
    global _DIRS
    if _DIRS is None:
        _DIRS = cache_dirs()
    return _DIRS


_SAVING = True  # False while a process goes on without the lock: it saves nothing
_TOLD = False  # the line that a compile is under way was printed
_FROM: Path | None = None  # the directory the engine was loaded from, when it was
_SAVED: Path | None = None  # the directory this process saved the engine in, when it did


def say(line: str) -> None:
    """One line on stderr (the engine has no other way to talk while numba compiles)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def holder(lock: Path) -> str:
    """Who holds `lock`, as its holder wrote it (`pid N on HOST since TIME`)."""
    try:
        text = lock.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        text = ""
    return text.splitlines()[0][:200] if text else "another process"


@contextlib.contextmanager
def compile_lock(wait_s: float | None = None, where: CacheDirs | None = None) -> Iterator[bool]:
    """Held while a process compiles or loads the engine, so that processes starting at once
    on a cold cache (pytest-xdist workers, a sweep's tasks) compile it once: the first one
    compiles and saves, the others wait and load it. One lock per install (`CacheDirs.lock`).

    A waiter says who holds it (pid, host, since when) once it has waited `QUIET_WAIT_S`;
    after `wait_s` (default `LOCK_WAIT_S`) it goes on without it, with a warning: it loads
    the engine if the cache has it, else compiles it itself and saves nothing. A holder that
    is gone holds nothing (flock ends with its process). Yields whether it holds the lock."""
    global _SAVING
    where = where or dirs()
    wait_s = LOCK_WAIT_S if wait_s is None else wait_s
    fd = _open_lock(where.lock)
    if fd is None:  # no lock file this user may open: go on unlocked (numba writes each
        # cache file whole, by rename: two compiles at once cost time, not correctness)
        yield False
        return
    try:
        held = _acquire(fd, where.lock, wait_s)
        if held:
            _write_holder(fd)
        saving, _SAVING = _SAVING, held
        try:
            yield held
        finally:
            _SAVING = saving
    finally:
        os.close(fd)  # releases the lock


def _open_lock(lock: Path | None) -> int | None:
    if lock is None:
        return None
    try:
        return os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:
        return None


def _acquire(fd: int, lock: Path, wait_s: float) -> bool:
    began = time.monotonic()
    told = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            pass
        except OSError:  # a file system without locks (ENOLCK): go on as if held (numba
            return True  # writes each cache file whole, by rename)
        waited = time.monotonic() - began
        if not told and waited >= min(QUIET_WAIT_S, wait_s):
            say(
                f"slurmgpu: waiting for {holder(lock)}, which compiles the replay engine for "
                f"this install (lock {lock}; at most {wait_s:.0f} s)"
            )
            told = True
        if waited >= wait_s:
            say(
                f"slurmgpu: warning: {holder(lock)} still holds {lock} after {wait_s:.0f} s: "
                "going on without it (the engine is loaded from the cache if it is there, "
                "else compiled in this process and not saved)"
            )
            return False
        time.sleep(0.1)


def _write_holder(fd: int) -> None:
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    line = f"pid {os.getpid()} on {socket.gethostname()} since {when}\n"
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, line.encode(), 0)


def _compiling() -> None:
    """Say, once per process, that the engine is being compiled (a cache miss)."""
    global _TOLD
    if _TOLD:
        return
    _TOLD = True
    where = dirs()
    if where.write is not None and _SAVING:
        say(
            f"slurmgpu: compiling the replay engine once for this install (about "
            f"{COMPILE_ABOUT_S} s); later runs load it from {where.write}"
        )
    elif where.write is not None:
        say(f"slurmgpu: compiling the replay engine in this process (about {COMPILE_ABOUT_S} s)")
    else:
        say(
            f"slurmgpu: compiling the replay engine in this process (about {COMPILE_ABOUT_S} "
            f"s): this user may write none of {', '.join(map(str, where.read))}; "
            "`slurmgpu replay --compile-only` run by the install's owner compiles it for all"
        )


def compiled_here() -> bool:
    """Whether this process compiled (some of) the engine, rather than loading it."""
    return _TOLD


def loaded_from() -> Path | None:
    """The directory this process loaded the compiled engine from (None: it did not)."""
    return _FROM


def saved_in() -> Path | None:
    """The directory this process saved the compiled engine in (None: it did not)."""
    return _SAVED


if numba is not None:
    from numba.core import caching as _caching

    class _Locator(_caching._SourceFileBackedLocatorMixin, _caching._CacheLocator):
        """The source stamp and name of a cached entry point; the directories come from
        `dirs()` when it is loaded or saved."""

        def __init__(self, py_func, py_file):
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno

        def get_cache_path(self):
            return str(dirs().write or dirs().read[0])

        @classmethod
        def from_function(cls, py_func, py_file):
            return cls(py_func, py_file)

    class _Impl(_caching.CompileResultCacheImpl):
        _locator_classes = [_Locator]  # noqa: RUF012 (numba's own class attribute)

    class _EngineCache(_caching.FunctionCache):
        """numba's function cache, in this install's directories (`dirs()`): loaded from
        the first that has it, saved to the one this process may write; a miss says that
        the engine is being compiled."""

        _impl_class = _Impl

        def _file(self, where: Path):
            stamp = self._impl.locator.get_source_stamp()
            return _caching.IndexDataCacheFile(str(where), self._impl.filename_base, stamp)

        def _load_overload(self, sig, target_context):
            global _FROM
            if not self._enabled:
                return None
            key = self._index_key(sig, target_context.codegen())
            for where in dirs().read:
                try:
                    data = self._file(where).load(key)
                    if data is not None:
                        _FROM = where
                        return self._impl.rebuild(target_context, data)
                except Exception:  # unreadable or damaged: compile anew
                    continue
            _compiling()
            return None

        def _save_overload(self, sig, data):
            global _SAVED
            where = dirs().write
            if not (self._enabled and _SAVING and where is not None):
                return
            if not self._impl.check_cachable(data):
                return
            key = self._index_key(sig, data.codegen)
            try:
                where.mkdir(parents=True, exist_ok=True)
                self._file(where).save(key, self._impl.reduce(data))
                _SAVED = where
            except OSError as exc:
                say(f"slurmgpu: warning: the compiled replay engine was not saved: {exc}")


def cached(make: Callable[[int], Callable]) -> Callable:
    """An entry point: `make(digest)` returns the Python function (a closure over the digest,
    which numba's cache key hashes); compiled with an on-disk cache in this install's
    directories (`cache_dirs`)."""
    fn = make(SOURCE_DIGEST)
    if numba is None:
        return fn
    dispatcher = numba.njit(fn)
    dispatcher._cache = _EngineCache(dispatcher.py_func)  # what `njit(cache=True)` sets
    return dispatcher
