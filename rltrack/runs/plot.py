"""Plots of runs: one run's metrics and stage timings, and a metric across runs.

A single run (`plot_metrics`, `plot_timelog`, behind `Run.plot_metrics()` and
`Run.plot_timelog()` and the HTML report) is drawn as it was logged. Across
runs (`plot_runs`, behind `rltrack plot`), runs are put into groups by
hyperparameters, and each group is drawn as the mean over its runs (seeds) with
a shaded 95% confidence band, computed as `group_band` says:

1. each run's series is sorted by x (a repeated x keeps its last value) and,
   with `smooth=N`, replaced by its trailing moving average over N points;
2. the group's x grid is the union of its runs' x values (or, when that has
   more than `max_points` values, `max_points` evenly spaced x over the range);
3. each run is linearly interpolated onto the grid inside its own x range and
   left out outside it (no extrapolation): at each x, n = the runs covering it;
4. mean = the mean of those n values; the band is the Student-t interval of the
   mean, mean ± t(0.975, n-1) · s / √n with s the sample standard deviation
   (ddof=1). Where n = 1 there is no band (NaN).

Runs from different frameworks share the axes because their metrics carry the
canonical names (`collector/reward_mean`, ...). The figures are plain
`matplotlib.figure.Figure` objects, never pyplot ones: they need no GUI,
render with Agg when saved, and do not change the backend of the caller's
session (a notebook still shows them). numpy and matplotlib come with the
`runs` extra; matplotlib is imported only when a figure is drawn.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np

from rltrack.runs.grouping import (
    AXIS_UNITS,
    PlotError,
    PlottedRun,
    check_axis,
    check_group_keys,
    clean_series,
    default_group_keys,
    group_label,
    group_values,
    missing_metric_message,
    primary_axis,
    run_series,
    shortened,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: Confidence of the band around each group's mean.
CONFIDENCE = 0.95
#: Most x values a group's grid gets (more are replaced by an even grid over the same range).
MAX_POINTS = 1000
#: Default size of a cross-run plot, in pixels.
PLOT_SIZE = (960, 600)
DPI = 100
#: Subplots per row in a single run's metrics figure.
COLUMNS = 3


def parse_size(text: str) -> tuple[int, int]:
    """`"960x600"` -> (960, 600); PlotError for anything else."""
    match = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", text)
    if not match or not (16 <= int(match[1]) <= 10000 and 16 <= int(match[2]) <= 10000):
        raise PlotError(f"size {text!r} is not WIDTHxHEIGHT in pixels between 16 and 10000; use e.g. --size 960x600")
    return int(match[1]), int(match[2])


@cache
def t_quantile(dof: int, confidence: float = CONFIDENCE) -> float:
    """The two-sided Student-t quantile q with P(|T| <= q) = `confidence` for
    `dof` degrees of freedom (q = t(0.975, dof) for 95%).

    Bisection on θ = atan(q/√dof) of the exact finite series for P(|T| <= q)
    (Abramowitz & Stegun 26.7.3 and 26.7.4), so no scipy is needed."""
    if dof < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {dof}")
    low, high = 0.0, math.pi / 2
    for _ in range(100):
        theta = (low + high) / 2
        if _t_coverage(theta, dof) < confidence:
            low = theta
        else:
            high = theta
    return math.sqrt(dof) * math.tan((low + high) / 2)


def _t_coverage(theta: float, dof: int) -> float:
    """P(|T| <= √dof · tan θ) for Student's t with `dof` degrees of freedom."""
    cos2 = math.cos(theta) ** 2
    term, total = 1.0, 1.0
    if dof % 2 == 0:  # sin θ (1 + 1/2 cos²θ + 1·3/(2·4) cos⁴θ + ... up to cos^(dof-2) θ)
        for k in range(2, dof, 2):
            term *= (k - 1) / k * cos2
            total += term
        return math.sin(theta) * total
    if dof == 1:
        return 2 * theta / math.pi
    # 2/π (θ + sin θ cos θ (1 + 2/3 cos²θ + 2·4/(3·5) cos⁴θ + ... up to cos^(dof-3) θ))
    for k in range(3, dof - 1, 2):
        term *= (k - 1) / k * cos2
        total += term
    return 2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * total)


@dataclass
class GroupCurve:
    """One group's mean and confidence band on its x grid; `count[i]` runs cover `x[i]`;
    `series`: each of its runs' cleaned (x, y), in the order of `runs`."""

    label: str
    runs: list[str]
    series: list[tuple[np.ndarray, np.ndarray]]
    x: np.ndarray
    mean: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    count: np.ndarray


