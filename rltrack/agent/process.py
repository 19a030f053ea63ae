"""The delivery agent: one process per machine, user and Python environment
that writes the local files of every run and delivers it to the trackers.

Training processes only append to their run's journal (rltrack.training.logger) and
register the run in the agent directory (rltrack.agent.files). The agent:

* scans the registrations (every `SCAN_EVERY`) and picks up each writer of
  each run: its local files are written by a `FilesDelivery`, each tracker fed
  by a `DeliveryWorker` from a cursor per run, writer and tracker;
* reads each writer's journal once on its main thread (a `JournalFeed`, a
  batch per run in turn): the files write each batch there, and every
  tracker that is caught up takes it on its own thread; a tracker that lags
  reads its backlog from the journal itself (see rltrack.journal.feed);
* runs one thread per tracker configuration (tracker name and settings),
  stepping the workers of every run it serves in turn; the workers of one run
  share one backend (one tracker run for all its writers), and the clients
  underneath are shared across runs (one MLflow client per store, one W&B
  service for every W&B run): a tracker that is down holds only its own thread;
* ends a writer when its logger says so (the registration's status) or when
  its process is gone (the run crashed, the trackers' runs end failed); a
  tracker still behind is retried with backoff for `RETRY_AFTER_END` seconds
  after the end, then left to `rltrack sync`;
* is the only writer of report.json and of the end of meta.json (see
  rltrack.delivery.run_end): once it has read an ended writer's journal to its end, it
  adds the counts the training process journaled and its own to report.json
  and marks meta.json with the status of the journal's `end` line (`crashed`
  without one); at the writer's end it adds what it counted since, with the
  trackers' sections and what is pending;
* writes the writer's final state (the logger waiting in `close` reads it),
  and removes the registration;
* exits once it has served nothing for `IDLE_EXIT` seconds.

Killed at any moment, or dead of an exception, its keeper (rltrack.agent.keeper)
or else the next logger starts another, which finds the registrations and
continues from the cursors.
`rltrack agent` runs it in the foreground.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from rltrack.agent.files import (
    LOCK,
    STATUS,
    agent_dir,
    process_alive,
    read_json,
    registration_path,
    registrations,
    state_path,
    write_private,
)
from rltrack.delivery.registry import RemoteBackend, RunContext
from rltrack.trackers.remote import error_text
from rltrack.delivery.construct import build_backend
from rltrack.agent.lanes import TrackerRun, import_clients, lane
from rltrack.delivery.cursor import DeliveryBusy
from rltrack.delivery.worker import DeliveryWorker
from rltrack.delivery.files import FilesDelivery
from rltrack.journal import end_torn_tail, journal_path
from rltrack.journal.feed import JournalFeed
from rltrack.core.locks import hold
from rltrack.agent.resources import FILES_PER_WRITER, descriptor_budget, lower_priority, open_descriptors
from rltrack.core.report import Report
from rltrack.delivery.run_end import merge_into_report_file, record_end, tracker_status
from rltrack.core.turns import Faults, Turns

#: Seconds between looks at the registrations: a new run, or a run's end, is seen within that.
SCAN_EVERY = 0.1
#: Seconds between checks that the process of each open run is alive: a crashed run is seen within that.
ALIVE_EVERY = 1.0
#: Seconds without any run to serve before the agent exits.
IDLE_EXIT = float(os.environ.get("RLTRACK_AGENT_IDLE", "30"))
#: Seconds a failing tracker is retried after its run ended; then the rest waits for `rltrack sync`.
#: A tracker that takes batches is never given up, however long its backlog.
RETRY_AFTER_END = float(os.environ.get("RLTRACK_AGENT_RETRY", "300"))
#: Seconds a stopped agent (SIGTERM, `rltrack agent stop`) waits for its trackers to store what they took.
STOP_WAIT = 30.0
#: Seconds between the saves of a writer's state while it runs (at once when it ends).
STATE_EVERY = 0.2
STATUS_EVERY = 1.0
#: At most one rewrite of a run's report.json per this many seconds when its trackers' conditions change.
REPORT_EVERY = 1.0
#: OSErrors of the machine, not of a run: retried at the next turn even while serving a run (see `Agent._contained`).
MACHINE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOSPC, errno.ENOMEM, errno.EDQUOT})
#: Journal entries a feed reads per step: the agent steps every writer's feed in turn.
FEED_BATCH = 1000
#: Seconds a caught-up writer's journal waits before it is read again (below the feed's
#: `FRESH`): a training that logs 10 records a second gave every tracker and file a batch
#: of one, ~3 ms of the agent's CPU each; read twice a second, they take a few at once.
FEED_EVERY = 0.5


class Writer:
    """One registration: one writer of one run, from its logger's start until
    its files are complete and every tracker has it (or was given up)."""

    def __init__(self, key: str, registration: dict[str, Any], report: Report) -> None:
        self.key = key
        self.registration = registration
        #: (inode, mtime, size) of the registration file when it was last read: it is read again only when that changes.
        self.stamp: tuple[int, int, int] | None = None
        self.run_dir = Path(registration["run_dir"])
        self.writer: str | None = registration.get("writer")
        self.report = report
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


class Agent:
    def __init__(self, directory: Path, budget: int) -> None:
        self.dir = directory
        self.started = time.time()
        self.writers: dict[str, Writer] = {}
        #: Descriptors the agent may hold: a writer is picked up only while those held leave
        #: `FILES_PER_WRITER` of it; the others wait for descriptors to free (their journals keep everything).
        self.budget = budget
        self.queued = 0  # registrations waiting for descriptors at the last scan
        self._trouble: set[str] = set()  # the errors of the agent's own work already printed
        self.reports: dict[Path, tuple[Report, int]] = {}  # per run: its report, and how many writers use it
        self.tracker_runs: dict[tuple[Path, str, str], TrackerRun] = {}
        self.lanes: dict[tuple[str, str], Turns] = {}
        self.host = socket.gethostname()
        self._status_at = 0.0
        self._scanned_at = 0.0
        self._alive_checked_at = 0.0
        #: The signal that asked the agent to stop (SIGTERM, SIGINT, SIGHUP: see `stop`), or None.
        self.stop_signal: int | None = None

    def run(self) -> None:
        idle_since = time.monotonic()
        while True:
            if self.stop_signal is not None:
                self.stop()
                return
            self._contained("scan", self._scan)
            busy = False
            for writer in list(self.writers.values()):
                try:  # an OSError (descriptors, disk) is the machine's: tried again at the next turn
                    busy = self._contained(f"serve {writer.run_dir}", lambda: self._serve(writer), of_a_run=True) or busy
                except Exception as exc:  # one run's fault (a journal it cannot read) must not end the agent of every run
                    writer.failed("agent", "serve", exc)
                    self._save_state(writer)  # the logger reads the error there, and says it
                    if writer.ended_at is not None and time.monotonic() - writer.ended_at > RETRY_AFTER_END:
                        for worker in writer.workers.values():  # given up like a failing tracker: the rest waits for `rltrack sync`
                            worker.stop()
                        if all(worker.done for worker in writer.workers.values()):  # each lane applies its stop at its next step
                            self._finish(writer)
            now = time.monotonic()
            if now - self._status_at >= STATUS_EVERY:
                self._contained("status", self._save_status)
                self._status_at = now
            if self.writers or registrations(self.dir):
                idle_since = now
            elif now - idle_since >= IDLE_EXIT:
                self._save_status()
                return
            if not busy:
                time.sleep(SCAN_EVERY)

    def stop(self) -> None:
        """Stores what it holds and ends: the local files flushed, each
        tracker's staged rows stored and its cursor moved over them (each
        worker on its own thread, `DeliveryWorker.halt`), within
        `STOP_WAIT`; what is left of each run waits in its journal for the
        next agent (the next logger starts one) or `rltrack sync`."""
        workers = [worker for writer in self.writers.values() for worker in writer.workers.values() if not worker.done]
        for worker in workers:
            worker.halt()
        for turns in self.lanes.values():
            turns.wake.set()
        for writer in self.writers.values():
            self._contained("flush", writer.files.flush)
        deadline = time.monotonic() + STOP_WAIT
        while not all(worker.done for worker in workers) and time.monotonic() < deadline:
            time.sleep(SCAN_EVERY)
        for writer in self.writers.values():
            self._contained("save", lambda: self._save_state(writer))
        self._contained("status", self._save_status)
        held = sum(not worker.done for worker in workers)
        print(f"rltrack agent {os.getpid()}: stopped ({signal.Signals(self.stop_signal or signal.SIGTERM).name}): "
              + (f"{held} tracker(s) had not stored what they took after {STOP_WAIT:.0f} s (delivered again from the journal); " if held else "stored what it held; ")
              + f"{len(self.writers)} run writer(s) wait in their journals for the next agent", file=sys.stderr, flush=True)  # fmt: skip

    def _contained(self, what: str, call: Callable[[], Any], of_a_run: bool = False) -> Any:
        """`call()`; an OSError (out of descriptors, a full disk) is printed once
        per kind and the work is tried again at the next turn, not the agent's
        end. For work `of_a_run`, only the machine's (`MACHINE_ERRNOS`) are:
        any other is that run's fault (a journal that became a directory),
        raised for the caller to tell that run's logger."""
        try:
            return call()
        except OSError as exc:
            if of_a_run and exc.errno not in MACHINE_ERRNOS:
                raise
            kind = f"{what.split()[0]}: {type(exc).__name__} {exc.errno}"
            if kind not in self._trouble:
                self._trouble.add(kind)
                print(f"rltrack agent: {what}: {type(exc).__name__}: {exc} (tried again; further ones not printed)", file=sys.stderr, flush=True)
            return False

    # ---- registrations ----------------------------------------------------------

    def _scan(self) -> None:
        now = time.monotonic()
        if now - self._scanned_at < SCAN_EVERY:
            return
        self._scanned_at = now
        check_alive = now - self._alive_checked_at >= ALIVE_EVERY
        if check_alive:
            self._alive_checked_at = now
        queued = 0
        held: int | None = None  # descriptors held, counted once a registration is new
        for key, path in registrations(self.dir).items():
            writer = self.writers.get(key)
            if writer is None:
                held = open_descriptors(len(self.writers)) if held is None else held
                if held + FILES_PER_WRITER > self.budget:
                    queued += 1
                    continue
                held += FILES_PER_WRITER
            try:
                info = path.stat()
            except OSError:  # removed meanwhile
                continue
            stamp = (info.st_ino, info.st_mtime_ns, info.st_size)
            if writer is not None and writer.stamp == stamp:
                registration = writer.registration  # unchanged since it was read
            else:
                registration = read_json(path)
                if registration is None:
                    continue
            if writer is None:
                writer = self._pick_up(key, registration)
                if writer is None:
                    continue
            writer.registration, writer.stamp = registration, stamp
            if writer.status is None and registration.get("status"):
                self._end(writer, registration["status"])
            elif writer.status is None and check_alive and not process_alive(int(registration["pid"]), registration.get("pid_start")):
                self._crashed(writer)
            for name in list(writer.waiting):
                self._add_tracker(writer, name)
        self.queued = queued

    def _pick_up(self, key: str, registration: dict[str, Any]) -> Writer | None:
        run_dir = Path(registration["run_dir"])
        if not (run_dir / "meta.json").is_file():  # the run directory is gone
            registration_path(self.dir, key).unlink(missing_ok=True)
            return None
        for entry in registration.get("sys_path", []):  # for backends of the user's own (`module:Class`)
            if entry not in sys.path:
                sys.path.append(entry)
        report, users = self.reports.get(run_dir, (Report(), 0))
        writer = Writer(key, registration, report)
        context = RunContext(run_dir, registration["name"], registration["config"], report, writer.writer)
        sinks = []
        for name, settings in registration["files"].items():
            try:
                sinks.append(build_backend(name, settings, "the run's config"))
            except Exception as exc:
                writer.failed(name, "open", exc)
        writer.files = FilesDelivery(context, sinks, writer.faults)
        writer.feed = JournalFeed(writer.files.journal, writer.files.offset)
        writer.feed.consumers.append(writer.files)
        if sinks and writer.files.rebuilt:
            report.count("rebuilt", "the agent writing the local files was killed: they were written anew from the journal", section="files")
        self.reports[run_dir] = (report, users + 1)  # once nothing above can fail (out of descriptors: picked up at a later scan)
        self.writers[key] = writer
        return writer

    def _add_tracker(self, writer: Writer, name: str) -> None:
        settings = writer.registration["trackers"][name]
        identity = json.dumps(settings, sort_keys=True, default=str)
        group_key = (writer.run_dir, name, identity)
        tracker_run = self.tracker_runs.get(group_key)
        try:
            if tracker_run is None:
                backend = build_backend(name, settings, "the run's config")
                assert isinstance(backend, RemoteBackend)
                backend.open(RunContext(writer.run_dir, writer.registration["name"], writer.registration["config"], writer.report))
                tracker_run = self.tracker_runs[group_key] = TrackerRun(backend)
            worker = DeliveryWorker(tracker_run.backend, writer.run_dir, writer.writer, lock_wait=0, shared=tracker_run.workers, feed=writer.feed)
        except DeliveryBusy:  # `rltrack sync` delivers it now: picked up once it lets go
            return
        except Exception as exc:
            writer.failed(name, "open", exc)
            writer.waiting.discard(name)
            return
        writer.waiting.discard(name)
        if writer.status is not None:
            worker.end(tracker_status(writer.status))
        writer.workers[name] = worker
        tracker_run.workers.append(worker)
        writer.feed.consumers.append(worker)
        turns = self.lanes.get((name, identity))
        if turns is None:
            import_clients(tracker_run.backend, writer.failed)
            turns = self.lanes[(name, identity)] = lane(name)
        turns.add(worker)

    # ---- serving a writer ---------------------------------------------------------

    def _serve(self, writer: Writer) -> bool:
        """Reads a batch of the writer's journal for its files and trackers; ends
        the writer once everything is done. True if busy."""
        busy = False
        files = writer.files
        now = time.monotonic()
        due = writer.status is not None or now - writer.caught_up_at >= FEED_EVERY
        if due and not writer.feed.ended and (files.closed or files.flush()):  # the files on disk first: a full disk holds the journal's next batch back
            busy = writer.feed.step(FEED_BATCH)
            if not busy:
                writer.caught_up_at = now
        if not files.closed and not busy and files.flush() and writer.status is not None and writer.feed.ended:  # read to the end of the writer's journal
            if not writer.end_recorded:  # before the files' cursor is closed: killed between, the next agent reads the counts again
                self._record_end(writer, delivering=True)
                writer.end_recorded = True
            files.close(writer.status)
        if not files.closed and files.blocked and writer.ended_at is not None and now - writer.ended_at > RETRY_AFTER_END:
            files.give_up()  # a disk that stays full: the files are written anew by the next session, from the journal
        if writer.status is not None and files.closed:
            for worker in writer.workers.values():
                if not worker.done and (worker.fix is not None or worker.failing_longer_than(RETRY_AFTER_END, since=writer.ended_at)):
                    worker.stop()  # an error that cannot heal is not retried for minutes after the end: `rltrack sync` once fixed
            if writer.ended_at is not None and now - writer.ended_at > RETRY_AFTER_END:
                writer.waiting.clear()
            if not writer.waiting and all(worker.done for worker in writer.workers.values()):
                self._finish(writer)
                return busy
        if now - writer.saved_at >= STATE_EVERY:
            self._save_state(writer)
        self._report_trackers(writer, now)
        return busy

    def _end(self, writer: Writer, status: str) -> None:
        """The writer's journal is complete: deliver the rest, then end the trackers' runs with `status`."""
        writer.status = status
        writer.ended_at = time.monotonic()
        writer.feed.complete = True
        for worker in writer.workers.values():
            worker.end(tracker_status(status))

    def _crashed(self, writer: Writer) -> None:
        """The writer's process is gone without closing the run: what its journal holds is delivered."""
        journal = journal_path(writer.run_dir, writer.writer)
        if end_torn_tail(journal) == "cut":
            writer.report.count("torn", f"{journal.name}: the last line was cut short by a crash and is removed", section="journal")
        self._end(writer, "crashed")

    def _record_end(self, writer: Writer, delivering: bool) -> None:
        """Adds the run's counts (the training process's, journaled, and the
        agent's) and the sections of the writer's trackers to report.json;
        marks meta.json ended with the status the journal ends with (else the
        registration's: `crashed`), unless it is marked already. While
        trackers are `delivering`, what they count stays in the run's report
        until their cursors take it (see `DeliveryWorker._confirm`)."""
        assert writer.status is not None, "a writer's end is recorded once it has ended"
        status = writer.files.ended or writer.status
        self._save_report(writer, delivering, lambda counts, trackers, states: record_end(
            writer.run_dir, writer.writer, int(writer.registration["pid"]), status, counts, trackers, states))

    def _report_trackers(self, writer: Writer, now: float) -> None:
        """Rewrites report.json when a tracker's condition changed (delivered, given up,
        failing, with the error), at most once every `REPORT_EVERY` seconds."""
        if now - writer.report_saved_at < REPORT_EVERY or self._conditions(writer) == writer.reported:
            return
        writer.report_saved_at = now
        self._save_report(writer, True, lambda counts, trackers, states: merge_into_report_file(writer.run_dir, counts, trackers, states))

    def _save_report(self, writer: Writer, delivering: bool, save: Callable[[dict[str, Any], list[str], dict[str, Any]], None]) -> None:
        """`save(counts, trackers, states)`: what the run's report counted since
        (while trackers are `delivering`, their sections stay until their
        cursors take them), the writer's trackers and their conditions. On a
        full disk the counts are kept for the next save."""
        report = self.reports[writer.run_dir][0]
        leave = {run.backend.name for key, run in self.tracker_runs.items() if key[0] == writer.run_dir} if delivering else set()
        states = self._conditions(writer)
        counts = report.take(leave)
        try:
            save(counts, [worker.backend.name for worker in writer.workers.values()], states)
        except OSError as exc:
            report.add(counts)  # kept for the next save of report.json
            writer.failed("report", "save", exc)
            return
        writer.reported = states

    def _conditions(self, writer: Writer) -> dict[str, dict[str, Any]]:
        """Each tracker's condition (`DeliveryWorker.condition`); one the agent could not open is "not opened", with its error."""
        states = {worker.backend.name: worker.condition() for worker in writer.workers.values()}  # named as report.json's sections
        for name in writer.registration["trackers"]:
            if name not in writer.workers:
                states[name] = {"state": "not opened", "error": writer.errors.get(name) or "another process delivers it (rltrack sync?)"}
        return states

    def _finish(self, writer: Writer) -> None:
        """Records the end (again: what was counted since, the trackers as they are now), saves the final state, forgets the writer."""
        pending = {name: worker.last_error for name, worker in writer.workers.items() if not worker.caught_up()}
        for name in writer.registration["trackers"]:  # one the agent could not open has all of it pending
            if name not in writer.workers:
                pending[name] = writer.errors.get(name)
        if not writer.files.closed and writer.registration["files"]:  # given up after an error serving the writer
            pending["files"] = writer.errors.get("agent")
        self._record_end(writer, delivering=False)
        report, users = self.reports[writer.run_dir]
        if users > 1:
            self.reports[writer.run_dir] = (report, users - 1)
        else:
            del self.reports[writer.run_dir]
            for group_key in [k for k in self.tracker_runs if k[0] == writer.run_dir]:
                del self.tracker_runs[group_key]
        state = {**writer.state(), "done": True, "pending": pending}
        write_private(state_path(self.dir, writer.key), state)
        registration_path(self.dir, writer.key).unlink(missing_ok=True)
        del self.writers[writer.key]

    def _save_state(self, writer: Writer) -> None:
        state = writer.state()
        if state != writer.saved_state:
            write_private(state_path(self.dir, writer.key), state)
            writer.saved_state = state
        writer.saved_at = time.monotonic()

    def _save_status(self) -> None:
        status = {
            "pid": os.getpid(),
            "started": self.started,
            "saved": time.time(),
            "runs": [{"key": key, **writer.state()} for key, writer in self.writers.items()],
            "queued": self.queued,
            "budget": self.budget,
            "descriptors": open_descriptors(len(self.writers)),
        }
        write_private(self.dir / STATUS, status)



