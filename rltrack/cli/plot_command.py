"""`rltrack plot`: the command line's part of plotting, which runs a command names and the figure it saves.

Apart from rltrack.runs.plot (which draws figures from `Run`s, and is what
`Run.plot_metrics` calls) because choosing runs reads the index (rltrack.runs.index),
which itself reads runs: the drawing must not depend on the index.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Sequence

from rltrack.runs.plot import PlotError, parse_size, plot_runs
from rltrack.runs.query import query
from rltrack.runs.run import Run, open_run


def select_runs(patterns: Sequence[str], root: Path) -> tuple[list[Run], list[str]]:
    """The runs `patterns` name, each once, in order: a pattern is a run directory, or a
    regular expression searched in the ids and in the folder paths (relative to `root`)
    of the live (not archived) runs indexed under `root`. Also returns the patterns
    that matched nothing."""
    runs: dict[Path, Run] = {}
    unmatched = []
    indexed = None
    for pattern in patterns:
        if Path(pattern).is_dir():
            paths = [Path(pattern)]
        else:
            try:
                regex = re.compile(pattern)
            except re.error as exc:
                raise PlotError(
                    f"run pattern {pattern!r} is not a directory nor a regular expression ({exc}); e.g. 'cartpole/2026/' or 'lr=0.001'"
                ) from None
            if indexed is None:
                indexed = query(root, archived=False)
            paths = [root / path for run_id, path in zip(indexed["id"], indexed["path"]) if regex.search(run_id) or regex.search(path)]
        if not paths:
            unmatched.append(pattern)
        for path in paths:
            key = path.resolve()
            if key not in runs:
                try:
                    runs[key] = open_run(path)
                except ValueError as exc:
                    raise PlotError(str(exc)) from None
    return list(runs.values()), unmatched


def plot_command(args: argparse.Namespace) -> int:
    """`rltrack plot`: select the runs, draw, save the PNG, say what each line holds."""
    try:
        size = parse_size(args.size)
        runs, unmatched = select_runs(args.patterns, args.root)
        for pattern in unmatched:
            print(f"rltrack plot: no run matches {pattern!r} under {args.root} (see `rltrack runs ls --root {args.root}`)", file=sys.stderr)
        if not runs:
            raise PlotError(f"no runs to plot; give run directories or patterns over the run ids under {args.root}")
        group_by = [key.strip() for key in args.group_by.split(",") if key.strip()] if args.group_by else None
        result = plot_runs(runs, args.metric, x_axis=args.x, group_by=group_by, smooth=args.smooth, size=size)
        args.output.parent.mkdir(parents=True, exist_ok=True)
        result.save(str(args.output))
    except PlotError as exc:
        print(f"rltrack plot: {exc}", file=sys.stderr)
        return 2
    except ImportError as exc:
        print(f"rltrack plot: a package is missing ({exc}); install the extra: pip install 'rltrack[runs]'", file=sys.stderr)
        return 2
    for run_id, reason in result.skipped.items():
        print(f"rltrack plot: left out {run_id}: {reason}", file=sys.stderr)
    for curve in result.curves:
        print(f"{curve.label}: {len(curve.runs)} run(s), {len(curve.x)} points")
    print(args.output)
    return 0
