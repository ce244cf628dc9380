"""benchmarks/helios_earth.py: the jobs it rebuilds from per-minute sequences, and the record
made to fit the VC (the figures of docs/advise.md "A Helios-Earth-shaped month" rest on it;
the real sequences are not in the repository)."""

from __future__ import annotations

import numpy as np

from benchmarks import helios_earth as he
from tests.unit.advice.helios_month import GenJob


def _sequence(minutes: int = 600, gpus: int = 16, seed: int = 0) -> he.Sequence:
    """A VC of `gpus` GPUs whose small jobs (1-4 GPUs) arrive, wait and run minute by minute
    (a consistent sequence: a FIFO queue of the VC itself), no big ones."""
    rng = np.random.default_rng(seed)
    queue: list[int] = []
    running: list[list[int]] = []  # [gpus, minutes left]
    rows = []
    for _ in range(minutes):
        running = [[g, m - 1] for g, m in running if m > 1]
        queue += [int(rng.integers(1, 5)) for _ in range(rng.poisson(0.3))]
        while queue and sum(g for g, _ in running) + queue[0] <= gpus:
            running.append([queue.pop(0), int(rng.integers(2, 30))])
        rows.append((len(running), len(queue), sum(g for g, _ in running), sum(queue)))
    a = np.array(rows).T
    zero = np.zeros(minutes, dtype=np.int64)

    def pair(k: int) -> np.ndarray:
        return np.stack([a[k], zero])

    return he.Sequence("vcX", gpus, pair(0), pair(1), pair(2), pair(3))


def test_the_rebuilt_jobs_follow_the_sequence_and_the_record_fits_the_vc():
    seq = _sequence()
    jobs = he.month_jobs([seq], seed=3)
    assert len(jobs) > 90  # of ~180 arrivals: a minute shows only net changes (lower bound)
    # every start after its submit
    assert all(m.real_start >= m.gen.submit for m in jobs)
    assert all(1 <= m.gen.gpus <= 7 for m in jobs)  # the small class: 1-7 GPUs
    # the record never holds more GPUs than the VC has (make_feasible)
    events = sorted(
        [(m.real_start, m.gen.gpus) for m in jobs]
        + [(m.real_start + m.gen.duration, -m.gen.gpus) for m in jobs],
        key=lambda e: (e[0], e[1]),
    )
    assert max(np.cumsum([g for _, g in events])) <= seq.gpus
    # and its running GPUs per minute follow the sequence's (allocation within 2 points)
    rows = he.compare([seq], jobs)
    real, rebuilt = rows[0]["real"], rows[0]["rebuilt"]
    assert abs(real["allocation"] - rebuilt["allocation"]) < 0.02
    assert rows[0]["jobs"] == len(jobs)


def _job(k: int, start: float, dur: float, gpus: int) -> he.MonthJob:
    return he.MonthJob(GenJob(k, "vcX", "normal", "u", 0.0, dur, dur, gpus), start, "COMPLETED")


def test_make_feasible_delays_only_what_does_not_fit_one_node():
    jobs = [_job(1, 0, 120, 6), _job(2, 30, 60, 4), _job(3, 60, 60, 2), _job(4, 90, 30, 1)]
    moved = he.make_feasible(jobs, gpus=8)
    # job 2 (4 GPUs) does not fit beside job 1's 6 until it ends at 120; job 3 (2) fits at
    # 60; job 4 (1 GPU) then finds the node full until 120
    assert [m.real_start for m in jobs] == [0, 120, 60, 120]
    assert moved == 2


def test_make_feasible_places_on_nodes_as_slurm_does():
    # two 8-GPU nodes; 1 GPU on one, then a 4-GPU job on the same (the fullest that holds
    # it), a 7-GPU job on the other; a 16-GPU job needs both nodes idle: at 60, not 30
    jobs = [_job(1, 0, 60, 1), _job(2, 30, 30, 4), _job(3, 30, 30, 7), _job(4, 30, 60, 16)]
    assert he.make_feasible(jobs, gpus=16) == 1
    assert [m.real_start for m in jobs] == [0, 30, 30, 60]
    # 6 GPUs free in the pool, 3 on each node: a 4-GPU job waits for a node
    jobs = [_job(1, 0, 90, 5), _job(2, 0, 90, 5), _job(3, 30, 30, 4)]
    assert he.make_feasible(jobs, gpus=16) == 1
    assert jobs[2].real_start == 90
    # a job bigger than the VC is left where it was (the replay reports it cannot run)
    big = [_job(5, 0, 10, 24)]
    assert he.make_feasible(big, gpus=16) == 0 and big[0].real_start == 0
