"""The live cluster as an autopilot pass sees and changes it: the one place the pass reads
Slurm (through `sources/`) and acts (through `fleet.rebalance`'s journaled apply and undo,
one lock per node). Tests hand the pass another object with the same methods."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class LiveWorld:
    env: Mapping[str, str] | None = None
    partitions_conf: Path | None = None

    def partitions(self) -> list[Any]:
        from slurmgpu.sources import queue

        return queue.partitions(self.env)

    def nodes(self) -> list[Any]:
        from slurmgpu.sources import queue

        return queue.nodes(self.env)

    def jobs_on(self, node: str) -> list[Any]:
        from slurmgpu.sources.slurm_node_control import SlurmNodeControl

        return SlurmNodeControl(self.env).jobs_on(node)

    def sacct_text(self, since: Any, until: Any) -> str:
        from slurmgpu.sources.sacct import sacct_text

        return sacct_text(since, until, env=self.env)

    def apply(self, plan: Any, log: Path, **kw: Any) -> str:
        """`rebalance apply`'s journaled change (`fleet.rebalance.apply_plan`: the nodes'
        locks, the live partitions and `recheck` read again under them, intent logged first);
        `kw`: its `recheck`, `by`, `stamp`. Returns the time of its journal entry."""
        from slurmgpu.fleet.rebalance import apply_plan

        return apply_plan(plan, log, self.env, partitions_conf=self.partitions_conf, **kw)

    def recover(self, log: Path) -> list[str]:
        """Finish or undo a killed pass's half-made move (`fleet.rebalance.recover_pending`)."""
        from slurmgpu.fleet.rebalance import recover_pending

        return recover_pending(log, self.env, partitions_conf=self.partitions_conf)

    def undo(self, log: Path, stamp: str = "") -> Any:
        """Undo the move logged at `stamp` (this pass's own, though the log is shared)."""
        from slurmgpu.fleet.rebalance import undo_last

        return undo_last(log, self.env, partitions_conf=self.partitions_conf, time=stamp or None)

    def emit(self, plan: Any, directory: Path) -> list[Path]:
        from slurmgpu.fleet.rebalance import emit_plan

        return emit_plan(plan, directory, self.partitions_conf)

    # MIG (autopilot.carve) ------------------------------------------------------------------
    def inventories(self, site: Any) -> list[Any]:
        """The nodes' inventories: `site.snapshot_dir`'s snapshots, else this host read live
        through NVML (a pass running on the MIG node itself)."""
        if site.snapshot_dir is not None:
            from slurmgpu.mig.inputs import load_nodes

            return load_nodes(snapshot_dir=site.snapshot_dir)
        from slurmgpu.sources import nvml

        return [nvml.read_inventory(site.apply.host_root)]

    def mig_apply(self, opts: Any, recheck: Any = None) -> Any:
        """`slurmgpu mig apply` of one node: journaled, its lock held (`recheck` read under
        it before anything is done), gres.conf checked."""
        from slurmgpu.mig.apply import apply_config, slurmd_check

        return apply_config(opts, validate_gres=slurmd_check, recheck=recheck)

    def mig_recover(self, opts: Any) -> Any:
        """`slurmgpu mig apply --recover` of one node: its journal finished or rolled back."""
        from slurmgpu.mig.apply import recover, slurmd_check

        return recover(opts, validate_gres=slurmd_check)

    def mig_emit(self, site: Any, opts: Any, directory: Path) -> list[Path]:
        """`mig apply --emit DIR` from the node's inventory: the new gres.conf (and
        slurm.conf), their diff and the steps; nothing live touched."""
        from slurmgpu.mig.apply import emit, slurmd_check

        inv = {i.node_name: i for i in self.inventories(site)}.get(opts.node)
        kwargs = {"read_inventory": lambda: inv} if inv is not None else {}
        result = emit(opts, directory, validate_gres=slurmd_check, **kwargs)
        names = [c.path.name for c in result.changes] + ["changes.diff", "steps.txt"]
        return [directory / n for n in names]
