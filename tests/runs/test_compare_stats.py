"""rltrack.runs.stats against rliable itself, on the same score matrices.

Point estimates must equal rliable's to 1e-9. Intervals come from different random
draws (rliable draws with numpy's global generator), so their bounds must agree
within 2% of the scores' range at the same number of replications. How rliable is
imported beside pandas 3: tests/helpers/rliable_reference.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import trim_mean

from rliable_reference import import_rliable
from rltrack.runs import stats

REPS = 2000


@pytest.fixture(scope="module")
def rliable():
    return import_rliable()


def matrices(runs: int = 6) -> dict[str, np.ndarray]:
    """Three algorithms, 4 tasks, `runs` runs each (runs x tasks), means apart, skewed noise."""
    rng = np.random.default_rng(44)
    return {name: shift + rng.gamma(2.0, 0.2, size=(runs, 4)) * rng.choice([1, 3], size=(runs, 4)) for name, shift in (("a", 0.0), ("b", 0.3), ("c", 0.35))}


def columns(matrix: np.ndarray) -> list[np.ndarray]:
    return [matrix[:, task] for task in range(matrix.shape[1])]


def score_range(values: dict[str, np.ndarray]) -> float:
    every = np.concatenate([v.ravel() for v in values.values()])
    return float(every.max() - every.min())


def assert_close_intervals(ours: stats.Estimate, theirs: np.ndarray, tolerance: float) -> None:
    assert np.all(np.abs(np.atleast_1d(ours.lower) - theirs[0]) <= tolerance), (ours.lower, theirs[0], tolerance)
    assert np.all(np.abs(np.atleast_1d(ours.upper) - theirs[1]) <= tolerance), (ours.upper, theirs[1], tolerance)


@pytest.mark.parametrize("name", stats.AGGREGATES)
def test_aggregates_and_their_intervals_agree_with_rliable(rliable, name):
    library, metrics = rliable
    theirs = {"iqm": metrics.aggregate_iqm, "median": metrics.aggregate_median, "mean": metrics.aggregate_mean,
              "optimality_gap": metrics.aggregate_optimality_gap}[name]  # fmt: skip
    scores = matrices()
    points, intervals = library.get_interval_estimates(scores, lambda m: np.array([theirs(m)]), reps=REPS)
    tolerance = 0.02 * score_range(scores)
    for algorithm, matrix in scores.items():
        ours = stats.bootstrap(stats.AGGREGATE_FUNCTIONS[name], [columns(matrix)], reps=REPS, seed=1)
        assert abs(float(ours.value) - float(points[algorithm][0])) <= 1e-9
        assert_close_intervals(ours, intervals[algorithm], tolerance)
        assert ours.lower <= ours.value <= ours.upper


def test_probability_of_improvement_agrees_with_rliable(rliable):
    library, metrics = rliable
    scores = matrices()
    pairs = {"b,a": (scores["b"], scores["a"]), "c,b": (scores["c"], scores["b"]), "a,c": (scores["a"], scores["c"])}
    points, intervals = library.get_interval_estimates(pairs, lambda x, y: np.array([metrics.probability_of_improvement(x, y)]), reps=REPS)
    for pair, (x, y) in pairs.items():
        ours = stats.bootstrap(stats.improvement, [columns(x), columns(y)], reps=REPS, seed=2)
        assert abs(float(ours.value) - float(points[pair][0])) <= 1e-9
        assert_close_intervals(ours, intervals[pair], 0.02)  # probabilities range over [0, 1]
    same = stats.improvement(columns(scores["a"]), columns(scores["a"]))
    assert same == 0.5  # rliable's special case for equal columns, exact here from the ranks


def test_performance_profiles_agree_with_rliable(rliable):
    library, _ = rliable
    scores = matrices(runs=25)  # a profile moves in steps of 1 / (runs x tasks): finer than the 2% asked
    taus = np.linspace(0.0, 2.5, 26)
    profiles, bands = library.create_performance_profile(scores, taus, reps=REPS)
    for algorithm, matrix in scores.items():
        ours = stats.bootstrap(lambda s: stats.profile(s, taus), [columns(matrix)], reps=REPS, seed=3)
        np.testing.assert_allclose(ours.value, profiles[algorithm], atol=1e-9)
        assert_close_intervals(ours, bands[algorithm], 0.02 + 1e-9)  # fractions: the range is [0, 1]


def test_sample_efficiency_curves_agree_with_rliable(rliable):
    """rliable's recipe: scores (runs x tasks x frames), the IQM at each frame, bootstrapped over runs per task."""
    library, metrics = rliable
    rng = np.random.default_rng(7)
    frames = np.arange(1, 9)
    curves = {"a": rng.normal(size=(5, 3, 8)) + frames * 0.2, "b": rng.normal(size=(5, 3, 8)) + frames * 0.3}
    iqm_per_frame = lambda s: np.array([metrics.aggregate_iqm(s[..., f]) for f in range(s.shape[-1])])  # noqa: E731
    points, intervals = library.get_interval_estimates(curves, iqm_per_frame, reps=REPS)
    tolerance = 0.02 * score_range(curves)
    for algorithm, array in curves.items():
        per_task = [array[:, task, :] for task in range(array.shape[1])]
        ours = stats.curve_bootstrap(per_task, reps=REPS, seed=4)
        np.testing.assert_allclose(ours.value, points[algorithm], atol=1e-9)
        assert_close_intervals(ours, intervals[algorithm], tolerance)
        sorted_each_time = stats.bootstrap(stats.curve_iqm, [per_task], reps=REPS, seed=4)  # the same draws, each replication sorted
        np.testing.assert_allclose(ours.lower, sorted_each_time.lower, atol=1e-12)
        np.testing.assert_allclose(ours.upper, sorted_each_time.upper, atol=1e-12)


