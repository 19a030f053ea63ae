"""The comparison page's interactive part: runs' curves to explore, and the statistics' figures.

What a user compares seeds with in W&B, offline in one file: per value, each
group's mean over its runs with its 95% band (computed in the page as
rltrack.runs.plot.group_band computes it), hover showing each group's value and
band at x, zoom (wheel) and pan (drag), a legend whose entries hide their group,
TensorBoard's smoothing slider (an exponential moving average, debiased at its
start), the x axis among those the runs have (env_steps, train_iter, time, ...),
and each run as a thin line on demand. Below, the figures of `rltrack compare`
(rltrack.runs.analysis): interval plots of the aggregates, the probability of
improvement, performance profiles and sample-efficiency curves with bands.

The charts are hand-written SVG (explore.js, inlined: no library, no network).
The runs' values travel as one JSON block in which `<`, `>` and `&` are written
as JSON escapes, so nothing from a run can close the block, and the script
sets every text with `textContent`, never as HTML.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any

from rltrack.runs.grouping import AXIS_UNITS, group_label, group_values, primary_axis, run_axes
from rltrack.runs.plot import t_quantile

if TYPE_CHECKING:
    from rltrack.runs.analysis import Comparison
    from rltrack.runs.run import Run

#: Most values of one run drawn in one panel (the statistics use every value).
MAX_RUN_POINTS = 1000
#: Degrees of freedom the page's Student-t table covers (beyond: the last entry, t(0.975, 200) = 1.97).
T_TABLE = 200

STYLE = """
.controls { display: flex; flex-wrap: wrap; gap: 1.2em; align-items: center; margin: .5em 0 1em; }
.chart { position: relative; margin: .3em 0 1.2em; }
.chart.small { display: inline-block; margin-right: 1em; }
.chart svg { background: #fff; user-select: none; }
.chart .grid { stroke: #e6e6e6; }
.chart .frame { fill: none; stroke: #999; }
.chart .tick { font-size: 11px; fill: #444; }
.chart .label { font-size: 12px; fill: #222; }
.chart .cursor { stroke: #888; stroke-dasharray: 3 3; }
.tip { position: absolute; top: 8px; background: rgba(255,255,255,.95); border: 1px solid #bbb; padding: .3em .5em; font-size: 12px; pointer-events: none; }
.legend { display: flex; flex-wrap: wrap; gap: .3em .8em; font-size: 12px; }
.legend .item { border: 1px solid #ccc; background: #fafafa; border-radius: 3px; cursor: pointer; font: inherit; }
.legend .item.off { opacity: .35; text-decoration: line-through; }
.swatch { display: inline-block; width: .9em; height: .9em; margin-right: .35em; vertical-align: -.1em; }
"""


def run_points(run: Run, metric: str) -> dict[str, Any]:
    """A run's values of `metric` with their x on every axis it has (None where a value lacks
    one): at most MAX_RUN_POINTS of them, evenly spread over the run (its last one kept),
    numbers to 6 significant digits, so that a page of many runs and values stays a file a
    browser opens at once (TensorBoard keeps 1,000 values of a scalar the same way)."""
    chosen = [s for s in run.samples if s.kind == "scalars" and s.tag == metric and math.isfinite(s.value)]
    steps = [sample.steps or {"step": index} for index, sample in enumerate(chosen)]
    if len(chosen) > MAX_RUN_POINTS:
        kept = sorted({round(i * (len(chosen) - 1) / (MAX_RUN_POINTS - 1)) for i in range(MAX_RUN_POINTS)})
        chosen, steps = [chosen[i] for i in kept], [steps[i] for i in kept]
    axes = list(dict.fromkeys(axis for step in steps for axis in step))
    x: dict[str, list[Any]] = {axis: [step.get(axis) for step in steps] for axis in axes}
    start = min((s.time for s in run.samples if s.time is not None), default=None)
    if start is not None and any(s.time is not None for s in chosen):
        x["time"] = [None if s.time is None else _short(s.time - start) for s in chosen]
    return {"id": run.id, "y": [_short(s.value) for s in chosen], "x": x}


def _short(value: float) -> float:
    return float(f"{value:.6g}")


def panel(runs: Sequence[Run], metric: str, title: str, y_label: str, keys: list[str]) -> dict[str, Any]:
    """One value's panel: its groups (as `plot` makes them), each with its runs' points."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for run in runs:
        points = run_points(run, metric)
        if points["y"]:
            groups.setdefault(group_values(run, keys), []).append(points)
    axes = list(dict.fromkeys(axis for members in groups.values() for points in members for axis in points["x"]))
    primary = primary_axis(runs, metric)
    return {
        "metric": metric, "title": title, "ylabel": y_label, "axes": axes, "primary": primary if primary in axes else (axes or ["step"])[0],
        "groups": [{"label": group_label(keys, values), "runs": members} for values, members in sorted(groups.items())],
    }  # fmt: skip


def statistics(comparison: Comparison) -> dict[str, Any]:
    """The figures' data of a comparison: aggregates and improvements as rows, profiles and curves per group."""

    def by_group(table: Any, x: str) -> dict[str, dict[str, list[float]]]:
        return {g: {"x": list(t[x]), "y": list(t["value"]), "lo": list(t["lower"]), "hi": list(t["upper"])} for g, t in table.groupby("group")}

    return {
        "metric": comparison.metric, "axis": comparison.axis, "normalization": comparison.normalization, "groups": comparison.groups,
        "aggregates": comparison.aggregates.to_dict("records"), "improvement": comparison.improvement.to_dict("records"),
        "profiles": by_group(comparison.profiles, "tau"), "curves": by_group(comparison.curves, "x"),
    }  # fmt: skip


def embedded_json(value: Any) -> str:
    """JSON safe inside a <script> block: NaN and infinities as null, `<`, `>`, `&` as JSON escapes."""
    text = json.dumps(_finite(value), allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def explorer(runs: Sequence[Run], panels: list[dict[str, Any]], comparison: Comparison | None) -> tuple[str, str]:
    """(the curves section's body, the statistics figures' container and the page's data and script)."""
    axes = list(dict.fromkeys(axis for p in panels for axis in p["axes"])) or run_axes(runs)
    data = {
        "panels": panels, "axes": axes, "primary": panels[0]["primary"] if panels else (axes or ["step"])[0],
        "units": {**AXIS_UNITS}, "t95": [None, *(t_quantile(dof) for dof in range(1, T_TABLE + 1))],
        "stats": None if comparison is None else statistics(comparison),
    }  # fmt: skip
    controls = (
        '<div class="controls">'
        '<label>smoothing <input type="range" id="rltrack-smooth" min="0" max="0.99" step="0.01" value="0"> '
        '<output id="rltrack-smooth-value">0.00</output></label>'
        '<label>x axis <select id="rltrack-axis"></select></label>'
        '<label><input type="checkbox" id="rltrack-seeds"> each run as a thin line</label>'
        '<span class="note">hover: each group\'s value and band at x · wheel: zoom · drag: pan · double-click: reset · '
        "legend: click a group to hide it</span></div>"
        '<div id="rltrack-panels"></div>'
    )
    script = resources.files("rltrack.runs").joinpath("explore.js").read_text(encoding="utf-8")
    tail = f'<script type="application/json" id="rltrack-data">{embedded_json(data)}</script><script>{script}</script>'
    return controls, tail
