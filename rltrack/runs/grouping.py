"""Which values of which runs a cross-run figure or comparison reads, and how runs are grouped.

Shared by `rltrack plot` (rltrack.runs.plot), the comparison page
(rltrack.runs.compare, rltrack.runs.explore) and `rltrack compare`
(rltrack.runs.analysis): a run's series of a metric on an x axis (its primary
step axis, another step axis, or `time`), cleaned (finite, sorted by x, the last
value of a repeated x, optionally a trailing mean); the axes runs have; groups of
runs by hyperparameters and their labels; and the errors that name what exists
when a metric, axis or grouping key is one no run has.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

#: Hyperparameters that tell seeds apart: never a default grouping key.
SEED_NAME = re.compile(r"(^|[_./])seed$", re.IGNORECASE)
#: Run attributes that can be used as grouping keys besides hyperparameters.
RUN_ATTRIBUTES = ("source", "task", "host")
#: Step axes and what they count: the x axis's unit.
AXIS_UNITS = {
    "env_steps": "environment steps",
    "train_iter": "training iterations",
    "epoch": "epochs",
    "step": "records",
    "time": "seconds",
}

class PlottedRun(Protocol):
    """What the figures read of a run: rltrack.runs.run.Run has it. A protocol,
    so that `Run.plot_metrics()` can call this module without the two modules
    importing each other."""

    @property
    def id(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def task(self) -> str: ...
    @property
    def host(self) -> str: ...
    @property
    def hparams(self) -> dict[str, Any]: ...
    @property
    def metrics(self) -> dict[str, list[tuple[int, float]]]: ...
    @property
    def timelog(self) -> dict[str, list[float]]: ...
    @property
    def df(self) -> pd.DataFrame: ...
    @property
    def samples(self) -> list[Any]: ...  # rltrack.runs.records.Sample


class PlotError(ValueError):
    """The plot cannot be drawn as asked (no run has the metric, bad option value)."""



def trailing_mean(values: np.ndarray, window: int) -> np.ndarray:
    """The mean of each value and the `window - 1` before it (fewer at the start)."""
    if window <= 1:
        return values.astype(float)
    sums = np.cumsum(np.insert(values.astype(float), 0, 0.0))
    ends = np.arange(1, len(values) + 1)
    starts = np.maximum(ends - window, 0)
    return (sums[ends] - sums[starts]) / (ends - starts)


def clean_series(x: Iterable[float], y: Iterable[float], smooth: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Finite points sorted by x, the last value kept for a repeated x, smoothed."""
    xs, ys = np.asarray(list(x), dtype=float), np.asarray(list(y), dtype=float)
    keep = np.isfinite(xs) & np.isfinite(ys)
    xs, ys = xs[keep], ys[keep]
    order = np.argsort(xs, kind="stable")
    xs, ys = xs[order], ys[order]
    last = np.append(xs[1:] != xs[:-1], True) if len(xs) else np.zeros(0, dtype=bool)
    return xs[last], trailing_mean(ys[last], smooth)



def run_series(run: PlottedRun, metric: str, x_axis: str | None) -> tuple[list[float], list[float]]:
    """The metric's (x values, values): on the primary step axis, or against `x_axis`
    (a step axis of the run's values, or `time` for seconds since the run's first record)."""
    if x_axis is None:
        points = run.metrics.get(metric, [])
        return [step for step, _ in points], [value for _, value in points]
    chosen = [s for s in run.samples if s.kind == "scalars" and s.tag == metric]
    if x_axis == "time":
        start = min((s.time for s in run.samples if s.time is not None), default=0.0)
        pairs = [(s.time - start, s.value) for s in chosen if s.time is not None]
    else:
        pairs = [(s.steps[x_axis], s.value) for s in chosen if x_axis in s.steps]
    return [x for x, _ in pairs], [y for _, y in pairs]


def run_axes(runs: Sequence[PlottedRun]) -> list[str]:
    """The x axes the runs' values are at (step axes, then `time` when values carry their time)."""
    axes = dict.fromkeys(axis for run in runs for sample in run.samples for axis in sample.steps)
    timed = any(sample.time is not None for run in runs for sample in run.samples)
    return [*axes, *(["time"] if timed else [])]


