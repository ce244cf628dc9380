"""The engine's speed structures change no result: a backlogged trace against the starts the
engine gave before them (data/backlog-starts.json, README there), and each structure against
a plain recomputation of what it stands for."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from slurmgpu.replay.engine import PENDING, Replay, SchedConfig, _Part, replay
from tests.unit.replay.backlog_trace import backlog

DATA = Path(__file__).parent / "data" / "backlog-starts.json"
CONFIGS = {
    "default": SchedConfig(),
    "small-bf": SchedConfig(bf_max_job_test=60, bf_max_reservations=20),
}


@pytest.fixture(scope="module")
def expected():
    return json.loads(DATA.read_text(encoding="utf-8"))


@pytest.mark.parametrize("shape", ["whole", "mixed"])
@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_backlogged_replay_starts_every_job_as_before(expected, shape, config):
    trace, model = backlog(mixed=shape == "mixed")
    out = replay(trace, model, CONFIGS[config])
    want = expected[f"{shape}/{config}"]
    got = [None if not math.isfinite(s) else float(s) for s in out.start_s]
    assert got == want["start_s"]
    assert (len(out.runs.job), out.preemptions) == (want["runs"], want["preemptions"])
    # a real queue formed: the speed structures were exercised
    waits = out.start_s - trace.submit_s
    assert np.nanmean(waits[np.isfinite(waits)]) > 3600


class Probe(Replay):
    """At each backfill pass, check the partition's kept structures against recomputation."""

    checked = 0

    def _backfill(self, part, t):
        self._check(part, t)
        super()._backfill(part, t)

    def _check(self, part: _Part, t: float) -> None:
        pending = [j for j in range(len(self.state)) if self.state[j] == PENDING
                   and self.part_of[j] == part.index and self.kind[j] == 0
                   and (self.run_id[j] == 0 or self.eligible[j] <= t)]  # fmt: skip
        shortest: dict[float, float] = {}
        for j in pending:
            g = self.gpus[j]
            shortest[g] = min(shortest.get(g, math.inf), self.limit[j])
        assert part.shortest_limits() == shortest
        for g in range(1, 2 * part.max_cap + 1):
            assert part.can_place(g) == (part.place_whole(g) is not None)
            assert self._node_earliest(part, g, t) == self._earliest_by_hand(part, g, t)
        Probe.checked += 1

    def _earliest_by_hand(self, part: _Part, g: int, t: float) -> float:
        per = part.max_cap
        ends = [sorted((self.expected_end[v], c) for v, c in jobs.items())
                for jobs in part.node_jobs]  # fmt: skip
        if g > per:
            idle = sorted(max((e for e, _ in ends[n]), default=t)
                          for n in range(len(part.cap)) if part.cap[n] == per)  # fmt: skip
            need = -(-g // per)
            return max(idle[need - 1], t) if len(idle) >= need else math.inf
        best = math.inf
        for n, node_ends in enumerate(ends):
            if part.cap[n] < g:
                continue
            free, at = part.free[n], (t if part.free[n] >= g else math.inf)
            for e, c in node_ends:
                if at < math.inf:
                    break
                free += c
                at = e if free >= g else at
            best = min(best, at)
        return max(best, t)


def test_kept_structures_match_a_recomputation_through_a_backlogged_replay():
    trace, model = backlog(jobs=300, gpus=96, load=1.5, seed=5)
    Probe.checked = 0
    Probe(trace, model, SchedConfig()).run()
    assert Probe.checked > 50
