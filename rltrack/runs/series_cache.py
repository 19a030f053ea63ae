"""The metric series `rltrack compare` reads, kept in the index beside their run.

Comparing 1,000 runs of 1,000 points means reading a million journal lines
(about 20 s here); the statistics take a few seconds. A user compares the same
runs again and again (another grouping, score, reference), so each run's
cleaned series of the metric (finite, sorted by x, the last value of a repeated
x: rltrack.runs.grouping.clean_series) on the axis asked is stored in the
index's `series` table the first time, as float64 bytes, and read from there
afterwards. A row belongs to its run's index row and goes with it (ON DELETE
CASCADE): when a run's files change, the refresh every command starts with
replaces its row, and the series is read from the files again. Runs that are not
indexed under the root (a directory named on the command line from elsewhere)
are read from their files each time.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from rltrack.runs.grouping import clean_series, primary_axis, run_series
from rltrack.runs.index import connect

if TYPE_CHECKING:
    from rltrack.runs.run import Run


def read_series(runs: Sequence[Run], metric: str, x_axis: str | None, root: Path | None) -> list[tuple[np.ndarray, np.ndarray, str]]:
    """Each run's cleaned (x, y) of `metric` on `x_axis` (None: its primary step axis) and the
    name of that axis, from the index of `root` where it holds them, else from the run's
    files (and then stored)."""
    if root is None or not root.is_dir():
        return [from_files(run, metric, x_axis) for run in runs]
    axis = x_axis or ""
    with closing(connect(root)) as db:
        rowids = dict(db.execute("SELECT path, rowid FROM runs").fetchall())
        out, new = [], []
        for run in runs:
            rowid = rowids.get(_relative(run.path, root))
            query = "SELECT x, y, x_name FROM series WHERE run = ? AND metric = ? AND axis = ?"
            row = None if rowid is None else db.execute(query, (rowid, metric, axis)).fetchone()
            if row is not None:
                out.append((np.frombuffer(row[0]), np.frombuffer(row[1]), row[2]))
                continue
            out.append(from_files(run, metric, x_axis))
            if rowid is not None:
                x, y, name = out[-1]
                new.append((rowid, metric, axis, name, x.astype(np.float64).tobytes(), y.astype(np.float64).tobytes()))
        if new:
            try:
                with db:
                    db.executemany("INSERT OR REPLACE INTO series (run, metric, axis, x_name, x, y) VALUES (?, ?, ?, ?, ?, ?)", new)
            except sqlite3.OperationalError:  # a read-only index: the next comparison reads the files again
                pass
    return out


def from_files(run: Run, metric: str, x_axis: str | None) -> tuple[np.ndarray, np.ndarray, str]:
    x, y = clean_series(*run_series(run, metric, x_axis))
    return x, y, x_axis or primary_axis([run], metric)


def _relative(path: Path, root: Path) -> str | None:
    """The run's folder relative to the root, with `/`, as the index stores it; None outside the root."""
    relative = os.path.relpath(Path(path).resolve(), Path(root).resolve())
    return None if relative.startswith("..") else Path(relative).as_posix()
