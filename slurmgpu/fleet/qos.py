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
    """One round of `qos apply` (or of its undo) in the change log: what ran, and what
    slurmdbd held before it. `run` names the apply the round belongs to (its start time);
    an undo's `undoes` names the apply it undid."""

    time: str
    action: str  # apply | undo
    commands: tuple[tuple[str, ...], ...]
    qos_before: tuple[QosRecord, ...]
    associations_before: tuple[Association, ...]
    run: str = ""
    undoes: str = ""

    def check(self) -> str | None:
        if self.action not in ("apply", "undo"):
            return f"action {self.action!r:.30} is neither apply nor undo"
        for label, stamp in (("time", self.time), ("run", self.run), ("undoes", self.undoes)):
            if stamp or label == "time":
                try:
                    dt.datetime.fromisoformat(stamp)
                except ValueError:
                    return f"{label} {stamp!r:.40} is not an ISO time"
        if self.action == "apply" and (not self.commands or not all(self.commands)):
            return "an apply without commands"
        if self.action == "undo" and not self.undoes:
            return "an undo that names no apply"
        for cmd in self.commands:
            if cmd[0] not in ("add", "modify", "delete") or len(cmd) < 3:
                return f"{' '.join(cmd)[:60]!r}: not a sacctmgr command qos apply runs"
        return None


_AssocKey = tuple[str, str, "str | None"]


def _touched(commands) -> tuple[set[str], set[_AssocKey]]:
    """The QOS names and the associations (cluster, account, user) the commands changed."""
    qos, assocs = set(), set()
    for cmd in commands:
        if cmd[1] == "qos":
            if cmd[0] == "add":
                qos.add(cmd[2].lower())
            else:
                qos |= {w[5:].lower() for w in cmd if w.startswith("name=")}
            continue
        where = dict(w.split("=", 1) for w in cmd if "=" in w and "+=" not in w and "-=" not in w)
        user = where.get("name") if cmd[1] == "user" else None
        account = where.get("account") if cmd[1] == "user" else where.get("name")
        assocs.add((where.get("cluster", ""), account or "", user))
    return qos, assocs


def undo_commands(
    before_qos, before_assocs, qos_names, assoc_keys, live_qos, live_assocs
) -> list[tuple[str, ...]]:
    """The sacctmgr commands that bring the QOS `qos_names` and the associations
    `assoc_keys` back from `live_*` to `before_*` (pure; re-added QOS first, then changed
    ones, then association lists, accounts before users, then QOS to delete)."""
    from slurmgpu.render.qos import _settings_of

    was = {q.name.lower(): q for q in before_qos}
    now = {q.name.lower(): q for q in live_qos}
    adds, modifies, deletes = [], [], []
    for name in sorted(qos_names):
        old, cur = was.get(name), now.get(name)
        if old is not None and cur is None:
            adds.append(("add", "qos", name, *_settings_of(old, None)))
        elif old is not None and cur is not None:
            changes = _settings_of(old, cur)
            if changes:
                modifies.append(("modify", "qos", "where", f"name={name}", "set", *changes))
        elif old is None and cur is not None:
            deletes.append(("delete", "qos", "where", f"name={name}"))
    # a QOS that preempts others goes before them (nothing may preempt a QOS going away)
    deletes.sort(key=lambda c: -len(now[c[3][5:]].preempt))
    key = lambda a: (a.cluster, a.account, a.user)  # noqa: E731
    had = {key(a): {q.lower() for q in a.qos} for a in before_assocs}
    has = {key(a): {q.lower() for q in a.qos} for a in live_assocs}
    assoc_cmds = []
    for k in sorted(assoc_keys, key=lambda k: (k[2] is not None, k[0], k[1], k[2] or "")):
        if k not in had or k not in has:
            continue  # made or removed by someone else: not ours to undo
        cluster, account, user = k
        if user is None:
            where = ("modify", "account", "where", f"name={account}", f"cluster={cluster}")
        else:
            where = ("modify", "user", "where", f"name={user}", f"account={account}")
            where += (f"cluster={cluster}",)
        if had[k] - has[k]:
            assoc_cmds.append((*where, "set", "qos+=" + ",".join(sorted(had[k] - has[k]))))
        if has[k] - had[k]:
            assoc_cmds.append((*where, "set", "qos-=" + ",".join(sorted(has[k] - had[k]))))
    return adds + modifies + assoc_cmds + deletes


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


