"""`gen_job_submit`: job_submit.lua from the site policy, and its check (luac, a dry run)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class JobSubmitLua:
    """The rendered job_submit.lua, the comments its dry run submits, and warnings (users
    the passwd database here does not know)."""

    text: str
    samples: tuple[str, ...]
    warnings: tuple[str, ...]


def gen_job_submit(
    policy_path: str | None = None, slurm_version: str | None = None
) -> JobSubmitLua:
    """job_submit.lua for the policy at `policy_path` (default: $SLURMGPU_POLICY, else
    /etc/slurmgpu/slurmgpu.toml) and `slurm_version` (default: installed)."""
    from slurmgpu.render.job_submit import render_job_submit
    from slurmgpu.sources.policy_file import default_policy_path, load_policy
    from slurmgpu.sources.slurm import target_slurm_version
    from slurmgpu.sources.users import uids_for

    pol = load_policy(policy_path or default_policy_path())
    uid_of, missing = uids_for(u for t in pol.tiers for u in t.users)
    warnings = tuple(
        f"user {name} is not in the passwd database here; job_desc.user_name still matches it"
        for name in missing
    )
    version, _ = target_slurm_version(slurm_version)
    text = render_job_submit(pol, uid_of, version)
    samples = ("", *(f"tier={t.name}" for t in pol.tiers), *(f"kind={k.name}" for k in pol.kinds))
    return JobSubmitLua(text, samples, warnings)


def check_job_submit(
    text: str, samples: tuple[str, ...], warn: Callable[[str], None] = lambda _: None
) -> None:
    """Compile `text` (a job_submit.lua) with luac5.1 and dry-run it in Lua 5.1 and 5.4
    (lupa) on `samples`; a check that cannot run here is a `warn`ing, a failing one a
    `ConfigCheckError`."""
    import tempfile

    from slurmgpu.sources import lua_check

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "job_submit.lua"
        path.write_text(text, encoding="utf-8")
        if lua_check.luac_available() is None:
            warn("no luac5.1: compile check skipped")
        lua_check.luac_check(path)
    runtimes = [r for r in ("lua51", "lua54") if lua_check.lupa_available(r)]
    if not runtimes:
        warn("lupa not installed: dry run skipped")
    for runtime in runtimes:
        lua_check.dry_run(text, list(samples), runtime)