def test_a_runs_missing_x_is_left_out_of_the_iqm_there():
    curve = np.array([[1.0, 2.0], [3.0, np.nan], [5.0, 6.0], [7.0, 8.0], [100.0, np.nan]])
    value = stats.curve_iqm([curve])
    assert value[0] == pytest.approx(trim_mean([1, 3, 5, 7, 100], 0.25))
    assert value[1] == pytest.approx(trim_mean([2, 6, 8], 0.25))
    other = np.array([[0.5, np.nan], [2.5, 3.5], [9.0, 1.0]])
    counted = stats.curve_bootstrap([curve, other], reps=300, seed=5)
    sorted_each_time = stats.bootstrap(stats.curve_iqm, [[curve, other]], reps=300, seed=5)
    np.testing.assert_allclose(counted.lower, sorted_each_time.lower, atol=1e-12)
    np.testing.assert_allclose(counted.upper, sorted_each_time.upper, atol=1e-12)


def test_tasks_of_different_run_counts_weigh_runs_for_the_iqm_and_tasks_for_the_mean():
    scores = [np.array([1.0, 2.0, 3.0, 4.0]), np.array([10.0, 20.0])]
    assert stats.iqm(scores) == pytest.approx(trim_mean([1, 2, 3, 4, 10, 20], 0.25))
    assert stats.mean(scores) == pytest.approx((2.5 + 15) / 2)
    assert stats.median(scores) == pytest.approx((2.5 + 15) / 2)
    assert stats.optimality_gap(scores) == pytest.approx(1 - 1.0)  # every score is >= 1: clipped to 1


def test_the_interval_is_reproducible_with_a_seed_and_refuses_no_replications():
    scores = [np.array([1.0, 2.0, 5.0]), np.array([0.5, 4.0, 4.5])]
    first = stats.bootstrap(stats.iqm, [scores], reps=500, seed=9)
    again = stats.bootstrap(stats.iqm, [scores], reps=500, seed=9)
    assert (first.lower, first.upper) == (again.lower, again.upper)
    with pytest.raises(ValueError, match="reps must be"):
        stats.bootstrap(stats.iqm, [scores], reps=0)