# qos-apply.sh runs each command through `run`: sacctmgr's answers to a command that finds
# its work already done (a second run) are not failures; the state of slurmdbd before and
# after tells whether anything changed (exit 3, the convention of docs/acting.md) or not (0).
_SCRIPT_HEAD = """#!/bin/sh
# slurmgpu qos apply: the sacctmgr commands of the plan (generated; run it where sacctmgr
# reaches slurmdbd, as a Slurm administrator). Safe to run again: a command whose work is
# already done is not an error. Exit 0: nothing changed, 3: slurmdbd changed, 1: a command
# failed (its message on stderr), as `slurmgpu qos apply` (docs/acting.md, exit codes).
set -u
state() {
  sacctmgr -n -P show qos && sacctmgr -n -P show assoc format=cluster,account,user,qos
}
unreadable() {
  echo "qos-apply.sh: error: sacctmgr cannot read slurmdbd" >&2
  exit 1
}
run() {
  if out=$(sacctmgr -i "$@" 2>&1); then
    return 0
  fi
  case $out in
    *"Nothing new added"*|*"Nothing modified"*|*"Nothing deleted"*|*"Already existing"*)
      return 0 ;;
  esac
  printf '%s\n' "$out" >&2
  printf 'qos-apply.sh: error: sacctmgr -i %s failed\n' "$*" >&2
  exit 1
}
before=$(state) || unreadable
"""
_SCRIPT_TAIL = """after=$(state) || unreadable
if [ "$before" = "$after" ]; then
  echo "qos-apply.sh: unchanged"
  exit 0
fi
echo "qos-apply.sh: changed"
exit 3
"""


def render_script(first) -> str:
    """The plan's commands as an idempotent sh script (same plan, same bytes)."""
    import shlex

    body = "".join(f"run {shlex.join(c)}\n" for c in first.commands)
    return _SCRIPT_HEAD + body + _SCRIPT_TAIL


def emit_script(first, directory: Path) -> list[Path]:
    """The plan's commands as DIR/qos-apply.sh (+ its diff from nothing, the steps)."""
    from slurmgpu.util.emit import FileChange, emit_files

    steps = (
        f"sh {SCRIPT_NAME}  # where sacctmgr reaches slurmdbd, as a Slurm administrator; "
        "exit 0: unchanged, 3: changed, 1: failed",
        "slurmgpu qos plan  # exit 0 (nothing to do); if 3, run the new commands it prints "
        "(association QOS lists inherit, a second round may be needed)",
        *(f"slurm.conf: {s.key}={s.value}" for s in first.settings),
    )
    script = render_script(first)
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
    run_id = dt.datetime.now().isoformat(timespec="microseconds")
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
            entry = QosLogEntry(
                stamp, "apply", current.commands, tuple(live), tuple(assocs), run=run_id
            )
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


def _show(env=None):
    from slurmgpu.sources import sacctmgr
    from slurmgpu.sources.slurm import scontrol_show_config

    cluster = scontrol_show_config(env=env).get("ClusterName", "")
    return sacctmgr.show_qos(env), sacctmgr.show_associations(cluster, env)


def qos_undo(
    log: Path, on_run: Callable[[tuple[str, ...]], None] = lambda cmd: None
) -> tuple[tuple[str, ...], ...]:
    """`slurmgpu qos apply --undo`: bring the QOS and associations the last apply (all its
    rounds) changed back to what they were before it, round by round until they are; the
    undo is logged once it is done. Returns the commands run."""
    from slurmgpu.render.qos import format_command
    from slurmgpu.sources.sacctmgr import run_sacctmgr
    from slurmgpu.util.journal import append_record, read_records

    entries = read_records(log, QosLogEntry)
    undone = {e.undoes for e in entries if e.action == "undo"}
    runs = [e.run or e.time for e in entries if e.action == "apply"]
    pending = [r for r in dict.fromkeys(runs) if r not in undone]
    if not pending:
        from slurmgpu.errors import UsageError

        raise UsageError(f"nothing to undo in {log}")
    last = pending[-1]
    rounds = [e for e in entries if e.action == "apply" and (e.run or e.time) == last]
    names, keys = _touched([c for r in rounds for c in r.commands])
    first = rounds[0]
    ran: list[tuple[str, ...]] = []
    live, assocs = _show()
    before = (tuple(live), tuple(assocs))
    for _ in range(ROUNDS):
        cmds = undo_commands(first.qos_before, first.associations_before, names, keys, live, assocs)
        if not cmds:
            break
        for cmd in cmds:
            run_sacctmgr(cmd)
            ran.append(cmd)
            on_run(cmd)
        live, assocs = _show()
    left = undo_commands(first.qos_before, first.associations_before, names, keys, live, assocs)
    if left:
        raise SlurmgpuError(
            "after the undo, slurmdbd still differs from before the apply: "
            + "; ".join(format_command(c) for c in left)
        )
    stamp = dt.datetime.now().isoformat(timespec="seconds")
    append_record(log, QosLogEntry(stamp, "undo", tuple(ran), *before, undoes=last))
    return tuple(ran)
