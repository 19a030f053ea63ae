"""A tracker's cursor into a writer's journal, `cursors/<tracker>[@writer].json`
in the run directory: how far delivery has got (offset, events), the
tracker's position and its state (its run id, resume data), and the lock
(`<cursor>.lock`) that lets one delivery at a time move it. The delivery
worker (rltrack.delivery.worker) moves it; the agent, `rltrack sync`,
`rltrack runs` and report.json (rltrack.delivery.run_end) read it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from rltrack.core.atomic_file import write_atomic
from rltrack.core.locks import hold
from rltrack.core.report import Report
from rltrack.journal import journal_files, journal_path

CURSOR_DIR = "cursors"
#: How long `rltrack sync` waits for another process delivering the same
#: journal to the same tracker (the agent, finishing a run) while that
#: process saves no progress in the cursor, before giving up: two deliveries
#: on one cursor would send twice. One that advances is waited for as long as it advances.
LOCK_WAIT = 60.0


class DeliveryBusy(Exception):
    """Another process delivers this journal to this tracker."""


def lock_cursor(run_dir: Path, backend: str, writer: str | None, wait: float, waiting: Callable[[], None] | None) -> int:
    """Holds the cursor's lock, `<cursor>.lock` (an exclusive `flock`,
    released by the kernel when the process ends, however it ends); returns
    its descriptor. Held by another process: `waiting` is called, and the
    lock waited for while that process saves progress in the cursor, until
    it has saved none for `wait` seconds."""
    cursor = cursor_path(run_dir, backend, writer)
    path = cursor.with_suffix(".lock")
    path.parent.mkdir(exist_ok=True)
    fd = hold(path, 0)
    if fd is None and wait > 0:
        if waiting is not None:
            waiting()
        fd = hold(path, wait, progress=lambda: _saved(cursor))
    if fd is None:
        pending = pending_bytes(run_dir, backend, writer)
        raise DeliveryBusy(
            f"another process holds {path} and has delivered nothing to this tracker for {wait:.0f} s ({pending:,} journal bytes pending); "
            "`rltrack status` lists what the agent delivers: let it finish or give up (it retries a failing tracker for a while after a run ends), "
            "or end it, then try again"
        )
    return fd


def _saved(path: Path) -> tuple[int, int] | None:
    """When and where `path` was last saved (its inode changes with each atomic save); None while it does not exist."""
    try:
        saved = path.stat()
    except FileNotFoundError:
        return None
    return saved.st_ino, saved.st_mtime_ns


def cursor_path(run_dir: Path, backend: str, writer: str | None = None) -> Path:
    return run_dir / CURSOR_DIR / (f"{backend}.json" if writer is None else f"{backend}@{writer}.json")


class Cursor:
    """How far into the journal one backend has delivered, (for a tracker
    that counts, see `RemoteBackend.position`) where its run stood then, the
    tracker's state there (`RemoteBackend.state`: its run id, resume data),
    and what the backend counted and renamed delivering it (its report
    section): saved together, so that after any kill report.json, rebuilt
    from the cursors, says what the tracker holds, and delivery continues the
    same tracker run. A cursor saved before the state moved here takes the
    tracker's own `<backend>_run.json` of that time as its state."""

    def __init__(self, run_dir: Path, backend: str, writer: str | None = None) -> None:
        self.path = cursor_path(run_dir, backend, writer)
        saved = json.loads(self.path.read_text()) if self.path.is_file() else {}
        self.offset: int = saved.get("offset", 0)
        self.delivered: int = saved.get("delivered", 0)
        self.position: int | None = saved.get("position")
        #: The store the tracker's deliveries went to (`RemoteBackend.target`); "" when not known.
        self.target: str = saved.get("target", "")
        legacy = run_dir / CURSOR_DIR / f"{backend}_run.json"
        self.state: dict[str, Any] = saved.get("state") or (json.loads(legacy.read_text()) if legacy.is_file() else {})
        self.report = Report()
        self.report.add(saved.get("report", {}))

    def advance(
        self, offset: int, events: int, position: int | None = None, report: dict[str, Any] | None = None, state: dict[str, Any] | None = None
    ) -> None:  # fmt: skip
        """Saves the cursor moved on; a save that fails (a full disk) raises and leaves it as it was."""
        position = self.position if position is None else position
        state = self.state if state is None else state
        moved = Report()
        moved.add(self.report.as_dict())
        if report is not None:
            moved.add(report)
        saved: dict[str, Any] = {"offset": offset, "delivered": self.delivered + events, "report": moved.as_dict()}
        if position is not None:
            saved["position"] = position
        if self.target:
            saved["target"] = self.target
        if state:
            saved["state"] = state
        self.path.parent.mkdir(exist_ok=True)
        write_atomic(self.path, json.dumps(saved))
        self.offset, self.delivered, self.position, self.state, self.report = offset, self.delivered + events, position, state, moved


def pending_bytes(run_dir: Path, backend: str, writer: str | None = None) -> int:
    """Journal bytes that `backend` has not received: of `writer`'s journal if given, else of every writer's."""
    journals = journal_files(run_dir) if writer is None else {writer: journal_path(run_dir, writer)}
    return sum(
        max(0, journal.stat().st_size - Cursor(run_dir, backend, name).offset)
        for name, journal in journals.items() if journal.is_file()
    )


def report_pending(report: Report, run_dir: Path, backend: str) -> int:
    """Counts what `backend` has not received in its report section; returns the bytes."""
    pending = pending_bytes(run_dir, backend)
    if pending:
        report.count("pending", f"{pending} journal bytes not delivered", section=backend)
    return pending


def tracker_state(run_dir: Path, backend: str) -> dict[str, Any]:
    """The tracker's state (`RemoteBackend.state`: its run id, resume data)
    in the cursor of `backend`, over all writers, saved last; {} when none holds one."""
    cursors = [Cursor(run_dir, backend, writer) for writer in cursor_files(run_dir, backend)]
    saved = [(cursor.path.stat().st_mtime_ns, index, cursor.state) for index, cursor in enumerate(cursors) if cursor.state]
    return max(saved, key=lambda item: item[:2])[2] if saved else Cursor(run_dir, backend).state


def cursor_files(run_dir: Path, backend: str) -> list[str | None]:
    """The writers (None: the only one) that have a cursor for `backend`."""
    folder = run_dir / CURSOR_DIR
    writers: list[str | None] = [None] if (folder / f"{backend}.json").is_file() else []
    writers += [path.name[len(backend) + 1 : -len(".json")] for path in sorted(folder.glob(f"{backend}@*.json"))]
    return writers
