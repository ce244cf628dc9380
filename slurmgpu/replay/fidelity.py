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
    )


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
