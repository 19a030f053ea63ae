"""Which group of runs is better, and how sure: `rltrack compare` and `rltrack.runs.compare_runs`.

From runs of any library (canonical metric names line them up), a score per
run (rltrack.runs.scores: its rule said in every output), normalized per task
by a reference table when one is given (named in every output), grouped by
hyperparameters (as `rltrack plot` groups, or `group_by`) and by task (the
run's task, the hyperparameter `task_key`, or one task of every run with
`task_key="none"`: runs of libraries that name one environment differently), then per group the aggregates
of rltrack.runs.stats with stratified bootstrap intervals: IQM, median, mean,
optimality gap, the probability of improvement of each group over each other,
performance profiles and sample-efficiency curves (the IQM over runs at each x
of one grid, each run linearly interpolated inside its own x range).

`Comparison` holds them as pandas DataFrames; `to_json()` is the document
`rltrack compare --json` prints, `write_csv(dir)` the tables `--csv DIR` writes.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rltrack.runs import stats
from rltrack.runs.grouping import (
    PlotError,
    check_axis,
    check_group_keys,
    default_group_keys,
    group_label,
    group_value,
    group_values,
    missing_metric_message,
)
from rltrack.runs.scores import Reference, ScoreRule, load_reference, parse_rule
from rltrack.runs.series_cache import read_series

if TYPE_CHECKING:
    import pandas as pd

    from rltrack.runs.run import Run

#: x points of a sample-efficiency curve.
CURVE_POINTS = 50
#: Thresholds of a performance profile.
PROFILE_POINTS = 51


class CompareError(PlotError):
    """A comparison that cannot be made as asked; the message names what exists."""


@dataclass
class Comparison:
    """Everything `rltrack compare` reports (see the module docstring). Tables:

    scores        group, task, run, score (normalized when `normalization`), raw_score
    aggregates    group, aggregate (iqm, median, mean, optimality_gap), value, lower, upper
    improvement   x, y, value, lower, upper: P(a run of x scores above a run of y), tasks both have
    profiles      group, tau, value, lower, upper: the fraction of the group's runs scoring above tau
    curves        group, x, value, lower, upper, runs: the IQM at x over the runs that reach it
    """

    metric: str
    score: str
    normalization: str | None
    axis: str
    tasks: list[str]
    groups: list[str]
    reps: int
    seed: int | None
    confidence: float
    scores: pd.DataFrame
    aggregates: pd.DataFrame
    improvement: pd.DataFrame
    profiles: pd.DataFrame
    curves: pd.DataFrame
    skipped: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The document of `rltrack compare --json` (the shape issue 44 gives)."""
        groups: dict[str, Any] = {}
        for label in self.groups:
            mine = self.scores[self.scores["group"] == label]
            runs = {task: [{"run": r, "score": float(s)} for r, s in zip(rows["run"], rows["score"])] for task, rows in mine.groupby("task", sort=False)}
            entry: dict[str, Any] = {"runs": runs}
            for row in self.aggregates[self.aggregates["group"] == label].itertuples():
                entry[row.aggregate] = {"value": float(row.value), "ci": [float(row.lower), float(row.upper)]}
            groups[label] = entry
        improvement = [{"x": r.x, "y": r.y, "value": float(r.value), "ci": [float(r.lower), float(r.upper)]} for r in self.improvement.itertuples()]
        return {
            "metric": self.metric, "score": self.score, "normalization": self.normalization, "tasks": self.tasks,
            "groups": groups, "probability_of_improvement": improvement, "reps": self.reps, "confidence": self.confidence,
        }  # fmt: skip

    def write_csv(self, directory: Path) -> list[Path]:
        """The tables as CSV files in `directory`, and `comparison.csv` saying what they hold."""
        directory.mkdir(parents=True, exist_ok=True)
        import pandas as pd

        about = pd.DataFrame(
            [("metric", self.metric), ("score", self.score), ("normalization", self.normalization or "none"), ("x axis", self.axis),
             ("tasks", " ".join(self.tasks)), ("reps", self.reps), ("seed", self.seed), ("confidence", self.confidence)],
            columns=["name", "value"],
        )  # fmt: skip
        tables = {"comparison": about, "scores": self.scores, "aggregates": self.aggregates, "probability_of_improvement": self.improvement,
                  "performance_profiles": self.profiles, "sample_efficiency": self.curves}  # fmt: skip
        paths = []
        for name, table in tables.items():
            paths.append(directory / f"{name}.csv")
            table.to_csv(paths[-1], index=False)
        return paths


