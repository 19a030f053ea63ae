"""The end of one writer of a run: its counts into report.json, its status into meta.json.

One writer per fact: the agent (rltrack.agent.process) records a writer's end once it
has read the writer's journal to its end (the training process journals its
counts and final status as control lines, see rltrack.journal). A run that
no agent serves (only in-process backends: memory, console) has no other
writer, so its logger records its end itself, with the same function.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rltrack.core.atomic_file import write_atomic
from rltrack.core.locks import hold
from rltrack.core.report import Report
from rltrack.delivery.cursor import LOCK_WAIT, Cursor, cursor_files, report_pending
from rltrack.sinks.rundir import mark_ended


def tracker_status(status: str) -> str:
    """The status a tracker's run ends with when its writer ended with `status`
    (a crash is a failed run: trackers know no "crashed")."""
    return "failed" if status == "crashed" else status


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


def merge_into_report_file(run_dir: Path, counts: dict[str, Any], trackers: list[str], states: dict[str, dict[str, Any]] | None = None) -> None:
    """Adds `counts` (a `Report.as_dict()`) to the run's report.json. The
    sections of `trackers` are rebuilt from their cursors (what each
    delivered, counted and renamed, saved with the cursor), plus their
    errors, plus what is pending now. The training process, the agent and
    `rltrack sync` all add to it, so each holds `report.json.lock` meanwhile
    (for at most `LOCK_WAIT`).

    Its `trackers` part says where each tracker stands (see
    `DeliveryWorker.condition`): `states` as the agent sees them, else, for
    each of `trackers`, "delivered" or "pending" by its cursors."""
    path = run_dir / "report.json"
    fd = hold(run_dir / "report.json.lock", LOCK_WAIT)
    if fd is None:
        raise OSError(f"{path}: another process has held report.json.lock for over {LOCK_WAIT:.0f} s; the counts of this one are not added")
    try:
        merged = Report()
        saved = json.loads(path.read_text()) if path.is_file() else {}
        merged.add(saved, keep=lambda section, category: section not in trackers)
        merged.add(counts, keep=lambda section, category: section not in trackers or category == "errors")
        conditions: dict[str, dict[str, Any]] = dict(saved.get("trackers", {}))
        for name in trackers:
            confirmed = Report()
            for cursor in cursor_files(run_dir, name):
                confirmed.add(Cursor(run_dir, name, cursor).report.as_dict())
            merged.add(confirmed.as_dict())
            in_cursors = confirmed.as_dict()["counts"].get(f"{name}.errors", {})
            for reason, n in saved.get("counts", {}).get(f"{name}.errors", {}).items():  # those no cursor took (a tracker that never took a batch)
                if n > in_cursors.get(reason, 0):
                    merged.count("errors", reason, n - in_cursors.get(reason, 0), section=name)
            conditions[name] = {"state": "pending" if report_pending(merged, run_dir, name) else "delivered"}
        conditions.update(states or {})
        write_atomic(path, json.dumps({**merged.as_dict(), "trackers": conditions}, indent=2, sort_keys=True) + "\n")
    finally:
        os.close(fd)
