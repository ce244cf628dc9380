"""A real multi-node Slurm cluster on one host: one slurmd per node, each in its own namespaces.

munge, MariaDB, slurmdbd and slurmctld run as in `cluster.SlurmCluster` (whose life cycle this
class reuses). Each node's slurmd runs under `unshare --net --uts --mount`:
- **UTS**: its own host name (the node name), so `srun hostname` differs per node;
- **network**: a veth pair into the harness's private bridge (`sgb<id>`, a random
  10.x.y.0/24 that no interface here already uses); slurmctld answers on the bridge's .1, the
  nodes get .11, .12, ... Only addresses of these namespaces are ever used;
- **mount**: a private tmpfs on /dev holding the node's own fake GPU device nodes (made with
  mknod from the recorded machine: /dev/nvidiaN, /dev/nvidia-caps/nvidia-capN) beside the few
  standard ones, and the node's own directory bound over `ROOT/fake`, so that the same path
  (`ROOT/fake/machine.json` for the pynvml double, `ROOT/fake/host` for `--host-root`) shows
  each node its own recorded machine. Everything else (the session's munge socket, the
  repository, the venv, `ROOT/etc`) is the host's file system (as the test session sees it),
  so every slurmd reads the one slurm.conf and the one cluster-wide gres.conf.

One node as its admin sees it (what `slurmgpu mig apply` needs): `stop_slurmd(NAME)` and
`start_slurmd(NAME)` (systemctl stop/start: the start makes /dev from the node's machine
file as it is now, so MIG instances made since show as devices), `node_env(NAME)` and
`node_host_root(NAME)` (a command run from this host with the node's pynvml double and host
tree), and `control_command(ACTION, NAME)`: the argv of `python -m tests.harness.multinode
stop-slurmd|start-slurmd ROOT NAME` or `restart-slurmctld ROOT`, for a product's configurable
command running in another process; `sync()` then drops this object's stale process handles.

Namespaces die with their last process; veths die with their namespace; `down()` (also from
atexit and on SIGTERM) stops every slurmd by pid and deletes the bridge. A SIGKILLed test
run can leave only the bridge behind (`ip link del sgb<id>`, or `slurm-test-cluster down`).
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import random
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from tests.harness.cluster import (
    ClusterError,
    SlurmCluster,
    _clean_env,
    _tail,
    pid_alive,
    spawn,
    which,
)

REPO = Path(__file__).resolve().parents[2]
MACHINES_DIR = REPO / "tests" / "data" / "machines"
DOUBLES_DIR = REPO / "tests" / "doubles"
MACHINE_NAMES = ("dgx-a100-mig", "dgx-h100", "pcie-8gpu")
# Gres type of the harness's default gres.conf, per recorded machine (whole GPUs only: the
# default describes a MIG machine's GPUs as whole GPUs; generated files describe the slices)
DEFAULT_TYPES = {"dgx-h100": "h100", "dgx-a100-mig": "a100", "pcie-8gpu": "rtx4090"}
NAMESPACE_TOOLS = ("ip", "unshare", "nsenter", "mount", "mknod", "hostname", "base64")
# the standard device nodes a process expects in /dev (Linux's fixed numbers)
_STD_DEVICES = {"null": (1, 3), "zero": (1, 5), "full": (1, 7), "random": (1, 8)}
_STD_DEVICES.update({"urandom": (1, 9), "tty": (5, 0)})
DEFAULT_MULTI_PARTITIONS = ("PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP",)


@dataclass(frozen=True)
class NodeSpec:
    """One node of the cluster: its Slurm name, the recorded machine it is, its address."""

    name: str
    machine: str
    address: str = ""

    @staticmethod
    def parse(text: str) -> NodeSpec:
        """`NAME=MACHINE` (as `slurm-test-cluster up --node`)."""
        name, sep, machine = text.partition("=")
        if not sep or not re.fullmatch(r"[a-z][a-z0-9-]{0,30}", name):
            raise ClusterError(f"--node {text!r}: use NAME=MACHINE, e.g. gpu01=dgx-h100")
        if machine not in MACHINE_NAMES:
            raise ClusterError(
                f"--node {text!r}: machine must be one of {', '.join(MACHINE_NAMES)}"
            )
        return NodeSpec(name, machine)


def load_machine(machine: str) -> dict:
    """A recorded machine (tests/data/machines/NAME.json) as a dict."""
    return json.loads((MACHINES_DIR / f"{machine}.json").read_text(encoding="utf-8"))


def default_node_line(name: str, data: dict, gres_type: str) -> str:
    """A plain slurm.conf node line for a recorded machine (whole GPUs, no MIG)."""
    host = data["host"]
    sockets, cores, threads = host["sockets"], host["cores_per_socket"], host["threads_per_core"]
    return (
        f"NodeName={name} CPUs={sockets * cores * threads} Sockets={sockets} "
        f"CoresPerSocket={cores} ThreadsPerCore={threads} "
        f"RealMemory={host['memtotal_kib'] // 1024 - 4096} Gres=gpu:{gres_type}:{len(data['gpus'])}"
    )


def default_gres_line(name: str, data: dict, gres_type: str) -> str:
    from slurmgpu.util.hostlist import format_id_list

    minors = format_id_list(g["minor_number"] for g in data["gpus"])
    return f"NodeName={name} Name=gpu Type={gres_type} File=/dev/nvidia[{minors}]"


def device_nodes(data: dict) -> list[tuple[str, int, int]]:
    """(path under /dev, major, minor) of every device the recorded machine's driver makes."""
    from tests.doubles.hosttree import mig_minor_table

    devices = [("nvidiactl", 195, 255)]
    devices += [(f"nvidia{g['minor_number']}", 195, g["minor_number"]) for g in data["gpus"]]
    table = mig_minor_table()
    caps = {1, 2} if any(g.get("mig_mode") for g in data["gpus"]) else set()
    for g in data["gpus"]:
        for mig in g.get("mig_devices", []):
            gi = f"gpu{g['minor_number']}/gi{mig['gi_id']}"
            caps.add(table[f"{gi}/access"])
            caps.add(table[f"{gi}/ci{mig['ci_id']}/access"])
    # the caps major is dynamic on real hosts; slurmd only checks for a char device
    devices += [(f"nvidia-caps/nvidia-cap{m}", 511, m) for m in sorted(caps)]
    return devices


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [which("ip") or "ip", *args], capture_output=True, text=True, timeout=15, check=False
    )
    if check and proc.returncode != 0:
        raise ClusterError(f"ip {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc


def _free_subnet() -> str:
    """A 10.x.y.0/24 prefix (`10.x.y`) that no interface on this host uses yet."""
    used = _ip("-4", "-o", "addr", "show").stdout
    for _ in range(200):
        prefix = f"10.{random.randint(200, 250)}.{random.randint(0, 255)}"
        if f" {prefix}." not in used:
            return prefix
    raise ClusterError("no free 10.x.y.0/24 for the test cluster's bridge")


def _netns_id(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return ""


def _children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


class NodeProcess:
    """One node's `unshare ... slurmd`; pid files `pids/slurmd-NAME.pid` (+ `.child`)."""

    def __init__(self, root: Path, spec: NodeSpec) -> None:
        self.spec = spec
        self.root = root
        self.dir = root / "nodes" / spec.name
        self.log_file = root / "log" / f"slurmd-{spec.name}.log"
        self.output_file = root / "log" / f"slurmd-{spec.name}.out"
        self.pid_file = root / "pids" / f"slurmd-{spec.name}.pid"
        self.child_file = root / "pids" / f"slurmd-{spec.name}.child"
        self.proc: subprocess.Popen[bytes] | None = None

    def _read_pid(self, path: Path) -> int | None:
        try:
            return int(path.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    @property
    def pids(self) -> list[int]:
        """The unshare process and its child (the slurmd), those that are known."""
        return [p for p in (self._read_pid(self.pid_file), self._read_pid(self.child_file)) if p]

    def alive(self) -> bool:
        """True while the slurmd (or the unshare/start script before it) runs."""
        return any(pid_alive(p) and _ours(_cmdline(p)) for p in self.pids)

    def start(self, env: Mapping[str, str], cwd: Path, bridge: str, veth: str, detached: bool):
        """Start the namespaced slurmd and plug its namespace into `bridge` through `veth`."""
        script = self.dir / "start.sh"
        unshare = [which("unshare") or "unshare", "--net", "--uts", "--mount"]
        unshare += ["--propagation=private", "--fork", "--kill-child=SIGTERM"]
        self.proc = spawn(
            [*unshare, "/bin/sh", str(script)],
            env,
            cwd,
            self.output_file,
            die_with_parent=not detached,
        )
        self.pid_file.write_text(f"{self.proc.pid}\n")
        own = _netns_id(os.getpid())
        deadline = time.monotonic() + 10
        while _netns_id(self.proc.pid) in ("", own):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise ClusterError(
                    f"unshare for node {self.spec.name} did not start:\n{self.tail()}"
                )
            time.sleep(0.02)
        _ip("link", "del", veth, check=False)  # a leftover of a killed run of this cluster
        _ip(
            "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", str(self.proc.pid)
        )
        _ip("link", "set", veth, "master", bridge, "up")
        deadline = time.monotonic() + 10
        while not (kids := _children(self.proc.pid)):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise ClusterError(f"node {self.spec.name} did not start:\n{self.tail()}")
            time.sleep(0.02)
        self.child_file.write_text(f"{kids[0]}\n")

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM the slurmd (then unshare follows), SIGKILL what is left; only our pids."""
        for pid in reversed(self.pids):  # the child first
            if pid_alive(pid) and _cmdline(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while any(pid_alive(p) for p in self.pids) and time.monotonic() < deadline:
            if self.proc is not None:
                self.proc.poll()
            time.sleep(0.1)
        for pid in self.pids:
            if pid_alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
        self.proc = None
        for path in (self.pid_file, self.child_file):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def tail(self, n: int = 30) -> str:
        text = "\n".join(_tail(self.log_file, n))
        out = "\n".join(_tail(self.output_file, n))
        return (text + ("\n--- stdout/stderr ---\n" + out if out else "")) or "(no output)"


def _ours(cmdline: str) -> bool:
    """A process of a node: the slurmd, its start script or the unshare around them."""
    return any(word in cmdline for word in ("slurmd", "start.sh", "unshare"))


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


class MultiNodeCluster(SlurmCluster):
    """slurmctld + slurmdbd + MariaDB + munge as `SlurmCluster`, and one namespaced slurmd per node.

    `nodes` are `NodeSpec`s or `NAME=MACHINE` strings. `node_conf` (slurm.conf `NodeName=`
    lines, hostlists allowed) and `gres_conf` (a cluster-wide gres.conf, `NodeName=` on its
    lines) default to plain whole-GPU descriptions of the recorded machines; the harness adds
    each node's `NodeAddr=`/`NodeHostname=`. `topology_conf`, when given, is installed with
    `TopologyPlugin=topology/tree`; `topology_yaml` (Slurm 25.05+: several topologies,
    partitions pick one with `Topology=NAME`) as `topology.yaml`, which slurmctld reads first.
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        nodes: Sequence[NodeSpec | str],
        node_conf: str | None = None,
        gres_conf: str | None = None,
        topology_conf: str | None = None,
        topology_yaml: str | None = None,
        partitions: Sequence[str] | None = None,
        extra_conf: str = "",
        cluster_name: str | None = None,
        keep: bool = False,
        detached: bool = False,
        net: Mapping[str, str] | None = None,
    ) -> None:
        specs = [n if isinstance(n, NodeSpec) else NodeSpec.parse(n) for n in nodes]
        if len({s.name for s in specs}) != len(specs) or not specs:
            raise ClusterError("give one or more nodes, each with a distinct name")
        cluster_name = cluster_name or "sg" + secrets.token_hex(3)
        self.net = dict(net or {})
        self.net.setdefault("id", cluster_name[-6:])
        self.net.setdefault("bridge", f"sgb{self.net['id']}")
        self.net.setdefault("prefix", "")
        self._multi = {"node_conf": node_conf, "gres_conf": gres_conf}
        self._multi["topology_conf"] = topology_conf
        self._multi["topology_yaml"] = topology_yaml
        self.specs = specs
        defaults = self._default_confs()
        super().__init__(
            root,
            cluster_name=cluster_name,
            node_line=defaults[0].splitlines()[0],
            gres_conf=gres_conf if gres_conf is not None else defaults[1],
            extra_conf=extra_conf,
            partitions=list(DEFAULT_MULTI_PARTITIONS if partitions is None else partitions),
            keep=keep,
            detached=detached,
        )
        self.fake_dir = self.root / "fake"
        self.nodes = {s.name: NodeProcess(self.root, s) for s in specs}

    # ------------------------------------------------------------ configuration

    def _default_confs(self) -> tuple[str, str]:
        node_lines, gres_lines = [], []
        for s in self.specs:
            data = load_machine(s.machine)
            node_lines.append(default_node_line(s.name, data, DEFAULT_TYPES[s.machine]))
            gres_lines.append(default_gres_line(s.name, data, DEFAULT_TYPES[s.machine]))
        return "\n".join(node_lines) + "\n", "\n".join(gres_lines) + "\n"

    @property
    def node_names(self) -> list[str]:
        return [s.name for s in self.specs]

    def address(self, name: str) -> str:
        """The node's address on the private bridge."""
        return f"{self.net['prefix']}.{11 + self.node_names.index(name)}"

    @property
    def ctld_address(self) -> str:
        return f"{self.net['prefix']}.1"

    def _node_conf_lines(self) -> list[str]:
        """The slurm.conf node lines with NodeAddr= and NodeHostname= for each node added."""
        from slurmgpu.util.hostlist import expand_hostlist

        text = self._multi["node_conf"] or self._default_confs()[0]
        out = []
        seen: list[str] = []
        for line in text.splitlines():
            m = re.match(r"\s*NodeName=(\S+)(.*)$", line)
            if not m or line.lstrip().startswith("#"):
                continue
            names = expand_hostlist(m.group(1))
            unknown = [n for n in names if n not in self.node_names]
            if unknown:
                raise ClusterError(f"node line names nodes this cluster lacks: {unknown}")
            rest = re.sub(r"\s+Node(Addr|Hostname)=\S+", "", m.group(2))
            # one line per node: each needs its own address (Slurm takes hostlists here, but
            # one line each keeps the mapping obvious in the written slurm.conf)
            for name in names:
                out.append(
                    f"NodeName={name} NodeAddr={self.address(name)} NodeHostname={name}{rest}"
                )
                seen.append(name)
        missing = [n for n in self.node_names if n not in seen]
        if missing:
            raise ClusterError(f"no node line for {missing}")
        return out

    def render_slurm_conf(self) -> str:
        """The single-node slurm.conf, with the controller on the bridge and one line per node."""
        text = super().render_slurm_conf()
        drop = {self._settings["node_line"], *self._settings["partitions"]}
        r = self.root
        replace = {
            "SlurmctldHost": f"SlurmctldHost={_ctld_name()}({self.ctld_address})",
            "SlurmdSpoolDir": f"SlurmdSpoolDir={self.spool_dir}/%n",
            "SlurmdPidFile": f"SlurmdPidFile={r}/run/slurmd-%n.pid",
            "SlurmdLogFile": f"SlurmdLogFile={self.log_dir}/slurmd-%n.log",
            # a node that comes back after a restart is usable again at once
            "ReturnToService": "ReturnToService=2",
        }
        lines = []
        for line in text.splitlines():
            key = line.split("=", 1)[0]
            if line in drop:
                continue
            lines.append(replace.get(key, line))
        if self._multi["topology_conf"] is not None and not re.search(
            r"(?m)^TopologyPlugin=", text
        ):
            lines.append("TopologyPlugin=topology/tree")
        lines += self._node_conf_lines()
        lines += self._settings["partitions"]
        return "\n".join(lines) + "\n"

    def _write_configs(self) -> None:
        self._settings["node_line"] = self._first_node_line()
        super()._write_configs()
        # gres.conf verbatim: /dev/... are the nodes' own /dev (no mapping to a dev dir)
        gres = self._settings["gres_conf"]
        (self.conf_dir / "gres.conf").write_text(gres if gres.endswith("\n") else gres + "\n")
        for name in ("topology.conf", "topology.yaml"):
            topo = self.conf_dir / name
            text = self._multi.get(name.replace(".", "_"))
            if text is not None:
                topo.write_text(text)
            else:
                with contextlib.suppress(FileNotFoundError):
                    topo.unlink()

    def _first_node_line(self) -> str:
        text = self._multi["node_conf"] or self._default_confs()[0]
        return next(ln for ln in text.splitlines() if ln.strip().startswith("NodeName="))

    def _write_state(self) -> None:
        super()._write_state()
        path = self.root / "cluster.json"
        state = json.loads(path.read_text())
        state["multinode"] = {
            "nodes": [asdict(s) for s in self.specs],
            "net": self.net,
            "confs": self._multi,
        }
        path.write_text(json.dumps(state, indent=2) + "\n")

    # ------------------------------------------------------------ node file systems

    def machine_data(self, name: str) -> dict:
        """The recorded machine node `name` currently is (`nodes/NAME/fake/machine.json`)."""
        return json.loads((self.root / "nodes" / name / "fake" / "machine.json").read_text())

    def set_machine_data(self, name: str, data: dict) -> None:
        """Make node `name` this machine from its next (re)start: devices, double, host tree."""
        from tests.doubles.hosttree import build_host_tree

        fake = self.root / "nodes" / name / "fake"
        shutil.rmtree(fake, ignore_errors=True)
        fake.mkdir(parents=True)
        data = copy.deepcopy(data)
        data["host"]["hostname"] = name
        (fake / "machine.json").write_text(json.dumps(data, indent=1))
        build_host_tree(data, fake / "host")
        self._write_start_script(name, data)

    def _write_start_script(self, name: str, data: dict) -> None:
        node_dir = self.root / "nodes" / name
        mknods = "\n".join(
            f"mknod -m 666 /dev/{path} c {major} {minor}"
            for path, major, minor in device_nodes(data)
        )
        std = "\n".join(
            f"mknod -m 666 /dev/{dev} c {major} {minor}"
            for dev, (major, minor) in _STD_DEVICES.items()
        )
        slurmd = which("slurmd") or "slurmd"
        script = f"""#!/bin/sh
# node {name}: runs inside `unshare --net --uts --mount` (written by tests/harness/multinode.py)
set -e
i=0
while ! ip link show eth0 >/dev/null 2>&1; do
    i=$((i + 1)); [ $i -lt 500 ] || {{ echo "no eth0 from the harness" >&2; exit 1; }}
    sleep 0.02
done
ip link set lo up
ip addr add {self.address(name)}/24 dev eth0
ip link set eth0 up
hostname {name}
mount -t tmpfs -o mode=755 slurmgpu-dev /dev
{std}
mkdir -p /dev/shm /dev/nvidia-caps
mount -t tmpfs -o mode=1777 slurmgpu-shm /dev/shm
ln -s /proc/self/fd /dev/fd
ln -s /proc/self/fd/0 /dev/stdin
ln -s /proc/self/fd/1 /dev/stdout
ln -s /proc/self/fd/2 /dev/stderr
{mknods}
mount --bind {node_dir / "fake"} {self.fake_dir}
exec {slurmd} -D -N {name}
"""
        (node_dir / "start.sh").write_text(script)

    # ------------------------------------------------------------ life cycle

    def up(self, timeout: float = 120) -> MultiNodeCluster:
        missing = [t for t in NAMESPACE_TOOLS if which(t) is None]
        if missing:
            raise ClusterError("missing programs for the node namespaces: " + ", ".join(missing))
        if not self.net["prefix"]:
            self.net["prefix"] = _free_subnet()
        self.fake_dir.mkdir(parents=True, exist_ok=True)
        for s in self.specs:
            (self.spool_dir / s.name).mkdir(parents=True, exist_ok=True)
            if not (self.root / "nodes" / s.name / "fake" / "machine.json").exists():
                self.set_machine_data(s.name, load_machine(s.machine))
        try:
            self._make_bridge()  # slurmctld answers on the bridge's address
        except ClusterError:
            _ip("link", "del", self.net["bridge"], check=False)
            raise
        super().up(timeout)
        return self

    def _make_bridge(self) -> None:
        bridge = self.net["bridge"]
        if _ip("link", "show", bridge, check=False).returncode == 0:
            return
        # A fixed MAC: a bridge without one takes its lowest port's, so restarting a node
        # (new veth) could change it and leave the other nodes' ARP entries for slurmctld's
        # address pointing nowhere ("Unable to contact slurm controller", seen here).
        i = self.net["id"]
        mac = f"02:53:47:{i[0:2]}:{i[2:4]}:{i[4:6]}"
        _ip("link", "add", "name", bridge, "address", mac, "type", "bridge")
        _ip("addr", "add", f"{self.ctld_address}/24", "dev", bridge)
        _ip("link", "set", bridge, "up")

    def _veth(self, name: str) -> str:
        return f"sgv{self.net['id']}{self.node_names.index(name)}"

    def _start_slurmd(self, deadline: float) -> None:
        """Start every node's slurmd, then wait until all of them are idle."""
        for name in self.node_names:
            self._start_node(name)
        self._wait_nodes(self.node_names, deadline)

    def _start_node(self, name: str) -> None:
        env = _clean_env(self.env)
        self.nodes[name].start(
            env, self.work_dir, self.net["bridge"], self._veth(name), self.detached
        )

    def _wait_nodes(self, names: Sequence[str], deadline: float) -> None:
        while True:
            states = {n: self.node_record(n) for n in names}
            for name, node in states.items():
                flags = set(node.get("State", "").split("+"))
                if {"DRAIN", "INVALID_REG"} & flags and node.get("Reason", "(null)") != "(null)":
                    raise ClusterError(
                        f"node {name} registered but slurmctld set it State={node['State']} "
                        f"Reason={node['Reason']}\n"
                        f"--- slurmctld ---\n{self.log_tail('slurmctld', 15)}\n"
                        f"--- slurmd {name} ---\n{self.nodes[name].tail(15)}"
                    )
                proc = self.nodes[name].proc
                if proc is not None and proc.poll() is not None:
                    raise ClusterError(f"slurmd of node {name} exited:\n{self.nodes[name].tail()}")
            if all(_idle(node) for node in states.values()):
                return
            if time.monotonic() > deadline:
                shown = {n: s.get("State", "?") for n, s in states.items()}
                raise ClusterError(
                    f"nodes not all idle before the timeout: {shown}\n"
                    + "\n".join(f"--- slurmd {n} ---\n{self.nodes[n].tail(10)}" for n in names)
                )
            time.sleep(0.2)

    def node_record(self, name: str) -> dict[str, str]:
        """`scontrol show -o node NAME` as a dict ({} when slurmctld does not answer)."""
        from slurmgpu.sources.slurm import parse_scontrol_record

        proc = self.run(["scontrol", "show", "-o", "node", name], check=False)
        line = proc.stdout.strip()
        return parse_scontrol_record(line) if proc.returncode == 0 and line else {}

    def node_state(self) -> dict[str, str]:
        return self.node_record(self.node_names[0])

    def stop_nodes(self, names: Sequence[str] | None = None) -> None:
        for name in names or self.node_names:
            self.nodes[name].stop()

    def restart_node(self, name: str, *, wait_idle: bool = True, timeout: float = 60) -> None:
        """Stop and start one node's slurmd (fresh namespaces: its machine data re-read)."""
        deadline = time.monotonic() + timeout
        self.nodes[name].stop()
        self._start_node(name)
        if wait_idle:
            self._wait_nodes([name], deadline)

    def resume_node(self, name: str, timeout: float = 60) -> None:
        """RESUME the node until it is plainly IDLE (a slurmd still re-registering may drain
        it again with its old reason; RESUME is refused while it is not drained)."""
        deadline = time.monotonic() + timeout
        while True:
            record = self.node_record(name)
            if record.get("State") == "IDLE":
                return
            if "DRAIN" in record.get("State", ""):
                self.run(["scontrol", "update", f"NodeName={name}", "State=RESUME"], check=False)
            if time.monotonic() > deadline:
                raise TimeoutError(f"node {name} not IDLE after {timeout:g} s: {record}")
            time.sleep(0.5)

    def wait_node(self, name: str, predicate, timeout: float = 60) -> dict[str, str]:
        """Poll `scontrol show node NAME` until `predicate(record)`; the record."""
        deadline = time.monotonic() + timeout
        while True:
            record = self.node_record(name)
            if record and predicate(record):
                return record
            if time.monotonic() > deadline:
                raise TimeoutError(f"node {name} not as wanted after {timeout:g} s: {record}")
            time.sleep(0.3)

    def reconfigure(  # type: ignore[override]
        self,
        *,
        node_conf: str | None = None,
        gres_conf: str | None = None,
        topology_conf: str | None = None,
        topology_yaml: str | None = None,
        partitions: Sequence[str] | None = None,
        extra_conf: str = "",
        job_submit_lua: str | None = None,
        timeout: float = 90,
    ) -> None:
        """New configs (unset: the defaults), restart slurmctld and every node, wait idle."""
        self._multi = {"node_conf": node_conf, "gres_conf": gres_conf}
        self._multi["topology_conf"] = topology_conf
        self._multi["topology_yaml"] = topology_yaml
        defaults = self._default_confs()
        self._settings = self._make_settings(
            defaults[0].splitlines()[0],
            gres_conf if gres_conf is not None else defaults[1],
            extra_conf,
            list(DEFAULT_MULTI_PARTITIONS if partitions is None else partitions),
            job_submit_lua,
        )
        self._restart_all(timeout)

    def reset(self, timeout: float = 90) -> None:
        self.reconfigure(timeout=timeout)

    def _restart_all(self, timeout: float) -> None:
        if self._daemons["slurmctld"].alive():
            with contextlib.suppress(Exception):
                self.scancel_all(timeout=15)
        self.stop_nodes()
        for s in self.specs:
            self.set_machine_data(s.name, load_machine(s.machine))
        super()._restart_all(timeout)

    def down(self, *, _remove: bool = True) -> None:
        if self._daemons["slurmctld"].alive():
            with contextlib.suppress(Exception):
                self.scancel_all(timeout=10)
        self.stop_nodes()
        try:
            super().down(_remove=_remove)
        finally:
            # after slurmctld is gone: its clients talk to it on the bridge's address
            for name in self.node_names:
                _ip("link", "del", self._veth(name), check=False)
            _ip("link", "del", self.net["bridge"], check=False)

    def detach(self) -> None:
        super().detach()
        for node in self.nodes.values():
            node.proc = None

    def status(self) -> dict[str, bool]:
        status = super().status()
        status.pop("slurmd", None)
        status.update({f"slurmd-{n}": p.alive() for n, p in self.nodes.items()})
        return status

    @classmethod
    def attach(cls, root: str | os.PathLike[str]) -> MultiNodeCluster:  # type: ignore[override]
        """A handle on a multi-node cluster left running in `root` (`slurm-test-cluster up`)."""
        root = Path(root).resolve()
        try:
            state = json.loads((root / "cluster.json").read_text())
        except FileNotFoundError as exc:
            raise ClusterError(f"no test cluster in {root} (no cluster.json)") from exc
        multi = state.get("multinode")
        if multi is None:
            raise ClusterError(f"the test cluster in {root} is a single-node one")
        s = state["settings"]
        cluster = cls(
            root,
            nodes=[NodeSpec(**n) for n in multi["nodes"]],
            node_conf=multi["confs"]["node_conf"],
            gres_conf=multi["confs"]["gres_conf"],
            topology_conf=multi["confs"]["topology_conf"],
            topology_yaml=multi["confs"].get("topology_yaml"),
            partitions=s["partitions"],
            extra_conf=s["extra_conf"],
            cluster_name=state["cluster_name"],
            net=multi["net"],
        )
        cluster._owns_root = False
        cluster.detached = True
        cluster.ports = state["ports"]
        cluster.munged_started = state["munged_started"]
        return cluster

    # ------------------------------------------------------------ one node, as its admin sees it

    def stop_slurmd(self, name: str) -> None:
        """Stop node `name`'s slurmd (its namespaces go with it), as `systemctl stop slurmd`
        on a real node; nothing happens when it is not running."""
        self.nodes[name].stop()

    def start_slurmd(self, name: str) -> None:
        """Start node `name`'s slurmd in fresh namespaces, as `systemctl start slurmd`: it
        does not wait for the node to register, and does nothing when slurmd runs. Its /dev
        is made from the node's machine file as it is now, so MIG instances created through
        the pynvml double since the last start show up as their nvidia-caps devices."""
        if self.nodes[name].alive():
            return
        self._write_start_script(name, self.machine_data(name))
        self._start_node(name)

    def node_env(self, name: str) -> dict[str, str]:
        """Environment for an admin command run for node `name` from this host (`slurmgpu mig
        apply`): Slurm's client config, and the pynvml double on the node's own machine file,
        with MIG changes written back to it so they outlive the command as on a real GPU."""
        return _clean_env(
            {
                **self.env,
                "PYTHONPATH": os.pathsep.join([str(DOUBLES_DIR), str(REPO)]),
                "SLURMGPU_FAKE_NVML_MACHINE": str(
                    self.root / "nodes" / name / "fake" / "machine.json"
                ),
                "SLURMGPU_FAKE_NVML_WRITE": "1",
            }
        )

    def node_host_root(self, name: str) -> Path:
        """Node `name`'s recorded host tree (`--host-root` for commands run from this host)."""
        return self.root / "nodes" / name / "fake" / "host"

    def control_command(self, action: str, name: str | None = None) -> list[str]:
        """The argv that does `action` to this cluster from any process (a product's
        configurable command, e.g. mig apply's --stop-slurmd): `stop-slurmd NAME`,
        `start-slurmd NAME` or `restart-slurmctld`, through this module's command line. Call
        `sync()` afterwards in the process that holds this cluster object."""
        if action not in CONTROL_ACTIONS:
            raise ClusterError(f"unknown control action {action!r}")
        return [sys.executable, "-m", "tests.harness.multinode", action, str(self.root)] + (
            [name] if name else []
        )

    def sync(self) -> None:
        """Forget process handles that another process (a `control_command`) replaced, so
        this object stops and waits for the daemons the pid files now name."""
        for d in self._daemons.values():
            if d.proc is not None and _pid_in(d.pid_file) != d.proc.pid:
                d.proc.poll()
                d.proc = None
        for node in self.nodes.values():
            if node.proc is not None and _pid_in(node.pid_file) != node.proc.pid:
                node.proc.poll()
                node.proc = None

    # ------------------------------------------------------------ running things on nodes

    def node_run(
        self, name: str, argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout=120
    ) -> subprocess.CompletedProcess[str]:
        """Run `argv` inside node `name`'s namespaces (as slurmd's HealthCheckProgram would)."""
        pids = self.nodes[name].pids
        if len(pids) < 2:
            raise ClusterError(f"node {name} is not running")
        full_env = _clean_env({**self.env, **self.double_env(), **(env or {})})
        return subprocess.run(
            [which("nsenter") or "nsenter", f"--target={pids[1]}", "--mount", "--uts", "--net",
             "--", *argv],
            capture_output=True, text=True, timeout=timeout, env=full_env, cwd=self.work_dir,
            check=False,
        )  # fmt: skip

    def double_env(self) -> dict[str, str]:
        """Environment for a job step that should see its node's recorded GPUs through the
        pynvml double (srun exports the caller's environment; the path differs per node)."""
        return {
            "PYTHONPATH": os.pathsep.join([str(DOUBLES_DIR), str(REPO)]),
            "SLURMGPU_FAKE_NVML_MACHINE": str(self.fake_dir / "machine.json"),
        }


def _pid_in(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def _idle(node: Mapping[str, str]) -> bool:
    flags = set(node.get("State", "").split("+"))
    return "IDLE" in flags and not ({"DRAIN", "NOT_RESPONDING", "INVALID_REG"} & flags)


def _ctld_name() -> str:
    import socket

    return socket.gethostname().split(".")[0]


def is_multinode(root: str | os.PathLike[str]) -> bool:
    """True when `root` holds a multi-node test cluster (its cluster.json says so)."""
    try:
        return "multinode" in json.loads((Path(root) / "cluster.json").read_text())
    except (FileNotFoundError, ValueError):
        return False


def stop_multinode_dir(root: str | os.PathLike[str]) -> list[str]:
    """Stop a multi-node cluster left running in `root`; the names of what was stopped."""
    cluster = MultiNodeCluster.attach(root)
    running = [name for name, alive in cluster.status().items() if alive]
    cluster.down(_remove=False)
    return running


CONTROL_ACTIONS = ("stop-slurmd", "start-slurmd", "restart-slurmctld")


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m tests.harness.multinode ACTION ROOT [NODE]`: one control action on the
    cluster running in ROOT (what a real site does with systemctl on a node or controller)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tests.harness.multinode")
    parser.add_argument("action", choices=CONTROL_ACTIONS)
    parser.add_argument("root")
    parser.add_argument("node", nargs="?")
    args = parser.parse_args(argv)
    try:
        cluster = MultiNodeCluster.attach(args.root)
        if args.action == "restart-slurmctld":
            cluster.restart_slurmctld()
        elif args.node not in cluster.node_names:
            parser.error(f"{args.action} needs a node of the cluster: {cluster.node_names}")
        elif args.action == "stop-slurmd":
            cluster.stop_slurmd(args.node)
        else:
            cluster.start_slurmd(args.node)
    except ClusterError as exc:
        print(f"multinode: {args.action}: {exc}", file=sys.stderr)
        return 1
    return 0


__all__ = [
    "MACHINE_NAMES",
    "MultiNodeCluster",
    "NodeSpec",
    "is_multinode",
    "load_machine",
    "stop_multinode_dir",
]


if __name__ == "__main__":
    raise SystemExit(main())
