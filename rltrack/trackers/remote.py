"""The interface of trackers that are fed from the journal (MLflow, W&B, Neptune).

A remote backend never sees the pipeline thread. A `DeliveryWorker` reads the
journal from the backend's cursor and calls `deliver` with batches of at most
`max_batch` events and their ids (`EventId`: the journal's writer and the
byte offset after the line, unique in the run and the same in every delivery);
`deliver` either takes the whole batch or raises, and the same batch is
offered again after a backoff (or, when `refuses` says the error is in the
data, in halves down to the events refused; `sendable` leaves out what the
tracker is known to refuse before it is sent). So `deliver` must be safe to repeat: a
tracker that can store an id with a value does (trackio's `log_id`), the
others make what they send a function of the event (MLflow: timestamps fixed
at capture make the store ignore duplicates). The tracker's run is created
on first delivery, not in the constructor.

Delivery keeps the tracker's state: `state` (the tracker's run id and
whatever it needs to continue that run, a JSON-serialisable dict the backend
fills) is saved in the cursor as soon as it changes, and handed back by
`resume` when delivery starts again, in any process. No
backend writes files of its own in the run's `cursors/` folder.

A tracker that takes a batch before it is safely stored (W&B hands rows to
its own writer process; MLflow's bulk SQLite writer stages the rows of every
run for one transaction, see rltrack.trackers.mlflow.sqlite) says how far it
has got with `position` and how far is stored with `durable_position`: the
cursor advances only over what is stored, together with the position it
stands for, and `resume` tells the backend that position when
delivery resumes from the cursor, so that it skips what the tracker already
holds beyond it. At the end of a journal, `store_now` asks it not to wait
any longer. A tracker that keeps several batches in flight (MLflow's
server deliveries) works the same way, and on a failed batch `rewind`s:
delivery goes back to its cursor.
"""

from __future__ import annotations

import errno
import re
from pathlib import Path
from typing import Any, Callable, NamedTuple, Sequence

from rltrack.sinks.base import RunContext
from rltrack.core.events import Event
from rltrack.core.refusals import encodable


def check_names(**values: str | None) -> None:
    """Settings that are left out or non-empty strings (project, name, dir, ...)."""
    for key, value in values.items():
        if value is not None and (not isinstance(value, str) or not value):
            raise ValueError(f"{key} = {value!r} must be a non-empty string")


def check_tags(tags: Sequence[str]) -> None:
    if isinstance(tags, str) or not all(isinstance(t, str) for t in tags):
        raise ValueError(f'tags = {tags!r} must be a list of strings, e.g. tags = ["ppo", "cartpole"]')


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_RULE = re.compile(r"^[-=_* ]*([A-Za-z]+(Exception|Error))?[-=_* ]*$")  # a help page's banner: ----NeptuneXException----


def error_text(exc: BaseException) -> str:
    """`Type: message` in one line: the first line of the message that says
    something, without terminal colours, at most 300 characters. A tracker's
    own help page (Neptune prints a page of advice, colours and all, some of
    which rltrack refuses, such as a token in code) is not pasted into rltrack's messages."""
    for line in _ANSI.sub("", str(exc)).splitlines():
        line = line.strip()
        if line and not _RULE.match(line):
            return f"{type(exc).__name__}: {line[:300]}"
    return type(exc).__name__


def raised(exc: BaseException, *names: str) -> bool:
    """Whether `exc` is an instance of a class named one of `names` (a
    tracker's exception classes, without importing its package)."""
    return any(cls.__name__ in names for cls in type(exc).__mro__)


class SessionLost(Exception):
    """The tracker's session stopped storing what it takes (W&B's writer
    process stops for good once its folder's disk fills) and the backend has
    let it go. Delivery goes back to its cursor; the next `deliver` opens a
    new session, which skips what the tracker holds beyond the cursor (see
    `resume`) and takes the rest."""


class StoreNotReady(RuntimeError):
    """A tracker's store could not be made whole when the run starts
    (`RemoteBackend.make_store`); the message says why and what to do.
    `repair`: what the user must do (retrying cannot help); None: it may pass."""

    def __init__(self, message: str, repair: str | None = None) -> None:
        super().__init__(message)
        self.repair = repair


class EventId(NamedTuple):
    """Which journal line an event was read from: its writer (None: the
    run's only journal) and the byte offset after the line."""

    writer: str | None
    offset: int

    def __str__(self) -> str:
        return f"{self.writer or ''}:{self.offset}"