def main(foreground: bool = False, directory: Path | None = None) -> int:
    """Runs the agent of `directory` (default: this process's, see
    rltrack.agent.files) until it has been idle for `IDLE_EXIT` seconds;
    returns at once if another agent runs."""
    directory = directory or agent_dir()
    lock = hold(directory / LOCK, 1.0)  # a logger checking whether an agent runs holds it for an instant
    if lock is None:
        if foreground:
            print(f"rltrack agent: another agent already serves {directory} (see `rltrack status`)", file=sys.stderr)
        return 0
    if not foreground:
        lower_priority()
    budget = descriptor_budget()
    write_private(directory / "agent.json", {"pid": os.getpid(), "started": time.time(), "keeper": None if foreground else os.getppid()})
    print(f"rltrack agent {os.getpid()}: serving {directory}", file=sys.stderr, flush=True)
    agent = Agent(directory, budget)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # stopped on purpose: store what it holds first (`Agent.stop`)
        signal.signal(sig, lambda signum, frame: setattr(agent, "stop_signal", signum))
    try:
        agent.run()
    except Exception as exc:  # its keeper starts another, which continues from the cursors
        traceback.print_exc()
        print(f"rltrack agent {os.getpid()}: died: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        os._exit(1)
    if agent.stop_signal is None:
        print(f"rltrack agent {os.getpid()}: idle for {IDLE_EXIT:.0f} s, exiting", file=sys.stderr, flush=True)
    sys.stderr.flush()
    os._exit(0)  # a tracker client's thread stuck in a call must not hold the exit


if __name__ == "__main__":
    main(directory=Path(sys.argv[1]) if len(sys.argv) > 1 else None)
