"""How close a replay is to what really happened: mean wait error and start order kept."""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Fidelity:
    jobs: int
    recorded_mean_wait_s: float
    replayed_mean_wait_s: float
    mean_wait_error: float  # |replayed - recorded| / recorded
    same_order_fraction: float  # strict: largest share of jobs keeping their relative order
    pair_order_agreement: float  # share of job pairs started in the same order (Kendall)
    same_rank_fraction: float  # share of jobs at the same rank (ties: the same second)


def same_order_fraction(recorded_start: np.ndarray, replayed_start: np.ndarray) -> float:
    """The largest share of jobs whose starts keep their recorded relative order.

    Jobs are put in recorded start order (sacct's 1 s resolution makes ties: they are taken
    in replayed order) and the longest non-decreasing run of replayed starts is found: those
    jobs started in the same order in both; the rest are out of place.
    """
    n = len(recorded_start)
    if not n:
        return 1.0
    order = np.lexsort((replayed_start, recorded_start))
    seq = replayed_start[order]
    tails: list[float] = []  # patience sorting, non-decreasing
    for v in seq:
        k = bisect.bisect_right(tails, v)
        if k == len(tails):
            tails.append(v)
        else:
            tails[k] = v
    return len(tails) / n


def fidelity(
    submit: np.ndarray, recorded_start: np.ndarray, replayed_start: np.ndarray
) -> Fidelity:
    """Compare the jobs that started in both."""
    ok = np.isfinite(recorded_start) & np.isfinite(replayed_start)
    rec = (recorded_start - submit)[ok]
    rep = (replayed_start - submit)[ok]
    rec_mean, rep_mean = float(rec.mean()), float(rep.mean())
    err = abs(rep_mean - rec_mean) / rec_mean if rec_mean else float(rep_mean != 0)
    return Fidelity(
        int(ok.sum()),
        rec_mean,
        rep_mean,
        err,
        same_order_fraction(recorded_start[ok], replayed_start[ok]),
        pair_order_agreement(recorded_start[ok], replayed_start[ok]),
        same_rank_fraction(recorded_start[ok], replayed_start[ok]),
    )


def same_rank_fraction(recorded_start: np.ndarray, replayed_start: np.ndarray) -> float:
    """The share of jobs whose rank in the start sequence is the same in both.

    sacct records starts to the second, so the jobs started in one second are tied: a job's
    rank is the range [jobs started in earlier seconds, that + jobs in its second - 1], in
    each sequence (replayed starts are truncated to the second, as sacct would record them).
    A job counts when its two ranges overlap: some order of the ties gives it the same
    place in both. One job started far too early shifts every job it overtook, so this is
    much stricter than `same_order_fraction`.
    """

    def ranks(start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        sec = np.floor(np.asarray(start, float) + 1e-9)
        ordered = np.sort(sec)
        return ordered.searchsorted(sec, "left"), ordered.searchsorted(sec, "right") - 1

    if not len(recorded_start):
        return 1.0
    rec_lo, rec_hi = ranks(recorded_start)
    rep_lo, rep_hi = ranks(replayed_start)
    return float(np.mean((rec_lo <= rep_hi) & (rep_lo <= rec_hi)))


def pair_order_agreement(recorded_start: np.ndarray, replayed_start: np.ndarray) -> float:
    """Of the job pairs that started at different times in both, the share started in the
    same order (Kendall's concordance; pairs tied in either are not counted). O(n^2): for
    fidelity tests of hundreds of jobs, not for whole histories."""
    a = np.asarray(recorded_start, float)
    b = np.asarray(replayed_start, float)
    da = np.sign(a[:, None] - a[None, :])
    db = np.sign(b[:, None] - b[None, :])
    counted = (da != 0) & (db != 0)
    total = int(counted.sum())
    return float((da == db)[counted].sum() / total) if total else 1.0
