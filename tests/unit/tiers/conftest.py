"""Fixtures of the tiers unit tests (helpers live in `lua_env`)."""

from __future__ import annotations

import pytest

from tests.unit.tiers.lua_env import RUNTIMES


@pytest.fixture(params=RUNTIMES)
def lua_runtime(request) -> str:
    """Each Lua runtime lupa offers here: Lua 5.1 (what Debian's Slurm 22.05 links) and 5.4."""
    return request.param
