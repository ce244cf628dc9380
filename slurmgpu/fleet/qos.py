"""`slurmgpu qos apply`: bring slurmdbd's tier QOS and association QOS lists to the policy.

The plan (`render.qos.build_plan`) is computed from the live slurmdbd; `qos_apply` runs its
sacctmgr commands, journaling each round (the commands, and the QOS and associations as they
were before it) to the change log through `util.journal` *before* running it, then plans
again: association QOS lists inherit (an account's `qos-=` also reaches its users), so a
user the policy names may need a second round; three always settle a valid policy. With
`dry_run` it only plans; with `emit_dir` it writes the commands as a script for config
management (nothing run).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from slurmgpu.errors import SlurmgpuError
from slurmgpu.model.accounts import Association, QosRecord

ROUNDS = 3
SCRIPT_NAME = "qos-apply.sh"


@dataclass(frozen=True)
class QosLogEntry:
    """One round of `qos apply` in the change log: what ran, and what slurmdbd held before."""

    time: str
    action: str  # apply
    commands: tuple[tuple[str, ...], ...]
    qos_before: tuple[QosRecord, ...]
    associations_before: tuple[Association, ...]

    def check(self) -> str | None:
        if self.action != "apply":
            return f"action {self.action!r:.30} is not apply"
        try:
            dt.datetime.fromisoformat(self.time)
        except ValueError:
            return f"time {self.time!r:.40} is not an ISO time"
        if not self.commands or not all(self.commands):
            return "an apply without commands"
        return None


@dataclass(frozen=True)
class QosApplyResult:
    first: object  # render.qos.QosPlan: what was to do
    ran: tuple[tuple[str, ...], ...]
    last: object  # the plan after the last round (nothing to do unless dry_run/emit)


def _live(prune: bool, policy):
    from slurmgpu.render.qos import build_plan
    from slurmgpu.sources import sacctmgr
    from slurmgpu.sources.slurm import scontrol_show_config

    config = scontrol_show_config()
    live = sacctmgr.show_qos()
    assocs = sacctmgr.show_associations(config.get("ClusterName", ""))
    in_use = sacctmgr.qos_in_use([q.name for q in live])
    return build_plan(policy, live, assocs, config, in_use=in_use, prune=prune), live, assocs


def plan(policy, prune: bool):
    """`slurmgpu qos plan`: the plan from the live slurmdbd (changes nothing)."""
    return _live(prune, policy)[0]


def emit_script(first, directory: Path) -> list[Path]:
    """The plan's commands as DIR/qos-apply.sh (+ its diff from nothing, the steps)."""
    from slurmgpu.render.qos import format_command
    from slurmgpu.util.emit import FileChange, emit_files

    body = "".join(f"{format_command(c)}\n" for c in first.commands)
    script = "#!/bin/sh\n# slurmgpu qos apply: the sacctmgr commands of the plan\nset -e\n" + body
    steps = (
        f"sh {SCRIPT_NAME}  # where sacctmgr reaches slurmdbd, as a Slurm administrator",
        "slurmgpu qos plan  # must say nothing to do; if not, run the new commands it prints "
        "(association QOS lists inherit, a second round may be needed)",
        *(f"slurm.conf: {s.key}={s.value}" for s in first.settings),
    )
    return emit_files(directory, [FileChange(Path(SCRIPT_NAME), script, None)], steps)


def qos_apply(
    policy,
    *,
    prune: bool = False,
    log: Path | None = None,
    dry_run: bool = False,
    emit_dir: Path | None = None,
    on_plan: Callable[[object], None] = lambda plan: None,
    on_run: Callable[[tuple[str, ...]], None] = lambda cmd: None,
) -> QosApplyResult:
    """`slurmgpu qos apply`: run the plan's commands round by round until slurmdbd matches."""
    from slurmgpu.render.qos import format_command
    from slurmgpu.sources.sacctmgr import run_sacctmgr
    from slurmgpu.util.journal import append_record

    current, live, assocs = _live(prune, policy)
    first, ran = current, []
    on_plan(first)
    if dry_run or emit_dir is not None:
        if emit_dir is not None:
            emit_script(first, emit_dir)
        return QosApplyResult(first, (), current)
    for _ in range(ROUNDS):
        if current.nothing_to_do:
            break
        if log is not None:
            stamp = dt.datetime.now().isoformat(timespec="seconds")
            entry = QosLogEntry(stamp, "apply", current.commands, tuple(live), tuple(assocs))
            append_record(log, entry)
        for cmd in current.commands:
            run_sacctmgr(cmd)
            ran.append(cmd)
            on_run(cmd)
        current, live, assocs = _live(prune, policy)
    if not current.nothing_to_do:
        left = "; ".join(format_command(c) for c in current.commands)
        raise SlurmgpuError(f"after apply, slurmdbd still differs from the policy: {left}")
    return QosApplyResult(first, tuple(ran), current)
