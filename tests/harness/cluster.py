"""A real single-host Slurm cluster in one temp directory, started and stopped by the tests.

Debian's packages (munge, MariaDB, slurmdbd, slurmctld, slurmd) run on loopback with private
ports, configs, state, logs and pid files under `root`; nothing in /etc/slurm is read or
written. GPUs are the only thing faked: `mknod` char devices (NVIDIA's major 195) under
`dev_dir` stand in for /dev/nvidiaN, so slurmd accepts the gres.conf `File=` lines.

Test code, not product code: it drives daemons with `subprocess.Popen` directly (the product's
`slurmgpu.util.proc.run` is for one-shot commands only).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from slurmgpu.errors import SlurmCommandError
from slurmgpu.sources.slurmd import check_gres_conf
from slurmgpu.util.hostlist import expand_hostlist
from tests.harness.debian_root import SlurmRelease, active_release
from tests.harness.debian_root import release as slurm_release

DEFAULT_NODE_LINE = (
    "NodeName=gpu01 NodeHostname=localhost CPUs=16 Sockets=2 CoresPerSocket=8 "
    "ThreadsPerCore=1 RealMemory=64000 Gres=gpu:h100:8"
)
DEFAULT_GRES_CONF = "Name=gpu Type=h100 File=/dev/nvidia[0-7]\n"
DEFAULT_PARTITIONS = ("PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP",)
DEFAULT_ACCOUNT = "research"

# munge clients (slurmctld -> slurmdbd, sacctmgr) always use the default socket in 22.05, even
# with AuthInfo=socket=... (seen here), so the harness must own this path. A test session owns
# it privately: `enter_private_munge()` mounts an empty tmpfs on MUNGE_DIR in a mount namespace
# of the session's own, where `session_munged()` starts the one munged every cluster of the
# session uses. Only a detached cluster (`slurm-test-cluster up`) uses the host's socket.
MUNGE_DIR = "/run/munge"
MUNGE_SOCKET = MUNGE_DIR + "/munge.socket.2"
# the source name of the session's tmpfs on MUNGE_DIR, as /proc/self/mountinfo shows it
SESSION_MUNGE_MOUNT = "slurmgpu-session-munge"

# what each part of the cluster needs, by Debian package
REQUIRED_BINARIES: dict[str, tuple[str, ...]] = {
    "munge": ("munge", "unmunge", "munged"),
    "mariadb-server": ("mariadb-install-db", "mariadbd", "mariadb"),
    "slurmdbd": ("slurmdbd",),
    "slurmctld": ("slurmctld",),
    "slurmd": ("slurmd",),
    "slurm-client": ("sbatch", "squeue", "sacct", "sacctmgr", "scontrol", "scancel", "sinfo"),
}

SACCT_FIELDS = (
    "JobID,JobIDRaw,JobName,User,Account,Partition,QOS,State,ExitCode,Reason,AllocTRES,ReqTRES,"
    "AllocCPUS,NNodes,NodeList,Submit,Eligible,Start,End,Elapsed,ElapsedRaw,Timelimit,Priority,"
    "Comment,Flags"
)
TERMINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
    }
)
# order matters: stop the consumers before what they depend on
_STOP_ORDER = ("slurmd", "slurmctld", "slurmdbd", "mariadb", "munged")
_ALIASES = {"munge": "munged", "mysql": "mariadb", "mariadbd": "mariadb", "dbd": "slurmdbd"}
_SBIN_PATH = "/usr/local/sbin:/usr/sbin:/sbin"


class ClusterError(RuntimeError):
    """The test cluster could not be brought up or reconfigured; the message says why."""


class CommandFailed(subprocess.CalledProcessError):
    """A command run against the cluster exited non-zero; str() carries its output."""

    def __str__(self) -> str:
        text = (self.stderr or "").strip() or (self.stdout or "").strip() or "no output"
        return f"{' '.join(map(str, self.cmd))} exited {self.returncode}: {text}"


@dataclass(frozen=True)
class GresCheck:
    """What `slurmd -G` made of a gres.conf: its records, and every error/fatal line."""

    ok: bool
    records: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    output: str = ""


def which(name: str) -> str | None:
    """Find a program on PATH or in the sbin directories (daemons live there)."""
    return shutil.which(name, path=os.environ.get("PATH", "") + ":" + _SBIN_PATH)


def missing_binaries() -> list[str]:
    """`["slurmd (package slurmd)", ...]` for every program the cluster needs but lacks."""
    return [
        f"{prog} (package {pkg})"
        for pkg, progs in REQUIRED_BINARIES.items()
        for prog in progs
        if which(prog) is None
    ]


def _free_ports(count: int) -> list[int]:
    """Distinct free TCP ports on loopback (held open together so they differ)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _tail(path: Path, n: int) -> list[str]:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return []
    return lines[-n:]


