"""A partition with MIG slices beside its whole GPUs schedules as before the backfill pass
there made its reservations lazily (issue 38 item 3): carved backlogged traces, with 1-GPU
jobs the slice rule moves onto slices, against digests of the starts and runs that the
engine gave before that change (data/carved-starts.json, commit 092ab42; README there)."""

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from slurmgpu.replay.engine import SchedConfig, replay
from slurmgpu.replay.loop import advance
from slurmgpu.replay.state import build
from tests.unit.replay.backlog_trace import backlog

DATA = Path(__file__).parent / "data" / "carved-starts.json"
CONFIGS = {
    "default": SchedConfig(),
    "small-bf": SchedConfig(bf_max_job_test=60, bf_max_reservations=20),
}
EXPECTED = json.loads(DATA.read_text(encoding="utf-8"))


def _digest(values) -> str:
    return hashlib.sha256(np.ascontiguousarray(values, dtype=float).tobytes()).hexdigest()


def _case(key: str):
    shape, seed, config = key.split("/")
    trace, model = backlog(seed=int(seed.removeprefix("seed")), mixed=shape.startswith("mixed"),
                           carve=32 if shape == "carve32" else 16)  # fmt: skip
    return trace, model, CONFIGS[config]


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_carved_backlog_schedules_as_before(key):
    trace, model, config = _case(key)
    out = replay(trace, model, config)
    runs = np.stack([np.asarray(out.runs.job, float), out.runs.start, out.runs.end])
    want = EXPECTED[key]
    got_counts = (len(out.runs.job), out.preemptions, int(np.isfinite(out.start_s).sum()))
    assert got_counts == (want["runs"], want["preemptions"], want["started"])
    assert _digest(out.start_s) == want["starts_sha256"]
    assert _digest(runs) == want["runs_sha256"]


def test_carved_trace_moves_jobs_onto_slices_while_whole_jobs_queue():
    """The traces exercise what the change is about: slice-rule jobs started on slices by
    backfill passes of a partition with a queue of whole-GPU jobs."""
    trace, model, config = _case("carve32/seed3/default")
    state = build(trace, model, config)
    done, state = advance(state, 0)
    jobs = state[1]
    assert done
    assert jobs.on_slice.sum() > 20
    assert jobs.sliceable.sum() > jobs.on_slice.sum() // 2
    waits = (jobs.start - trace.submit_s)[trace.kind == 0]
    assert np.nanmean(waits[np.isfinite(waits)]) > 3600
