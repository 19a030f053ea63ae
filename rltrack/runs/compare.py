"""Several runs on one self-contained HTML page (`rltrack report` over a task, a query or a list).

What an RL user compares: the groups of runs (runs with equal hyperparameters,
seeds apart: `rltrack.runs.grouping.default_group_keys`), each drawn as the mean
over its runs with a 95% band, one interactive panel per *value* (a native key
and its canonical twin holding the same numbers are one panel, titled by the
canonical name; rltrack.runs.explore: hover, zoom, smoothing, x axis, each run
on demand); the hyperparameters that tell the groups apart; a summary table of
the main metrics per group (final value, mean ± sample std over the group's
runs, and n); a table of the runs (group, seed, status, final values), as
W&B's runs table and trackio's runs list show; and what `rltrack compare`
reports (rltrack.runs.analysis) with its figures. Every chart names its axes
and their units. Like the single-run page (rltrack.runs.report, whose helpers
it uses), the page is one file: inline CSS and script, no external URL,
everything from the runs escaped.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

from rltrack.runs.analysis import Comparison, compare_runs
from rltrack.runs.explore import STYLE as EXPLORE_STYLE
from rltrack.runs.explore import explorer, panel
from rltrack.runs.grouping import SEED_NAME, default_group_keys, group_label, group_values
from rltrack.runs.plot import CONFIDENCE
from rltrack.runs.report import page, section, table, value_panels, value_unit
from rltrack.runs.run import MAIN_METRICS, Run

#: Most panels on a page (the rest are named under the figures).
MAX_PANELS = 12


def panels(runs: Sequence[Run], chosen: list[tuple[str, list[str]]], keys: list[str]) -> tuple[list[dict[str, Any]], str]:
    """The interactive panels' data (rltrack.runs.explore), at most MAX_PANELS, and a note naming the rest."""
    drawn = [panel(runs, metric, metric + (f" (= {', '.join(aliases)})" if aliases else ""), value_unit(metric), keys) for metric, aliases in chosen[:MAX_PANELS]]
    rest = [metric for metric, _ in chosen[MAX_PANELS:]]
    return drawn, f'<p class="note">Not drawn ({len(rest)}): {html.escape(", ".join(rest))}.</p>' if rest else ""


def statistics_section(comparison: Comparison | None, reason: str) -> str:
    """What `rltrack compare` reports, as a table and (drawn by the page) its figures."""
    if comparison is None:
        return f'<p class="note">{html.escape(reason)}</p>'
    about = [("metric", comparison.metric), ("score", comparison.score), ("normalization", comparison.normalization or "none (raw scores)"),
             ("tasks", ", ".join(comparison.tasks)), ("intervals", f"{comparison.confidence:.0%} stratified bootstrap percentile intervals, "
             f"{comparison.reps} replications (runs resampled within each task), seed {comparison.seed}")]  # fmt: skip
    rows = []
    for group in comparison.groups:
        mine = comparison.aggregates[comparison.aggregates["group"] == group]
        rows.append([group, int((comparison.scores["group"] == group).sum()), *(f"{r.value:.4g} [{r.lower:.4g}, {r.upper:.4g}]" for r in mine.itertuples())])
    return (
        table(["", "this comparison"], about)
        + table(["group", "runs", *(r for r in comparison.aggregates["aggregate"].unique())], rows, numeric_from=1)
        + '<p class="note">IQM: the mean of the middle 50% of all runs\' scores; median and mean: over tasks of each task\'s mean; '
        "optimality gap: how far scores fall below 1 (the reference max when normalized). Below: the intervals, the probability that a run "
        "of one group scores above a run of another (averaged over tasks), performance profiles (the fraction of runs scoring above τ) "
        "and sample-efficiency curves (the IQM over runs at each x), each with its band.</p>"
        '<div id="rltrack-stats"></div>'
    )


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


def render_comparison(runs: Sequence[Run], title: str, comparison: Comparison | None = None, group_by: Sequence[str] | None = None) -> str:
    """The comparison page of `runs` as a string, grouped by `group_by` (default: `default_group_keys`);
    its statistics are `comparison`'s, else `rltrack compare`'s defaults over the first main metric."""
    keys = list(group_by) if group_by else default_group_keys(runs)
    groups: dict[tuple[str, ...], list[Run]] = {}
    for run in runs:
        groups.setdefault(group_values(run, keys), []).append(run)
    groups = dict(sorted(groups.items()))
    chosen = value_panels(runs)
    main = [metric for metric, _ in chosen if metric in MAIN_METRICS] or [metric for metric, _ in chosen[:3]]
    reason = "no metric to compare"
    if comparison is None and main:
        try:
            comparison = compare_runs(runs=runs, metric=main[0], group_by=group_by)
        except ValueError as exc:
            reason = f"no statistics for {main[0]}: {exc}"
    differing = table(
        ["group", *keys, "runs"], [[group_label(keys, values), *values, len(members)] for values, members in groups.items()]
    ) if keys else '<p class="note">The runs have the same hyperparameters (seeds apart): one group.</p>'  # fmt: skip
    drawn, not_drawn = panels(runs, chosen, keys)
    controls, data_and_script = explorer(runs, drawn, comparison)
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
            "(no band where one run covers a step; cut at the runs' range); one panel per value.</p>" + controls + not_drawn,
        ),
        section("statistics", "Which group is better, and how sure", statistics_section(comparison, reason)),
    ]
    return page(title, sections, style=EXPLORE_STYLE, script=data_and_script)