def group_band(
    series: Sequence[tuple[np.ndarray, np.ndarray]], *, confidence: float = CONFIDENCE, max_points: int = MAX_POINTS
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x, mean, lower, upper, count) of cleaned series, as the module docstring says."""
    series = [(x, y) for x, y in series if len(x)]
    if not series:
        empty = np.zeros(0)
        return empty, empty, empty, empty, np.zeros(0, dtype=int)
    grid = np.unique(np.concatenate([x for x, _ in series]))
    if len(grid) > max_points:
        grid = np.linspace(grid[0], grid[-1], max_points)
    values = np.full((len(series), len(grid)), np.nan)
    for row, (x, y) in enumerate(series):
        inside = (grid >= x[0]) & (grid <= x[-1])
        values[row, inside] = np.interp(grid[inside], x, y)
    count = np.isfinite(values).sum(axis=0)
    covered = count > 0  # an even grid can fall in a gap between runs that do not overlap
    grid, values, count = grid[covered], values[:, covered], count[covered]
    mean = np.nansum(values, axis=0) / count
    deviation = np.sqrt(np.nansum((values - mean) ** 2, axis=0) / np.maximum(count - 1, 1))
    quantiles = np.array([t_quantile(int(n) - 1, confidence) if n > 1 else np.nan for n in count])
    half = quantiles * deviation / np.sqrt(count)
    return grid, mean, mean - half, mean + half, count


@dataclass
class CrossRunPlot:
    """What `plot_runs` drew: the figure, one curve per group, and the runs left out with why."""

    figure: Figure
    curves: list[GroupCurve]
    skipped: dict[str, str] = field(default_factory=dict)

    def save(self, path: str) -> None:
        """The figure as a PNG of exactly the size asked for."""
        self.figure.savefig(path, format="png", dpi=DPI)


def plot_runs(
    runs: Sequence[PlottedRun],
    metric: str,
    *,
    x_axis: str | None = None,
    group_by: Sequence[str] | None = None,
    smooth: int = 1,
    size: tuple[int, int] = PLOT_SIZE,
    max_points: int = MAX_POINTS,
) -> CrossRunPlot:
    """`metric` across `runs`: one line per group of runs with equal `group_by` values
    (default: `default_group_keys`), the mean over the group's runs and its 95% band.

    Runs without the metric (or without the x axis) are left out and listed in
    `skipped`; if no run has it, `PlotError` names the metric and what the runs have."""
    if smooth < 1:
        raise PlotError(f"smoothing window must be a number of points >= 1, got {smooth}; use --smooth 1 for none")
    keys = list(group_by) if group_by else default_group_keys(runs)
    check_group_keys(runs, keys)
    check_axis(runs, x_axis)
    groups: dict[tuple[str, ...], list[tuple[PlottedRun, tuple[np.ndarray, np.ndarray]]]] = {}
    skipped: dict[str, str] = {}
    for run in runs:
        x, y = clean_series(*run_series(run, metric, x_axis), smooth=smooth)
        if not len(x):
            skipped[run.id] = f"no finite {metric!r}" + (f" against {x_axis!r}" if x_axis else "")
            continue
        groups.setdefault(group_values(run, keys), []).append((run, (x, y)))
    if not groups:
        raise PlotError(missing_metric_message(runs, metric, x_axis))
    curves = []
    for values, members in sorted(groups.items()):
        series = [s for _, s in members]
        x, mean, lower, upper, count = group_band(series, max_points=max_points)
        curves.append(GroupCurve(group_label(keys, values), [run.id for run, _ in members], series, x, mean, lower, upper, count))
    x_label = x_axis or primary_axis(runs, metric)
    return CrossRunPlot(draw_curves(curves, metric, f"{x_label} ({AXIS_UNITS.get(x_label, 'steps')})", size), curves, skipped)


def new_figure(width_px: int, height_px: int) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width_px / DPI, height_px / DPI), dpi=DPI, layout="constrained")


#: Pixels per character of a legend label at the legend's font size (a generous average).
_LEGEND_CHAR_PX = 7.0
#: Pixels of one legend row at the legend's font size, spacing included (a generous measure).
_LEGEND_ROW_PX = 20.0
#: The share of the figure's height a legend takes before the figure grows for it.
_LEGEND_SHARE = 0.25


def draw_curves(curves: Sequence[GroupCurve], metric: str, x_label: str, size: tuple[int, int]) -> Figure:
    """The groups' means and bands on one axes. The legend goes below the axes,
    inside the figure (constrained layout makes room for it), in as many
    columns as fit, each label cut to its column's width, and the figure
    grows downwards when its rows need more than a quarter of `size`'s
    height: however long and many the group labels, the legend stays in the
    figure, readable, and off the curves."""
    figure = new_figure(*size)
    axes = figure.add_subplot()
    draw_groups(axes, curves)
    clip_to_runs(axes, curves)
    axes.set_xlabel(x_label)
    axes.set_ylabel(metric)
    axes.set_title(f"{metric}: mean over runs, {CONFIDENCE:.0%} confidence band")
    add_legend(figure, axes, size[0])
    return figure


def draw_groups(axes: Any, curves: Sequence[GroupCurve]) -> None:
    """Each group's mean as a line labelled with its group and n, its band shaded."""
    for curve in curves:
        (line,) = axes.plot(curve.x, curve.mean, label=f"{curve.label} (n={len(curve.runs)})")
        axes.fill_between(curve.x, curve.lower, curve.upper, color=line.get_color(), alpha=0.25, linewidth=0)
    axes.grid(alpha=0.3)


