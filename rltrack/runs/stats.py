"""The statistics RL papers report over runs and tasks, with stratified bootstrap intervals.

Since Agarwal et al. (NeurIPS 2021, "Deep RL at the Edge of the Statistical
Precipice", the `rliable` library), results are aggregates of (normalized)
scores over all runs of all tasks, each with a confidence interval from a
*stratified* bootstrap: every replication resamples, with replacement, the runs
of each task separately (tasks are the strata, never resampled), and the
interval is the percentile interval of the replications. This module computes
the same numbers as `rliable.metrics` and `rliable.library` (checked against it
in tests/runs/test_compare_stats.py), vectorised over the replications with
numpy alone, without rliable's dependency on `arch` (and SciPy, whose import
alone would cost a command a second).

A group's scores are one 1-D array per task (`Scores`): tasks may hold
different numbers of runs (rliable needs a runs x tasks matrix; with equal
counts the results are rliable's):

    iqm              the 25% trimmed mean of all scores (as scipy.stats.trim_mean, which rliable calls)
    median, mean     the median / mean over tasks of each task's mean score
    optimality_gap   1 - mean(min(score, 1)) over all scores (normalized scores: how far below the reference max)
    probability of improvement P(X > Y): per task, the Mann-Whitney U of X's runs over Y's divided by
                     n_x n_y (ties count 1/2), averaged over the tasks both have; X and Y resampled independently
    performance profile  the fraction of all scores above each threshold tau
    sample-efficiency curve  the IQM at each x of a common grid (`Curves`: runs x points per task, NaN where
                     a run does not reach x; the IQM at x is over the runs that do)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

#: One array of run scores per task (each of shape (runs,)); with a leading replication axis: (reps, runs).
Scores = Sequence[np.ndarray]
#: Replications drawn by default (rliable's performance profiles use 2,000).
DEFAULT_REPS = 2000
CONFIDENCE = 0.95
#: The aggregates every comparison reports, in this order.
AGGREGATES = ("iqm", "median", "mean", "optimality_gap")


@dataclass(frozen=True)
class Estimate:
    """A point estimate (of any shape) and its percentile interval (`lower`, `upper`: the same shape)."""

    value: np.ndarray
    lower: np.ndarray
    upper: np.ndarray


def trimmed_mean(values: np.ndarray) -> np.ndarray:
    """The 25% trimmed mean over the last axis, as scipy.stats.trim_mean(values, 0.25, axis=-1):
    int(0.25 n) values cut from each end."""
    n = values.shape[-1]
    cut = int(n * 0.25)
    return np.sort(values, axis=-1)[..., cut : n - cut].mean(axis=-1)


def iqm(scores: Scores) -> np.ndarray:
    """The interquartile mean of all scores (over the last axis of each task's array)."""
    return trimmed_mean(np.concatenate(list(scores), axis=-1))


def median(scores: Scores) -> np.ndarray:
    return np.median(np.stack([s.mean(axis=-1) for s in scores]), axis=0)


def mean(scores: Scores) -> np.ndarray:
    return np.mean(np.stack([s.mean(axis=-1) for s in scores]), axis=0)


def optimality_gap(scores: Scores, gamma: float = 1.0) -> np.ndarray:
    return gamma - np.mean(np.minimum(np.concatenate(list(scores), axis=-1), gamma), axis=-1)


AGGREGATE_FUNCTIONS: dict[str, Callable[[Scores], np.ndarray]] = {
    "iqm": iqm, "median": median, "mean": mean, "optimality_gap": optimality_gap,
}  # fmt: skip


def improvement(x: Scores, y: Scores) -> np.ndarray:
    """P(X > Y): per task the Mann-Whitney U of X over Y divided by n_x n_y (pairs where
    X's run scores above Y's, ties counting 1/2), averaged over tasks."""
    per_task = []
    for xs, ys in zip(x, y):
        above = xs[..., :, None] > ys[..., None, :]
        ties = xs[..., :, None] == ys[..., None, :]
        per_task.append((above.sum(axis=(-2, -1)) + 0.5 * ties.sum(axis=(-2, -1))) / (xs.shape[-1] * ys.shape[-1]))
    return np.mean(np.stack(per_task), axis=0)


def profile(scores: Scores, taus: np.ndarray) -> np.ndarray:
    """The fraction of all scores above each tau: shape (..., len(taus))."""
    flat = np.concatenate(list(scores), axis=-1)
    return np.stack([np.mean(flat > tau, axis=-1) for tau in taus], axis=-1)


def curve_iqm(curves: Sequence[np.ndarray]) -> np.ndarray:
    """The IQM over runs at each x of per-task (..., runs, points) arrays, NaN-aware: at each x, the
    25% trimmed mean (int(0.25 n) cut from each end) of the n runs that reach it."""
    values = np.swapaxes(np.concatenate(list(curves), axis=-2), -2, -1)  # (..., points, runs): runs contiguous to sort
    ordered = np.sort(values, axis=-1)  # NaN last
    count = np.isfinite(ordered).sum(axis=-1)
    cut = (count * 0.25).astype(int)
    sums = np.cumsum(np.nan_to_num(ordered), axis=-1)
    sums = np.concatenate([np.zeros_like(sums[..., :1]), sums], axis=-1)
    high = np.take_along_axis(sums, (count - cut)[..., None], axis=-1)[..., 0]
    low = np.take_along_axis(sums, cut[..., None], axis=-1)[..., 0]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, (high - low) / (count - 2 * cut), np.nan)


