"""Delivers a run's journal to one remote tracker, from a persisted cursor.

One `DeliveryWorker` (a thread) per remote backend. It reads complete journal
lines from its cursor (a byte offset, saved in `cursors/<backend>.json` after
every acknowledged batch), hands them to the backend in batches, and on
failure retries the same batch with exponential backoff. The backlog lives in
the journal on disk, so memory stays bounded however long a tracker is down,
and `rltrack sync` resumes from the same cursor after a crash. A run with
several writers has a journal per writer, and a cursor per backend and
writer (`cursors/<backend>@<writer>.json`).
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import threading
import time
from collections import deque
from pathlib import Path

from rltrack.backends.remote import RemoteBackend
from rltrack.events import Event
from rltrack.journal import journal_files, journal_path
from rltrack.report import Report

CURSOR_DIR = "cursors"
BACKOFF_START = 0.5
BACKOFF_MAX = 30.0
POLL = 0.1
#: At the end of a journal, how long to wait for the tracker to store what it
#: took before leaving the rest behind the cursor (sent again, without
#: doubles, by the next delivery).
STORE_WAIT = 60.0
#: How long a delivery waits for another process delivering the same journal
#: to the same tracker (the child of a run that just crashed, finishing what it
#: had received) before giving up: two deliveries on one cursor send twice.
LOCK_WAIT = 60.0


class DeliveryBusy(Exception):
    """Another process delivers this journal to this tracker."""


def _lock_cursor(path: Path) -> int:
    """Holds `<cursor>.lock` (an exclusive `flock`, released by the kernel
    when the process ends, however it ends); returns its descriptor."""
    path.parent.mkdir(exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + LOCK_WAIT
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                raise DeliveryBusy(
                    f"another process has been delivering to this tracker for over {LOCK_WAIT:.0f} s (it holds {path}); "
                    "wait for it to end, or end it, then try again"
                ) from None
            time.sleep(POLL)


def cursor_path(run_dir: Path, backend: str, writer: str | None = None) -> Path:
    return run_dir / CURSOR_DIR / (f"{backend}.json" if writer is None else f"{backend}@{writer}.json")


class Cursor:
    """How far into the journal one backend has delivered, and (for a tracker
    that counts, see `RemoteBackend.position`) where its run stood then."""

    def __init__(self, run_dir: Path, backend: str, writer: str | None = None) -> None:
        self.path = cursor_path(run_dir, backend, writer)
        saved = json.loads(self.path.read_text()) if self.path.is_file() else {}
        self.offset: int = saved.get("offset", 0)
        self.delivered: int = saved.get("delivered", 0)
        self.position: int | None = saved.get("position")

    def advance(self, offset: int, events: int, position: int | None = None) -> None:
        self.offset = offset
        self.delivered += events
        if position is not None:
            self.position = position
        saved = {"offset": self.offset, "delivered": self.delivered}
        if self.position is not None:
            saved["position"] = self.position
        self.path.parent.mkdir(exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(saved))
        os.replace(tmp, self.path)


def read_batch(journal: Path, offset: int, limit: int) -> tuple[list[Event], int]:
    """Up to `limit` events from byte `offset`, and the offset after them.
    A line not yet ended by a newline is left for next time."""
    events: list[Event] = []
    if not journal.is_file():
        return events, offset
    with journal.open("rb") as f:
        f.seek(offset)
        while len(events) < limit:
            line = f.readline()
            if not line.endswith(b"\n"):
                break
            offset += len(line)
            if line.strip():
                events.append(Event.from_json(line.decode("utf-8")))
    return events, offset


def pending_bytes(run_dir: Path, backend: str) -> int:
    """Journal bytes, over all writers, that `backend` has not received."""
    return sum(
        max(0, journal.stat().st_size - Cursor(run_dir, backend, writer).offset)
        for writer, journal in journal_files(run_dir).items()
    )


def report_pending(report: Report, run_dir: Path, backend: str) -> int:
    """Counts what `backend` has not received in its report section; returns the bytes."""
    pending = pending_bytes(run_dir, backend)
    if pending:
        report.count("pending", f"{pending} journal bytes not delivered", section=backend)
    return pending


def say_pending(report: Report, run_dir: Path, backend: str, last_error: str | None) -> None:
    """Counts what `backend` has not received, and tells the user how to deliver it."""
    pending = report_pending(report, run_dir, backend)
    print(
        f"rltrack: {backend} has not received everything ({pending} journal bytes pending"
        f"{', last error: ' + last_error if last_error else ''}); "
        f"deliver it with: rltrack sync {run_dir} --to {backend}",
        file=sys.stderr,
    )


class DeliveryWorker:
    """Feeds `backend` from the journal of `run_dir` on its own thread."""

    def __init__(self, backend: RemoteBackend, run_dir: Path, writer: str | None = None, *, close_at_end: bool = True) -> None:
        self.backend = backend
        self.close_at_end = close_at_end  # False: more journals follow into the same tracker run
        self.run_dir = run_dir
        self.journal = journal_path(run_dir, writer)
        self._lock: int | None = _lock_cursor(cursor_path(run_dir, backend.name, writer).with_suffix(".lock"))
        self._unlocking = threading.Lock()
        self.cursor = Cursor(run_dir, backend.name, writer)  # read once locked: a process that held the lock may have moved it
        self._read_offset = self.cursor.offset  # ahead of the cursor by what the tracker took but has not stored
        self._untold: deque[tuple[int, int, int | None]] = deque()  # those batches: (offset after, events, position)
        self.errors = 0
        self.last_error: str | None = None
        self._status = "finished"
        self._journal_done = threading.Event()  # no more lines will be appended
        self._stop = threading.Event()  # give up now, even if behind
        self._thread = threading.Thread(target=self._loop, name=f"rltrack-deliver-{backend.name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def finish(self, status: str, timeout: float | None) -> bool:
        """Once the journal is complete: deliver the rest for up to `timeout`
        seconds, then end the tracker's run with `status`. Returns True if
        everything was delivered; otherwise the worker gives up (a delivery
        call that hangs is abandoned on its daemon thread) and the rest waits
        in the journal for `rltrack sync`."""
        self._status = status
        self._journal_done.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._stop.set()
            self._unlock()  # given up: the next delivery (`rltrack sync`) may start at once
            return False
        return self.caught_up()

    def caught_up(self) -> bool:
        return self.cursor.offset >= (self.journal.stat().st_size if self.journal.is_file() else 0)

    def run_until_caught_up(self, status: str) -> None:
        """For `rltrack sync`: deliver everything on the calling thread."""
        self._status = status
        self._journal_done.set()
        self._loop()

    def _loop(self) -> None:
        try:
            self._deliver_all()
        finally:
            self._unlock()

    def _unlock(self) -> None:
        with self._unlocking:
            if self._lock is not None:
                os.close(self._lock)
                self._lock = None

    def _deliver_all(self) -> None:
        self._start()
        backoff = BACKOFF_START
        while not self._stop.is_set():
            # Read "done" before the journal: if it was already set, an empty
            # read means everything is delivered; if it gets set after the
            # read, the loop reads once more before ending.
            journal_complete = self._journal_done.is_set()
            events, offset = read_batch(self.journal, self._read_offset, self.backend.max_batch)
            if not events:
                if offset != self._read_offset:  # only blank lines
                    self._taken(offset, 0)
                    continue
                self._confirm()
                if journal_complete:
                    self._end()
                    return
                self._stop.wait(POLL)
                continue
            try:
                self.backend.deliver(events)
            except Exception as exc:  # the tracker is down or refused: keep the batch, retry later
                self.errors += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                self.backend.run.report.count("errors", self.last_error, section=self.backend.name)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)
                continue
            backoff = BACKOFF_START
            self._taken(offset, len(events))

    def _start(self) -> None:
        """Tells the backend where its run stood at the cursor. A stream that
        starts afresh saves the position first: if this process dies before
        anything is stored, the next delivery still knows where it began."""
        if self.cursor.position is None:
            position = self.backend.position()
            if position is not None:
                self.cursor.advance(self.cursor.offset, 0, position)
        self.backend.continue_from(self.cursor.position)

    def _taken(self, offset: int, events: int) -> None:
        self._read_offset = offset
        self._untold.append((offset, events, self.backend.position()))
        self._confirm()

    def _confirm(self) -> None:
        """Advances the cursor over the batches the tracker has stored."""
        if not self._untold:
            return
        stored = self.backend.durable_position()
        offset, events, position = None, 0, None
        while self._untold and (stored is None or self._untold[0][2] is None or self._untold[0][2] <= stored):
            offset, batch_events, position = self._untold.popleft()
            events += batch_events
        if offset is not None:
            self.cursor.advance(offset, events, position)

    def _end(self) -> None:
        """The journal is delivered: end the tracker's run (unless more writers
        follow into it), then wait a while for the tracker to store what it
        took (W&B may still be writing after `finish` returns)."""
        if self.close_at_end:
            self._close_backend()
        deadline = time.monotonic() + STORE_WAIT
        self._confirm()
        while self._untold and time.monotonic() < deadline and not self._stop.wait(POLL):
            self._confirm()

    def _close_backend(self) -> None:
        try:
            self.backend.close(self._status)
        except Exception as exc:  # the data is delivered; only the run's final status is missing
            self.last_error = f"close: {type(exc).__name__}: {exc}"
            self.backend.run.report.count("errors", self.last_error, section=self.backend.name)


def time_left(deadline: float | None) -> float | None:
    """Seconds until `deadline` (a `time.monotonic()` time), never below 0; None: no limit."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def finish_all(workers: list[DeliveryWorker], status: str, deadline: float | None) -> dict[str, str | None]:
    """Finishes each worker by `deadline` (see `time_left`); returns the
    trackers not caught up, each with its last error."""
    pending = {}
    for worker in workers:
        if not worker.finish(status, time_left(deadline)):
            pending[worker.backend.name] = worker.last_error
    return pending
