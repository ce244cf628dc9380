"""job_submit.lua writes a kind's slice in the form the target Slurm stores and accepts.

Seen on the test clusters (tests/integration/test_tiers.py runs on both): 22.05.8 refuses
`gres/shard:2` and 24.11.5 refuses `gres:shard:2` in job_desc.tres_per_node.
"""

from __future__ import annotations

import pytest

from slurmgpu.render.job_submit import render_job_submit, tres_per_node
from slurmgpu.sources.policy_file import load_policy
from tests.unit.tiers.lua_env import EXAMPLE


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ((22, 5, 8), "gres:shard:2"),
        ((23, 2, 0), "gres/shard:2"),
        ((24, 11, 5), "gres/shard:2"),
    ],
)
def test_tres_per_node_form_by_release(version, expected):
    assert tres_per_node("shard:2", version) == expected
    # an already prefixed value is re-spelled, never doubled
    assert tres_per_node("gres:shard:2", version) == expected
    assert tres_per_node("gres/shard:2", version) == expected


def test_rendered_script_uses_the_target_form():
    policy = load_policy(EXAMPLE)
    old = render_job_submit(policy, slurm_version=(22, 5, 0))
    new = render_job_submit(policy, slurm_version=(24, 11, 5))
    assert 'tres_per_node = "gres:gpu:h100:8"' in old
    assert 'tres_per_node = "gres/' not in old
    assert 'tres_per_node = "gres/gpu:h100:8"' in new
    assert 'tres_per_node = "gres:' not in new
    assert render_job_submit(policy) == old  # the default target is still 22.05
