"""Delivers a run's journal to one remote tracker, from a persisted cursor.

One `DeliveryWorker` per tracker and journal, stepped by the agent (see
rltrack.agent.process) or by `rltrack sync`. It reads complete journal lines
from its cursor (a byte offset, saved in `cursors/<backend>.json`, or
`<backend>@<writer>.json` for one of several writers, after every stored
batch), hands them to the backend in batches, and on failure retries the
same batch with exponential backoff. The backlog lives in the journal on
disk, so memory stays bounded however long a tracker is down. In the agent
a worker takes the batches its writer's `JournalFeed` parsed while it is
caught up, and reads the journal itself while it lags (rltrack.delivery.reading).

A record the tracker cannot take never holds up the rest: what it is known
in advance to refuse (rltrack.delivery.outgoing: text with no UTF-8 form,
kinds and names its `Rules` refuse) is left out before sending, and a batch it refuses for
something in its data (`RemoteBackend.judge`) is split until the refused
records are found; each is counted as refused in the tracker's report
section with its place in the journal (rltrack.core.refusals), the rest
delivered in order. A tracker that is down is no refusal: the batch waits.
What a tracker's run needs to continue (`state`, ids, positions) is in
rltrack.trackers.remote.
"""

from __future__ import annotations

import copy
import os
import time
from collections import Counter, deque
from pathlib import Path
from typing import Any, Callable

from rltrack.trackers.remote import STORED, EventId, Forgotten, Lines, Progress, RemoteBackend, SessionLost, error_text
from rltrack.core.events import Event
from rltrack.journal import count_skipped, journal_path
from rltrack.journal.feed import Batch, JournalFeed
from rltrack.delivery.cursor import LOCK_WAIT, Cursor, lock_cursor, tracker_state
from rltrack.delivery.outgoing import outgoing
from rltrack.delivery.reading import Reading
from rltrack.delivery.thinning import Thinning
from rltrack.core.refusals import refused, split_refused
from rltrack.core.turns import Inbox

BACKOFF_START = 0.5
BACKOFF_MAX = 30.0
#: Seconds before an error that cannot heal (`Failure.fix`) is tried again.
CANNOT_HEAL_WAIT = 300.0
POLL = 0.1
#: At the end of a journal, how long to wait for the tracker to store what it
#: took before leaving the rest behind the cursor (sent again, without
#: doubles, by the next delivery).
STORE_WAIT = 60.0
#: Parsed batches a caught-up worker keeps from its feed; more are dropped (and read from the journal).
#: At most this many batches of a writer stay in memory for a slow tracker; a failing one keeps none.
INBOX = 2


