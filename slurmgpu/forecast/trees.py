"""Gradient-boosted regression trees in numpy (squared loss): no extra dependency.

Small on purpose: a few hundred rows to a few ten thousand, a dozen features, shallow trees.
Each feature is cut once into at most `BINS` quantile bins; a node's best split is found from
per-bin gradient sums (`np.bincount`), so fitting costs rounds x nodes x features bincounts.
Trees are complete binary trees in heap order (children of node i are 2i+1, 2i+2): a node that
cannot split sends every row left (threshold +inf), so prediction is `depth` vectorized steps
over all trees at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BINS = 32


@dataclass(frozen=True)
class Boosted:
    """A fitted ensemble: per tree, per internal node, the feature and threshold; per leaf the
    (learning-rate scaled) value; `base` is the starting prediction."""

    feature: np.ndarray  # (trees, 2**depth - 1) int
    threshold: np.ndarray  # (trees, 2**depth - 1) float; +inf: everything goes left
    leaf: np.ndarray  # (trees, 2**depth) float
    base: float
    depth: int

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Predictions for the rows of `x` (n, features)."""
        n, trees = x.shape[0], self.feature.shape[0]
        node = np.zeros((trees, n), dtype=np.int64)
        t = np.arange(trees)[:, None]
        for _ in range(self.depth):
            f = self.feature[t, node]
            go_left = x[np.arange(n)[None, :], f] <= self.threshold[t, node]
            node = 2 * node + np.where(go_left, 1, 2)
        first_leaf = 2**self.depth - 1
        return self.base + self.leaf[t, node - first_leaf].sum(axis=0)


def _cuts(x: np.ndarray) -> list[np.ndarray]:
    """Per feature, the distinct quantile cut points (a value <= cut goes left)."""
    qs = np.linspace(0, 1, BINS + 1)[1:-1]
    return [np.unique(np.quantile(col, qs)) for col in x.T]


def _best_split(
    binned: np.ndarray, g: np.ndarray, rows: np.ndarray, n_cuts: list[int], min_leaf: int
) -> tuple[int, int, float]:
    """(feature, cut index, gain) of the best split of `rows`; feature -1 when none helps."""
    best = (-1, -1, 0.0)
    gr, n = g[rows], len(rows)
    total = gr.sum()
    for j, k in enumerate(n_cuts):
        if k == 0:
            continue
        b = binned[rows, j]
        s = np.cumsum(np.bincount(b, weights=gr, minlength=k + 1))[:-1]
        c = np.cumsum(np.bincount(b, minlength=k + 1))[:-1]
        ok = (c >= min_leaf) & (n - c >= min_leaf)
        if not ok.any():
            continue
        cl = np.where(ok, c, 1)
        gain = np.where(ok, s**2 / cl + (total - s) ** 2 / np.where(ok, n - c, 1), -np.inf)
        gain -= total**2 / n
        i = int(np.argmax(gain))
        if gain[i] > best[2] + 1e-12:
            best = (j, i, float(gain[i]))
    return best


def _tree(
    binned: np.ndarray,
    cuts: list[np.ndarray],
    g: np.ndarray,
    depth: int,
    min_leaf: int,
    rate: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One tree fitted to the residuals `g`: its nodes, leaf values and each row's leaf."""
    internal = 2**depth - 1
    feature = np.zeros(internal, dtype=np.int64)
    threshold = np.full(internal, np.inf)
    node_of = np.zeros(len(g), dtype=np.int64)
    n_cuts = [len(c) for c in cuts]
    for i in range(internal):
        rows = np.flatnonzero(node_of == i)
        j, k, _ = _best_split(binned, g, rows, n_cuts, min_leaf) if len(rows) else (-1, -1, 0)
        left = rows
        if j >= 0:
            feature[i], threshold[i] = j, cuts[j][k]
            left = rows[binned[rows, j] <= k]
        node_of[rows] = 2 * i + 2
        node_of[left] = 2 * i + 1
    leaf_of = node_of - internal
    sums = np.bincount(leaf_of, weights=g, minlength=internal + 1)
    counts = np.bincount(leaf_of, minlength=internal + 1)
    leaf = rate * np.where(counts > 0, sums / np.maximum(counts, 1), 0.0)
    return feature, threshold, leaf, leaf[leaf_of]


def fit_boosted(
    x: np.ndarray,
    y: np.ndarray,
    *,
    rounds: int = 150,
    depth: int = 3,
    rate: float = 0.1,
    min_leaf: int = 8,
) -> Boosted:
    """Gradient boosting with squared loss: each tree fits the current residuals."""
    if len(y) < 2 * min_leaf:
        raise ValueError("too few rows for the boosted trees")
    cuts = _cuts(x)
    binned = np.stack(
        [np.searchsorted(c, col, side="left") for c, col in zip(cuts, x.T, strict=True)], axis=1
    )
    base = float(y.mean())
    pred = np.full(len(y), base)
    feats, thrs, leaves = [], [], []
    for _ in range(rounds):
        f, t, leaf, step = _tree(binned, cuts, y - pred, depth, min_leaf, rate)
        feats.append(f)
        thrs.append(t)
        leaves.append(leaf)
        pred += step
    return Boosted(np.array(feats), np.array(thrs), np.array(leaves), base, depth)
