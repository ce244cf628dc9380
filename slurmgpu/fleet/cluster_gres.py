"""Cluster-wide gres.conf: load one snapshot per node, render, check every node with slurmd -G."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from slurmgpu.render.cluster_gres import ClusterGres, render_cluster_gres
from slurmgpu.render.gres import GresOptions
from slurmgpu.sources import slurmd, snapshot


def gen_cluster_gres(paths: Sequence[str], directory: str | None, opts: GresOptions) -> ClusterGres:
    """One gres.conf and grouped node lines for every node that has a snapshot."""
    inventories = snapshot.load_many(paths, directory)
    shas = {inv.node_name: snapshot.inventory_sha256(inv) for inv in inventories}
    return render_cluster_gres(inventories, opts, inventory_sha256=shas)


@dataclasses.dataclass(frozen=True)
class NodeCheck:
    """What slurmd -G said about the cluster-wide gres.conf as seen by one node."""

    node: str
    check: slurmd.GresCheck


def check_cluster_gres(result: ClusterGres, gres_text: str | None = None) -> list[NodeCheck]:
    """Parse the file with Slurm's own parser once per node (`slurmd -G -N NODE`).

    Each node is checked against its own node definition, so a line that names the wrong
    hostlist, a Cores= range past one node type's CPUs or a count mismatch shows up for the
    node it breaks.
    """
    text = result.gres_conf if gres_text is None else gres_text
    checks = []
    for group in result.groups:
        for name in group.names:
            check = slurmd.check_gres_conf(
                text, result.node_line_for(name), gres_types=result.gres_types
            )
            checks.append(NodeCheck(name, check))
    return checks
