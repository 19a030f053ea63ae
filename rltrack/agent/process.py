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
  reads its backlog from the journal itself (see rltrack.journal.feed); what
  is done for one writer at each turn is rltrack.agent.writer's;
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
from rltrack.delivery.construct import build_backend, tracker_view
from rltrack.agent.lanes import TrackerRun, import_clients, lane
from rltrack.delivery.cursor import DeliveryBusy
from rltrack.delivery.worker import DeliveryWorker
from rltrack.delivery.files import FilesDelivery
from rltrack.journal.feed import JournalFeed
from rltrack.core.locks import hold
from rltrack.agent.resources import FILES_PER_WRITER, descriptor_budget, lower_priority, open_descriptors
from rltrack.core.report import Report
from rltrack.delivery.run_end import tracker_status
from rltrack.core.turns import Turns
from rltrack.agent.writer import RETRY_AFTER_END, Writer

#: Seconds between looks at the registrations: a new run, or a run's end, is seen within that.
SCAN_EVERY = 0.1
#: Seconds between checks that the process of each open run is alive: a crashed run is seen within that.
ALIVE_EVERY = 1.0
#: Seconds without any run to serve before the agent exits.
IDLE_EXIT = float(os.environ.get("RLTRACK_AGENT_IDLE", "30"))
#: Seconds a stopped agent (SIGTERM, `rltrack agent stop`) waits for its trackers to store what they took.
STOP_WAIT = 30.0
STATUS_EVERY = 1.0
#: OSErrors of the machine, not of a run: retried at the next turn even while serving a run (see `Agent._contained`).
MACHINE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOSPC, errno.ENOMEM, errno.EDQUOT})


class Agent:
    """The agent's main thread: finds the writers to serve in the
    registrations, serves each in turn, and gives their trackers to the lanes."""

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
                    writer.save_state()  # the logger reads the error there, and says it
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
            self._contained("save", writer.save_state)
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
                writer.end(registration["status"])
            elif writer.status is None and check_alive and not process_alive(int(registration["pid"]), registration.get("pid_start")):
                writer.crashed()
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
        writer = Writer(key, registration, report, state_path(self.dir, key), lambda: self._trackers_of(run_dir))
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
            worker = DeliveryWorker(
                tracker_run.backend, writer.run_dir, writer.writer, lock_wait=0, shared=tracker_run.workers, feed=writer.feed, view=tracker_view(settings),
            )  # fmt: skip
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
        """A turn of `writer` (`Writer.serve`); forgets it once it is over. True if busy."""
        busy = writer.serve()
        if writer.over:
            self._finish(writer)
        return busy

    def _trackers_of(self, run_dir: Path) -> set[str]:
        """The trackers of the run in `run_dir` (of every writer of the run): their report sections stay while they deliver."""
        return {run.backend.name for key, run in self.tracker_runs.items() if key[0] == run_dir}

    def _finish(self, writer: Writer) -> None:
        """Records the end (again: what was counted since, the trackers as they are now), saves the final state, forgets the writer."""
        pending = {name: worker.last_error for name, worker in writer.workers.items() if not worker.caught_up()}
        for name in writer.registration["trackers"]:  # one the agent could not open has all of it pending
            if name not in writer.workers:
                pending[name] = writer.errors.get(name)
        if not writer.files.closed and writer.registration["files"]:  # given up after an error serving the writer
            pending["files"] = writer.errors.get("agent")
        writer.record_end(delivering=False)
        report, users = self.reports[writer.run_dir]
        if users > 1:
            self.reports[writer.run_dir] = (report, users - 1)
        else:
            del self.reports[writer.run_dir]
            for group_key in [k for k in self.tracker_runs if k[0] == writer.run_dir]:
                del self.tracker_runs[group_key]
        state = {**writer.state(), "done": True, "pending": pending}
        write_private(writer.state_file, state)
        registration_path(self.dir, writer.key).unlink(missing_ok=True)
        del self.writers[writer.key]

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
