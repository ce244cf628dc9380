"""The engine's speed structures change no result: a backlogged trace against the starts the
engine gave before them (data/backlog-starts.json, README there), and each structure against
a plain recomputation of what it stands for, after every turn of the event loop."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from slurmgpu.replay.engine import GRACE, PENDING, RUNNING, SchedConfig, outcome, replay
from slurmgpu.replay.loop import advance, probe
from slurmgpu.replay.runs import shortest_limit
from slurmgpu.replay.state import C_PASSES, T_NOW, build
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


def check_kept_structures(state) -> None:
    """Every structure the engine keeps for speed against a plain recomputation from the jobs
    and the nodes, for each partition, between two turns of the event loop."""
    _, jobs, nodes, parts, _, events = state
    t = float(events.times[T_NOW])
    for p in np.flatnonzero(parts.exists):
        lo, hi = int(parts.node_lo[p]), int(parts.node_hi[p])
        per = int(parts.max_cap[p])
        on = [[] for _ in range(hi - lo)]  # per node: (expected end, GPUs) of its jobs
        for node in range(lo, hi):
            for s in range(nodes.slot_job.shape[1]):
                if nodes.slot_job[node, s] >= 0:
                    v = nodes.slot_job[node, s]
                    on[node - lo].append((jobs.expected_end[v], nodes.slot_gpus[node, s]))
        free = [int(nodes.cap[n]) - sum(c for _, c in on[n - lo]) for n in range(lo, hi)]
        assert free == nodes.free[lo:hi].tolist()
        assert int(parts.free_whole[p]) == sum(free)
        counts = np.bincount(free, minlength=parts.bucket.shape[1])
        assert counts.tolist() == parts.bucket[p].tolist()
        cap = nodes.cap[lo:hi].tolist()
        idle = [n for n in range(hi - lo) if cap[n] == per and free[n] == per]
        assert int(parts.idle_full[p]) == len(idle)
        running = sorted(j for j in np.flatnonzero(jobs.part == p)
                         if jobs.state[j] in (RUNNING, GRACE))  # fmt: skip
        r0 = int(parts.run_lo[p])
        assert sorted(parts.run_jobs[r0 : r0 + parts.run_n[p]].tolist()) == running
        ends = sorted((float(jobs.expected_end[j]), int(j)) for j in running
                      if jobs.akind[j] == 1)  # fmt: skip
        e0 = int(parts.end_lo[p])
        kept = list(zip(parts.end_t[e0 : e0 + parts.end_n[p]].tolist(),
                        parts.end_j[e0 : e0 + parts.end_n[p]].tolist(), strict=True))  # fmt: skip
        assert kept == ends
        # pending whole-GPU jobs in the queue (a requeued one once eligible): count, sizes and
        # the shortest time limit per size
        queued = [j for j in np.flatnonzero((jobs.part == p) & (jobs.state == PENDING))
                  if jobs.run_id[j] == 0 or jobs.eligible[j] <= t]  # fmt: skip
        assert int(parts.pending[p]) == len(queued)
        whole = [j for j in queued if jobs.kind[j] == 0]
        for s, size in enumerate(parts.sizes.tolist()):
            mine = [float(jobs.limit[j]) for j in whole if jobs.gpus[j] == size]
            assert int(parts.size_hist[p, s]) == len(mine)
            assert plain(shortest_limit)(parts, p, s) == min(mine, default=math.inf)
        fits, chosen, at = probe(*state, p, t)
        for g in range(1, 2 * per + 1):
            want = best_fit(free, cap, per, g)
            assert fits[g - 1] == (want is not None)
            if want is not None:
                assert [int(n) - lo for n in chosen[g - 1, : len(want)]] == want
            assert at[g - 1] == earliest_by_hand(on, free, cap, per, g, t)


def plain(fn):
    """A compiled function's Python source (to call it on the tuples from Python)."""
    return getattr(fn, "py_func", fn)


def best_fit(free, cap, per, g):
    """The node with the fewest free GPUs that holds g (the lowest numbered), or the lowest
    numbered ceil(g / per) idle full nodes; None when none."""
    if g > sum(free):
        return None
    if g <= per:
        fits = [n for n in range(len(free)) if free[n] >= g]
        return [min(fits, key=lambda n: (free[n], n))] if fits else None
    idle = [n for n in range(len(free)) if cap[n] == per and free[n] == per]
    need = -(-g // per)
    return idle[:need] if len(idle) >= need else None


def earliest_by_hand(on, free, cap, per, g, t):
    ends = [sorted(node) for node in on]
    if g > per:
        idle = sorted(max((e for e, _ in ends[n]), default=t)
                      for n in range(len(cap)) if cap[n] == per)  # fmt: skip
        need = -(-g // per)
        return max(idle[need - 1], t) if len(idle) >= need else math.inf
    best = math.inf
    for n, node_ends in enumerate(ends):
        if cap[n] < g:
            continue
        have, at = free[n], (t if free[n] >= g else math.inf)
        for e, c in node_ends:
            if at < math.inf:
                break
            have += c
            at = e if have >= g else at
        best = min(best, at)
    return max(best, t)


@pytest.mark.parametrize("shape", ["whole", "mixed"])
def test_kept_structures_match_a_recomputation_through_a_backlogged_replay(shape):
    trace, model = backlog(jobs=300, gpus=96, load=1.5, seed=5, mixed=shape == "mixed")
    state = build(trace, model, SchedConfig())
    checked = 0
    done = False
    while not done:
        passes = state[5].count[C_PASSES]
        done, state = advance(state, 1)
        if state[5].count[C_PASSES] > passes:  # a turn with backfill passes
            check_kept_structures(state)
            checked += 1
    assert checked > 50
    # and stepping changed nothing: the same schedule as in one go
    assert outcome(state).start_s.tolist() == replay(trace, model, SchedConfig()).start_s.tolist()