def pid_alive(pid: int) -> bool:
    """True while `pid` runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            # the state letter follows the parenthesised command name
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (FileNotFoundError, IndexError, ProcessLookupError):
        return False


def _pid_cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


# ---------------------------------------------------------------- fake devices, gres.conf

_DEV_VALUE = re.compile(r"(?i)\b(File|MultipleFiles)\s*=\s*(\S+)")
_TRAILING_NUMBER = re.compile(r"(\d+)$")


def map_dev_paths(gres_conf: str, dev_dir: Path) -> tuple[str, list[Path]]:
    """Rewrite `/dev/...` in File=/MultipleFiles= to `dev_dir/...`; list the device paths."""
    devices: list[Path] = []

    def repl(m: re.Match[str]) -> str:
        value = m.group(2)
        mapped = re.sub(r"(^|,)/dev/", lambda g: g.group(1) + str(dev_dir) + "/", value)
        for path in expand_hostlist(mapped):
            if path.startswith(str(dev_dir) + "/"):
                devices.append(Path(path))
        return f"{m.group(1)}={mapped}"

    text = "\n".join(
        line if line.lstrip().startswith("#") else _DEV_VALUE.sub(repl, line)
        for line in gres_conf.splitlines()
    )
    return text + "\n", devices


# other vendors' fixed majors (DRM 226) and dynamic ones as picks (kfd, davinci*: the
# kernel assigns them at load time on real hosts)
_VENDOR_MAJORS = (
    (re.compile(r"(renderD|card)\d+"), 226),
    (re.compile(r"kfd"), 235),
    (re.compile(r"davinci\d+"), 236),
    (re.compile(r"davinci_manager|devmm_svm|hisi_hdc"), 237),
)


def make_device_nodes(paths: Iterable[Path]) -> None:
    """Create char devices: nvidiaN -> 195:N (NVIDIA's major), nvidia-capN -> 511:N, AMD
    renderD/card -> 226:N (DRM), /dev/kfd, Ascend davinciN and its control devices, else 240:N.

    slurmd only checks that `File=` names a char/block device; the numbers only need to be
    plausible (the caps, kfd and davinci majors are dynamic on real hosts).
    """
    for path in paths:
        if path.exists():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        m = _TRAILING_NUMBER.search(path.name)
        minor = int(m.group(1)) if m else 0
        if re.fullmatch(r"nvidia\d+", path.name):
            major = 195
        elif path.name == "nvidiactl":
            major, minor = 195, 255
        elif path.name.startswith("nvidia-cap"):
            major = 511
        else:
            major = next((n for rx, n in _VENDOR_MAJORS if rx.fullmatch(path.name)), 240)
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor % 1048576))


def _gres_names(*texts: str) -> list[str]:
    names = ["gpu", "shard"]
    for text in texts:
        for m in re.finditer(r"(?i)\bName=([A-Za-z0-9_]+)", text):
            if m.group(1) not in names:
                names.append(m.group(1))
    return names


def _node_names(node_line: str) -> list[str]:
    m = re.search(r"(?i)\bNodeName=(\S+)", node_line)
    if not m:
        raise ClusterError(f"node line has no NodeName=: {node_line!r}")
    return expand_hostlist(m.group(1))


def validate_gres(
    gres_conf: str,
    node_line: str,
    *,
    work_dir: str | os.PathLike[str],
    dev_dir: str | os.PathLike[str],
    timeout: float = 60,
) -> GresCheck:
    """Parse `gres_conf` with Slurm's own parser (`slurmd -G`) for the node in `node_line`.

    `/dev/...` paths are mapped to the cluster's fake device nodes (created on demand), then
    the product's own checker runs it: `slurmgpu.sources.slurmd.check_gres_conf` (private
    slurm.conf with `SlurmdParameters=config_overrides`; every `error:`/`fatal:` line counts,
    since `slurmd -G` exits 0 on errors). GresTypes names every GRES the files mention, plus
    gpu and shard, as the cluster's slurm.conf does.
    """
    del work_dir  # the checker makes its own temp dir
    text, devices = map_dev_paths(gres_conf, Path(dev_dir))
    make_device_nodes(devices)
    _node_names(node_line)  # a clear ClusterError for a line without NodeName=
    try:
        check = check_gres_conf(
            text,
            node_line,
            gres_types=",".join(_gres_names(text, node_line)),
            slurmd=which("slurmd") or "slurmd",
            timeout=timeout,
        )
    except SlurmCommandError as exc:
        raise ClusterError(str(exc)) from exc
    records = [f"Gres {r}" for r in check.records]
    return GresCheck(ok=check.ok, records=records, errors=check.errors, output=check.output)


def _clean_env(extra: Mapping[str, str]) -> dict[str, str]:
    """This process's environment without inherited SLURM_* settings, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["PATH"] = env.get("PATH", "/usr/bin:/bin") + ":" + _SBIN_PATH
    env.update(extra)
    return env


# ---------------------------------------------------------------- daemons


def spawn(
    argv: Sequence[str],
    env: Mapping[str, str],
    cwd: Path,
    output_file: Path,
    *,
    die_with_parent: bool,
) -> subprocess.Popen[bytes]:
    """Start a daemon in the foreground, its output appended to `output_file` (shared by
    `Daemon` and the multi-node harness's namespaced slurmds)."""
    output_file.parent.mkdir(parents=True, exist_ok=True)
    with open(output_file, "ab") as out:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=cwd,
            # own session: a Ctrl-C in the test terminal must not kill it before cleanup
            start_new_session=True,
            preexec_fn=_die_with_parent if die_with_parent else None,
        )