def clip_to_runs(axes: Any, curves: Sequence[GroupCurve]) -> None:
    """The y range set to the runs' values: with few seeds the band can reach far
    beyond every run (t(0.975, 1) = 12.7) and would squash the curves; it is cut at the edge."""
    values = [y for curve in curves for _, y in curve.series]
    low, high = float(min(np.min(v) for v in values)), float(max(np.max(v) for v in values))
    pad = (high - low) * 0.05 or abs(high) * 0.05 or 1.0
    axes.set_ylim(low - pad, high + pad)


def add_legend(figure: Figure, axes: Any, width_px: int) -> None:
    """The axes' legend below it, inside the figure (see `draw_curves`)."""
    handles, labels = axes.get_legend_handles_labels()
    if not handles:
        return
    longest = max(len(label) for label in labels)
    columns = max(1, min(len(labels), 4, int(width_px * 0.9 // ((min(longest, 60) + 4) * _LEGEND_CHAR_PX))))
    limit = max(12, int(width_px * 0.9 / columns / _LEGEND_CHAR_PX) - 4)
    rows_px = math.ceil(len(labels) / columns) * _LEGEND_ROW_PX
    width, height = figure.get_size_inches()
    if rows_px > height * figure.dpi * _LEGEND_SHARE:
        figure.set_size_inches(width, height + (rows_px - height * figure.dpi * _LEGEND_SHARE) / figure.dpi)
    figure.legend(handles, [shortened(label, limit) for label in labels], loc="outside lower center", ncols=columns, fontsize="small")


def plot_metrics(run: PlottedRun, keys: Sequence[str] | None = None, labels: Sequence[tuple[str, str]] | None = None) -> Figure:
    """One subplot per metric key (default: all of the run's metrics), against the
    primary step axis; `labels`: (x, y) axis labels per key (default: "step", the key)."""
    chosen = list(keys) if keys is not None else sorted(run.metrics)
    labels = list(labels) if labels is not None else [("step", key) for key in chosen]
    rows = max(1, math.ceil(len(chosen) / COLUMNS))
    figure = new_figure(320 * min(max(len(chosen), 1), COLUMNS), 240 * rows)
    for index, key in enumerate(chosen, start=1):
        axes = figure.add_subplot(rows, min(len(chosen), COLUMNS), index)
        points = run.metrics.get(key, [])
        axes.plot([step for step, _ in points], [value for _, value in points], linewidth=1)
        axes.set_title(key, fontsize="small")
        axes.set_xlabel(labels[index - 1][0], fontsize="x-small")
        axes.set_ylabel(labels[index - 1][1], fontsize="x-small")
        axes.tick_params(labelsize="x-small")
        axes.grid(alpha=0.3)
    if not chosen:
        figure.text(0.5, 0.5, "no metrics", ha="center", va="center")
    return figure


@dataclass(frozen=True)
class StageTimes:
    """Summary of one stage's durations in seconds."""

    stage: str
    count: int
    total: float
    mean: float
    std: float
    minimum: float
    maximum: float


def stage_times(timelog: Mapping[str, Sequence[float]]) -> list[StageTimes]:
    """Per stage: count, total, mean, sample std, min and max of its finite durations, by total time."""
    summaries = []
    for stage, durations in timelog.items():
        values = np.asarray([d for d in durations if math.isfinite(d)], dtype=float)
        if not len(values):
            continue
        std = float(values.std(ddof=1)) if len(values) > 1 else 0.0
        summaries.append(
            StageTimes(stage, len(values), float(values.sum()), float(values.mean()), std, float(values.min()), float(values.max()))
        )
    return sorted(summaries, key=lambda s: -s.total)


def plot_timelog(run: PlottedRun) -> Figure:
    """Total seconds per stage as horizontal bars, labelled with calls and mean ± std."""
    summaries = stage_times(run.timelog)
    figure = new_figure(720, 120 + 40 * max(len(summaries), 1))
    axes = figure.add_subplot()
    if not summaries:
        axes.text(0.5, 0.5, "no stage timings", ha="center", va="center", transform=axes.transAxes)
        axes.set_axis_off()
        return figure
    positions = np.arange(len(summaries))
    bars = axes.barh(positions, [s.total for s in summaries], color="tab:blue")
    axes.bar_label(bars, labels=[f"{s.count}× {s.mean:.3g} ± {s.std:.2g} s" for s in summaries], fontsize="small", padding=3)
    axes.set_yticks(positions, labels=[s.stage for s in summaries])
    axes.invert_yaxis()
    axes.set_xlabel("total seconds")
    axes.margins(x=0.3)
    return figure
