"""Render the job_submit.lua that routes jobs to tiers and slices (pure: policy -> text)."""

from __future__ import annotations

from collections.abc import Mapping

from slurmgpu import __version__
from slurmgpu.model.policy import Policy
from slurmgpu.render.templating import render

TEMPLATE = "job_submit.lua.j2"


def tres_per_node(gres: str) -> str:
    """`gpu:h100:8` -> `gres:gpu:h100:8`: how 22.05 stores a --gres request in job_desc."""
    return gres if gres.startswith("gres:") else f"gres:{gres}"


def render_job_submit(policy: Policy, uid_of: Mapping[str, int] | None = None) -> str:
    """The job_submit.lua text for `policy`.

    `uid_of` maps policy user names to uids (resolved by the caller, e.g. from the passwd
    database); they back up `job_desc.user_name` when a tier admits named users.
    """
    uid_of = dict(uid_of or {})
    tiers = [
        {
            "name": t.name,
            "qos": t.qos,
            "description": t.description,
            "restricted": t.restricted,
            "preemptible": policy.requeued_when_preempted(t),
            # Slurm account names are case-insensitive (stored lowercased)
            "accounts": sorted({a.lower() for a in t.accounts}),
            "users": sorted(t.users),
            "uids": sorted({uid_of[u] for u in t.users if u in uid_of}),
        }
        for t in policy.tiers
    ]
    kinds = [
        {
            "name": k.name,
            "tres_per_node": tres_per_node(k.slice.gres),
            "partition": k.partition,
            "time_limit_min": k.time_limit_min,
        }
        for k in policy.kinds
    ]
    users = sorted({u for t in policy.tiers for u in t.users if u in uid_of})
    return render(
        TEMPLATE,
        version=__version__,
        source=policy.source,
        default_tier=policy.default_tier,
        default_kind=policy.default_kind,
        tiers=tiers,
        kinds=kinds,
        uid_names=sorted((uid_of[u], u) for u in users),
    )