class Daemon:
    """One daemon run in the foreground; its pid is recorded in `pids/NAME.pid`."""

    def __init__(self, name: str, root: Path, log_file: Path, program: str) -> None:
        self.name = name
        self.log_file = log_file
        self.program = program  # a word that must be in /proc/PID/cmdline before a kill
        self.output_file = root / "log" / f"{name}.out"
        self.pid_file = root / "pids" / f"{name}.pid"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        if self.proc is not None:
            return self.proc.pid
        try:
            return int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def start(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: Path,
        *,
        die_with_parent: bool = False,
    ) -> None:
        """Start it; with `die_with_parent` the kernel sends it SIGTERM if we get killed."""
        self.proc = spawn(argv, env, cwd, self.output_file, die_with_parent=die_with_parent)
        self.pid_file.write_text(f"{self.proc.pid}\n")

    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        pid = self.pid
        return pid is not None and pid_alive(pid) and self.program in _pid_cmdline(pid)

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM, wait, then SIGKILL; only the pid this harness started."""
        pid = self.pid
        if pid is None:
            return
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while self.alive() and time.monotonic() < deadline:
                time.sleep(0.1)
            if self.alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                deadline = time.monotonic() + 5
                while self.alive() and time.monotonic() < deadline:
                    time.sleep(0.05)
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=1)
        self.proc = None
        with contextlib.suppress(FileNotFoundError):
            self.pid_file.unlink()

    def tail(self, n: int = 40) -> str:
        lines = _tail(self.log_file, n)
        out = _tail(self.output_file, n) if self.output_file != self.log_file else []
        text = "\n".join(lines)
        if out:
            text += ("\n" if text else "") + f"--- {self.name} stdout/stderr ---\n" + "\n".join(out)
        return text or f"(no log output in {self.log_file})"


# ---------------------------------------------------------------- the cluster


class SlurmCluster:
    """munge + MariaDB + slurmdbd + slurmctld + one slurmd (node `gpu01`) under `root`.

    `SlurmCluster().up()` brings it up (raising `ClusterError` naming the daemon and its log
    tail when one fails), `down()` stops every daemon it started, by pid. Configuration
    arguments are those of `reconfigure()`; the defaults are the harness's DGX-like node.
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        cluster_name: str | None = None,
        node_line: str | None = None,
        gres_conf: str | None = None,
        extra_conf: str = "",
        partitions: Sequence[str] | None = None,
        job_submit_lua: str | None = None,
        keep: bool = False,
        detached: bool = False,
        slurm: SlurmRelease | None = None,
    ) -> None:
        self._owns_root = root is None
        # which Slurm runs the daemons: the one on PATH (see debian_root.SlurmRelease.activate)
        self.slurm = slurm or active_release()
        # a pytest run that is SIGKILLed must not leave daemons behind; a cluster started by
        # `slurm-test-cluster up` must outlive the script
        self.detached = detached
        self.root = Path(root or tempfile.mkdtemp(prefix="slurmgpu-cluster-")).resolve()
        self.keep = keep
        self.cluster_name = cluster_name or "sg" + secrets.token_hex(3)
        self.account = DEFAULT_ACCOUNT
        self.conf_dir = self.root / "etc"
        self.dev_dir = self.root / "dev"
        self.log_dir = self.root / "log"
        self.work_dir = self.root / "work"
        self.state_dir = self.root / "state"
        self.spool_dir = self.root / "spool"
        self.mysql_dir = self.root / "mysql"
        self.mysql_socket = self.mysql_dir / "mysqld.sock"
        self.slurm_conf = self.conf_dir / "slurm.conf"
        self.env: dict[str, str] = {"SLURM_CONF": str(self.slurm_conf)}
        self.ports: dict[str, int] = {}
        self.munged_started = False
        self.first_job_id: int | None = None  # FirstJobId= after _forget_jobs
        self._settings = self._make_settings(
            node_line, gres_conf, extra_conf, partitions, job_submit_lua
        )
        self.node_name = _node_names(self._settings["node_line"])[0]
        self._daemons = {
            "munged": Daemon("munged", self.root, self.log_dir / "munged.log", "munged"),
            "mariadb": Daemon("mariadb", self.root, self.log_dir / "mariadb.log", "mariadbd"),
            "slurmdbd": Daemon("slurmdbd", self.root, self.log_dir / "slurmdbd.log", "slurmdbd"),
            "slurmctld": Daemon(
                "slurmctld", self.root, self.log_dir / "slurmctld.log", "slurmctld"
            ),
            "slurmd": Daemon("slurmd", self.root, self.log_dir / "slurmd.log", "slurmd"),
        }
        self._atexit_registered = False

    # ------------------------------------------------------------ life cycle

    @staticmethod
    def _make_settings(
        node_line: str | None,
        gres_conf: str | None,
        extra_conf: str,
        partitions: Sequence[str] | None,
        job_submit_lua: str | None,
    ) -> dict:
        node_line = (node_line or DEFAULT_NODE_LINE).strip()
        if not re.search(r"(?i)\bNode(Hostname|Addr)=", node_line):
            # the single slurmd answers on loopback whatever the node is called
            node_line += " NodeHostname=localhost"
        return {
            "node_line": node_line,
            "gres_conf": DEFAULT_GRES_CONF if gres_conf is None else gres_conf,
            "extra_conf": extra_conf or "",
            "partitions": list(DEFAULT_PARTITIONS if partitions is None else partitions),
            "job_submit_lua": job_submit_lua,
        }

    def up(self, timeout: float = 120) -> SlurmCluster:
        """Start every daemon and wait until node `gpu01` is idle; ClusterError on failure."""
        missing = missing_binaries()
        if missing:
            raise ClusterError("missing programs: " + ", ".join(missing))
        root = self.slurm.root()
        if root is not None and os.environ.get("PATH", "").split(":")[0] != str(root.bin_dir):
            raise ClusterError(
                f"Slurm {self.slurm.series} is not first on PATH: call its activate() first "
                "(the session fixture in tests/harness/releases.py does)"
            )
        if os.geteuid() != 0:
            raise ClusterError("the test cluster needs root (slurmd, mknod, munge socket)")
        deadline = time.monotonic() + timeout
        if not self.detached:
            # before our atexit `down` is registered: the session's munged is stopped after it
            enter_private_munge()
        self._register_cleanup()
        try:
            for d in (self.conf_dir, self.dev_dir, self.log_dir, self.work_dir, self.state_dir):
                d.mkdir(parents=True, exist_ok=True)
            (self.root / "pids").mkdir(exist_ok=True)
            (self.root / "run").mkdir(exist_ok=True)
            (self.spool_dir / "slurmd").mkdir(parents=True, exist_ok=True)
            # other users (add_user) must read slurm.conf and write job output in work/
            self.root.chmod(0o755)
            self.work_dir.chmod(0o1777)
            names = ("mariadb", "slurmdbd", "slurmctld", "slurmd")
            self.ports = dict(zip(names, _free_ports(len(names)), strict=True))
            self._write_state()
            self._write_configs()
            self._start_munge(deadline)
            self._start_mariadb(deadline)
            self._start_slurmdbd(deadline)
            self._setup_accounting()
            self._start_slurmctld(deadline)
            self._start_slurmd(deadline)
        except BaseException:
            self.down(_remove=False)
            raise
        return self

    def down(self, *, _remove: bool = True) -> None:
        """Stop every daemon this cluster started (by pid), MariaDB and munged included."""
        if self._daemons["slurmctld"].alive():
            with contextlib.suppress(Exception):
                self.scancel_all(timeout=10)
        for name in _STOP_ORDER:
            if name == "munged" and not self.munged_started:
                continue  # the session's munged (or the host's): not this cluster's to stop
            self._daemons[name].stop()
        if self._atexit_registered:
            atexit.unregister(self.down)
            self._atexit_registered = False
        if _remove and self._owns_root and not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)

    def detach(self) -> None:
        """Leave the daemons running after this process exits (`slurm-test-cluster up`)."""
        if self._atexit_registered:
            atexit.unregister(self.down)
            self._atexit_registered = False
        for d in self._daemons.values():
            d.proc = None  # forget the Popen; the pid files still say who to stop

    @classmethod
    def attach(cls, root: str | os.PathLike[str]) -> SlurmCluster:
        """A handle on a cluster that `up()` + `detach()` left running in `root`."""
        root = Path(root).resolve()
        try:
            state = json.loads((root / "cluster.json").read_text())
        except FileNotFoundError as exc:
            raise ClusterError(f"no test cluster in {root} (no cluster.json)") from exc
        cluster = cls(
            root,
            cluster_name=state["cluster_name"],
            slurm=slurm_release(state.get("slurm")),
            **state["settings"],
        )
        cluster._owns_root = False
        cluster.detached = True  # daemons (re)started through a handle keep running
        cluster.ports = state["ports"]
        cluster.munged_started = state["munged_started"]
        return cluster

    def status(self) -> dict[str, bool]:
        """{daemon: running?} for the daemons this cluster is responsible for."""
        names = [n for n in _STOP_ORDER if n != "munged" or self.munged_started]
        return {name: self._daemons[name].alive() for name in names}

    def __enter__(self) -> SlurmCluster:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    def _register_cleanup(self) -> None:
        if not self._atexit_registered:
            atexit.register(self.down)
            self._atexit_registered = True
        # a SIGTERM (CI timeout) should still run atexit and stop the daemons
        with contextlib.suppress(ValueError):  # not the main thread
            if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
                signal.signal(signal.SIGTERM, _exit_on_sigterm)

    def _write_state(self) -> None:
        state = {
            "cluster_name": self.cluster_name,
            "ports": self.ports,
            "munged_started": self.munged_started,
            "settings": self._settings,
            "slurm": self.slurm.series,
        }
        (self.root / "cluster.json").write_text(json.dumps(state, indent=2) + "\n")

    # ------------------------------------------------------------ configuration

    def render_slurm_conf(self) -> str:
        """The slurm.conf for the current settings (extra_conf keys replace the defaults)."""
        s = self._settings
        r = self.root
        lines = [
            f"ClusterName={self.cluster_name}",
            f"SlurmctldHost={socket.gethostname().split('.')[0]}(127.0.0.1)",
            f"SlurmctldPort={self.ports['slurmctld']}",
            f"SlurmdPort={self.ports['slurmd']}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            f"StateSaveLocation={self.state_dir}",
            f"SlurmdSpoolDir={self.spool_dir}/slurmd",
            f"SlurmctldPidFile={r}/run/slurmctld.pid",
            f"SlurmdPidFile={r}/run/slurmd.pid",
            f"SlurmctldLogFile={self.log_dir}/slurmctld.log",
            f"SlurmdLogFile={self.log_dir}/slurmd.log",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "MpiDefault=none",
            "MailProg=/bin/true",
            "ReturnToService=2",
            "InactiveLimit=0",
            "KillWait=5",
            "MinJobAge=300",
            "SchedulerType=sched/backfill",
            # batch jobs start ~1 s sooner than with the default 3 s batching delay
            "SchedulerParameters=batch_sched_delay=0",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "DefMemPerCPU=1000",
            "PriorityType=priority/multifactor",
            "PreemptType=preempt/qos",
            "PreemptMode=REQUEUE",
            "JobRequeue=1",
            "SlurmdParameters=config_overrides",
            f"GresTypes={','.join(_gres_names(s['gres_conf'], s['node_line']))}",
            "AccountingStorageType=accounting_storage/slurmdbd",
            "AccountingStorageHost=localhost",
            f"AccountingStoragePort={self.ports['slurmdbd']}",
            "AccountingStorageTRES=gres/gpu,gres/shard",
            "AccountingStorageEnforce=associations,limits,qos",
            "AccountingStoreFlags=job_comment",
            "JobAcctGatherType=jobacct_gather/linux",
            "JobCompType=jobcomp/none",
        ]
        if self.first_job_id is not None:
            lines.append(f"FirstJobId={self.first_job_id}")
        if s["job_submit_lua"] is not None:
            lines.append("JobSubmitPlugins=lua")
        extra = [ln for ln in s["extra_conf"].splitlines() if ln.strip()]
        overridden = {
            m.group(1).lower()
            for ln in extra
            if (m := re.match(r"\s*([A-Za-z]+)\s*=", ln))
            and m.group(1).lower() not in ("nodename", "partitionname")
        }
        lines = [ln for ln in lines if ln.split("=", 1)[0].lower() not in overridden]
        lines += extra
        lines.append(s["node_line"])
        lines += s["partitions"]
        return "# written by the slurmgpu test harness\n" + "\n".join(lines) + "\n"

    def _write_configs(self) -> None:
        s = self._settings
        self.slurm_conf.write_text(self.render_slurm_conf())
        gres_text, devices = map_dev_paths(s["gres_conf"], self.dev_dir)
        # the shared devices every AMD / Ascend job opens besides its own (never in gres.conf)
        if "/dri/renderD" in gres_text:
            devices.append(self.dev_dir / "kfd")
        if "/davinci" in gres_text:
            devices += [self.dev_dir / n for n in ("davinci_manager", "devmm_svm", "hisi_hdc")]
        make_device_nodes(devices)
        (self.conf_dir / "gres.conf").write_text(gres_text)
        lua = self.conf_dir / "job_submit.lua"
        if s["job_submit_lua"] is not None:
            lua.write_text(s["job_submit_lua"])
        else:
            with contextlib.suppress(FileNotFoundError):
                lua.unlink()
        for name, text in self.slurm.extra_files:  # e.g. 24.11's cgroup.conf
            (self.conf_dir / name).write_text(text)
        dbd = self.conf_dir / "slurmdbd.conf"
        dbd.write_text(
            "\n".join(
                [
                    "AuthType=auth/munge",
                    "DbdHost=localhost",
                    f"DbdPort={self.ports['slurmdbd']}",
                    "SlurmUser=root",
                    f"PidFile={self.root}/run/slurmdbd.pid",
                    f"LogFile={self.log_dir}/slurmdbd.log",
                    "DebugLevel=info",
                    "StorageType=accounting_storage/mysql",
                    "StorageHost=127.0.0.1",
                    f"StoragePort={self.ports['mariadb']}",
                    "StorageUser=slurm",
                    "StoragePass=slurm",
                    "StorageLoc=slurm_acct_db",
                    "",
                ]
            )
        )
        dbd.chmod(0o600)  # slurmdbd refuses a readable slurmdbd.conf

    # ------------------------------------------------------------ bring-up steps

    def _fail(self, name: str, what: str) -> ClusterError:
        d = self._daemons[name]
        return ClusterError(f"{name} {what}\n--- last lines of {d.log_file} ---\n{d.tail(40)}")

    def _wait(
        self, name: str, ready: Callable[[], bool], deadline: float, what: str = "ready"
    ) -> None:
        """Poll `ready()` until true; raise naming `name` if its process dies or time runs out."""
        d = self._daemons[name]
        while True:
            if ready():
                return
            if d.pid is not None and not d.alive():
                raise self._fail(name, f"exited before it was {what}")
            if time.monotonic() > deadline:
                raise self._fail(name, f"was not {what} before the timeout")
            time.sleep(0.2)

    def _start(self, name: str, argv: Sequence[str]) -> None:
        self._daemons[name].start(
            argv, _clean_env(self.env), self.work_dir, die_with_parent=not self.detached
        )

    def _start_munge(self, deadline: float) -> None:
        if not self.detached:
            # the session's own munged, on a socket no other process on the host can reach
            self._daemons["munged"] = session_munged(deadline - time.monotonic())
            return
        # by hand (`slurm-test-cluster up`): the daemons outlive this process and the user's
        # shell runs sinfo/sbatch against them, so this uses the host's default socket
        if munge_answers():
            return  # reuse the munged on the default socket; never stop one we did not start
        key = write_munge_key(self.root / "munge" / "munge.key")
        Path(MUNGE_SOCKET).parent.mkdir(parents=True, exist_ok=True)
        self.munged_started = True
        self._write_state()
        self._start("munged", munged_argv(key, MUNGE_SOCKET, self.root / "run", self.log_dir))
        self._wait("munged", munge_answers, deadline, "answering on " + MUNGE_SOCKET)

    def _start_mariadb(self, deadline: float) -> None:
        data = self.mysql_dir / "data"
        tmp = self.mysql_dir / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        init = subprocess.run(
            [
                which("mariadb-install-db") or "mariadb-install-db",
                "--no-defaults",
                f"--datadir={data}",
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ],
            capture_output=True,
            text=True,
            timeout=max(5.0, deadline - time.monotonic()),
            cwd=self.work_dir,
            check=False,
        )
        if init.returncode != 0:
            tail = "\n".join((init.stdout + init.stderr).splitlines()[-30:])
            raise ClusterError(f"mariadb-install-db exited {init.returncode}\n{tail}")
        self._start(
            "mariadb",
            [
                which("mariadbd") or "mariadbd",
                "--no-defaults",
                f"--datadir={data}",
                f"--tmpdir={tmp}",
                f"--socket={self.mysql_socket}",
                f"--port={self.ports['mariadb']}",
                "--bind-address=127.0.0.1",
                "--skip-name-resolve",
                "--user=root",
                f"--pid-file={self.root}/run/mariadb.pid",
                f"--log-error={self.log_dir}/mariadb.log",
                # a throwaway test database: speed over durability
                "--innodb-buffer-pool-size=64M",
                "--innodb-flush-log-at-trx-commit=0",
                "--innodb-doublewrite=0",
                "--skip-log-bin",
            ],
        )
        self._wait("mariadb", lambda: _port_open(self.ports["mariadb"]), deadline, "listening")
        sql = (
            "CREATE DATABASE IF NOT EXISTS slurm_acct_db;"
            "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';"
            "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
        )
        proc = subprocess.run(
            [
                which("mariadb") or "mariadb",
                "--no-defaults",
                f"--socket={self.mysql_socket}",
                "-uroot",
                "-e",
                sql,
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if proc.returncode != 0:
            raise self._fail("mariadb", f"refused the set-up SQL: {proc.stderr.strip()}")

    def _start_slurmdbd(self, deadline: float) -> None:
        self._start("slurmdbd", [which("slurmdbd") or "slurmdbd", "-D"])
        self._wait("slurmdbd", lambda: _port_open(self.ports["slurmdbd"]), deadline, "listening")

    def _setup_accounting(self) -> None:
        """Register the cluster; root's default account becomes `research`.

        `sacctmgr add cluster` gives root the default account `root` whose association only
        has QOS `normal`: jobs asking another QOS then fail (`Invalid qos specification`),
        so tests work in an ordinary account they can give QOS to (`allow_qos`).
        """
        try:
            self.sacctmgr("add", "cluster", self.cluster_name)
            self.sacctmgr(
                "add", "account", self.account, "Description=tests", "Organization=slurmgpu"
            )
            self.sacctmgr("add", "user", "root", f"Account={self.account}")
            self.sacctmgr("modify", "user", "root", "set", f"DefaultAccount={self.account}")
        except CommandFailed as exc:
            raise self._fail("slurmdbd", f"refused the accounting set-up: {exc}") from exc

    def _start_slurmctld(self, deadline: float) -> None:
        argv = [which("slurmctld") or "slurmctld", "-D"]
        if self.slurm.ignore_missing_state and not (self.state_dir / "node_state").exists():
            argv.append("-i")  # the node state was dropped on purpose (see _restart_all)
        self._start("slurmctld", argv)
        self._wait("slurmctld", self._ctld_up, deadline, "answering `scontrol ping`")

    def _ctld_up(self) -> bool:
        if not _port_open(self.ports["slurmctld"]):
            return False
        proc = self.run(["scontrol", "ping"], check=False, timeout=15)
        return "is UP" in proc.stdout

    def _start_slurmd(self, deadline: float) -> None:
        self._start("slurmd", [which("slurmd") or "slurmd", "-D", "-N", self.node_name])
        self._wait(
            "slurmd", self._node_idle, deadline, f"registered with node {self.node_name} idle"
        )

    def node_state(self) -> dict[str, str]:
        """`scontrol show -o node NODE` as a dict ({} when slurmctld does not answer)."""
        from slurmgpu.sources.slurm import parse_scontrol_record

        proc = self.run(["scontrol", "show", "-o", "node", self.node_name], check=False)
        line = proc.stdout.strip()
        return parse_scontrol_record(line) if proc.returncode == 0 and line else {}

    def _node_idle(self) -> bool:
        """True once the node is IDLE; ClusterError at once when slurmctld drained it.

        The saved node state is dropped before every (re)start, so a DRAIN or INVALID_REG
        here comes from the configuration just written (e.g. `gres/gpu count reported lower
        than configured (4 < 8)`): no point waiting for the timeout.
        """
        node = self.node_state()
        flags = set(node.get("State", "").split("+"))
        if {"DRAIN", "INVALID_REG"} & flags and node.get("Reason", "(null)") != "(null)":
            ctld = self._daemons["slurmctld"]
            raise ClusterError(
                f"slurmd registered node {self.node_name} but slurmctld set it "
                f"State={node['State']} Reason={node['Reason']}\n"
                f"--- last lines of {ctld.log_file} ---\n{ctld.tail(15)}\n"
                f"--- last lines of {self._daemons['slurmd'].log_file} ---\n"
                f"{self._daemons['slurmd'].tail(15)}"
            )
        return "IDLE" in flags and not ({"DRAIN", "NOT_RESPONDING", "INVALID_REG"} & flags)

    # ------------------------------------------------------------ reconfiguration

    def reconfigure(
        self,
        *,
        node_line: str | None = None,
        gres_conf: str | None = None,
        extra_conf: str = "",
        partitions: Sequence[str] | None = None,
        job_submit_lua: str | None = None,
        timeout: float = 60,
    ) -> None:
        """Rewrite slurm.conf / gres.conf (/ job_submit.lua), restart slurmctld + slurmd.

        Unset arguments take the defaults (not the previous call's values). Jobs are cancelled
        first, and the saved node state is dropped so an earlier DRAIN does not stick. Raises
        ClusterError naming the daemon and its log tail when the node does not come up idle.
        """
        self._settings = self._make_settings(
            node_line, gres_conf, extra_conf, partitions, job_submit_lua
        )
        self._restart_all(timeout)

    def reset(self, timeout: float = 60) -> None:
        """Back to the default node, partition and no job_submit plugin."""
        self.reconfigure(timeout=timeout)

    def _restart_all(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        if self._daemons["slurmctld"].alive():
            with contextlib.suppress(Exception):
                self.scancel_all(timeout=15)
        forget = self.slurm.forget_jobs_on_reconfigure and self._daemons["slurmctld"].alive()
        next_job_id = self._next_job_id() if forget else None
        self._daemons["slurmd"].stop()
        self._daemons["slurmctld"].stop()
        for name in ("node_state", "node_state.old"):
            with contextlib.suppress(FileNotFoundError):
                (self.state_dir / name).unlink()
        if next_job_id is not None:
            self._forget_jobs(next_job_id)
        self.node_name = _node_names(self._settings["node_line"])[0]
        self._write_configs()
        self._write_state()
        self._start_slurmctld(deadline)
        self._start_slurmd(deadline)

    def _next_job_id(self) -> int:
        """One more than the highest job id slurmctld or the accounting database knows."""
        ids = self.job_ids()
        proc = self.run(
            ["sacct", "-a", "-X", "-n", "-P", "-S", "2000-01-01", "-o", "JobIDRaw"], check=False
        )
        ids += [int(x) for x in proc.stdout.split() if x.isdigit()]
        return max(ids, default=0) + 1

    def _forget_jobs(self, next_job_id: int) -> None:
        """Drop the saved jobs (all finished: reconfigure cancels first); ids carry on.

        Slurm 24.11.5's slurmctld segfaults at start-up (in libc, after `Recovered JobId=N`)
        when a finished job it recovers used `shard` and the node has no shards any more
        (seen here: a `--gres=shard:2` job, then the default node). So for such a release a
        reconfigure starts slurmctld without saved jobs, with FirstJobId= past every job id
        it or the database knows, so `sacct -j ID` never meets a reused id.
        """
        for name in ("job_state", "job_state.old"):
            with contextlib.suppress(FileNotFoundError):
                (self.state_dir / name).unlink()
        self.first_job_id = next_job_id

    def restart_slurmctld(self, timeout: float = 60) -> None:
        """Stop and start slurmctld alone (jobs and node state survive, as in production)."""
        deadline = time.monotonic() + timeout
        self._daemons["slurmctld"].stop()
        self._start_slurmctld(deadline)

    def validate_gres(self, gres_conf: str, node_line: str) -> GresCheck:
        """Check a gres.conf for `node_line` with `slurmd -G` (see module `validate_gres`)."""
        return validate_gres(gres_conf, node_line, work_dir=self.work_dir, dev_dir=self.dev_dir)

    def log_tail(self, name: str, n: int = 40) -> str:
        """The last `n` lines of a daemon's log (slurmctld, slurmd, slurmdbd, mariadb, munged)."""
        return self._daemons[_ALIASES.get(name, name)].tail(n)

    # ------------------------------------------------------------ commands

    def run(
        self,
        argv: Sequence[str],
        check: bool = True,
        timeout: float = 60,
        input: str | None = None,
        cwd: str | os.PathLike[str] | None = None,
        user: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a command with this cluster's SLURM_CONF; CommandFailed if check and rc != 0.

        With `user`, it runs as that Unix user (`runuser -u USER --`, environment kept), e.g.
        one made by `add_user`.
        """
        argv = [str(a) for a in argv]
        full = [which("runuser") or "runuser", "-u", user, "--", *argv] if user else argv
        proc = subprocess.run(
            full,
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
            env=_clean_env(self.env),
            cwd=cwd or self.work_dir,
            check=False,
        )
        if check and proc.returncode != 0:
            raise CommandFailed(proc.returncode, argv, proc.stdout, proc.stderr)
        return proc

    def sbatch(
        self,
        *args: str,
        script: str = "#!/bin/sh\nsleep 1\n",
        check: bool = True,
        user: str | None = None,
    ) -> int | None:
        """Submit `script` (stdin) with `sbatch --parsable ARGS`; the job id.

        With check=False a refused submission returns None (use `run(["sbatch", ...])` to read
        the refusal). Job output files land in `work_dir` unless ARGS say otherwise. `user`
        submits as that Unix user (see `add_user`).
        """
        proc = self.run(["sbatch", "--parsable", *args], check=check, input=script, user=user)
        if proc.returncode != 0:
            return None
        return int(proc.stdout.strip().split(";")[0])

    def scontrol(self, *args: str) -> str:
        """`scontrol ARGS` stdout (CommandFailed on error)."""
        return self.run(["scontrol", *args]).stdout

    def sacctmgr(self, *args: str, check: bool = True) -> str:
        """`sacctmgr -i ARGS` stdout (no confirmation prompt)."""
        return self.run(["sacctmgr", "-i", *args], check=check).stdout

    def add_user(self, name: str, *, account: str | None = None, qos: Sequence[str] = ()) -> None:
        """A Unix user (created if missing, never removed) with an association in `account`.

        slurmctld checks the submitting uid against the associations
        (AccountingStorageEnforce=associations), so a test can submit as a user who is in
        the database, or as one who is not (create the Unix user with `add_user` in another
        account, or with `useradd` alone). `qos` sets that user's QOS list.
        """
        if not re.fullmatch(r"[a-z_][a-z0-9_-]{0,30}", name):
            raise ValueError(f"not a plain user name: {name!r}")
        exists = subprocess.run(["getent", "passwd", name], capture_output=True, check=False)
        if exists.returncode != 0:
            created = subprocess.run(
                [
                    which("useradd") or "useradd",
                    "--system",
                    "--user-group",
                    "--no-create-home",
                    "--shell=/bin/sh",
                    name,
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            # a concurrent run may have created it in the meantime
            if created.returncode not in (0, 9):
                raise ClusterError(f"useradd {name} failed: {created.stderr.strip()}")
        account = account or self.account
        if not qos:
            # idempotent: test modules of one session may add the same user (sacctmgr refuses
            # a second add: "Nothing new added" on 22.05, "Nothing added" on 24.11)
            known = self.sacctmgr(
                "show", "assoc", "--parsable2", "--noheader", "where", f"user={name}",
                f"account={account}", f"cluster={self.cluster_name}", "format=User",
            )  # fmt: skip
            if name in known.split():
                return
        args = ["add", "user", name, f"Account={account}", f"DefaultAccount={account}"]
        if qos:
            args.append("QOS=" + ",".join(qos))
        self.sacctmgr(*args)

    def allow_qos(self, *qos: str) -> None:
        """Let root's default account (and root in it) submit with these QOS."""
        value = "qos+=" + ",".join(qos)
        self.sacctmgr("modify", "account", self.account, "set", value)
        self.sacctmgr("modify", "user", "root", "where", f"account={self.account}", "set", value)

    def job_ids(self) -> list[int]:
        """Ids of every job slurmctld still lists (pending, running, completing)."""
        out = self.run(["squeue", "-h", "-o", "%A", "--states=all"], check=False).stdout
        return [int(x) for x in out.split() if x.isdigit()]

    def active_job_ids(self) -> list[int]:
        """Ids of jobs not yet finished (pending, running, suspended, completing...)."""
        out = self.run(["squeue", "-h", "-o", "%A %T", "--states=all"], check=False).stdout
        ids = []
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1] not in TERMINAL_STATES | {"PREEMPTED"}:
                ids.append(int(parts[0]))
        return ids

    def scancel_all(self, timeout: float = 30) -> None:
        """Cancel every job and wait until none is pending, running or completing."""
        ids = self.active_job_ids()
        if ids:
            self.run(["scancel", *map(str, ids)], check=False)
        deadline = time.monotonic() + timeout
        while self.active_job_ids():
            if time.monotonic() > deadline:
                out = self.run(["squeue", "--states=all"], check=False).stdout
                raise TimeoutError(f"jobs still active {timeout:g} s after scancel:\n{out}")
            time.sleep(0.25)

    def job_state(self, jobid: int) -> str | None:
        """The job's state from squeue, else from sacct (first word: `CANCELLED by 0` ->
        `CANCELLED`); None when neither knows it yet."""
        proc = self.run(["squeue", "-h", "-j", str(jobid), "-o", "%T", "--states=all"], check=False)
        state = proc.stdout.strip() if proc.returncode == 0 else ""
        if state:
            return state.split()[0]
        proc = self.run(["sacct", "-n", "-X", "-P", "-j", str(jobid), "-o", "State"], check=False)
        lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
        return lines[-1].split()[0] if lines else None

    def wait_job_state(self, jobid: int, states: str | Iterable[str], timeout: float = 60) -> str:
        """Wait until the job is in one of `states`; return it.

        TimeoutError with the job's details when time runs out; ClusterError at once when the
        job ends in another (terminal) state.
        """
        wanted = {states.upper()} if isinstance(states, str) else {s.upper() for s in states}
        deadline = time.monotonic() + timeout
        seen: list[str] = []
        while True:
            state = self.job_state(jobid)
            if state and (not seen or seen[-1] != state):
                seen.append(state)
            if state in wanted:
                return state
            if state in TERMINAL_STATES:
                raise ClusterError(
                    f"job {jobid} ended {state} while waiting for {sorted(wanted)}"
                    f" (states seen: {' -> '.join(seen)})\n{self._job_details(jobid)}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"job {jobid} not in {sorted(wanted)} after {timeout:g} s"
                    f" (states seen: {' -> '.join(seen) or 'none'})\n{self._job_details(jobid)}"
                )
            time.sleep(0.25)

    def _job_details(self, jobid: int) -> str:
        job = self.run(["scontrol", "show", "job", str(jobid)], check=False)
        return (
            f"--- scontrol show job {jobid} ---\n{(job.stdout or job.stderr).strip()}\n"
            f"--- last lines of slurmctld.log ---\n{self.log_tail('slurmctld', 15)}"
        )

    def sacct_rows(self, jobid: int, fields: str = SACCT_FIELDS) -> list[dict[str, str]]:
        """`sacct -P -D -j JOBID --format=FIELDS` as a list of dicts (all steps, all runs)."""
        proc = self.run(
            ["sacct", "-P", "-D", "-j", str(jobid), f"--format={fields}", "--delimiter=\x1f"]
        )
        lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
        if not lines:
            return []
        header = lines[0].split("\x1f")
        return [dict(zip(header, ln.split("\x1f"), strict=False)) for ln in lines[1:]]

    def wait_sacct(
        self,
        jobid: int,
        predicate: Callable[[list[dict[str, str]]], bool] | None = None,
        timeout: float = 60,
        fields: str = SACCT_FIELDS,
    ) -> list[dict[str, str]]:
        """Poll sacct until `predicate(rows)` holds (default: any row); return the rows.

        slurmctld sends records to slurmdbd asynchronously, so a fresh job may take a moment
        to appear, and its end even longer.
        """
        check = predicate or bool
        deadline = time.monotonic() + timeout
        rows: list[dict[str, str]] = []
        while True:
            rows = self.sacct_rows(jobid, fields)
            if check(rows):
                return rows
            if time.monotonic() > deadline:
                shown = "\n".join(map(str, rows)) or "(no rows)"
                raise TimeoutError(
                    f"sacct rows for job {jobid} did not satisfy the condition after "
                    f"{timeout:g} s:\n{shown}"
                )
            time.sleep(0.5)


def write_munge_key(path: Path) -> Path:
    """A fresh munge key (128 random bytes, mode 600, in a 700 directory)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.write_bytes(secrets.token_bytes(128))
    path.chmod(0o600)
    return path


def munged_argv(key: Path, socket_path: str, run_dir: Path, log_dir: Path) -> list[str]:
    """`munged` in the foreground with its key, socket, pid, log and seed files given."""
    return [
        which("munged") or "munged",
        "-F",
        "--force",  # take over a stale socket left by a munged that died
        f"--key-file={key}",
        f"--socket={socket_path}",
        f"--pid-file={run_dir}/munged.pid",
        f"--log-file={log_dir}/munged.log",
        f"--seed-file={key.parent}/munged.seed",
    ]


def munge_answers(socket_path: str = MUNGE_SOCKET) -> bool:
    """True when `munge -n | unmunge` works on `socket_path` (default: the system socket)."""
    munge, unmunge = which("munge"), which("unmunge")
    if not munge or not unmunge:
        return False
    try:
        cred = subprocess.run(
            [munge, "-n", f"--socket={socket_path}"], capture_output=True, timeout=5, check=False
        )
        if cred.returncode != 0:
            return False
        back = subprocess.run(
            [unmunge, f"--socket={socket_path}"],
            input=cred.stdout,
            capture_output=True,
            timeout=5,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return False
    return back.returncode == 0


# ---------------------------------------------------------------- the session's own munged

_CLONE_NEWNS = 0x00020000
_MS_NOSUID, _MS_NODEV, _MS_REC, _MS_PRIVATE = 0x2, 0x4, 0x4000, 0x40000


@dataclass
class _MungeSession:
    pid: int  # the process that entered the namespace (a forked child must enter its own)
    daemon: Daemon | None = None


_munge_session: _MungeSession | None = None


def _libc_call(what: str, name: str, *args: object) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if getattr(libc, name)(*args) != 0:
        err = os.strerror(ctypes.get_errno())
        raise ClusterError(
            f"the session's private {MUNGE_DIR}: {what} failed: {err} "
            "(the test cluster needs root with CAP_SYS_ADMIN)"
        )


def enter_private_munge() -> None:
    """Put this process in a mount namespace of its own, with an empty tmpfs on /run/munge.

    Once per process (a second call does nothing). From then on MUNGE_SOCKET, the path every
    Slurm and munge program of this process and of its children uses, is this session's
    alone: no other test session, system munged or CI run on the host can answer on it,
    replace it or stop it, and nothing this session starts or stops there is seen outside.
    The rest of the file system stays shared (`/` is made private recursively first, so the
    tmpfs does not propagate back to the host). The namespace ends with its last process; no
    mount is left on the host. A process already inside another session's namespace (a child
    of a test) gets its own tmpfs on top, so it does not share the parent's munged either.

    Only the calling thread moves (Linux): call it before starting threads that run programs
    (tests/integration/conftest.py calls it when the session is configured).
    """
    global _munge_session
    if _munge_session is not None and _munge_session.pid == os.getpid():
        return
    import ctypes

    _libc_call("unshare(CLONE_NEWNS)", "unshare", ctypes.c_int(_CLONE_NEWNS))
    flags = ctypes.c_ulong(_MS_REC | _MS_PRIVATE)
    _libc_call("making / private", "mount", b"none", b"/", None, flags, None)
    Path(MUNGE_DIR).mkdir(parents=True, exist_ok=True)
    _libc_call(
        f"mounting a tmpfs on {MUNGE_DIR}",
        "mount",
        SESSION_MUNGE_MOUNT.encode(),
        MUNGE_DIR.encode(),
        b"tmpfs",
        ctypes.c_ulong(_MS_NOSUID | _MS_NODEV),
        b"mode=0755,size=16m",
    )
    _munge_session = _MungeSession(pid=os.getpid())
    # registered before any cluster's `down`, so at exit it runs after them (atexit is LIFO)
    atexit.register(stop_session_munged)


def in_private_munge() -> bool:
    """True when this process entered its private /run/munge (`enter_private_munge`)."""
    return _munge_session is not None and _munge_session.pid == os.getpid()


def session_munged(timeout: float = 30) -> Daemon:
    """The session's own munged on MUNGE_SOCKET (started on first use; ClusterError if not).

    Enters the private namespace first (`enter_private_munge`). Never reuses a munged it did
    not start: the socket is private, so one answering there can only be this session's. The
    key (fresh, random), seed, pid file and log live in `/run/munge/session/` on the private
    tmpfs. It is stopped when this process exits (atexit, SIGTERM) or is killed (SIGTERM via
    PR_SET_PDEATHSIG), never by a cluster's `down()`, since every cluster of the session uses
    it. A Debian root's programs see the same socket: its wrappers bind the caller's
    /run/munge into the root (tests/harness/debian_root.py).
    """
    enter_private_munge()
    assert _munge_session is not None
    daemon = _munge_session.daemon
    if daemon is not None and daemon.alive():
        return daemon
    home = Path(MUNGE_DIR) / "session"
    for sub in (home, home / "log", home / "pids"):
        sub.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = write_munge_key(home / "munge.key")
    daemon = Daemon("munged", home, home / "munged.log", "munged")
    _munge_session.daemon = daemon
    daemon.start(
        munged_argv(key, MUNGE_SOCKET, home, home), _clean_env({}), home, die_with_parent=True
    )
    deadline = time.monotonic() + timeout
    while not munge_answers():
        if not daemon.alive():
            raise ClusterError(
                f"the session's munged exited before it was answering on {MUNGE_SOCKET}\n"
                f"--- last lines of {daemon.log_file} ---\n{daemon.tail()}"
            )
        if time.monotonic() > deadline:
            daemon.stop()
            raise ClusterError(
                f"the session's munged was not answering on {MUNGE_SOCKET} after {timeout:g} s"
                f"\n--- last lines of {daemon.log_file} ---\n{daemon.tail()}"
            )
        time.sleep(0.1)
    return daemon


def stop_session_munged() -> None:
    """Stop the session's munged (this process's; nothing else's). Also run at exit."""
    if in_private_munge() and _munge_session is not None and _munge_session.daemon is not None:
        _munge_session.daemon.stop()
        _munge_session.daemon = None


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the parent dies (Linux prctl PR_SET_PDEATHSIG)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # 1 == PR_SET_PDEATHSIG


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def stop_dir(root: str | os.PathLike[str]) -> list[str]:
    """Stop a cluster left running in `root` by its pid files; the names of what was stopped."""
    cluster = SlurmCluster.attach(root)
    running = [name for name, alive in cluster.status().items() if alive]
    cluster.down(_remove=False)
    return running
