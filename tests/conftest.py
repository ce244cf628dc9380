"""The whole suite's one setup: the replay engine compiled (or loaded from this install's
cache) before the first test, as an installer's `slurmgpu replay --compile-only` does. A
compile says so on stderr (`replay/_jit.py`); done here, that line lands in this setup, never
in the captured output of whichever test happens to replay first on a cold cache."""

import pytest


@pytest.fixture(scope="session", autouse=True)
def compiled_replay_engine() -> None:
    try:
        from slurmgpu.replay.engine import warm_up
    except ImportError:  # an install without the analysis extra: no engine to compile
        return
    warm_up()
