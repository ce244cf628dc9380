"""`gen-job-submit`: render job_submit.lua (or the `slurmgpu_tiers` module), check it in Lua,
install it atomically."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from slurmgpu.errors import SlurmgpuError
from slurmgpu.model.policy import Policy
from slurmgpu.render.job_submit import render_job_submit
from slurmgpu.sources import lua_check
from slurmgpu.sources.slurm import target_slurm_version
from slurmgpu.sources.users import uids_for
from slurmgpu.util.atomic import write_atomic


@dataclass(frozen=True)
class JobSubmitResult:
    """The rendered text, where it went (`None`: stdout) and the lines for stderr."""

    text: str
    written: Path | None
    notes: tuple[str, ...]


def sample_comments(policy: Policy) -> list[str]:
    """The comments a dry run tries: none, each tier's tag, each kind's tag."""
    tiers = [f"tier={t.name}" for t in policy.tiers]
    return ["", *tiers, *(f"kind={k.name}" for k in policy.kinds)]


def gen_job_submit(
    policy: Policy,
    output: str = "-",
    *,
    module: bool = False,
    check: bool = False,
    slurm_version: str | None = None,
) -> JobSubmitResult:
    """Render the script (or module) for `policy`; with `check`, compile and dry-run it
    first (and say exactly which checks ran); with an `output` path, install it atomically
    (temp file, check, `.bak`, rename)."""
    notes: list[str] = []
    uid_of, missing = uids_for(u for t in policy.tiers for u in t.users)
    notes.extend(
        f"slurmgpu: warning: user {name} is not in the passwd database here; "
        "job_desc.user_name still matches it"
        for name in missing
    )
    version, _ = target_slurm_version(slurm_version)
    text = render_job_submit(policy, uid_of, version, module=module)
    samples = sample_comments(policy)
    done: list[lua_check.ScriptCheck] = []

    def validate(path: Path) -> None:
        done.append(lua_check.check_script(path, samples, module=module))

    if output == "-":
        if check:
            with tempfile.TemporaryDirectory() as tmp:
                probe = Path(tmp) / ("slurmgpu_tiers.lua" if module else "job_submit.lua")
                probe.write_text(text, encoding="utf-8")
                validate(probe)
            notes.append(f"slurmgpu: {done[0].describe()}")
        return JobSubmitResult(text, None, tuple(notes))
    try:
        write_atomic(output, text, mode=0o644, validate=validate if check else None)
    except OSError as exc:
        raise SlurmgpuError(f"cannot write {output}: {exc.strerror}") from exc
    how = f" ({done[0].describe()})" if done else " (not checked: no --check)"
    notes.append(f"wrote {output}{how}")
    if module:
        notes.append(
            "slurmctld reloads job_submit.lua only when it changes: touch the site's "
            "job_submit.lua to load the new module"
        )
    return JobSubmitResult(text, Path(output), tuple(notes))
