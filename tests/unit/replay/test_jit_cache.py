"""The compiled engine's cache and compile lock (`replay/_jit.py`): one per install, a lock
that names its holder and is waited on for a bounded time, a line on stderr when (and only
when) the engine is being compiled, and `replay --compile-only` to compile it ahead.

Every process here runs with numba on (`NUMBA_DISABLE_JIT` dropped from its environment), so
the tests hold whether or not the suite itself runs the engine as Python."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmgpu.replay import _jit

ROOT = Path(__file__).resolve().parents[3]
SYNTHETIC = ROOT / "tests" / "data" / "sacct" / "synthetic-mix.txt"
REPLAY = ["replay", "--sacct-file", str(SYNTHETIC), "--capacity", "gpu=16", "--capacity",
          "mig=1", "--gpu-type", "gpu=h100", "--format", "json"]  # fmt: skip

# another process that takes a compile lock (in DIR) and keeps it until it is killed
HOLD = """
import sys, time
from pathlib import Path
from slurmgpu.replay import _jit
where = Path(sys.argv[1])
with _jit.compile_lock(where=_jit.CacheDirs((where,), where)) as held:
    print("held" if held else "not held", flush=True)
    time.sleep(600)
"""


def env(**extra: str) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k not in ("NUMBA_DISABLE_JIT", "NUMBA_CACHE_DIR")}
    return {**out, "PYTHONPATH": str(ROOT), **extra}


@pytest.fixture
def hold():
    """`hold(dir[, env])`: a process holding the compile lock in `dir`; killed at the end."""
    procs: list[subprocess.Popen] = []

    def start(where: Path, environ: dict[str, str] | None = None) -> subprocess.Popen:
        # by default numba on or off as in this process: the lock this process would take
        environ = environ or {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen([sys.executable, "-c", HOLD, str(where)], stdout=subprocess.PIPE,
                                text=True, env=environ, cwd=ROOT)  # fmt: skip
        procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def test_a_held_lock_names_its_holder_and_the_wait_is_bounded(tmp_path, hold, capsys):
    holder = hold(tmp_path)
    where = _jit.CacheDirs((tmp_path,), tmp_path)
    began = time.monotonic()
    with _jit.compile_lock(wait_s=2.0, where=where) as held:
        waited = time.monotonic() - began
        saving = _jit._SAVING
    assert not held and not saving  # went on without it, and saves nothing meanwhile
    assert _jit._SAVING  # ... only meanwhile
    assert 2.0 <= waited < 5.0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2, err
    who = f"pid {holder.pid} on {socket.gethostname()} since "
    assert err[0].startswith(f"slurmgpu: waiting for {who}") and "at most 2 s" in err[0]
    assert str(where.lock) in err[0]
    assert err[1].startswith(f"slurmgpu: warning: {who}") and "after 2 s" in err[1]


def test_a_lock_whose_holder_is_gone_is_no_wait(tmp_path, hold, capsys):
    holder = hold(tmp_path)
    holder.send_signal(signal.SIGKILL)  # gone without releasing anything by hand
    holder.wait()
    assert f"pid {holder.pid} " in _jit.holder(_jit.CacheDirs((tmp_path,), tmp_path).lock)
    began = time.monotonic()
    with _jit.compile_lock(wait_s=60.0, where=_jit.CacheDirs((tmp_path,), tmp_path)) as held:
        assert held
        assert _jit.holder(_jit.CacheDirs((tmp_path,), tmp_path).lock).startswith(
            f"pid {os.getpid()} on "
        )
    assert time.monotonic() - began < 1.0
    assert capsys.readouterr().err == ""


def test_two_installs_share_no_cache_and_no_lock(tmp_path, hold, capsys):
    """Two checkouts (or venvs) of the same version: neither waits for the other's compile,
    also with one NUMBA_CACHE_DIR for both."""
    one, two = (tmp_path / name / "slurmgpu" / "replay" for name in ("one", "two"))
    for package in (one, two):
        package.mkdir(parents=True)
    a, b = _jit.cache_dirs(one), _jit.cache_dirs(two)
    assert (a.write, b.write) == (one / "__pycache__", two / "__pycache__")
    moved = str(tmp_path / "numba-cache")
    a2, b2 = _jit.cache_dirs(one, moved=moved), _jit.cache_dirs(two, moved=moved)
    assert a2.write != b2.write and a2.write.parent == b2.write.parent == Path(moved)
    for first, second in ((a, b), (a2, b2)):
        assert first.lock != second.lock
        hold(first.write)
        began = time.monotonic()
        with _jit.compile_lock(wait_s=30.0, where=second) as held:
            assert held
        assert time.monotonic() - began < 1.0
    assert capsys.readouterr().err == ""


def test_an_install_this_user_cannot_write_is_read_and_the_user_cache_written(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "site").write_text("")  # a file where the package's directory would be
    package = tmp_path / "site" / "replay"  # (so that even root cannot write there)
    dirs = _jit.cache_dirs(package, moved="")
    user = tmp_path / "cache" / "slurmgpu" / f"replay-{_jit.install_tag(package)}"
    assert dirs == _jit.CacheDirs((package / "__pycache__", user), user)


# a cached entry point like the engine's (`_jit.cached`), in a file of its own
ENTRY = """
import sys
from slurmgpu.replay import _jit

