"""One number per run for a metric (its score), and scores normalized by a reference table.

A score rule says which number stands for a run, and every output names it:

    last       the mean of the run's last 10% of points (at least one), or, for an
               evaluation metric (its namespace holds "eval"), the last evaluation
    last:N     the mean of the run's last N values
    auc        the area under the curve (trapezoidal, on the run's x axis) divided by
               the x range it spans: the curve's mean height, comparable across run lengths
    max        the run's largest value

A reference table gives each task a `min` and a `max` (random and expert
returns, say); a normalized score is (score - min) / (max - min), so 0 is the
reference minimum and 1 its maximum, and scores of several tasks can be
aggregated. It is read from a TOML, JSON or CSV file:

    # TOML: a table per task (also accepted under a [reference] section of a config file)
    [CartPole-v1]
    min = 9.0
    max = 500.0

    {"CartPole-v1": {"min": 9.0, "max": 500.0}}      # JSON; [9.0, 500.0] works too

    task,min,max                                     # CSV with a header row
    CartPole-v1,9.0,500.0
"""

from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Iterable
from typing import Any

import numpy as np

#: The share of a run's points `last` averages.
LAST_SHARE = 0.1
RULES = "last, last:N (N values), auc or max"


class ScoreError(ValueError):
    """A score rule or reference table that cannot be used; the message says what to write."""


@dataclass(frozen=True)
class ScoreRule:
    """`kind` is last, auc or max; `count` the N of last:N (None: the last 10% or the last evaluation)."""

    kind: str
    count: int | None = None

    def __str__(self) -> str:
        return f"last:{self.count}" if self.count else self.kind

    def describe(self, metric: str, axis: str) -> str:
        """What a score is, in words, for the outputs."""
        if self.kind == "max":
            return f"max: each run's largest {metric}"
        if self.kind == "auc":
            return f"auc: the area under each run's {metric} curve divided by the {axis} range it spans (its mean height)"
        if self.count:
            return f"last:{self.count}: the mean of each run's last {self.count} values of {metric}"
        if is_evaluation(metric):
            return f"last: each run's last evaluation ({metric})"
        return f"last: the mean of each run's last {LAST_SHARE:.0%} of points of {metric}"

    def score(self, metric: str, x: np.ndarray, y: np.ndarray) -> float:
        """The score of one run's cleaned series (finite, sorted by x, at least one point)."""
        if self.kind == "max":
            return float(np.max(y))
        if self.kind == "auc":
            span = x[-1] - x[0]
            return float(y[0]) if span <= 0 else float(np.sum((y[1:] + y[:-1]) / 2 * np.diff(x)) / span)
        if self.count:
            count = self.count
        elif is_evaluation(metric):
            count = 1
        else:
            count = max(1, math.ceil(len(y) * LAST_SHARE))
        return float(np.mean(y[-count:]))


def is_evaluation(metric: str) -> bool:
    """Whether a metric holds evaluations (evaluator/reward_mean, eval/mean_reward), whose last value is the result."""
    return "eval" in metric.rsplit("/", 1)[0].lower() if "/" in metric else False


def parse_rule(text: str) -> ScoreRule:
    """`last`, `last:10`, `auc`, `max` -> a ScoreRule; ScoreError for anything else."""
    match = re.fullmatch(r"\s*(last|auc|max)(?::\s*(\d+))?\s*", text or "")
    if not match or (match[2] is not None and (match[1] != "last" or int(match[2]) < 1)):
        raise ScoreError(f"score {text!r} is not one of {RULES}; e.g. --score last:10")
    return ScoreRule(match[1], int(match[2]) if match[2] else None)


@dataclass(frozen=True)
class Reference:
    """Per task, the (min, max) a normalized score maps to 0 and 1; `source` names where it came from."""

    source: str
    bounds: dict[str, tuple[float, float]]

    def describe(self) -> str:
        return f"(score - min) / (max - min), min and max per task from {self.source}"

    def check(self, tasks: Iterable[str]) -> None:
        """ScoreError naming every task the table lacks, and those it has."""
        missing = sorted(set(tasks) - set(self.bounds))
        if missing:
            raise ScoreError(
                f"task(s) {', '.join(map(repr, missing))} not in the reference table {self.source} (it has: {', '.join(sorted(self.bounds))}); "
                "add a line for each, or compare without --reference"
            )

    def normalize(self, task: str, score: Any) -> Any:
        """(score - min) / (max - min) of the task, for a number or a numpy array."""
        self.check([task])
        low, high = self.bounds[task]
        return (score - low) / (high - low)


def load_reference(path: Path) -> Reference:
    """The reference table in `path` (.toml, .json or .csv); ScoreError naming the file and the bad entry."""
    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            with path.open(newline="", encoding="utf-8") as f:
                rows = list(csv.DictReader(f))
            if rows and not {"task", "min", "max"} <= set(rows[0]):
                raise ScoreError(f"reference table {path}: the CSV needs a header row `task,min,max`, got {','.join(rows[0])}")
            table: dict[str, Any] = {row["task"]: {"min": row["min"], "max": row["max"]} for row in rows}
        elif suffix == ".json":
            table = json.loads(path.read_text(encoding="utf-8"))
        elif suffix == ".toml":
            import tomllib

            table = tomllib.loads(path.read_text(encoding="utf-8"))
            table = table.get("reference", table) if isinstance(table.get("reference"), dict) else table
        else:
            raise ScoreError(f"reference table {path}: use a .toml, .json or .csv file (task -> min, max)")
    except (OSError, ValueError) as exc:
        if isinstance(exc, ScoreError):
            raise
        raise ScoreError(f"reference table {path} cannot be read: {exc}") from None
    if not isinstance(table, dict) or not table:
        raise ScoreError(f"reference table {path} holds no task; write one `task -> min, max` entry per task")
    return Reference(str(path), {str(task): _bounds(path, str(task), entry) for task, entry in table.items()})


def _bounds(path: Path, task: str, entry: Any) -> tuple[float, float]:
    pair = (entry.get("min"), entry.get("max")) if isinstance(entry, dict) else tuple(entry) if isinstance(entry, list) else ()
    try:
        low, high = (float(v) for v in pair)
    except (TypeError, ValueError):
        raise ScoreError(f"reference table {path}: task {task!r} needs numbers `min` and `max`, got {entry!r}") from None
    if not (math.isfinite(low) and math.isfinite(high)) or high == low:
        raise ScoreError(f"reference table {path}: task {task!r} has min {low} and max {high}; they must be finite and differ")
    return low, high