class DeliveryWorker:
    """Feeds `backend` from the journal of one writer of `run_dir`, a batch
    per `step`. It has no thread of its own: the agent steps the workers of
    each tracker on that tracker's thread, `rltrack sync` on its own (see
    `run_until_caught_up`). `close_at_end`: the tracker's run ends once this
    journal is delivered, and every worker of `shared` (the other writers
    feeding the same tracker run) is done. `feed`: the reader of the
    journal whose batches this worker takes while caught up (see `take`).
    Another process delivering the same cursor is waited for (see
    `_lock_cursor`) while it advances, until it has saved no progress for
    `lock_wait` seconds (default `LOCK_WAIT`; 0: not waited for), `waiting`
    called as the wait begins. `view`: the tracker's coarser view
    (`rltrack.delivery.construct.tracker_view`). `cursor_name`: what its
    cursors are named after, when not the tracker (`rltrack sync` to another store).

    One thread owns the worker: the one that steps it (an agent lane,
    `rltrack sync`'s own). Its phase moves `starting` -> `delivering` ->
    `storing` (the tracker's run is ended, waiting for it to store what it
    took) -> `done` (or straight to `done`: given up), and only that thread
    changes it, and the status and cursor. Another thread (the agent's main
    thread, which reads the registrations) sends requests, `end(status)` and
    `stop()`, which the owner applies at its next step."""

    def __init__(
        self, backend: RemoteBackend, run_dir: Path, writer: str | None = None, *, close_at_end: bool = True, lock_wait: float | None = None,
        shared: list[DeliveryWorker] | None = None, feed: JournalFeed | None = None, waiting: Callable[[], None] | None = None,
        view: tuple[float, str] | None = None, cursor_name: str | None = None,
    ) -> None:  # fmt: skip
        self.backend = backend
        self.close_at_end = close_at_end
        self.shared = shared or []
        #: Batches the feed handed over, in journal order (the agent's main thread puts, this worker's thread takes).
        self.inbox: Inbox[Batch] = Inbox(INBOX)
        self.run_dir = run_dir
        self.writer = writer
        self.journal = journal_path(run_dir, writer)
        self.cursor_name = cursor_name or backend.name
        self._lock: int | None = lock_cursor(run_dir, self.cursor_name, writer, LOCK_WAIT if lock_wait is None else lock_wait, waiting)
        self.cursor = Cursor(run_dir, self.cursor_name, writer)  # read once locked: a process that held the lock may have moved it
        self.cursor.target = self.cursor.target or backend.target(backend.run)
        #: Where the journal is read next (ahead of the cursor by what the tracker took but has not stored), from the feed or the journal.
        self.reading = Reading(self.journal, self.cursor.offset, self.inbox, feed, count_skipped(backend.run.report, backend.name))
        self.thinning = Thinning(*view) if view else None
        self._untold: deque[tuple[int, int, int | None]] = deque()  # those batches: (offset after, events, position)
        self.errors = 0
        self.last_error: str | None = None
        #: What the tracker refused of this journal in this delivery, and where it stays (as in report.json).
        self.refused: list[str] = []
        #: `time.monotonic()` of the first failure since the last batch the tracker took (None: not failing).
        self.failing_since: float | None = None
        self._failing_wall = 0  # the same as a wall time (whole seconds)
        #: What to do about the last error when retrying cannot heal it (`Failure.fix`); None: it may pass.
        self.fix: str | None = None
        #: Set once no more lines will be appended (`end`), with the status the tracker's run ends with.
        self.journal_complete = False
        self.status = "finished"
        self.phase = "starting"  # see the class docstring
        self.next_try = 0.0  # `time.monotonic()` before which `step` waits (backoff after a failure)
        self._backoff = BACKOFF_START
        self._storing_until = 0.0  # in phase `storing`: how long the tracker may take to store what it took
        #: What other threads asked for ("end", status), ("stop", None) or ("halt", None), applied by the owner (`_apply_requests`).
        self._requests: deque[tuple[str, str | None]] = deque()

    @property
    def done(self) -> bool:
        """Delivered and ended, or given up: no step does anything more."""
        return self.phase == "done"

    def end(self, status: str) -> None:
        """From any thread: the journal is complete, and the tracker's run
        ends with `status` once it is delivered (applied at the next step)."""
        self._requests.append(("end", status))

    def stop(self) -> None:
        """From any thread: give up at the next step; what is left waits in
        the journal for `rltrack sync`."""
        self._requests.append(("stop", None))

    def halt(self) -> None:
        """From any thread, when the agent stops: at the next step, what the
        tracker took is stored and the cursor moved over it, then the worker
        gives up; the rest waits in the journal for the next agent."""
        self._requests.append(("halt", None))

    def _apply_requests(self) -> None:
        while self._requests:  # deque's append and popleft are atomic: no lock
            what, status = self._requests.popleft()
            if what == "end" and status is not None:
                self.status, self.journal_complete = status, True
            elif what == "stop":
                self.give_up()
            elif what == "halt" and not self.done:
                try:
                    self._confirm(self._ask(store_now=True))
                except Exception as exc:  # noqa: BLE001 - not stored: delivered again from the cursor by the next agent
                    self.backend.run.report.count("errors", error_text(exc), section=self.backend.name)
                self.give_up()

    def step(self) -> bool:
        """Delivers one batch (or retries it, or ends the tracker's run at the
        end of a complete journal). True when more work is waiting right away."""
        self.backend.save_state = self._keep_state  # the writers of a run share one backend: what it saves goes to this one's cursor
        self._apply_requests()  # a halt stores what the tracker took: state it saves then is this worker's too
        if self.done:
            return False
        now = time.monotonic()
        if now < self.next_try:
            return False
        try:
            return self._step(now)
        except Exception as exc:  # the tracker is down or refused: keep the batch, retry later
            self.fault(exc)
            return False

    def fault(self, exc: Exception) -> None:
        """Counts the error; the same batch is tried again after a backoff
        (after minutes when retrying soon cannot help: said once by the agent and the logger)."""
        now = time.monotonic()
        self.inbox.clear()  # a tracker that is down holds no batch in memory: it reads them from the journal once it takes them again
        self._rewind(isinstance(exc, Forgotten))
        self.errors += 1
        if self.failing_since is None:
            self.failing_since, self._failing_wall = now, round(time.time())
        self.last_error = error_text(exc)
        self.backend.run.report.count("errors", self.last_error, section=self.backend.name)
        if isinstance(exc, SessionLost):
            self._new_session()
        self.fix = self.backend.judge(exc.__cause__ if isinstance(exc, Forgotten) and isinstance(exc.__cause__, Exception) else exc).fix
        if self.fix is not None:
            self.next_try = now + CANNOT_HEAL_WAIT
            return
        self.next_try = now + self._backoff
        self._backoff = min(self._backoff * 2, BACKOFF_MAX)

    def _rewind(self, forgotten: bool) -> None:
        """After an error, when the backend forgot batches it took but had not stored (`Forgotten`),
        or windows were open (thinning): the cursor moves over those stored, reading goes on from it."""
        if not forgotten and self.thinning is None:
            return
        try:
            self._confirm()
        except Exception as exc:  # noqa: BLE001 - counted; reading still goes back to the cursor
            self.backend.run.report.count("errors", error_text(exc), section=self.backend.name)
        self._untold.clear()
        self.reading.offset = self.cursor.offset
        if self.thinning is not None:  # its open windows are read again from the cursor, which stops at their first line
            self.thinning = Thinning(self.thinning.every, self.thinning.how)

    def _step(self, now: float) -> bool:
        if self.phase == "starting":
            self._start()
            self.phase = "delivering"
        if self.phase == "storing":
            self._confirm()
            if not self._untold or now > self._storing_until:
                self.give_up()
            return False
        # Read "complete" before the journal: if it was already set, an empty
        # read means everything is delivered; if it gets set after the read,
        # the next step reads once more before ending.
        complete = self.journal_complete
        batch = self.reading.next(self.backend.rules.max_batch)
        if batch is None:  # the feed reads the journal's next lines now
            self._confirm()
            return False
        entries, offset, ends = batch
        if not entries:
            self._confirm()
            if complete and self.thinning is not None and self.thinning.held_from() is not None:
                refusals: list[tuple[str, EventId]] = []
                progress = self._send(*self.thinning.flush(), refusals)  # the windows still open: the journal ends here
                self._count_refused(refusals)
                self._taken(offset, 0, progress)
                return True
            if complete:
                self._end()
            return False
        if self.backend.rules.takes_lines:  # the journal's bytes as they are: nothing is left out
            refusals, dropped = [], Counter[str]()
            taken = sum(1 for entry in entries if type(entry) is Event)
            try:
                progress = _progress(self.backend.deliver([], [], lines=Lines(self.writer, self.journal, self.reading.offset, offset)))
            finally:
                self._keep_state()
        else:
            events, ids, starts, refusals, dropped = outgoing(entries, ends, self.reading.offset, self.writer, self.backend.rules, self.backend.name)
            taken, thinned = len(events), 0
            if self.thinning is not None and events:
                events, ids, thinned = self.thinning.take(events, ids, starts)
            before = len(refusals)
            progress = self._send(events, ids, refusals)
            taken -= len(refusals) - before
            if thinned:  # counted once the batch is delivered: a failed send is taken again, and was counted twice
                self.backend.run.report.count("thinned", self.thinning.describe(), thinned, section=self.backend.name)
        self._count_refused(refusals, dropped)
        self._backoff = BACKOFF_START
        self.failing_since = self.fix = None
        self._taken(offset, taken, progress)
        return True

    def _send(self, events: list[Event], ids: list[EventId], refusals: list[tuple[str, EventId]]) -> Progress | None:
        """Delivers `events`, split down to what the tracker refuses for
        something in their data (`Failure.refused`, see
        rltrack.core.refusals.split_refused: the tracker takes a batch again
        without doubles; each refused one added to `refusals`), and keeps the
        tracker's state; how far the tracker has got (None: nothing sent)."""
        if not events:
            return None
        said: list[Progress] = []

        def deliver(events: list[Event], ids: list[EventId]) -> None:
            said.append(_progress(self.backend.deliver(events, ids)))

        try:
            split_refused(deliver, events, ids, lambda exc: self.backend.judge(exc).refused, refusals)
        finally:  # a tracker run created by a batch that then failed is the one to continue
            self._keep_state()
        return said[-1] if said else None

    def _count_refused(self, refusals: list[tuple[str, EventId]], dropped: Counter[str] | None = None) -> None:
        """Counted once the batch is taken: a batch retried is checked again."""
        for reason, n in (dropped or {}).items():
            self.backend.run.report.count("dropped", reason, n, section=self.backend.name)
        for reason, event_id in refusals:
            self.refused.append(refused(self.backend.run.report, self.backend.name, reason, self.journal, event_id.offset, len(self.refused)))

    def take(self, batch: Batch) -> None:
        """From the feed (on the agent's main thread): keeps `batch` if this
        worker is caught up (it needs the batch's entries next), as long as
        the inbox has room (else it is dropped, counted, and read from the
        journal later). A lagging or failing worker reads the journal itself."""
        if self.failing_since is not None:
            return
        self.reading.offer(batch)

    def caught_up(self) -> bool:
        return self.cursor.offset >= (self.journal.stat().st_size if self.journal.is_file() else 0)

    def pending_bytes(self) -> int:
        return max(0, (self.journal.stat().st_size if self.journal.is_file() else 0) - self.cursor.offset)

    def condition(self) -> dict[str, Any]:
        """Where this tracker stands, for report.json: `state` "delivering",
        "failing" (every batch refused since `failing_since`, a wall time),
        "delivered" (its run ended with everything) or "given up" (the rest
        waits for `rltrack sync`), with the last `error` and its `fix` while not delivered."""
        if self.done:
            state = "delivered" if self.caught_up() else "given up"
        else:
            state = "delivering" if self.failing_since is None else "failing"
        condition: dict[str, Any] = {"state": state}
        if state in ("failing", "given up") and self.last_error:
            condition["error"] = self.last_error
            if self.fix:
                condition["fix"] = self.fix
        if state == "failing":
            condition["failing_since"] = self._failing_wall
        return condition

    def failing_longer_than(self, seconds: float, since: float | None = None) -> bool:
        """True when the tracker has refused every batch for over `seconds`,
        counted from its first failure or from `since` (`time.monotonic()`),
        whichever is later. A tracker that takes batches, however slowly, is
        not failing."""
        if self.failing_since is None:
            return False
        start = self.failing_since if since is None else max(self.failing_since, since)
        return time.monotonic() - start > seconds

    def run_until_caught_up(self, status: str, give_up_after: float | None = None) -> None:
        """For `rltrack sync`: deliver everything on the calling thread, or
        stop once the tracker has been failing for `give_up_after` seconds
        (None: however long), with the rest left in the journal."""
        self.end(status)
        try:
            while not self.done and self.fix is None and not (give_up_after is not None and self.failing_longer_than(give_up_after)):
                if not self.step():
                    time.sleep(min(POLL, max(0.0, self.next_try - time.monotonic())) or POLL)
        finally:
            self.give_up()

    def give_up(self) -> None:
        """Stops here (what is left waits in the journal for `rltrack sync`)
        and releases the cursor; on the owner's thread (others: `stop`)."""
        self.phase = "done"
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    def _start(self) -> None:
        """Tells the backend where its run stood at the cursor, and its state
        there (a cursor without one, of a writer that has delivered nothing
        yet, gets the newest of the tracker's other cursors: one tracker run
        for every writer). A stream that starts afresh saves the position
        first: if this process dies before anything is stored, the next
        delivery still knows where it began."""
        where = _progress(self.backend.resume(self.cursor.position, self.cursor.state or tracker_state(self.run_dir, self.cursor_name)))
        position = where.taken if self.cursor.position is None else None
        if position is not None:
            self.cursor.advance(self.cursor.offset, 0, position)
        self._keep_state()

    def _keep_state(self) -> None:
        """Saves the tracker's state in the cursor as soon as it changes,
        before what it took is stored: a kill meanwhile must not make the
        next delivery start another tracker run, or forget where this one
        keeps its data."""
        if self.backend.state != self.cursor.state:
            self.cursor.advance(self.cursor.offset, 0, state=copy.deepcopy(self.backend.state))

    def _new_session(self) -> None:
        """Back to the cursor, after the tracker's session was lost: what it
        took beyond the cursor and did not store is delivered again, from the
        journal, by a new session (started as after a crash, see `_start`)."""
        self.reading.offset = self.cursor.offset
        self._untold.clear()
        self.phase = "starting"

    def _taken(self, offset: int, events: int, progress: Progress | None) -> None:
        """The tracker took the lines up to `offset` (and said `progress`, None:
        nothing was sent); the cursor may pass them once stored, but not the
        first line of a window still open (thinning)."""
        self.reading.offset = offset
        held = self.thinning.held_from() if self.thinning is not None else None
        taken = progress.taken if progress is not None else self._untold[-1][2] if self._untold else None  # nothing sent: as before
        self._untold.append((offset if held is None else min(offset, held), events, taken))
        self._confirm(progress)

    def _ask(self, store_now: bool = False) -> Progress:
        """How far a tracker that stores later than it takes has stored (`store_now`:
        once it has stored what it took, without waiting any longer); the others store as they take."""
        return _progress(self.backend.deliver([], [], store_now=store_now)) if self.backend.rules.stores_later else STORED

    def _confirm(self, progress: Progress | None = None) -> None:
        """Advances the cursor over the batches the tracker has stored
        (`progress`: what it just said; else it is asked)."""
        if not self._untold:
            return
        stored = (self._ask() if progress is None else progress).stored
        taken, offset, events, position = 0, 0, 0, None
        for batch_offset, batch_events, batch_position in self._untold:
            if not (stored is None or batch_position is None or batch_position <= stored):
                break
            taken, offset, events, position = taken + 1, batch_offset, events + batch_events, batch_position
        if taken:  # with what the backend counted meanwhile: both describe what the tracker holds
            counted = self.backend.run.report.take_section(self.backend.name)
            try:
                self.cursor.advance(offset, events, position, counted)
            except OSError:  # not saved (a full disk): the same batches are confirmed at a later step
                self.backend.run.report.add(counted)
                raise
            for _ in range(taken):
                self._untold.popleft()

    def _end(self) -> None:
        """The journal is delivered: end the tracker's run (unless more writers
        follow into it), then wait a while for the tracker to store what it
        took (W&B may still be writing after `finish` returns)."""
        progress = self._ask(store_now=True)  # if it fails, the next step comes back here
        if self.close_at_end and all(other.done for other in self.shared if other is not self):
            try:
                self.backend.close(self.status)
            except Exception as exc:  # the data is delivered; only the run's final status is missing
                self.last_error = f"close: {type(exc).__name__}: {exc}"
                self.backend.run.report.count("errors", self.last_error, section=self.backend.name)
        self._keep_state()  # the status the tracker's run ended with
        self.phase, self._storing_until = "storing", time.monotonic() + STORE_WAIT
        self._confirm(progress)
        if not self._untold:
            self.give_up()


def _progress(said: Progress | None) -> Progress:
    """What a tracker's `deliver` or `resume` said (None: everything it took is stored)."""
    return STORED if said is None else said
