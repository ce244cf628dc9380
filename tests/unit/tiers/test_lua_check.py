"""The checks `gen-job-submit --check` runs before installing a script."""

from __future__ import annotations

import shutil

import pytest

from slurmgpu.errors import ConfigCheckError
from slurmgpu.render.job_submit import render_job_submit
from slurmgpu.sources.lua_check import dry_run, luac_check
from slurmgpu.sources.policy_file import load_policy
from tests.unit.tiers.lua_env import EXAMPLE

GOOD_ENTRY_POINTS = (
    "function slurm_job_submit(j, p, u) return slurm.SUCCESS end\n"
    "function slurm_job_modify(j, r, p, u) return slurm.SUCCESS end\n"
)


def test_luac_rejects_a_syntax_error(tmp_path):
    assert shutil.which("luac5.1"), "luac5.1 (Debian package lua5.1) is part of the test setup"
    bad = tmp_path / "job_submit.lua"
    bad.write_text("function slurm_job_submit(\n")
    with pytest.raises(ConfigCheckError, match=r"luac rejected the script: .*job_submit\.lua:"):
        luac_check(bad)
    good = tmp_path / "good.lua"
    good.write_text(render_job_submit(load_policy(EXAMPLE)))
    luac_check(good)


@pytest.mark.parametrize("runtime", ["lua51", "lua54"])
def test_dry_run(runtime):
    assert dry_run(GOOD_ENTRY_POINTS, ["", "tier=P0"], runtime) == []
    with pytest.raises(ConfigCheckError, match="defines no slurm_job_modify"):
        dry_run("function slurm_job_submit() return 0 end", [""], runtime)
    with pytest.raises(ConfigCheckError, match="does not load"):
        dry_run("error('at load time')", [""], runtime)
    with pytest.raises(ConfigCheckError, match="not a Slurm code"):
        dry_run(
            GOOD_ENTRY_POINTS.replace("return slurm.SUCCESS end\nfunction", "end\nfunction"),
            [""],
            runtime,
        )
    text = render_job_submit(load_policy(EXAMPLE))
    messages = dry_run(text, ["", "tier=P9", "kind=training"], runtime)
    assert "slurmgpu: unknown tier 'P9': use P0, P1, P2" in messages