def make(digest):
    def add(a, b):
        return a + b + (digest == 0)
    return add

add = _jit.cached(make)
print(add(1, 2), _jit.compiled_here(), _jit.loaded_from())
"""


def test_a_compile_says_so_once_and_a_warm_cache_says_nothing(tmp_path):
    script = tmp_path / "entry.py"
    script.write_text(ENTRY)
    cache = tmp_path / "numba-cache"
    moved = env(NUMBA_CACHE_DIR=str(cache))

    def run():
        return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              env=moved, cwd=ROOT, check=True)  # fmt: skip

    cold, warm = run(), run()
    where = cache / f"slurmgpu-replay-{_jit.install_tag(_jit.HERE)}"
    assert cold.stdout.split() == ["3", "True", "None"]
    assert cold.stderr.splitlines() == [
        f"slurmgpu: compiling the replay engine once for this install (about "
        f"{_jit.COMPILE_ABOUT_S} s); later runs load it from {where}"
    ]
    assert warm.stdout.split() == ["3", "False", str(where)]
    assert warm.stderr == ""
    assert list(where.glob("entry.make.locals.add-*.nbi"))  # saved where cache_dirs says


# the same entry point, with the cache directories given: read DIRS..., write the last
ENTRY_IN = ENTRY.replace(
    "\nadd = ",
    """