class RemoteBackend:
    name = ""
    #: What the tracker's files in the run's `cursors/` folder (its cursor, its
    #: run's state) are named after when not `name`: `rltrack sync` sets it
    #: before `open` for a store other than the one the run was delivered to.
    cursor_key = ""
    #: Events per `deliver` call; each backend splits further to its tracker's limits.
    max_batch = 1000
    #: The tracker client's modules, imported by the agent on its main thread before this tracker's lane starts.
    client_modules: tuple[str, ...] = ()
    #: The tracker takes the journal's lines as they are (`deliver_lines`: a
    #: mirror of the journal, control lines included) rather than its events (`deliver`).
    takes_lines = False
    #: The tracker's coarser view of the journal, (window seconds, "last" or "mean"):
    #: settings `every` / `max_values_per_second` and `thin`, which every tracker
    #: takes (rltrack.delivery.thinning); None: every value.
    view: tuple[float, str] | None = None

    @classmethod
    def validate(cls, settings: dict[str, Any]) -> None:
        """As `Backend.validate`: the training process checks a tracker's settings, the agent builds it."""
        cls(**settings)

    @classmethod
    def check_environment(cls, settings: dict[str, Any]) -> None:
        """What only this machine can tell about the settings (the tracker's
        package installed, credentials in the environment), raising ValueError
        or `MissingExtraError`; checked for a tracker in `backends.use` only,
        where `validate` checks every table's values, used or not."""

    @classmethod
    def make_store(cls, settings: dict[str, Any], stores: Path) -> None:
        """Makes the tracker's store whole where rltrack makes it (in `stores`,
        run.stores), when a run starts (`make_logger`, `rltrack run` before its
        command): before the first value, so that no client opening it races
        its making. Nothing for a tracker whose store makes itself safely
        (trackio makes its tables with `CREATE TABLE IF NOT EXISTS` under a
        lock of its own, which its dashboard takes too)."""

    @property
    def cursor_name(self) -> str:
        return self.cursor_key or self.name

    def target(self, run: RunContext) -> str:
        """Which store and grouping this tracker's settings deliver `run` to
        (its URI or directory, and project or experiment), as text: a cursor
        records it, so that delivering to another store starts afresh; "": not
        known (then every delivery counts as the same store)."""
        return ""

    def open(self, run: RunContext) -> None:
        self.run = run
        #: The tracker's run id and resume data (JSON-serialisable), handed
        #: over by `resume`; delivery saves a copy in the cursor whenever it changes.
        self.state: dict[str, Any] = {}
        #: Saves `state` in the cursor at once: delivery sets it before each
        #: `deliver`; a backend calls it when its state changes before a write
        #: the tracker cannot take back (a new tracker run, before its first row).
        self.save_state: Callable[[], None] = lambda: None

    def deliver(self, events: list[Event], ids: list[EventId]) -> None:
        """Takes `events` (`ids[i]` is the id of `events[i]`) or raises."""
        raise NotImplementedError

    def deliver_lines(self, writer: str | None, journal: Path, start: int, end: int) -> None:
        """For a tracker that `takes_lines`: takes the bytes [`start`, `end`)
        of `writer`'s `journal` (whole lines) or raises."""
        raise NotImplementedError

    def sendable(self, event: Event) -> tuple[Event | None, list[str]]:
        """`event` without what this tracker is known in advance to refuse
        (None: all of it), and what was left out, one `what: why` text per
        value or event (delivery counts each as refused, with its place in the
        journal). Every tracker: no lone surrogate (rltrack.core.refusals);
        a tracker adds its own rules (empty names, NUL bytes, lengths)."""
        return encodable(event)

    def refuses(self, exc: Exception) -> str | None:
        """Why, when `exc` is the tracker refusing something in the data of
        the batch (not its network, its server or the disk), None otherwise:
        delivery then finds the events it refuses and delivers the rest
        (see rltrack.delivery.worker). Text it cannot encode, a name too long
        for a file, a NUL byte in a file name."""
        in_data = (
            isinstance(exc, UnicodeError)
            or (isinstance(exc, OSError) and exc.errno == errno.ENAMETOOLONG)
            or (isinstance(exc, ValueError) and "null byte" in str(exc))
        )
        return f"refused by {self.name}: {error_text(exc)}" if in_data else None

    def close(self, status: str) -> None:
        """Ends the tracker's run with `status` (finished, failed, killed)."""

    def position(self) -> int | None:
        """How far the tracker's run has got after the last `deliver` (a count
        the tracker keeps, e.g. W&B's history rows); None: it keeps none."""
        return None

    def durable_position(self) -> int | None:
        """The `position` up to which the tracker has stored what it took;
        None: everything is stored once `deliver` returns."""
        return None

    def store_now(self) -> None:
        """Stores what the tracker took without waiting any longer (the end of a journal)."""

    def rewind(self) -> bool:
        """After an error: forgets what it took but has not stored (batches
        still in flight, see rltrack.trackers.inflight), so that delivery
        sends it again from the cursor; True when there was any."""
        return False

    def cannot_heal(self, exc: Exception) -> str | None:
        """What to do about `exc` when retrying cannot help (credentials
        refused, an unknown project, a store the URI cannot name); None for
        an error that may pass (a server down, a timeout): that one is
        retried with backoff. The delivery retries the other kind only after
        minutes, and says so where the user looks, once."""
        if isinstance(exc, ImportError):
            return f"install what is missing ({exc.name or exc}) in the environment the agent runs in"
        return None

    def resume(self, position: int | None, state: dict[str, Any]) -> None:
        """Delivery of one journal (re)starts at a cursor saved at
        `position` (whatever the tracker's run holds beyond it is the start
        of what comes next; None: a cursor that has delivered nothing, so
        nothing beyond it is held) with the `state` saved there. Called once per
        journal: the writers of a run share one backend, whose state is the
        first one handed over until it has its own."""
        if not self.state:
            self.state = dict(state)
