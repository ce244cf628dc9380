"""Inventory of many nodes through Slurm: one `slurmgpu inventory` task per node (`srun`).

Prerequisite (docs/fleet.md): slurmgpu is installed on the nodes at the path given as
`remote_command` (default `slurmgpu` on the nodes' PATH). The step runs one task per node
(`srun -N N --ntasks-per-node=1 -w HOSTLIST -l`): each task prints a header line naming its
node (`$SLURMD_NODENAME`), then the snapshot JSON on stdout; `-l` labels every line with the
task's rank, so output from all nodes can be told apart on one stream. A node whose task fails
(NVML error, a GPU lost) is reported with its error; the other nodes' snapshots are kept.
Nodes Slurm already knows to be unusable (DOWN, DRAIN, NOT_RESPONDING) are reported as such
and not asked, since an allocation that names them would never start.

With ConstrainDevices=yes in cgroup.conf a step only sees the GPUs it was allocated: pass
`--exclusive --gres=gpu:N` as `srun_args` for a homogeneous node set, or run the inventory
outside Slurm.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from slurmgpu.errors import SlurmCommandError, SnapshotError, UsageError
from slurmgpu.model.inventory import Inventory
from slurmgpu.sources import snapshot
from slurmgpu.sources.slurm import scontrol_show
from slurmgpu.util.hostlist import compress_hostlist, expand_hostlist
from slurmgpu.util.proc import run

HEADER = "slurmgpu-node"
_LABEL = re.compile(r"^\s*(\d+): ?(.*)$")
_TASK_EXIT = re.compile(r"srun: error: (\S+): tasks? ([\d,-]+): (.*)$")
UNUSABLE_FLAGS = frozenset({"DOWN", "DRAIN", "NOT_RESPONDING", "FAIL", "POWERED_DOWN"})


@dataclass(frozen=True)
class NodeInventory:
    """One node's answer: its snapshot, or the error that stopped it (never both)."""

    node: str
    inventory: Inventory | None = None
    snapshot_text: str = ""
    error: str | None = None
    warnings: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.inventory is not None


@dataclass
class _Task:
    node: str | None = None
    stdout: list[str] = field(default_factory=list)


def remote_argv(remote_command: Sequence[str], host_root: str) -> list[str]:
    """What each task runs: a header naming its node, then `slurmgpu inventory`, base64'd.

    base64 (76-character lines) because `srun --label` cuts long lines into labelled pieces
    (seen: a snapshot's long NVLink lines arrived split, with a label inside the JSON).
    """
    script = (
        f'printf "{HEADER} %s\\n" "$SLURMD_NODENAME"; '
        'out=$("$@") || exit $?; printf "%s\\n" "$out" | base64'
    )
    return ["sh", "-c", script, "sh", *remote_command, "inventory", "--host-root", host_root]


def srun_argv(nodes: Sequence[str], remote: Sequence[str], srun_args: Sequence[str]) -> list[str]:
    return [
        "srun",
        f"--nodes={len(nodes)}",
        "--ntasks-per-node=1",
        f"--nodelist={compress_hostlist(nodes)}",
        "--label",
        "--kill-on-bad-exit=0",  # one failing node must not kill the others' tasks
        "--job-name=slurmgpu-inventory",
        *srun_args,
        *remote,
    ]


def unusable_nodes(nodes: Sequence[str], env: Mapping[str, str] | None) -> dict[str, str]:
    """{node: why} for nodes Slurm says cannot run a step now; unknown nodes included."""
    records = {r.get("NodeName", ""): r for r in scontrol_show("node", env=env)}
    out = {}
    for node in nodes:
        rec = records.get(node)
        if rec is None:
            out[node] = "Slurm does not know this node"
            continue
        flags = set(rec.get("State", "").split("+"))
        bad = sorted(flags & UNUSABLE_FLAGS)
        if bad:
            reason = rec.get("Reason", "(null)")
            out[node] = f"node is {rec.get('State')}" + (
                f" (Reason={reason})" if reason != "(null)" else ""
            )
    return out


