"""Several runs on one self-contained HTML page (`rltrack report` over a task, a query or a list).

What an RL user compares: the groups of runs (runs with equal hyperparameters,
seeds apart: `rltrack.runs.plot.default_group_keys`), each drawn as the mean
over its runs with a 95% band and each of its runs as a thin line, one panel
per *value* (a native key and its canonical twin holding the same numbers are
one panel, titled by the canonical name); the hyperparameters that tell the
groups apart; a summary table of the main metrics per group (final value,
mean ± sample std over the group's runs, and n); a table of the runs (group,
seed, status, final values), as W&B's runs table and trackio's runs list
show. Every chart names its axes and their units. Like the single-run page
(rltrack.runs.report, whose helpers it uses), the page is one file: inline
CSS, base64 PNGs, no script, everything from the runs escaped.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from rltrack.runs.plot import (
    CONFIDENCE,
    SEED_NAME,
    GroupCurve,
    clip_to_runs,
    default_group_keys,
    group_label,
    group_values,
    plot_runs,
)
from rltrack.runs.report import page, png_data_uri, section, table, value_panels, value_unit
from rltrack.runs.run import MAIN_METRICS, Run

#: Most panels on a page (the rest are named under the figures).
MAX_PANELS = 12
#: Size of one panel, in pixels.
PANEL_SIZE = (760, 470)


def figures(runs: Sequence[Run], chosen: list[tuple[str, list[str]]], keys: list[str]) -> str:
    parts = []
    for metric, aliases in chosen[:MAX_PANELS]:
        result = plot_runs(runs, metric, group_by=keys or None, size=PANEL_SIZE)
        axes = result.figure.axes[0]
        draw_members(axes, result.curves)
        axes.set_ylabel(value_unit(metric))
        title = metric + (f" (= {', '.join(aliases)})" if aliases else "")
        parts.append(f'<h3 class="panel">{html.escape(title)}</h3><img alt="{html.escape(metric)}" src="{png_data_uri(result.figure)}">')
        if result.skipped:
            parts.append(f'<p class="note">{len(result.skipped)} run(s) without this metric.</p>')
    rest = [metric for metric, _ in chosen[MAX_PANELS:]]
    if rest:
        parts.append(f'<p class="note">Not drawn ({len(rest)}): {html.escape(", ".join(rest))}.</p>')
    return "".join(parts) or '<p class="note">no metrics</p>'


def draw_members(axes: Any, curves: list[GroupCurve]) -> None:
    """Each run of a group of several as a thin line in its group's colour (what a
    user looks at beside the mean: do the seeds agree?), and the y range set to
    the runs' values: with few seeds the band can reach far beyond every run
    (t(0.975, 1) = 12.7), and would squash the curves; it is cut at the edge."""
    means = axes.get_lines()[: len(curves)]
    for curve, mean in zip(curves, means):
        if len(curve.runs) > 1:
            for x, y in curve.series:
                axes.plot(x, y, color=mean.get_color(), linewidth=0.7, alpha=0.5)
    clip_to_runs(axes, curves)


def summary_rows(groups: dict[tuple[str, ...], list[Run]], keys: list[str], metrics: list[str]) -> list[list[str]]:
    """Per group: its label, n, and per metric the final value's mean ± std over its runs."""
    rows = []
    for values, members in groups.items():
        row = [group_label(keys, values), str(len(members))]
        for metric in metrics:
            finals = [run.summary[metric]["final"] for run in members if metric in run.summary]
            row.append(_mean_std(finals))
        rows.append(row)
    return rows


def run_table(groups: dict[tuple[str, ...], list[Run]], keys: list[str], metrics: list[str]) -> str:
    """One row per run, by group: its id, group, seed, status and each main metric's final value."""
    members = [run for runs in groups.values() for run in runs]
    seeds = sorted({name for run in members for name in run.hparams if SEED_NAME.search(name)})
    rows = []
    for values, runs in groups.items():
        for run in runs:
            finals = [run.summary[m]["final"] if m in run.summary else "-" for m in metrics]
            rows.append([run.id, group_label(keys, values), *(run.hparams.get(name, "-") for name in seeds), run.status, *finals])
    return table(["run", "group", *seeds, "status", *(f"{m}: final" for m in metrics)], rows, numeric_from=2 + len(seeds) + 1)


def _mean_std(values: list[float]) -> str:
    if not values:
        return "-"
    mean = math.fsum(values) / len(values)
    if len(values) == 1:
        return f"{mean:.4g} (n=1)"
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))
    return f"{mean:.4g} ± {std:.2g} (n={len(values)})"


def render_comparison(runs: Sequence[Run], title: str) -> str:
    """The comparison page of `runs` as a string."""
    keys = default_group_keys(runs)
    groups: dict[tuple[str, ...], list[Run]] = {}
    for run in runs:
        groups.setdefault(group_values(run, keys), []).append(run)
    groups = dict(sorted(groups.items()))
    chosen = value_panels(runs)
    main = [metric for metric, _ in chosen if metric in MAIN_METRICS] or [metric for metric, _ in chosen[:3]]
    differing = table(
        ["group", *keys, "runs"], [[group_label(keys, values), *values, len(members)] for values, members in groups.items()]
    ) if keys else '<p class="note">The runs have the same hyperparameters (seeds apart): one group.</p>'  # fmt: skip
    sections = [
        section("groups", f"Groups ({len(runs)} runs)", differing),
        section(
            "summary",
            "Summary",
            table(["group", "runs", *(f"{m}: final" for m in main)], summary_rows(groups, keys, main), numeric_from=1)
            + '<p class="note">final: each run\'s last value; mean ± sample standard deviation over the group\'s runs.</p>',
        ),
        section("runs", "Runs", run_table(groups, keys, main)),
        section(
            "curves",
            "Curves",
            f'<p class="note">Per group: the mean over its runs, the band its {CONFIDENCE:.0%} Student-t interval '
            "(no band where one run covers a step), each of its runs a thin line; one panel per value.</p>" + figures(runs, chosen, keys),
        ),
    ]
    return page(title, sections)
