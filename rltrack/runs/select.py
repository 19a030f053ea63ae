"""Which runs a command names: run directories, patterns over the run ids, `--task`, `--where`.

What `rltrack plot`, `rltrack report` and `rltrack compare` (and `rltrack.runs.compare_runs`)
share, so that they select runs the same way `rltrack runs ls` does: `--task`
and `--where` go through the index's query (rltrack.runs.query), patterns are
regular expressions over the ids and folder paths of the live runs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from rltrack.runs.query import query
from rltrack.runs.run import Run, open_run


class SelectionError(ValueError):
    """A pattern that is neither a directory nor a regular expression, or a directory that is no run."""


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
                raise SelectionError(
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
                    raise SelectionError(str(exc)) from None
    return list(runs.values()), unmatched


def chosen_runs(
    root: Path, patterns: Sequence[str] = (), task: str | None = None, where: str | None = None, *, all_by_default: bool = False
) -> tuple[list[Run], list[str]]:
    """The runs of the patterns, then those `--task` / `--where` select (each once, in
    order), and the patterns that matched nothing. With neither a pattern nor
    `task` / `where`: every live run under `root` if `all_by_default` (as `runs ls`), else none."""
    runs, unmatched = select_runs(patterns, root) if patterns else ([], [])
    if task or where or (all_by_default and not patterns):
        seen = {run.path.resolve() for run in runs}
        table = query(root, where=where, task=task, archived=False)
        for path in table["path"] if len(table) else []:
            if (root / path).resolve() not in seen:
                runs.append(open_run(root / path))
    return runs, unmatched