def parse_step_output(stdout: str, stderr: str) -> tuple[dict[int, _Task], dict[str, str], list]:
    """Split the labelled output by task rank; srun's per-node failure lines by node."""
    tasks: dict[int, _Task] = {}
    for line in stdout.splitlines():
        m = _LABEL.match(line)
        if not m:
            continue
        task = tasks.setdefault(int(m.group(1)), _Task())
        if task.node is None and m.group(2).startswith(HEADER + " "):
            task.node = m.group(2).split(" ", 1)[1].strip()
        else:
            task.stdout.append(m.group(2))
    failures: dict[str, str] = {}
    task_stderr: list[tuple[int, str]] = []
    for line in stderr.splitlines():
        m = _TASK_EXIT.search(line)
        if m:
            failures[m.group(1)] = m.group(3).strip()
            continue
        lm = _LABEL.match(line)
        if lm:
            task_stderr.append((int(lm.group(1)), lm.group(2)))
    return tasks, failures, task_stderr


def inventory_nodes(
    hostlist: str,
    *,
    remote_command: Sequence[str] = ("slurmgpu",),
    host_root: str = "/",
    srun_args: Sequence[str] = (),
    timeout_s: float = 300.0,
    env: Mapping[str, str] | None = None,
) -> list[NodeInventory]:
    """Inventory every node of `hostlist` through one srun step; one result per node."""
    try:
        nodes = expand_hostlist(hostlist)
    except ValueError as exc:
        raise UsageError(f"--nodes {hostlist!r}: {exc}") from exc
    if not nodes:
        raise UsageError("--nodes: no node given")
    skipped = unusable_nodes(nodes, env)
    results = {n: NodeInventory(n, error=why) for n, why in skipped.items()}
    asked = [n for n in nodes if n not in skipped]
    if asked:
        argv = srun_argv(asked, remote_argv(remote_command, host_root), srun_args)
        proc = run(argv, timeout=timeout_s, env=env, check=False)
        results.update(_collect(asked, proc.stdout, proc.stderr, proc.returncode))
    return [results[n] for n in nodes]


def _collect(nodes: Sequence[str], stdout: str, stderr: str, rc: int) -> dict[str, NodeInventory]:
    tasks, failures, task_stderr = parse_step_output(stdout, stderr)
    rank_node = {rank: t.node for rank, t in tasks.items() if t.node}
    errors: dict[str, list[str]] = {}
    warnings: dict[str, list[str]] = {}
    for rank, line in task_stderr:
        node = rank_node.get(rank, f"task {rank}")
        kind = warnings if "warning:" in line.lower() else errors
        kind.setdefault(node, []).append(line.strip())
    out: dict[str, NodeInventory] = {}
    for task in tasks.values():
        if task.node is None or task.node not in nodes:
            continue
        node = task.node
        why = failures.get(node)
        try:
            text = base64.b64decode("".join(task.stdout), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            text, why = "", why or "its output is not the base64 the task script writes"
        if why is None and text.strip():
            try:
                inv = snapshot.loads(text, source=f"{node} (srun)")
            except SnapshotError as exc:
                why = f"its snapshot does not load: {exc}"
            else:
                out[node] = NodeInventory(node, inv, text, warnings=tuple(warnings.get(node, [])))
                continue
        detail = "; ".join(errors.get(node, [])[-3:])
        message = why or "printed no snapshot"
        out[node] = NodeInventory(node, error=f"{message}: {detail}" if detail else message)
    for node in nodes:
        if node not in out:
            tail = "; ".join(stderr.strip().splitlines()[-3:]) or f"srun exited {rc}"
            out[node] = NodeInventory(node, error=f"no answer from its task ({tail})")
    return out


def write_snapshots(results: Sequence[NodeInventory], directory: str) -> list[str]:
    """Write `DIR/NODE.json` for every node that answered (atomically); the paths."""
    from pathlib import Path

    from slurmgpu.util.atomic import write_atomic

    d = Path(directory)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--output-dir {directory}: {exc.strerror}") from exc
    paths = []
    for r in results:
        if r.ok:
            path = d / f"{r.node}.json"
            write_atomic(path, r.snapshot_text, backup=False)
            paths.append(str(path))
    return paths


__all__ = [
    "NodeInventory",
    "SlurmCommandError",
    "inventory_nodes",
    "parse_step_output",
    "write_snapshots",
]
