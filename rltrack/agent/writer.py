"""One writer the agent serves (one registration: one writer of one run),
and what the agent does for it at each turn: reads a batch of its journal
for its local files and for the trackers that are caught up, ends it when
its logger says so or its process is gone, and writes what it stands at
(its state file, which the logger waiting in `close` reads, and its
trackers' conditions in report.json).

Why a module of its own: rltrack.agent.process is the agent's process (its
main loop, signals, status) and decides which writers it serves (it scans
the registrations, picks a writer up, gives its trackers their lanes, and
forgets it once it is over); the work of one writer is here.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

from rltrack.agent.files import write_private
from rltrack.core.report import Report
from rltrack.core.turns import Faults
from rltrack.delivery.files import FilesDelivery
from rltrack.delivery.run_end import merge_into_report_file, record_end, tracker_status
from rltrack.delivery.worker import DeliveryWorker
from rltrack.journal import end_torn_tail, journal_path
from rltrack.journal.feed import JournalFeed
from rltrack.trackers.remote import error_text

#: Seconds a failing tracker is retried after its run ended; then the rest waits for `rltrack sync`.
#: A tracker that takes batches is never given up, however long its backlog.
RETRY_AFTER_END = float(os.environ.get("RLTRACK_AGENT_RETRY", "300"))
#: Seconds between the saves of a writer's state while it runs (at once when it ends).
STATE_EVERY = 0.2
#: At most one rewrite of a run's report.json per this many seconds when its trackers' conditions change.
REPORT_EVERY = 1.0
#: Journal entries a feed reads per step: the agent steps every writer's feed in turn.
FEED_BATCH = 1000
#: Seconds a caught-up writer's journal waits before it is read again (below the feed's
#: `FRESH`): a training that logs 10 records a second gave every tracker and file a batch
#: of one, ~3 ms of the agent's CPU each. Most of a batch's cost is per batch (trackio's
#: `bulk_log` opens its store, takes its lock and connects, ~5 ms; an MLflow transaction
#: ~0.8 ms): at 20 records a second, read every 0.5 s, the agent and wandb-core used 3.3-3.4% of
#: a core, read every second 2.7% (values reach the trackers ~0.5 s later; `flush()` waits
#: for the local files up to ~1 s).
FEED_EVERY = 1.0


class Writer:
    """One registration: one writer of one run, from its logger's start until
    its files are complete and every tracker has it (or was given up).
    `state_file`: where its state is saved; `run_trackers`: the names of the
    trackers of its run (of every writer of the run: they share `report`)."""

    def __init__(self, key: str, registration: dict[str, Any], report: Report, state_file: Path, run_trackers: Callable[[], set[str]]) -> None:
        self.key = key
        self.registration = registration
        #: (inode, mtime, size) of the registration file when it was last read: it is read again only when that changes.
        self.stamp: tuple[int, int, int] | None = None
        self.run_dir = Path(registration["run_dir"])
        self.writer: str | None = registration.get("writer")
        self.report = report
        self.state_file = state_file
        self._run_trackers = run_trackers
        #: Its local files, and the reader of its control lines (counts, end): every writer has one, with file backends or none.
        self.files: FilesDelivery
        #: Reads the journal once for the files and the trackers, from where the files stopped.
        self.feed: JournalFeed
        self.faults = Faults(report, lambda reason: print(f"rltrack agent: {self.run_dir}: {reason}", file=sys.stderr, flush=True), error_text)
        #: The first error of each backend, for the logger to print at close (the agent's own stderr is its log).
        self.errors = self.faults.first
        self.failed = self.faults.failed
        self.workers: dict[str, DeliveryWorker] = {}
        self.waiting: set[str] = set(registration["trackers"])  # trackers whose cursor another process holds
        self.status: str | None = None
        self.ended_at: float | None = None
        self.end_recorded = False  # the journal's counts are in report.json (once the journal is read to its end)
        #: The trackers' conditions report.json was last written with, and when (`time.monotonic()`).
        self.reported: dict[str, Any] = {}
        self.report_saved_at = 0.0
        self.saved_state: dict[str, Any] | None = None
        self.saved_at = 0.0
        self.caught_up_at = 0.0  # when its feed last found nothing new (`time.monotonic()`)

    def state(self) -> dict[str, Any]:
        trackers = {
            name: {"pending_bytes": worker.pending_bytes(), "last_error": worker.last_error, "fix": worker.fix, "done": worker.done,
                   "batches_dropped": worker.inbox.dropped,
                   "failing_since": worker.condition().get("failing_since")}
            for name, worker in self.workers.items()
        }
        for name in self.waiting:
            trackers[name] = {"pending_bytes": None, "last_error": "another process delivers it (rltrack sync?)", "done": False}
        return {
            "run_dir": str(self.run_dir),
            "writer": self.writer,
            "status": self.status,
            "files_offset": self.files.flushed,
            "trackers": trackers,
            "errors": list(self.errors.values()),
            "done": False,
        }

    @property
    def over(self) -> bool:
        """Its files are complete and every tracker is done with it (or was
        given up): the agent forgets it (`Agent._finish`)."""
        return self.status is not None and self.files.closed and not self.waiting and all(worker.done for worker in self.workers.values())

    def serve(self) -> bool:
        """Reads a batch of the writer's journal for its files and trackers;
        gives up what cannot end, until the writer is `over`. True if busy."""
        busy = False
        files = self.files
        now = time.monotonic()
        due = self.status is not None or now - self.caught_up_at >= FEED_EVERY
        if due and not self.feed.ended and (files.closed or files.flush()):  # the files on disk first: a full disk holds the journal's next batch back
            busy = self.feed.step(FEED_BATCH)
            if not busy:
                self.caught_up_at = now
        if not files.closed and not busy and files.flush() and self.status is not None and self.feed.ended:  # read to the end of the writer's journal
            if not self.end_recorded:  # before the files' cursor is closed: killed between, the next agent reads the counts again
                self.record_end(delivering=True)
                self.end_recorded = True
            files.close(self.status)
        if not files.closed and files.blocked and self.ended_at is not None and now - self.ended_at > RETRY_AFTER_END:
            files.give_up()  # a disk that stays full: the files are written anew by the next session, from the journal
        if self.status is not None and files.closed:
            for worker in self.workers.values():
                if not worker.done and (worker.fix is not None or worker.failing_longer_than(RETRY_AFTER_END, since=self.ended_at)):
                    worker.stop()  # an error that cannot heal is not retried for minutes after the end: `rltrack sync` once fixed
            if self.ended_at is not None and now - self.ended_at > RETRY_AFTER_END:
                self.waiting.clear()
            if self.over:
                return busy
        if now - self.saved_at >= STATE_EVERY:
            self.save_state()
        self._report_trackers(now)
        return busy

    def end(self, status: str) -> None:
        """The writer's journal is complete: deliver the rest, then end the trackers' runs with `status`."""
        self.status = status
        self.ended_at = time.monotonic()
        self.feed.complete = True
        for worker in self.workers.values():
            worker.end(tracker_status(status))

    def crashed(self) -> None:
        """The writer's process is gone without closing the run: what its journal holds is delivered."""
        journal = journal_path(self.run_dir, self.writer)
        if end_torn_tail(journal) == "cut":
            self.report.count("torn", f"{journal.name}: the last line was cut short by a crash and is removed", section="journal")
        self.end("crashed")

    def record_end(self, delivering: bool) -> None:
        """Adds the run's counts (the training process's, journaled, and the
        agent's) and the sections of the writer's trackers to report.json;
        marks meta.json ended with the status the journal ends with (else the
        registration's: `crashed`), unless it is marked already. While
        trackers are `delivering`, what they count stays in the run's report
        until their cursors take it (see `DeliveryWorker._confirm`)."""
        assert self.status is not None, "a writer's end is recorded once it has ended"
        status = self.files.ended or self.status
        self._save_report(delivering, lambda counts, trackers, states: record_end(
            self.run_dir, self.writer, int(self.registration["pid"]), status, counts, trackers, states))

    def _report_trackers(self, now: float) -> None:
        """Rewrites report.json when a tracker's condition changed (delivered, given up,
        failing, with the error), at most once every `REPORT_EVERY` seconds."""
        if now - self.report_saved_at < REPORT_EVERY or self.conditions() == self.reported:
            return
        self.report_saved_at = now
        self._save_report(True, lambda counts, trackers, states: merge_into_report_file(self.run_dir, counts, trackers, states))

    def _save_report(self, delivering: bool, save: Callable[[dict[str, Any], list[str], dict[str, Any]], None]) -> None:
        """`save(counts, trackers, states)`: what the run's report counted since
        (while trackers are `delivering`, their sections stay until their
        cursors take them), the writer's trackers and their conditions. On a
        full disk the counts are kept for the next save."""
        leave = self._run_trackers() if delivering else set()
        states = self.conditions()
        counts = self.report.take(leave)
        try:
            save(counts, [worker.backend.name for worker in self.workers.values()], states)
        except OSError as exc:
            self.report.add(counts)  # kept for the next save of report.json
            self.failed("report", "save", exc)
            return
        self.reported = states

    def conditions(self) -> dict[str, dict[str, Any]]:
        """Each tracker's condition (`DeliveryWorker.condition`); one the agent could not open is "not opened", with its error."""
        states = {worker.backend.name: worker.condition() for worker in self.workers.values()}  # named as report.json's sections
        for name in self.registration["trackers"]:
            if name not in self.workers:
                states[name] = {"state": "not opened", "error": self.errors.get(name) or "another process delivers it (rltrack sync?)"}
        return states

    def save_state(self) -> None:
        state = self.state()
        if state != self.saved_state:
            write_private(self.state_file, state)
            self.saved_state = state
        self.saved_at = time.monotonic()