def task_group_keys(runs: Sequence[Run], task_key: str) -> list[str]:
    """`default_group_keys`, less the task key and keys that only rename the task (one value per task)."""
    keys = []
    for key in default_group_keys(runs):
        per_task: dict[str, set[str]] = {}
        for run in runs:
            per_task.setdefault(task_of(run, task_key), set()).add(repr(group_value(run, key)))
        if key != task_key and not (len(per_task) > 1 and all(len(values) == 1 for values in per_task.values())):
            keys.append(key)
    return keys


#: `task_key` that makes every run one task (runs of several libraries on one environment, named differently).
ONE_TASK = "none"


def task_of(run: Run, task_key: str) -> str:
    if task_key == ONE_TASK:
        return "all"
    value = group_value(run, task_key)
    return "?" if value is None else str(value)


def compare_runs(
    root: str | Path | None = None, patterns: Sequence[str] = (), *, task: str | None = None, where: str | None = None,
    runs: Sequence[Run] | None = None, metric: str, score: str | ScoreRule = "last", group_by: Sequence[str] | None = None,
    task_key: str = "task", reference: str | Path | Reference | None = None, x_axis: str | None = None,
    reps: int = stats.DEFAULT_REPS, seed: int | None = 0, confidence: float = stats.CONFIDENCE,
) -> Comparison:
    """Compare runs: `runs`, or those `patterns` / `task` / `where` select under `root`
    (default: runs) as `rltrack runs ls` does (all live runs when none is given). See the
    module docstring. The series read are kept in the index of `root` (rltrack.runs.series_cache)."""
    if runs is None:
        from rltrack.runs.select import chosen_runs

        root = Path(root or "runs")
        runs, _ = chosen_runs(root, patterns, task, where, all_by_default=True)
    if not runs:
        raise CompareError(f"no runs to compare under {root or 'runs'}; give run patterns, --task or --where (see `rltrack runs ls`)")
    rule = parse_rule(score) if isinstance(score, str) else score
    table = load_reference(Path(reference)) if isinstance(reference, (str, Path)) else reference
    if task_key not in ("task", ONE_TASK):
        check_group_keys(runs, [task_key])
    keys = list(group_by) if group_by else task_group_keys(runs, task_key)
    check_group_keys(runs, keys)
    if not 0 < confidence < 1:
        raise CompareError(f"confidence must lie between 0 and 1, got {confidence}; e.g. 0.95")
    series: dict[tuple[str, str], list[tuple[str, np.ndarray, np.ndarray]]] = {}  # (group, task) -> [(run, x, y)]
    skipped: dict[str, str] = {}
    axes = set()
    for run, (x, y, axis) in zip(runs, read_series(runs, metric, x_axis, None if root is None else Path(root))):
        if not len(x):
            skipped[run.id] = f"no finite {metric!r}" + (f" against {x_axis!r}" if x_axis else "")
            continue
        name = task_of(run, task_key)
        axes.add(axis)
        series.setdefault((group_label(keys, group_values(run, keys)), name), []).append((run.id, x, y))
    if not series:
        check_axis(runs, x_axis)  # an axis no run has, said as such
        raise CompareError(missing_metric_message(runs, metric, x_axis))
    if table is not None:
        table.check(name for _, name in series)
    return _compare(series, rule, metric, axes.pop() if len(axes) == 1 else "step", table, reps, seed, confidence, skipped)


