"""The end of one writer of a run: its counts into report.json, its status into meta.json.

One writer per fact: the agent (rltrack.agent.process) records a writer's end once it
has read the writer's journal to its end (the training process journals its
counts and final status as control lines, see rltrack.journal). A run that
no agent serves (only in-process backends: memory, console) has no other
writer, so its logger records its end itself, with the same function.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rltrack.delivery.worker import merge_into_report_file
from rltrack.sinks.rundir import mark_ended


def record_end(
    run_dir: Path, writer: str | None, pid: int, status: str, counts: dict[str, Any], trackers: list[str], states: dict[str, dict[str, Any]] | None = None
) -> None:  # fmt: skip
    """Adds `counts` (a `Report.as_dict()`) and the sections of `trackers`
    (see `merge_into_report_file`, with their `states`) to report.json, then marks meta.json (the
    writer's part of it, see `mark_ended`) ended with `status`. Raises OSError
    when report.json cannot be written; meta.json is marked all the same."""
    try:
        merge_into_report_file(run_dir, counts, trackers, states)
    finally:
        mark_ended(run_dir, writer, pid, status)