def resample(scores: Scores, reps: int, rng: np.random.Generator) -> list[np.ndarray]:
    """`reps` stratified replications: each task's runs drawn with replacement, (reps, runs[, ...]) per task."""
    return [s[rng.integers(0, len(s), size=(reps, len(s)))] for s in scores]


def percentile_interval(replications: np.ndarray, confidence: float = CONFIDENCE) -> tuple[np.ndarray, np.ndarray]:
    """The percentile interval over the first axis (numpy's linear interpolation, as `arch` computes it)."""
    tail = (1 - confidence) / 2 * 100
    lower, upper = np.nanpercentile(replications, [tail, 100 - tail], axis=0)
    return lower, upper


#: Replications bootstrapped at once (bounds the memory of large comparisons).
CHUNK = 250


def bootstrap(
    statistic: Callable[..., np.ndarray], groups: Sequence[Sequence[np.ndarray]], *, reps: int = DEFAULT_REPS,
    seed: int | None = 0, confidence: float = CONFIDENCE,
) -> Estimate:
    """`statistic(*groups)` and its stratified percentile interval: each group's
    tasks are resampled independently (several groups: probability of improvement)."""
    if reps < 1:
        raise ValueError(f"reps must be a number of replications >= 1, got {reps}; rliable's default is 2000")
    rng = np.random.default_rng(seed)
    value = np.asarray(statistic(*groups))
    chunks = []
    for start in range(0, reps, CHUNK):
        size = min(CHUNK, reps - start)
        chunks.append(np.asarray(statistic(*(resample(group, size, rng) for group in groups))))
    lower, upper = percentile_interval(np.concatenate(chunks, axis=0), confidence)
    return Estimate(value, lower, upper)


def curve_bootstrap(curves: Sequence[np.ndarray], *, reps: int = DEFAULT_REPS, seed: int | None = 0, confidence: float = CONFIDENCE) -> Estimate:
    """`curve_iqm` of per-task (runs, points) arrays and its stratified percentile interval,
    without sorting each replication: a replication is how often it draws each run (runs
    drawn within their task), and each point's runs are sorted once. In a replication the
    sorted values are each run's value repeated its count times; the 25% trimmed mean keeps
    the positions int(0.25 n) .. n - int(0.25 n) of them (n: the draws of runs reaching the point)."""
    if reps < 1:
        raise ValueError(f"reps must be a number of replications >= 1, got {reps}; rliable's default is 2000")
    rng = np.random.default_rng(seed)
    values = np.concatenate(list(curves))
    order = np.argsort(values, axis=0)  # per point, NaN last
    ordered = np.take_along_axis(values, order, axis=0)
    finite = np.isfinite(ordered)
    filled = np.where(finite, ordered, 0.0)
    starts = np.cumsum([0, *(len(c) for c in curves)])
    chunks = []
    for first in range(0, reps, CHUNK):
        size = min(CHUNK, reps - first)
        counts = np.zeros((size, len(values)), dtype=np.int32)
        for start, end in zip(starts[:-1], starts[1:]):
            drawn = rng.integers(start, end, size=(size, end - start))
            np.add.at(counts, (np.arange(size)[:, None], drawn), 1)
        sorted_counts = counts[:, order] * finite.astype(np.int32)  # (size, runs, points): NaN values drawn count for nothing
        upto = np.cumsum(sorted_counts, axis=1, dtype=np.int32)  # all int32: mixing in int64 costs several times the arithmetic
        total = upto[:, -1, :]
        cut = total // 4
        kept = np.maximum(np.minimum(upto, (total - cut)[:, None, :]) - np.maximum(upto - sorted_counts, cut[:, None, :]), 0)
        with np.errstate(invalid="ignore", divide="ignore"):
            chunks.append(np.where(total > 0, (kept * filled).sum(axis=1) / (total - 2 * cut), np.nan))
    lower, upper = percentile_interval(np.concatenate(chunks, axis=0), confidence)
    return Estimate(curve_iqm(curves), lower, upper)