def check_axis(runs: Sequence[PlottedRun], x_axis: str | None) -> None:
    """PlotError naming the axes the runs have when no run has `x_axis`."""
    if x_axis is not None and x_axis not in (axes := run_axes(runs)):
        raise PlotError(f"no run has the x axis {x_axis!r}; the runs have: {', '.join(axes) or 'none'}; pass one to --x, or leave --x out for each run's primary step axis")


def primary_axis(runs: Sequence[PlottedRun], metric: str) -> str:
    """The name of the step axis the metric's points are at (the first axis of its
    samples), when the runs agree; else "step"."""
    names = set()
    for run in runs:
        sample = next((s for s in run.samples if s.tag == metric and s.kind == "scalars"), None)
        if sample is not None:
            names.add(next(iter(sample.steps), "step"))
    return names.pop() if len(names) == 1 else "step"


def group_value(run: PlottedRun, key: str) -> Any:
    """A run's value for a grouping key: a hyperparameter, or `source`/`task`/`host`."""
    if key in run.hparams:
        return run.hparams[key]
    if key in RUN_ATTRIBUTES:
        return getattr(run, key)
    return None


def default_group_keys(runs: Sequence[PlottedRun]) -> list[str]:
    """The hyperparameters every run has whose values differ between the runs,
    seeds left out, and `source` when the runs come from several frameworks (a
    hyperparameter only some runs have, as across frameworks, says nothing
    about the others)."""
    shared = set.intersection(*(set(run.hparams) for run in runs)) if runs else set()
    keys = []
    for name in sorted(shared | {"source"}):
        if SEED_NAME.search(name):
            continue
        if len({repr(group_value(run, name)) for run in runs}) > 1:
            keys.append(name)
    return keys


def check_group_keys(runs: Sequence[PlottedRun], keys: Sequence[str]) -> None:
    """PlotError naming the keys the runs have when a grouping key is one no run has (a typo
    would otherwise make one group `key=?` of every run)."""
    unknown = [key for key in keys if all(group_value(run, key) is None for run in runs)]
    if unknown:
        have = sorted({name for run in runs for name in run.hparams} | set(RUN_ATTRIBUTES))
        raise PlotError(f"no run has the grouping key(s) {', '.join(map(repr, unknown))}; the runs have: {', '.join(have)}")


def group_values(run: PlottedRun, keys: Sequence[str]) -> tuple[str, ...]:
    """The run's grouping values as text, `?` where it has none; a float to 12
    significant digits (0.009, not 0.009000000000000001: the error of a sum
    such as `0.001 * 9` tells no group apart and makes a legend unreadable)."""
    return tuple("?" if (value := group_value(run, key)) is None else _text(value) for key in keys)


def _text(value: Any) -> str:
    return repr(float(format(value, ".12g"))) if isinstance(value, float) else str(value)


def short_keys(keys: Sequence[str]) -> list[str]:
    """Each key by its last part (`policy/learn/learning_rate` -> `learning_rate`)
    where that part names one key only, else in full: what a legend shows."""
    last = Counter(key.rsplit("/", 1)[-1] for key in keys)
    return [key.rsplit("/", 1)[-1] if last[key.rsplit("/", 1)[-1]] == 1 else key for key in keys]


#: Characters of one value in a group label (longer ones lose their middle).
MAX_LABEL_VALUE = 40


def group_label(keys: Sequence[str], values: Sequence[str]) -> str:
    pairs = zip(short_keys(keys), values)
    return ", ".join(f"{key}={shortened(value, MAX_LABEL_VALUE)}" for key, value in pairs) or "all runs"


def shortened(text: str, limit: int) -> str:
    """`text`, its middle replaced by "…" when longer than `limit` characters:
    the start and the end (where values that differ often differ) stay."""
    if len(text) <= limit:
        return text
    head = max((limit - 1) // 2, 1)
    return text[:head] + "…" + text[len(text) - max(limit - 1 - head, 1):]



def missing_metric_message(runs: Sequence[PlottedRun], metric: str, x_axis: str | None) -> str:
    available = Counter(key for run in runs for key in run.metrics)
    near = [key for key, _ in available.most_common() if key.rsplit("/", 1)[-1] in metric or metric in key][:8]
    shown = near or [key for key, _ in available.most_common(12)]
    where = f" against x axis {x_axis!r}" if x_axis else ""
    return (
        f"none of the {len(runs)} runs has metric {metric!r}{where}; "
        f"metrics they have include: {', '.join(shown) or 'none'}; pass one of them to --metric"
        + ("" if not x_axis else " or leave out --x to use each run's primary step axis")
    )
