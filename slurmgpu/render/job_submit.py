"""Render the job_submit.lua that routes jobs to tiers and slices (pure: policy -> text)."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping, Sequence

from slurmgpu import __version__
from slurmgpu.model.accel import CLASSES, Offer
from slurmgpu.model.gpu import VENDORS
from slurmgpu.model.policy import Policy
from slurmgpu.render.templating import render

TEMPLATE = "job_submit.lua.j2"
DEFAULT_SLURM_VERSION = (22, 5, 0)
# How job_desc.tres_per_node spells a --gres request, seen on real daemons: 22.05.8 stores
# and accepts only `gres:shard:2`, 24.11.5 only `gres/shard:2`; each refuses the other's form
# ("Invalid Trackable RESource (TRES) specification"). 23.02 is taken as the switch (the
# release that made tres_per_* TRES strings); no 23.x was run here to confirm it.
GRES_SLASH_FROM = (23, 2, 0)
# The module's file name (without .lua) that `gen-job-submit --module` writes and a site's
# job_submit.lua requires.
MODULE_NAME = "slurmgpu_tiers"


def policy_digest(policy: Policy) -> str:
    """sha256 of the parsed policy, whatever path it was read from (its `source` left out):
    the same policy renders the same bytes, given as `./p.toml`, `/etc/...` or a copy."""
    return hashlib.sha256(repr(dataclasses.replace(policy, source="")).encode()).hexdigest()


def tres_per_node(gres: str, slurm_version: tuple[int, int, int] = DEFAULT_SLURM_VERSION) -> str:
    """`gpu:h100:8` -> `gres:gpu:h100:8` (22.05) or `gres/gpu:h100:8` (23.02+)."""
    bare = gres.removeprefix("gres:").removeprefix("gres/")
    return f"gres/{bare}" if tuple(slurm_version) >= GRES_SLASH_FROM else f"gres:{bare}"


def render_job_submit(
    policy: Policy,
    uid_of: Mapping[str, int] | None = None,
    slurm_version: tuple[int, int, int] = DEFAULT_SLURM_VERSION,
    *,
    module: bool = False,
    accel_offers: Sequence[Offer] | None = None,
    accel_source: str = "",
) -> str:
    """The job_submit.lua text for `policy`, for the Slurm release `slurm_version`.

    `accel_offers` (`slurmgpu.model.accel.offers` of the cluster's nodes, from
    `accel_source`) lets the script route a `accel=mem>=SIZE` comment tag to the smallest
    fitting device across vendors, as `submit --accel` does; None: such jobs are refused.

    With `module`, the same rules as a Lua module (`MODULE_NAME.lua`) that returns a table
    with `job_submit` and `job_modify`, for a site's own job_submit.lua to require and call.

    `uid_of` maps policy user names to uids (resolved by the caller, e.g. from the passwd
    database); they back up `job_desc.user_name` when a tier admits named users. The release
    decides how a kind's slice is written into `job_desc.tres_per_node` (GRES_SLASH_FROM).
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
            "tres_per_node": tres_per_node(k.slice.gres, slurm_version),
            "partition": k.partition,
            "time_limit_min": k.time_limit_min,
            "accel": list(k.accel),
        }
        for k in policy.kinds
    ]
    users = sorted({u for t in policy.tiers for u in t.users if u in uid_of})
    return render(
        TEMPLATE,
        version=__version__,
        policy_digest=policy_digest(policy),
        default_tier=policy.default_tier,
        default_kind=policy.default_kind,
        tiers=tiers,
        kinds=kinds,
        uid_names=sorted((uid_of[u], u) for u in users),
        module=module,
        module_name=MODULE_NAME,
        accel_offers=None if accel_offers is None else [_lua_offer(o) for o in accel_offers],
        accel_source=accel_source,
        accel_vendors=list(VENDORS),
        accel_classes=list(CLASSES),
        gres_prefix=tres_per_node("", slurm_version),
    )


def _lua_offer(o: Offer) -> dict:
    """An offer's fields for the template; memory as repr() so Lua reads the same double."""
    return {
        "name": o.name,
        "gtype": o.gtype or "",
        "accel_class": o.accel_class,
        "vendor": o.vendor,
        "unit_mib": repr(float(o.unit_memory_mib)),
        "max_count": o.max_count,
        "isolation": o.isolation,
        "sizing": o.sizing,
    }
