"""Another Slurm release for the tests: a Debian root with that release's packages, cached.

Debian 12's packages give Slurm 22.05; most sites run 23.x-25.x. A newer Debian release's
packages need a newer libc than the host's, so they run in a root made with `debootstrap`
from Debian's archive (minbase + the Slurm packages, about 290 MB, 1-3 minutes to build) and
cached outside the repository, under `/var/cache/slurmgpu/` (`SLURMGPU_ROOT_CACHE`), keyed by
the suite, the mirror and the package list. A root without its `built.json` marker, or whose
`slurmctld -V` does not print the expected release, is rebuilt.

How a program of the root runs (the seam the cluster harness uses): `bin/` beside the root
holds one small shell wrapper per Slurm/munge program. Each wrapper enters a private mount
namespace (`unshare --mount`, gone when the program exits: nothing to unmount, no mounts left
on the host), binds the host's `/dev`, `/proc`, `/sys`, `/tmp` and (read-only) `/etc` into
the root, then `chroot`s and `exec`s the root's program in the caller's working directory.
Every step is an `exec`, so the pid a caller gets is the program's own pid (a daemon can be
stopped by pid as on the host). The root's `/etc/passwd`, `group`, `shadow`, `gshadow` and
`hosts` are symlinks to the host's (`/host-etc/...`), so users the tests add on the host
exist for slurmctld and slurmd at once, and uids of files in `/tmp` mean the same inside.
`SlurmRelease.activate()` puts `bin/` first on this process's PATH: the harness, and the
slurmgpu code the tests call, then run that release's `sbatch`, `sacct`, `slurmd -G`, ...
exactly as on a site where it is installed. MariaDB stays the host's (slurmdbd reaches it
over loopback TCP). munge runs inside the root, but the wrapper binds the caller's
`/run/munge` onto the root's: in a test session that is the session's private tmpfs
(`cluster.enter_private_munge`), so the root's munged and clients use the session's own
socket, never one another session of the same cached root uses; outside a session (a
cluster started by hand) it is the host's, as with the host's Slurm.

Test code, not product code.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_CACHE = Path("/var/cache/slurmgpu")
DEFAULT_MIRROR = "http://deb.debian.org/debian"
# Ubuntu's archive (Slurm 25.11: Debian's forky and sid moved on to 26.05 while Ubuntu 26.04
# LTS keeps 25.11; its packages are Debian's packaging); SLURMGPU_UBUNTU_MIRROR changes it
UBUNTU_MIRROR = "http://archive.ubuntu.com/ubuntu"
# Debian 12 has no Ubuntu keyring package: the archive's public key is kept with the tests
# (tests/data/keyrings/README.md says where it comes from and its fingerprint)
UBUNTU_KEYRING = Path(__file__).resolve().parents[1] / "data/keyrings/ubuntu-archive-2018.gpg"
# bumped when the way a root is prepared changes, so old caches are rebuilt
ROOT_FORMAT = 1

# programs of the root that get a wrapper in bin/ (those missing in a release are left out)
WRAPPED_PROGRAMS = (
    "slurmd",
    "slurmctld",
    "slurmdbd",
    "sbatch",
    "srun",
    "salloc",
    "squeue",
    "sacct",
    "sacctmgr",
    "scontrol",
    "scancel",
    "sinfo",
    "sstat",
    "sprio",
    "sshare",
    "sreport",
    "sdiag",
    "munge",
    "unmunge",
    "munged",
    # `runuser -u USER -- sbatch` must drop privileges inside the root: a wrapper run as an
    # ordinary user could not enter a mount namespace
    "runuser",
)
# host paths that programs inside see at the same path: the test clusters' temp directories
# (configs, logs, job output, fake /dev/nvidia*) live under /tmp (bound with its submounts: a
# multi-node cluster's node binds its own `fake/` directory there); `host_binds()` adds the
# checkout and the Python that runs it
SHARED_DIRS = ("/tmp",)
# this checkout: job steps, prologs/epilogs and HealthCheckProgram run its venv's Python
REPO = Path(__file__).resolve().parents[2]
# host files the root reads through /host-etc (live: a user added on the host is seen at once)
HOST_ETC_FILES = ("passwd", "group", "shadow", "gshadow", "hosts")


def host_binds(repo: Path = REPO) -> tuple[str, ...]:
    """Host paths bound into a root at the same path, besides /dev, /proc, /sys and /etc.

    /tmp, this checkout (with its `.venv`) and the interpreter that venv runs: a job step,
    an epilog or slurmd's HealthCheckProgram started by a slurmd inside the root runs
    `.venv/bin/python -m slurmgpu ...` as on a site where slurmgpu is installed on the nodes.
    The interpreter is the one running this code (`sys.base_prefix`): a private prefix
    (pyenv, /opt/python) is bound whole; the system's (`/usr`) only as its `pythonX.Y`
    binary, the names the venv's links go through, and its standard library, so a root that
    has its own Python (another version) keeps it. The root adds the C libraries that
    interpreter loads (libexpat1, libffi8: `RELEASES`' packages).
    """

    paths = list(SHARED_DIRS)
    paths.append(str(repo))
    prefix = Path(sys.base_prefix).resolve()
    if str(prefix) in ("/usr", "/usr/local"):
        version = "python{}.{}".format(*sys.version_info[:2])
        paths.append(str(prefix / "lib" / version))
        # the venv's `bin/python3` -> /usr/bin/python3 -> python3.11: every name on the way
        link = Path(repo / ".venv" / "bin" / "python3")
        for _ in range(8):
            if not link.is_symlink():
                break
            target = Path(os.readlink(link))
            link = target if target.is_absolute() else link.parent / target
            paths.append(str(link))
        paths.append(str(prefix / "bin" / version))
    else:
        paths.append(str(prefix))
    kept: list[str] = []
    for path in paths:
        if any(path == k or path.startswith(k.rstrip("/") + "/") for k in kept):
            continue  # already inside a bound directory
        kept.append(path)
    return tuple(kept)


class RootError(RuntimeError):
    """The Debian root could not be built or does not work; the message says why."""


@dataclass(frozen=True)
class SlurmRelease:
    """A Slurm release the integration tests can run against.

    `suite` None: the host's own packages (Debian 12: 22.05). Otherwise a Debian suite whose
    archive has this release, run from a cached root (see the module docstring).
    """

    series: str  # "24.11": what `--slurm` takes and `slurmctld -V` must start with
    suite: str | None = None
    packages: tuple[str, ...] = ()
    # "debian" or "ubuntu": whose archive the suite is in (mirror, keyring, components)
    distro: str = "debian"
    # files the release needs in the cluster's config directory (name -> text), e.g. cgroup.conf
    extra_files: tuple[tuple[str, str], ...] = ()
    # drop slurmctld's saved jobs when the harness reconfigures (job ids carry on): see
    # SlurmCluster._forget_jobs for the 24.11 crash this avoids
    forget_jobs_on_reconfigure: bool = False
    # start slurmctld with `-i` after the harness dropped its saved node state: 25.11 stops
    # with `fatal: No node state file (.../node_state) to recover` when other state is there
    ignore_missing_state: bool = False

    @property
    def version(self) -> tuple[int, int]:
        """(24, 11) for "24.11"."""
        major, minor = self.series.split(".")
        return int(major), int(minor)

    def root(self) -> DebianRoot | None:
        """The cached Debian root for this release (None for the host's Slurm)."""
        if self.suite is None:
            return None
        return DebianRoot(self.suite, self.packages, distro=self.distro)

    def activate(
        self,
        environ: MutableMapping[str, str] | None = None,
        log: Callable[[str], None] = print,
    ) -> str:
        """Make this release the one on PATH (build its root if needed); its `slurmctld -V`.

        For a Debian root, `bin/` goes first on `environ["PATH"]` (default: this process's
        environment, so in-process slurmgpu calls and their subprocesses see it too).
        """
        global _active  # which release the harness runs is process-wide
        env = os.environ if environ is None else environ
        root = self.root()
        if root is None:
            _active = self
            return host_slurm_version()
        root.ensure(self.series, log=log)
        parts = [p for p in env.get("PATH", "").split(":") if p and p != str(root.bin_dir)]
        env["PATH"] = ":".join([str(root.bin_dir), *parts])
        version = root.slurm_version()
        _active = self
        return version


# the Slurm packages; the C libraries the host's Python (bound in: `host_binds`) loads that a
# minbase root lacks: libexpat1 (pyexpat, Debian's python3.11 itself), libffi8 (ctypes); and
# iproute2, as on a real node (job steps of the multi-node tests run `ip addr`)
_PACKAGES = ("slurmd", "slurmctld", "slurmdbd", "slurm-client", "munge")
_PACKAGES += ("libexpat1", "libffi8", "iproute2")

# Only the trixie root needs these: it sees no cgroup filesystem (/sys is bound without its
# submounts) and 24.x loads a cgroup plugin in slurmd even with proctrack/linuxproc.
_NO_CGROUP = (("cgroup.conf", "CgroupPlugin=disabled\n"),)

# The releases the tests can run from a Debian root, besides the host's own packages. Adding
# the next one (25.x): an entry with the Debian suite that ships it (packages.debian.org),
# then `scripts/run-tests --slurm 25.11` and write down what differs (docs/testing.md).
RELEASES: dict[str, SlurmRelease] = {
    "24.11": SlurmRelease(
        "24.11",
        suite="trixie",
        packages=_PACKAGES,
        extra_files=_NO_CGROUP,
        forget_jobs_on_reconfigure=True,
    ),
    # Debian's archive no longer has 25.11 (the mirror's forky and sid both built a root
    # with `slurm-wlm 26.05.5`, 2026-12); Ubuntu 26.04 LTS ("resolute") ships Debian's
    # packaging of 25.11.2 (25.11.2-1ubuntu2, universe)
    "25.11": SlurmRelease(
        "25.11",
        suite="resolute",
        distro="ubuntu",
        packages=_PACKAGES,
        extra_files=_NO_CGROUP,
        forget_jobs_on_reconfigure=True,
        ignore_missing_state=True,
    ),
}
# what the host's packages are taken to be when its slurmctld cannot say (Debian 12)
HOST_SERIES = "22.05"

_active: SlurmRelease | None = None


def host_release() -> SlurmRelease:
    """The host's own Slurm packages, with the series their `slurmctld -V` prints."""
    m = _VERSION.search(host_slurm_version())
    series = ".".join(m.group(1).split(".")[:2]) if m else HOST_SERIES
    return SlurmRelease(series)


# the release a test session runs (`scripts/run-tests --slurm 24.11` sets it)
ENV = "SLURMGPU_TEST_SLURM"


def active_release() -> SlurmRelease:
    """The release `activate()` last put on PATH; in a process that did not activate one
    (a child of the test session: the environment, PATH included, is inherited) the one
    $SLURMGPU_TEST_SLURM names; else the host's."""
    return _active or release(os.environ.get(ENV))


def release(series: str | None) -> SlurmRelease:
    """The release for `--slurm SERIES`: the host's for None, "" or the host's own series."""
    host = host_release()
    if not series or series == host.series:
        return host
    try:
        return RELEASES[series]
    except KeyError:
        known = ", ".join(sorted({host.series, *RELEASES}))
        raise RootError(f"no Slurm {series} for the tests: known releases are {known}") from None


_VERSION = re.compile(r"slurm(?:-wlm)?\s+(\d+\.\d+\.\d+)")


def host_slurm_version() -> str:
    """The host's `slurmctld -V` (e.g. `slurm-wlm 22.05.8`), or a line saying it is missing."""
    # the host's sbin only: PATH may already lead to a root's wrappers (an activated session)
    exe = shutil.which("slurmctld", path="/usr/local/sbin:/usr/sbin:/sbin")
    if exe is None:
        return "slurmctld not installed"
    proc = subprocess.run([exe, "-V"], capture_output=True, text=True, timeout=30, check=False)
    return (proc.stdout + proc.stderr).strip()


def mounts_under(path: Path) -> list[str]:
    """Mount points at or below `path` in this process's mount namespace."""
    prefix = str(path.resolve()).rstrip("/")  # "/" -> "": every mount point is below it
    found = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            point = line.split()[4].replace("\\040", " ")
            if point == prefix or point.startswith(prefix + "/"):
                found.append(point)
    return found


def safe_rmtree(path: Path) -> None:
    """Remove a root; refuse while anything is mounted in it (a bound /tmp would go too)."""
    if not path.exists():
        return
    mounted = mounts_under(path)
    if mounted:
        raise RootError(f"refusing to delete {path}: still mounted there: {', '.join(mounted)}")
    shutil.rmtree(path)


class DebianRoot:
    """A Debian (or Ubuntu) `suite` root with `packages`, built by debootstrap into the cache."""

    def __init__(
        self,
        suite: str,
        packages: tuple[str, ...],
        *,
        cache_dir: str | os.PathLike[str] | None = None,
        mirror: str | None = None,
        distro: str = "debian",
    ) -> None:
        if distro not in ("debian", "ubuntu"):
            raise RootError(f"unknown distribution {distro!r} for a root (debian or ubuntu)")
        self.suite = suite
        self.distro = distro
        self.packages = tuple(sorted(packages))
        self.cache_dir = Path(cache_dir or os.environ.get("SLURMGPU_ROOT_CACHE") or DEFAULT_CACHE)
        if distro == "ubuntu":
            self.mirror = mirror or os.environ.get("SLURMGPU_UBUNTU_MIRROR") or UBUNTU_MIRROR
        else:
            self.mirror = mirror or os.environ.get("SLURMGPU_DEBIAN_MIRROR") or DEFAULT_MIRROR
        parts: list[object] = [ROOT_FORMAT, suite, self.mirror, self.packages]
        if distro != "debian":  # a Debian root's key is what it was before Ubuntu roots
            parts.append(distro)
        recipe = json.dumps(parts)
        self.key = hashlib.sha256(recipe.encode()).hexdigest()[:12]
        self.home = self.cache_dir / f"{distro}-{suite}-{self.key}"
        self.path = self.home / "root"
        # wrappers per checkout and interpreter (they bind both: `host_binds`), so sessions of
        # several checkouts can share one cached root
        self.binds = host_binds()
        binds_key = hashlib.sha256("\0".join(self.binds).encode()).hexdigest()[:8]
        self.bin_dir = self.home / "bin" / binds_key
        self.marker = self.home / "built.json"
        self.build_log = self.home / "debootstrap.log"

    @property
    def label(self) -> str:
        """`Debian trixie`, `Ubuntu resolute`: which archive's suite this root is."""
        return f"{self.distro.title()} {self.suite}"

    # ------------------------------------------------------------ state

    def built(self) -> bool:
        """The marker says this recipe was built completely."""
        try:
            return json.loads(self.marker.read_text()).get("key") == self.key
        except (FileNotFoundError, ValueError):
            return False

    def slurm_version(self) -> str:
        """`slurmctld -V` run inside the root (`slurm-wlm 24.11.5`); RootError if it fails."""
        proc = self.run_inside(["slurmctld", "-V"], timeout=60)
        text = (proc.stdout + proc.stderr).strip()
        if proc.returncode != 0 or not _VERSION.search(text):
            raise RootError(f"slurmctld -V in {self.path} exited {proc.returncode}: {text[-400:]}")
        return text

    def run_inside(self, argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
        """Run a wrapped program of the root (through bin/)."""
        exe = self.bin_dir / argv[0]
        if not exe.exists():
            raise RootError(f"{argv[0]} has no wrapper in {self.bin_dir}")
        return subprocess.run(
            [str(exe), *argv[1:]], capture_output=True, text=True, timeout=timeout, check=False
        )

    # ------------------------------------------------------------ building

    def ensure(self, series: str, log: Callable[[str], None] = print) -> None:
        """Build the root unless a working one is cached; RootError saying why it cannot."""
        if os.geteuid() != 0:
            raise RootError("building and entering a Debian root needs root (debootstrap, mount)")
        self.home.mkdir(parents=True, exist_ok=True)
        with open(self.home / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one builder at a time; the others wait
            if self.built():
                self.write_wrappers()
                with contextlib.suppress(RootError, subprocess.TimeoutExpired):
                    if self._is_series(self.slurm_version(), series):
                        return
                log(f"the cached root {self.path} does not run Slurm {series}: rebuilding it")
            self.build(log=log)
            found = self.slurm_version()
            if not self._is_series(found, series):
                raise RootError(f"the {self.suite} root runs {found!r}, not Slurm {series}")

    @staticmethod
    def _is_series(version_text: str, series: str) -> bool:
        m = _VERSION.search(version_text)
        return bool(m) and m.group(1).startswith(series + ".")

    def build(self, log: Callable[[str], None] = print) -> None:
        """debootstrap a fresh root next to the old one, prepare it, then swap it in."""
        debootstrap = shutil.which("debootstrap", path="/usr/sbin:/usr/bin:/sbin:/bin")
        if debootstrap is None:
            raise RootError(
                "debootstrap is not installed (apt-get install debootstrap; "
                "scripts/run-tests installs it)"
            )
        with contextlib.suppress(FileNotFoundError):
            self.marker.unlink()
        new = self.home / "root.new"
        safe_rmtree(new)
        argv = [
            debootstrap,
            "--variant=minbase",
            "--include=" + ",".join(self.packages),
            self.suite,
            str(new),
            self.mirror,
        ]
        if self.distro == "ubuntu":
            # Slurm is in universe; Ubuntu's key is not on a Debian host (UBUNTU_KEYRING)
            argv[2:2] = ["--components=main,universe", f"--keyring={UBUNTU_KEYRING}"]
        # a debootstrap older than the suite has no script for it (Debian 12's knows trixie
        # and sid, not forky or Ubuntu 26.04): every Debian suite since buster is built by
        # the `sid` script, every Ubuntu one by `gutsy`
        scripts = Path("/usr/share/debootstrap/scripts")
        generic = scripts / ("gutsy" if self.distro == "ubuntu" else "sid")
        if scripts.is_dir() and not (scripts / self.suite).exists() and generic.exists():
            argv.append(str(generic))
        log(f"building a {self.label} root with {', '.join(self.packages)} in {new}")
        started = time.monotonic()
        with open(self.build_log, "w") as out:
            proc = subprocess.run(
                argv, stdout=out, stderr=subprocess.STDOUT, timeout=1800, check=False
            )
        if proc.returncode != 0:
            tail = "\n".join(self.build_log.read_text(errors="replace").splitlines()[-15:])
            raise RootError(
                f"debootstrap of {self.label} from {self.mirror} exited "
                f"{proc.returncode} (full log: {self.build_log}):\n{tail}"
            )
        self._prepare(new)
        old = self.home / "root.old"
        safe_rmtree(old)
        if self.path.exists():
            self.path.rename(old)
        new.rename(self.path)
        safe_rmtree(old)
        self.write_wrappers()
        seconds = time.monotonic() - started
        size = subprocess.run(
            ["du", "-sm", str(self.path)], capture_output=True, text=True, check=False
        ).stdout.split()
        self.marker.write_text(
            json.dumps(
                {
                    "key": self.key,
                    "suite": self.suite,
                    "mirror": self.mirror,
                    "packages": list(self.packages),
                    "format": ROOT_FORMAT,
                    "build_seconds": round(seconds, 1),
                    "size_mb": int(size[0]) if size else None,
                },
                indent=2,
            )
            + "\n"
        )
        log(f"built {self.path} in {seconds:.0f} s ({size[0] if size else '?'} MB)")

    @staticmethod
    def _prepare(root: Path) -> None:
        """Mount points for the shared host directories; host account files by symlink."""
        for sub in ("host-etc", "run/munge", "proc", "sys", "dev", "tmp"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        for name in HOST_ETC_FILES:
            target = root / "etc" / name
            if target.is_symlink() or target.exists():
                target.unlink()
            target.symlink_to(f"/host-etc/{name}")
        # no init inside: nothing may start services (the harness starts its own daemons)
        policy = root / "usr" / "sbin" / "policy-rc.d"
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)

    def write_wrappers(self) -> None:
        """bin/NAME for every program of WRAPPED_PROGRAMS the root has (rewritten each time)."""
        self.bin_dir.mkdir(parents=True, exist_ok=True)
        for path in self.binds:  # mount points inside the root
            host, inside = Path(path), self.path / path.lstrip("/")
            if host.is_dir():
                inside.mkdir(parents=True, exist_ok=True)
            elif not (inside.exists() or inside.is_symlink()):
                inside.parent.mkdir(parents=True, exist_ok=True)
                inside.touch()
        enter = self.bin_dir / ".enter"
        _write_executable(enter, _enter_script(self.path, self.binds))
        for name in WRAPPED_PROGRAMS:
            inside = next(
                (
                    f"/{d}/{name}"
                    for d in ("usr/sbin", "usr/bin", "sbin", "bin")
                    if (self.path / d / name).exists()
                ),
                None,
            )
            wrapper = self.bin_dir / name
            if inside is None:
                with contextlib.suppress(FileNotFoundError):
                    wrapper.unlink()
                continue
            _write_executable(
                wrapper,
                "#!/bin/sh\n"
                f"# {name} of the {self.label} root {self.path}\n"
                "# (written by tests/harness/debian_root.py; see its docstring)\n"
                f'exec "{enter}" {inside} "$@"\n',
            )


def _write_executable(path: Path, text: str) -> None:
    if path.exists() and path.read_text() == text:
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.chmod(0o755)
    tmp.rename(path)


def _enter_script(root: Path, paths: tuple[str, ...] = SHARED_DIRS) -> str:
    """The shell script that runs `PROGRAM ARGS` inside `root` (see the module docstring)."""
    binds = "\n".join(f'mount --rbind "{d}" "$r{d}"' for d in paths)
    return f"""#!/bin/sh
# .enter PROGRAM [ARGS...]: run PROGRAM (a path inside the Debian root) in the root, in the
# caller's working directory when the root sees it (else /). Written by
# tests/harness/debian_root.py. The mounts live in a private mount namespace that ends with
# the program; every step execs, so the caller's child pid is the program's pid.
exec unshare --mount --propagation private /bin/sh -c '
set -e
r=$1; wd=$2; shift 2
mount --rbind /dev "$r/dev"
mount --bind /proc "$r/proc"
mount --bind /sys "$r/sys"
{binds}
mount --bind /etc "$r/host-etc"
mount -o remount,bind,ro "$r/host-etc"
if [ -d /run/munge ]; then mount --bind /run/munge "$r/run/munge"; fi
exec chroot "$r" /bin/sh -c "cd \\"\\$0\\" 2>/dev/null || cd /; exec \\"\\$@\\"" "$wd" "$@"
' enter "{root}" "$PWD" "$@"
"""


def main(argv: list[str] | None = None) -> int:
    """`python3 tests/harness/debian_root.py 24.11 25.11`: build (or find cached) those roots.

    Standard library only, so CI can build the roots before the venv exists (.ci/run runs it
    in the background while the host's tests run); `python -m tests.harness.releases SERIES`
    is the same for one release, with the venv.
    """
    import argparse

    parser = argparse.ArgumentParser(prog="debian_root.py")
    parser.add_argument("series", nargs="+", help=f"one or more of {', '.join(RELEASES)}")
    args = parser.parse_args(argv)
    failed = 0
    for series in args.series:
        if series not in RELEASES:
            print(
                f"debian_root: no root for Slurm {series} ({', '.join(RELEASES)})", file=sys.stderr
            )
            failed += 1
            continue
        chosen = RELEASES[series]
        root = chosen.root()
        assert root is not None
        started = time.monotonic()
        try:
            root.ensure(series, log=lambda line: print(line, flush=True))
            version = root.slurm_version()
        except (RootError, OSError, subprocess.TimeoutExpired) as exc:
            print(f"debian_root: Slurm {series}: {exc}", file=sys.stderr)
            failed += 1
            continue
        took = time.monotonic() - started
        print(f"Slurm {series}: {version} ({root.label} root {root.path}; {took:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