dirs = tuple(__import__("pathlib").Path(d) for d in sys.argv[1:])
_jit._DIRS = _jit.CacheDirs(dirs, dirs[-1])
add = """,
)


def test_another_users_compile_is_read_from_the_install_and_never_written_there(tmp_path):
    """The install's owner compiled it into the package's cache; a user who may not write
    there loads it from there (no compile line) and would save into their own directory."""
    script, owner, user = tmp_path / "entry.py", tmp_path / "package", tmp_path / "user"
    script.write_text(ENTRY_IN)

    def run(*dirs: Path):
        command = [sys.executable, str(script), *map(str, dirs)]
        return subprocess.run(command, capture_output=True, text=True, env=env(), cwd=ROOT,
                              check=True)  # fmt: skip

    first = run(owner)
    assert first.stdout.split() == ["3", "True", "None"]
    assert first.stderr.startswith("slurmgpu: compiling the replay engine once for this install")
    assert "warning" not in first.stderr
    saved = sorted(p.name for p in owner.iterdir())
    second = run(owner, user)
    assert second.stdout.split() == ["3", "False", str(owner)] and second.stderr == ""
    assert sorted(p.name for p in owner.iterdir()) == saved
    assert not user.exists() or not list(user.iterdir())


def test_compile_only_then_replays_load_it_silently():
    """`replay --compile-only` (the installer's step) leaves the engine in this install's
    cache: a second one and a replay say nothing on stderr."""
    cli = [sys.executable, "-m", "slurmgpu"]
    first = subprocess.run([*cli, "replay", "--compile-only"], capture_output=True, text=True,
                           env=env(), cwd=ROOT, check=True)  # fmt: skip
    where = _jit.cache_dirs().write
    assert first.stdout.startswith("replay engine: ") and str(where) in first.stdout
    for args in (["replay", "--compile-only"], REPLAY):
        again = subprocess.run([*cli, *args], capture_output=True, text=True, env=env(),
                               cwd=ROOT, check=True)  # fmt: skip
        assert again.stderr == ""
    assert again.stdout.startswith("{")
    second = subprocess.run([*cli, "replay", "--compile-only"], capture_output=True, text=True,
                            env=env(), cwd=ROOT, check=True)  # fmt: skip
    assert second.stdout == f"replay engine: already compiled for this install, in {where}\n"


def test_compile_only_refuses_a_replay_option():
    proc = subprocess.run([sys.executable, "-m", "slurmgpu", "replay", "--compile-only",
                           "--sacct-file", str(SYNTHETIC)], capture_output=True, text=True,
                          env=env(NUMBA_DISABLE_JIT="1"), cwd=ROOT)  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr == "slurmgpu: error: --compile-only replays nothing: drop --sacct-file\n"


def test_compile_only_where_no_cache_can_be_written_says_so_before_compiling(tmp_path):
    (tmp_path / "file").write_text("")
    began = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "slurmgpu", "replay", "--compile-only"],
                          capture_output=True, text=True, cwd=ROOT,
                          env=env(NUMBA_CACHE_DIR=str(tmp_path / "file" / "cache")))  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("slurmgpu: error: --compile-only: this user may write no ")
    assert proc.stderr.endswith("run it as the install's owner\n")
    assert len(proc.stderr.splitlines()) == 1  # nothing compiled: no compile line
    assert time.monotonic() - began < 20


def test_compile_only_that_could_not_save_fails(tmp_path, monkeypatch):
    """Compiled in this process while another held the lock past its bound (so not saved):
    the installer's step fails rather than print a cache that has nothing."""
    from click.testing import CliRunner

    from slurmgpu.cli import main
    from slurmgpu.replay import engine

    monkeypatch.setattr(engine, "_WARM", True)  # (the compile itself: the tests above)
    monkeypatch.setattr(_jit, "COMPILED", True)
    monkeypatch.setattr(_jit, "_DIRS", _jit.CacheDirs((tmp_path,), tmp_path))
    monkeypatch.setattr(_jit, "_TOLD", True)  # compiled here ...
    monkeypatch.setattr(_jit, "_SAVED", None)  # ... and saved nowhere
    res = CliRunner().invoke(main, ["replay", "--compile-only"])
    assert res.exit_code == 1 and res.stdout == ""
    assert res.stderr == (
        "slurmgpu: error: replay engine: compiled, but not saved: run --compile-only again\n"
    )
    monkeypatch.setattr(_jit, "_SAVED", tmp_path)
    res = CliRunner().invoke(main, ["replay", "--compile-only"])
    assert res.exit_code == 0 and res.stdout.startswith("replay engine: compiled in ")
    assert res.stdout.endswith(f" s, saved in {tmp_path}\n")


# `slurmgpu replay` while another process holds this install's lock (in DIR; the engine is
# read from the install's own cache), with a 3 s bound
WAITER = """
import sys
from pathlib import Path
from slurmgpu.replay import _jit
lock_dir = Path(sys.argv[1])
_jit.LOCK_WAIT_S = 3.0
_jit._DIRS = _jit.CacheDirs(_jit.cache_dirs().read, lock_dir)
from slurmgpu.cli import main
main(sys.argv[2:])
"""


def test_replay_reports_the_holder_and_finishes_within_the_bound(tmp_path, hold):
    holder = hold(tmp_path, env())  # numba on, as in the replay
    began = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", WAITER, str(tmp_path), *REPLAY],
                          capture_output=True, text=True, env=env(), cwd=ROOT)  # fmt: skip
    took = time.monotonic() - began
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("{")
    lines = [line for line in proc.stderr.splitlines() if "compiling" not in line]
    who = f"pid {holder.pid} on {socket.gethostname()} since "
    assert len(lines) == 2 and lines[0].startswith(f"slurmgpu: waiting for {who}"), lines
    assert lines[1].startswith(f"slurmgpu: warning: {who}") and "after 3 s" in lines[1]
    cold = "compiling" in proc.stderr  # a cold install compiles on top of the wait
    assert took < 3.0 + (_jit.COMPILE_ABOUT_S * 4 if cold else 20.0)
