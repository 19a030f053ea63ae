"""`rltrack report`: which runs a command names, and the page it writes for them.

One run named alone gets the single-run page (rltrack.runs.report); several
(run directories, regular expressions over the run ids, `--task`, `--where`)
get the comparison page (rltrack.runs.compare). Apart from both because
choosing runs reads the index, as `rltrack plot` does (rltrack.cli.plot_command).
"""

from __future__ import annotations

import argparse
import sys
from rltrack.runs.compare import render_comparison
from rltrack.runs.plot import PlotError
from rltrack.runs.query import QueryError
from rltrack.runs.report import write_report
from rltrack.runs.run import Run
from rltrack.runs.select import chosen_runs


def report_runs(args: argparse.Namespace) -> list[Run]:
    """The runs of the patterns, then those of `--task` / `--where` (each once, in order)."""
    runs, unmatched = chosen_runs(args.root, args.runs, args.task, args.where)
    for pattern in unmatched:
        print(f"rltrack report: no run matches {pattern!r} under {args.root} (see `rltrack runs ls --root {args.root}`)", file=sys.stderr)
    return runs


def report_command(args: argparse.Namespace) -> int:
    """`rltrack report RUN... [--task T] [--where EXPR] -o page.html`."""
    try:
        runs = report_runs(args)
        if not runs:
            raise PlotError(f"no runs to report on; give run directories, run id patterns, --task or --where over the runs under {args.root}")
        if len(runs) == 1 and not (args.task or args.where):
            write_report(runs[0], args.output)
        else:
            what = " ".join([*args.runs, *([f"task {args.task}"] if args.task else []), *([f"where {args.where}"] if args.where else [])])
            args.output.parent.mkdir(parents=True, exist_ok=True)
            args.output.write_text(render_comparison(runs, f"rltrack: {len(runs)} runs ({what})"), encoding="utf-8")
    except (LookupError, ValueError, OSError, PlotError, QueryError) as exc:
        print(f"rltrack report: {exc}", file=sys.stderr)
        return 2
    except ImportError as exc:
        print(f"rltrack report: a package is missing ({exc}); install the extra: pip install 'rltrack[runs]'", file=sys.stderr)
        return 2
    print(args.output)
    return 0