def _compare(
    series: dict[tuple[str, str], list[tuple[str, np.ndarray, np.ndarray]]], rule: ScoreRule, metric: str, axis: str,
    table: Reference | None, reps: int, seed: int | None, confidence: float, skipped: dict[str, str],
) -> Comparison:
    import pandas as pd

    groups = sorted({group for group, _ in series})
    tasks = sorted({name for _, name in series})
    rows = []
    for (group, name), members in sorted(series.items()):
        for run_id, x, y in members:
            raw = rule.score(metric, x, y)
            rows.append((group, name, run_id, raw if table is None else table.normalize(name, raw), raw))
    scores = pd.DataFrame(rows, columns=["group", "task", "run", "score", "raw_score"])
    by_group = {g: {t: np.asarray(s["score"], dtype=float) for t, s in scores[scores["group"] == g].groupby("task")} for g in groups}
    options = {"reps": reps, "seed": seed, "confidence": confidence}

    aggregates = []
    for group in groups:
        for name in stats.AGGREGATES:
            estimate = stats.bootstrap(stats.AGGREGATE_FUNCTIONS[name], [list(by_group[group].values())], **options)
            aggregates.append((group, name, float(estimate.value), float(estimate.lower), float(estimate.upper)))

    improvement = []
    for x, y in itertools.combinations(groups, 2):
        shared = [t for t in tasks if t in by_group[x] and t in by_group[y]]
        if not shared:
            continue
        e = stats.bootstrap(stats.improvement, [[by_group[x][t] for t in shared], [by_group[y][t] for t in shared]], **options)
        improvement += [(x, y, float(e.value), float(e.lower), float(e.upper)), (y, x, 1 - float(e.value), 1 - float(e.upper), 1 - float(e.lower))]

    taus = np.linspace(scores["score"].min(), scores["score"].max(), PROFILE_POINTS)
    profiles = []
    for group in groups:
        e = stats.bootstrap(lambda s: stats.profile(s, taus), [list(by_group[group].values())], **options)
        profiles += [(group, float(t), float(v), float(lo), float(hi)) for t, v, lo, hi in zip(taus, e.value, e.lower, e.upper)]

    curves = _curves(series, groups, table, options)
    return Comparison(
        metric, rule.describe(metric, axis), None if table is None else table.describe(), axis, tasks, groups, reps, seed, confidence, scores,
        pd.DataFrame(aggregates, columns=["group", "aggregate", "value", "lower", "upper"]),
        pd.DataFrame(improvement, columns=["x", "y", "value", "lower", "upper"]),
        pd.DataFrame(profiles, columns=["group", "tau", "value", "lower", "upper"]),
        curves, skipped,
    )  # fmt: skip


def _curves(
    series: dict[tuple[str, str], list[tuple[str, np.ndarray, np.ndarray]]], groups: list[str], table: Reference | None, options: dict[str, Any]
) -> pd.DataFrame:
    """Per group, the IQM over runs (and its band) of the (normalized) values at CURVE_POINTS
    x values from the first x of any run to the last of any run; a run counts only inside its own x range."""
    import pandas as pd

    first = min(x[0] for members in series.values() for _, x, _ in members)
    last = max(x[-1] for members in series.values() for _, x, _ in members)
    grid = np.linspace(first, last, CURVE_POINTS) if last > first else np.array([first])
    rows = []
    for group in groups:
        per_task = []
        for (owner, name), members in sorted(series.items()):
            if owner != group:
                continue
            values = np.full((len(members), len(grid)), np.nan)
            for row, (_, x, y) in enumerate(members):
                inside = (grid >= x[0]) & (grid <= x[-1])
                values[row, inside] = np.interp(grid[inside], x, y if table is None else table.normalize(name, y))
            per_task.append(values)
        estimate = stats.curve_bootstrap(per_task, **options)
        reach = np.isfinite(np.concatenate(per_task)).sum(axis=0)
        rows += [(group, float(x), float(v), float(lo), float(hi), int(n)) for x, v, lo, hi, n in zip(grid, estimate.value, estimate.lower, estimate.upper, reach) if n]
    return pd.DataFrame(rows, columns=["group", "x", "value", "lower", "upper", "runs"])


def dumps(comparison: Comparison) -> str:
    """`to_json()` as text (NaN, which JSON has not, as null)."""
    return json.dumps(_finite(comparison.to_json()), indent=2)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not np.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
