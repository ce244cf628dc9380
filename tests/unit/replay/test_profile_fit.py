"""Backfill's profile (`replay/profile.py`) against a plain recomputation: the earliest fit
found run by run, steps made in a buffer that grows, and the reservation it makes, on random
profiles."""

import numpy as np
import pytest

from slurmgpu.replay import profile as pf
from slurmgpu.replay.engine import INF


class Profile:
    """The profile's buffer and lengths with the functions on them."""

    def __init__(self, t, free, ends, gpus):
        self.prof, self.meta = pf.build(t, free, ends, gpus)

    @property
    def times(self):
        return self.prof[pf.TIMES, : self.meta[pf.M]]

    @property
    def avail(self):
        return self.prof[pf.AVAIL, : self.meta[pf.M]]

    def reserve(self, g, lim, horizon, node_gpus, after):
        self.prof, start = pf.reserve(self.prof, self.meta, g, lim, horizon, node_gpus, after)
        return start

    def earliest(self, g, lim, first):
        return pf.earliest(self.prof, self.meta, g, lim, first)

    def free_for(self, until):
        return pf.free_for(self.prof, self.meta, until)


def plain_earliest(times, avail, g, lim, first):
    """The first step from `first` whose GPUs stay >= g at every step up to its time + lim."""
    for i in range(first, len(times)):
        if all(avail[j] >= g for j in range(i, len(times)) if times[j] <= times[i] + lim):
            return i
    return -1


def random_profile(rng, steps):
    t = float(rng.integers(0, 1000)) + 0.5
    ends = np.sort(t + rng.choice(np.arange(1, 20 * steps), steps, replace=False) * 30.0)
    gpus = rng.integers(1, 9, steps).astype(float)
    prof = Profile(t, float(rng.integers(0, 6)), ends, gpus)
    for _ in range(int(rng.integers(0, 30))):  # earlier reservations: a profile with holes
        at = float(rng.choice(prof.times))
        g = float(rng.integers(1, 17))
        prof.reserve(g, 30.0 * int(rng.integers(1, 40)), INF, float(rng.integers(0, 17)), at)
    return prof


@pytest.mark.parametrize("seed", range(40))
def test_earliest_fit_is_the_first_step_that_holds_the_job(seed):
    rng = np.random.default_rng(seed)
    prof = random_profile(rng, int(rng.integers(1, 60)))
    times, avail = prof.times.tolist(), prof.avail.tolist()
    for _ in range(30):
        # a GPU count the profile has at some steps and not others: the runs are many
        g, lim = (
            float(rng.choice(avail)) + float(rng.integers(0, 2)),
            30.0 * int(rng.integers(0, 60)),
        )
        first = int(rng.integers(0, len(times)))
        assert prof.earliest(g, lim, first) == plain_earliest(times, avail, g, lim, first)


@pytest.mark.parametrize("seed", range(20))
def test_reserve_holds_its_window_and_leaves_the_rest(seed):
    rng = np.random.default_rng(100 + seed)
    prof = random_profile(rng, int(rng.integers(1, 40)))
    for _ in range(20):
        before = dict(zip(prof.times.tolist(), prof.avail.tolist(), strict=True))
        at = lambda x, before=before: before[max(s for s in before if s <= x)]  # noqa: E731
        g, lim = float(rng.integers(1, 9)), 30.0 * int(rng.integers(1, 60))
        after = float(rng.choice(prof.times)) + float(rng.integers(0, 2)) * 7.0
        horizon = prof.times[0] + float(rng.integers(0, 2000)) * 10.0
        node = 8.0 * int(rng.integers(1, 3))
        start = prof.reserve(g, lim, horizon, node, after)
        steps, free = prof.times.tolist(), prof.avail.tolist()
        assert steps == sorted(set(steps))  # strictly increasing, whatever was inserted
        if start == INF:  # no fit from `after` on, or only past the horizon
            assert free == [at(s) for s in steps]
            k = steps.index(max(s for s in steps if s <= max(after, steps[0])))
            fit = plain_earliest(steps, [at(s) for s in steps], g, lim, k)
            assert fit < 0 or steps[fit] > horizon or after > horizon
            continue
        i = steps.index(start)
        assert start >= after and start <= horizon
        assert i == plain_earliest(
            steps,
            [at(s) for s in steps],
            g,
            lim,
            steps.index(max(s for s in steps if s <= max(after, steps[0]))),
        )
        for s, f in zip(steps, free, strict=True):
            was = at(s)
            held = start <= s < start + lim
            assert f == (was - min(was, max(node, g)) if held else was)


@pytest.mark.parametrize("seed", range(10))
def test_build_has_one_step_per_distinct_end(seed):
    rng = np.random.default_rng(300 + seed)
    t = float(rng.integers(0, 1000)) + 0.5
    ends = np.sort(t + rng.integers(-5, 40, int(rng.integers(0, 50))) * 10.0)
    gpus = rng.integers(1, 9, len(ends)).astype(float)
    free = float(rng.integers(0, 6))
    prof = Profile(t, free, ends, gpus)
    at = np.maximum(ends, t + 1.0)  # an end before t + 1 counts at t + 1
    steps = sorted(set(at.tolist()))
    assert prof.times.tolist() == [t, *steps]
    assert prof.avail.tolist() == [free] + [free + gpus[at <= s].sum() for s in steps]


@pytest.mark.parametrize("seed", range(20))
def test_free_for_is_the_least_up_to_its_time_between_changes(seed):
    """The kept least-so-far (`LOW`) against a plain minimum, while reservations, holds and
    new steps change the profile between questions."""
    rng = np.random.default_rng(500 + seed)
    prof = random_profile(rng, int(rng.integers(1, 50)))
    for _ in range(60):
        times, avail = prof.times.tolist(), prof.avail.tolist()
        until = float(rng.choice(times)) + float(rng.integers(-1, 2)) * 5.0
        assert prof.free_for(until) == min(
            (a for s, a in zip(times, avail, strict=True) if s <= until), default=INF
        )
        g = float(rng.integers(1, 9))
        assert pf.free_until(prof.prof, prof.meta, g, until) == (prof.free_for(until) >= g)
        what = rng.integers(0, 3)
        if what == 0:
            prof.reserve(g, 30.0 * int(rng.integers(1, 40)), INF, 8.0, float(rng.choice(times)))
        elif what == 1:
            i = int(rng.integers(0, len(times)))
            prof.prof = pf.hold(prof.prof, prof.meta, i, 1.0, times[i] + 100.0)
