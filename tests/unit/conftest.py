"""Every unit test takes its node locks in its own directory, never the host's
/var/lib/slurmgpu/locks (`util.lock.lock_dir`), so no test waits on another's lock."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _own_lock_dir(tmp_path_factory, monkeypatch) -> None:
    monkeypatch.setenv("SLURMGPU_LOCK_DIR", str(tmp_path_factory.mktemp("locks")))
