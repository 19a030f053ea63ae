"""`rltrack export`: a run's values as one tidy table file, for pandas, R or a spreadsheet.

One file per run, named after the run's directory: the rows of `Run.df` (one
value per row: key, value, namespace, kind, time, one column per step axis)
with the run's id in a `run` column, so several exports concatenate into one
table. CSV needs nothing more; Parquet needs pyarrow (the `runs` extra).
"""

from __future__ import annotations

from pathlib import Path

from rltrack.sinks.rundir import safe_filename
from rltrack.runs.run import Run

FORMATS = ("csv", "parquet")


def export_run(run: Run, out_dir: Path, file_format: str) -> Path:
    """Writes `<out_dir>/<run dir name>.<format>` and returns its path."""
    if file_format not in FORMATS:
        raise ValueError(f"export format {file_format!r} is not one of {', '.join(FORMATS)}")
    frame = run.df
    frame.insert(0, "run", run.id)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{safe_filename(run.path.name)}.{file_format}"
    if file_format == "csv":
        frame.to_csv(target, index=False)
    else:
        frame.to_parquet(target, index=False)
    return target
