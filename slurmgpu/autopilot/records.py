"""What an autopilot pass writes into its state directory, as typed journal records.

The state directory (default `/var/lib/slurmgpu/autopilot`) holds:

- `changes.jsonl`: the change log, one sealed `ChangeRecord` a line (`util.journal`): every
  proposal, approval, apply (written before the pass acts: its intent), hold, verification,
  rollback, abort (an apply that did not take effect) and hand revert, with the replay's
  prediction and what sacct recorded before and after;
- `rebalance.jsonl`: the journal of `fleet.rebalance` (what a rollback undoes), unless the
  pass is given another (`--rebalance-log`: the one `rebalance apply` writes, by default); the
  node locks are in `util.lock.lock_dir()`, shared with every acting command;
- `proposals/ID/`: `proposal.json` (a sealed `Proposal`), the new files and their diff when
  the moves change an include file (`util.emit.emit_files`), `steps.txt`, and `approved`
  once someone ran `slurmgpu autopilot approve ID`;
- `mig-apply-NODE.json` and `mig/ID/`: the journal of `mig apply` per node (its lock in
  `lock_dir()`, shared with rebalance), and each MIG change's mig-parted configs: `mig-parted.yaml`
  (the new layouts) and `old.yaml` (the layouts before, what a rollback applies);
- `history.sacct`: the last pass's sacct dump (with `--since`);
- `autopilot.prom`: the Prometheus textfile of the last pass.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from slurmgpu.model.rebalance import Move

# abort: an apply (written before acting, as its intent) that did not happen or was undone
# before it took effect (refused under the locks, or a killed pass's half move undone);
# reverted: an apply found undone by hand before its verification
ACTIONS = (
    "propose", "approve", "apply", "hold", "verify", "rollback", "skip", "abort", "reverted",
)  # fmt: skip
JUDGED = ("verify", "rollback", "abort", "reverted")


@dataclass(frozen=True)
class MigChange:
    """One node's MIG relayout: its mig-parted config names, per-GPU layouts before and after
    (`"whole"` or `"1g.10gb=4,3g.40gb=1"`, in NVML index order)."""

    node: str
    partition: str
    config: str  # the new layouts' config in mig/ID/mig-parted.yaml
    old_config: str  # the old layouts' config in mig/ID/old.yaml
    before: tuple[str, ...]
    after: tuple[str, ...]


@dataclass(frozen=True)
class Observed:
    """What sacct recorded for one group (`partition:NAME` or `tier:NAME`) in a window:
    jobs submitted in it that started, their waits, preemptions and allocated GPU-hours."""

    group: str
    jobs: int
    mean_wait_s: float
    p95_wait_s: float
    preemptions: int
    gpu_hours: float
    # allocated GPU-seconds of the started jobs with a measured need that the need covers
    # (sum need x run time / sum allocated GPU equivalents x run time); None: none measured
    need_share: float | None = None


@dataclass(frozen=True)
class Predicted:
    """The calibrated replay's effect on one partition: mean wait before/after and the range
    of the mean wait's change over the perturbed replays."""

    partition: str
    mean_wait_before_s: float | None
    mean_wait_after_s: float | None
    change_low_s: float | None
    change_high_s: float | None


@dataclass(frozen=True)
class ChangeRecord:
    """One line of the change log."""

    time: str  # ISO, UTC
    action: str
    id: str = ""  # the change's id (a proposal's id; an apply's own id)
    of: str = ""  # verify / rollback / approve: the id they are about
    moves: tuple[Move, ...] = ()
    changes: tuple[str, ...] = ()  # the advise changes (model.changes grammar)
    score: float = 0.0
    predicted: tuple[Predicted, ...] = ()
    before: tuple[Observed, ...] = ()
    after: tuple[Observed, ...] = ()
    rebalance_time: str = ""  # the apply's entry in rebalance.jsonl
    reasons: tuple[str, ...] = ()
    mig: tuple[MigChange, ...] = ()  # a MIG change (instead of moves)

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(m.node for m in self.moves) + tuple(c.node for c in self.mig)

    @property
    def partitions(self) -> tuple[str, ...]:
        out = {x for m in self.moves for x in (m.source, m.target)}
        return tuple(sorted(out | {c.partition for c in self.mig}))

    def check(self) -> str | None:
        if self.action not in ACTIONS:
            return f"action {self.action!r:.30} is none of {', '.join(ACTIONS)}"
        try:
            dt.datetime.fromisoformat(self.time)
        except ValueError:
            return f"time {self.time!r:.40} is not an ISO time"
        if self.action in ("apply", "propose") and not (self.id and (self.moves or self.mig)):
            return f"an {self.action} without an id, moves or MIG changes"
        if self.action in (*JUDGED, "approve") and not self.of:
            return f"a {self.action} that names no change"
        return None

    @property
    def when(self) -> dt.datetime:
        return dt.datetime.fromisoformat(self.time)


@dataclass(frozen=True)
class Proposal:
    """A proposed change waiting for approval: the moves, the plan and its prediction."""

    id: str
    time: str
    moves: tuple[Move, ...]
    changes: tuple[str, ...]
    score: float
    predicted: tuple[Predicted, ...]
    before: tuple[Observed, ...]
    partitions_before: dict[str, tuple[str, ...]]
    partitions_after: dict[str, tuple[str, ...]]
    mig: tuple[MigChange, ...] = ()


@dataclass(frozen=True)
class StateDir:
    root: Path

    @property
    def changes(self) -> Path:
        return self.root / "changes.jsonl"

    @property
    def rebalance_log(self) -> Path:
        return self.root / "rebalance.jsonl"

    @property
    def proposals(self) -> Path:
        return self.root / "proposals"

    def proposal(self, pid: str) -> Path:
        return self.proposals / pid

    @property
    def prom(self) -> Path:
        return self.root / "autopilot.prom"

    def mig_dir(self, cid: str) -> Path:
        return self.root / "mig" / cid

    @property
    def history(self) -> Path:
        return self.root / "history.sacct"


def read_changes(state: StateDir) -> list[ChangeRecord]:
    from slurmgpu.util.journal import read_records

    return read_records(state.changes, ChangeRecord)


def append_change(state: StateDir, record: ChangeRecord) -> None:
    from slurmgpu.util.journal import append_record

    append_record(state.changes, record)


def iso(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).isoformat(timespec="seconds")


def new_id(now: dt.datetime) -> str:
    """A change's id: `ap-` and its UTC time."""
    return "ap-" + now.astimezone(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
