"""`rltrack plot`: the command line's part of plotting, which runs a command names and the figure it saves.

Apart from rltrack.runs.plot (which draws figures from `Run`s, and is what
`Run.plot_metrics` calls) because choosing runs reads the index (rltrack.runs.index),
which itself reads runs: the drawing must not depend on the index.
"""

from __future__ import annotations

import argparse
import sys

from rltrack.runs.plot import PlotError, parse_size, plot_runs
from rltrack.runs.select import SelectionError, select_runs


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
    except (PlotError, SelectionError) as exc:
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
