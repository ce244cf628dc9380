"""`gen-job-submit`: render job_submit.lua (or the `slurmgpu_tiers` module), check it in Lua,
and hand it to `util.emit` (install atomically, or --diff / --dry-run / --emit DIR)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from slurmgpu.errors import UsageError
from slurmgpu.model.accel import Offer, offers
from slurmgpu.model.policy import Policy
from slurmgpu.render.job_submit import MODULE_NAME, render_job_submit
from slurmgpu.sources import lua_check
from slurmgpu.sources.slurm import target_slurm_version
from slurmgpu.sources.users import uids_for
from slurmgpu.util.emit import emit

# The most devices one offer may give a job (whole GPUs or shards of a node): far above any
# real node (8 GPUs x 128 shards is 1024), far below what would not fit a Lua integer.
MAX_OFFER_COUNT = 65536


@dataclass(frozen=True)
class JobSubmitResult:
    """The exit status `emit` gave (1: --diff found a difference) and the lines for stderr
    (warnings, then what the check ran)."""

    status: int
    notes: tuple[str, ...]


def sample_comments(policy: Policy, accel: bool = False) -> list[str]:
    """The comments a dry run tries: none, each tier's tag, each kind's tag (and with the
    cluster's offers, an accel= request per kind)."""
    tiers = [f"tier={t.name}" for t in policy.tiers]
    kinds = [f"kind={k.name}" for k in policy.kinds]
    asks = [f"{k} accel=mem>=1G" for k in ["", *kinds]] if accel else []
    return ["", *tiers, *kinds, *asks]


def accel_offers(source: str, policy: Policy) -> tuple[tuple[Offer, ...], str]:
    """The devices the cluster offers for `accel=` routing, and where they were read:
    `sinfo` (the live cluster, as `submit --accel` reads it) or a file of
    `sinfo -h -N -o '%N|%G'` lines."""
    from slurmgpu.sources.cluster_gres import node_gres, parse_sinfo_gres

    if source == "sinfo":
        nodes = node_gres(ttl_s=0)
    else:
        try:
            text = Path(source).read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise UsageError(f"--accel-gres {source}: {exc.strerror}") from None
        nodes = parse_sinfo_gres(text)
    table = offers(nodes, policy.shards_per_gpu)
    if not table:
        raise UsageError(f"--accel-gres {source}: no node offers a GPU or NPU of a known model")
    for offer in table:
        if offer.max_count > MAX_OFFER_COUNT:
            what = ":".join(p for p in (offer.name, offer.gtype) if p)
            raise UsageError(
                f"--accel-gres {source}: {what:.60} counts {offer.max_count:.3g} devices on one "
                f"node, more than {MAX_OFFER_COUNT}: not a real node's GRES"
            )
    # what the table was read from, without its path: the same devices render the same bytes
    return table, f"the GRES of {len(nodes)} node(s)"


def script_checker(
    samples: list[str], *, module: bool, done: list[lua_check.ScriptCheck]
) -> Callable[[str], None]:
    """`emit`'s check: compile and dry-run the text in a temp file (`check_script`), raising
    on the first failure; what ran is appended to `done`."""

    def check(text: str) -> None:
        with tempfile.TemporaryDirectory(prefix="slurmgpu-lua-") as tmp:
            probe = Path(tmp) / (f"{MODULE_NAME}.lua" if module else "job_submit.lua")
            probe.write_text(text, encoding="utf-8")
            done.append(lua_check.check_script(probe, samples, module=module))

    return check


def gen_job_submit(
    policy: Policy,
    output: str = "-",
    *,
    module: bool = False,
    check: bool = False,
    slurm_version: str | None = None,
    diff: bool = False,
    dry_run: bool = False,
    emit_dir: str | None = None,
    accel_gres: str | None = None,
) -> JobSubmitResult:
    """Render the script (or module) for `policy` and emit it; with `check`, compile and
    dry-run it first and say exactly which checks ran (never "checked" when none could).
    `accel_gres` (`sinfo` or a file, `accel_offers`) renders the cluster's devices for the
    `accel=` routing across vendors."""
    notes: list[str] = []
    uid_of, missing = uids_for(u for t in policy.tiers for u in t.users)
    notes.extend(
        f"slurmgpu: warning: user {name} is not in the passwd database here; "
        "job_desc.user_name still matches it"
        for name in missing
    )
    version, _ = target_slurm_version(slurm_version)
    table, where = accel_offers(accel_gres, policy) if accel_gres else (None, "")
    text = render_job_submit(
        policy, uid_of, version, module=module, accel_offers=table, accel_source=where
    )
    done: list[lua_check.ScriptCheck] = []
    samples = sample_comments(policy, accel=table is not None)
    checker = script_checker(samples, module=module, done=done) if check else None
    status = emit(
        text,
        output,
        check=checker,
        mode=0o644,
        diff=diff,
        dry_run=dry_run,
        emit_dir=emit_dir,
    )
    if done:
        what = output if output != "-" else ("the module" if module else "the script")
        notes.append(f"slurmgpu: {what}: {done[0].describe()}")
    elif output != "-" and not (diff or dry_run or emit_dir):
        notes.append(f"slurmgpu: {output}: not checked (no --check)")
    if module and output != "-" and not (diff or dry_run or emit_dir):
        notes.append(
            "slurmgpu: slurmctld reloads job_submit.lua only when it changes: touch the site's "
            "job_submit.lua to load the new module"
        )
    return JobSubmitResult(status, tuple(notes))
