"""`rltrack compare`: which group of runs is better, and how sure (rltrack.runs.analysis).

    rltrack compare [RUN_PATTERN...] [--task T] [--where EXPR] --metric KEY [--score last|last:N|auc|max]
                    [--group-by KEYS] [--task-key KEY] [--reference FILE] [--x AXIS] [--reps N] [--seed S]
                    [--json | --csv DIR] [--html FILE]

Runs are selected as `rltrack runs ls` selects them (rltrack.runs.select); the
table printed names the score rule, the normalization, the tasks and the
replications, then per group the aggregates with their intervals, then the
probability of improvement of each group over each other.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rltrack.cli.runs_command import render_table, root_argument

if TYPE_CHECKING:
    from rltrack.runs.analysis import Comparison

#: rltrack.runs.stats.DEFAULT_REPS, which this module does not import before the command runs (numpy).
DEFAULT_REPS = 2000

def add_command(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = commands.add_parser(
        "compare",
        help="which group of runs is better, and how sure: IQM, median, mean, optimality gap with bootstrap intervals",
        description="Scores each run on a metric (last values, area under the curve or maximum), normalizes them per task "
        "with a reference table if given, and reports per group of runs the interquartile mean, median, mean and "
        "optimality gap over tasks and seeds with stratified bootstrap confidence intervals (rliable's method), "
        "and the probability that a run of one group beats a run of another.",
    )
    parser.add_argument("patterns", nargs="*", metavar="RUN_PATTERN", help="a run directory, or a regex searched in the run ids and folder paths under --root (default: all live runs)")
    parser.add_argument("--task", help="only the runs of this task (glob patterns such as 'cartpole*' work)")
    parser.add_argument("--where", metavar="EXPR", help="the runs a query selects, as `rltrack runs ls --where`")
    parser.add_argument("--metric", required=True, help="the metric's key, e.g. collector/reward_mean (canonical names work across frameworks)")
    parser.add_argument("--score", default="last", help="each run's score: last (mean of its last 10%% of points, or its last evaluation), last:N, auc or max (default last)")
    parser.add_argument("--group-by", metavar="KEYS", help="comma-separated hyperparameters (or source, host) defining groups (default: those that differ between runs, seeds and task excepted)")
    parser.add_argument("--task-key", default="task", metavar="KEY", help="what tells tasks apart: the runs' task (default), a hyperparameter such as env_id, or none: every run one task")
    parser.add_argument("--reference", type=Path, metavar="FILE", help="a .toml/.json/.csv table of task -> min, max: scores become (score - min) / (max - min)")
    parser.add_argument("--x", metavar="AXIS", help="the x axis of auc and the sample-efficiency curves: env_steps, train_iter, time (default: each run's primary step axis)")
    parser.add_argument("--reps", type=int, default=DEFAULT_REPS, help=f"bootstrap replications (default {DEFAULT_REPS})")
    parser.add_argument("--seed", type=int, default=0, help="the bootstrap's random seed (default 0)")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    output.add_argument("--csv", type=Path, metavar="DIR", help="write the tables as CSV files into DIR")
    parser.add_argument("--html", type=Path, metavar="FILE", help="also write the comparison page: curves to explore (hover, zoom, smoothing, x axis) and these statistics' figures")
    parser.add_argument("--root", type=root_argument, default=Path("runs"), help="the runs root holding the index (default: runs; a storage URI is read from storage)")
    parser.set_defaults(handler=compare_command)


def compare_command(args: argparse.Namespace) -> int:
    try:
        from rltrack.runs.analysis import compare_runs, dumps
        from rltrack.runs.compare import render_comparison
        from rltrack.runs.grouping import PlotError
        from rltrack.runs.query import QueryError
        from rltrack.runs.select import chosen_runs
    except ImportError as exc:
        print(f"rltrack compare: a package is missing ({exc}); install the extra: pip install 'rltrack[runs]'", file=sys.stderr)
        return 2
    group_by = [k.strip() for k in args.group_by.split(",") if k.strip()] if args.group_by else None
    try:
        runs, unmatched = chosen_runs(args.root, args.patterns, args.task, args.where, all_by_default=True)
        for pattern in unmatched:
            print(f"rltrack compare: no run matches {pattern!r} under {args.root} (see `rltrack runs ls --root {args.root}`)", file=sys.stderr)
        comparison = compare_runs(
            args.root, runs=runs, metric=args.metric, score=args.score,
            group_by=group_by,
            task_key=args.task_key, reference=args.reference, x_axis=args.x, reps=args.reps, seed=args.seed,
        )  # fmt: skip
        if args.html:
            args.html.parent.mkdir(parents=True, exist_ok=True)
            args.html.write_text(render_comparison(runs, f"rltrack compare: {len(runs)} runs, {args.metric}", comparison, group_by), encoding="utf-8")
    except (PlotError, QueryError, LookupError, ValueError, OSError) as exc:
        print(f"rltrack compare: {exc}", file=sys.stderr)
        return 2
    for run_id, reason in comparison.skipped.items():
        print(f"rltrack compare: left out {run_id}: {reason}", file=sys.stderr)
    if args.json:
        print(dumps(comparison))
    elif args.csv:
        for path in comparison.write_csv(args.csv):
            print(path)
    else:
        print(render(comparison))
    return 0


def render(comparison: Comparison) -> str:
    """The comparison as text: what was compared, the aggregates per group, the probabilities of improvement."""
    from rltrack.runs.stats import AGGREGATES

    lines = [
        f"metric:        {comparison.metric}",
        f"score:         {comparison.score}",
        f"normalization: {comparison.normalization or 'none (raw scores)'}",
        f"tasks:         {', '.join(comparison.tasks)}",
        f"intervals:     {comparison.confidence:.0%} stratified bootstrap percentile intervals, {comparison.reps} replications, seed {comparison.seed}",
        "",
    ]
    rows = []
    for group in comparison.groups:
        row = {"group": group, "runs": int((comparison.scores["group"] == group).sum())}
        for item in comparison.aggregates[comparison.aggregates["group"] == group].itertuples():
            row[item.aggregate] = f"{item.value:.4g} [{item.lower:.4g}, {item.upper:.4g}]"
        rows.append(row)
    lines.append(render_table(rows, ["group", "runs", *AGGREGATES]))
    if len(comparison.improvement):
        lines += ["", "probability of improvement P(a run of x scores above a run of y), averaged over tasks:"]
        pairs = [{"x": r.x, "y": r.y, "P(x > y)": f"{r.value:.3f} [{r.lower:.3f}, {r.upper:.3f}]"} for r in comparison.improvement.itertuples()]
        lines.append(render_table(pairs, ["x", "y", "P(x > y)"]))
    return "\n".join(lines)
