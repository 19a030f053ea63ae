"""The contract of trackers fed from the journal (MLflow, W&B, Neptune, trackio, the storage mirror, plug-ins).

A tracker holds its client calls and declares its rules as data (`Rules`);
everything else is delivery's, decided once for every tracker
(rltrack.delivery.worker): cursors and durable positions, retries and
backoff, what is left out before sending (rltrack.delivery.outgoing: text
with no UTF-8 form, and the kinds and names the tracker's rules refuse), the split of a batch it
refuses, thinning, non-finite histogram entries and steps beyond 64 bits
(rltrack.core.refusals). The contract, ten members:

* `name` and `rules`: what it is called in a config, and what it declares
  (batch size, client modules, whether it takes the journal's lines, the
  value kinds it takes, the names it refuses, whether it stores later than it takes);
* `validate(settings, in_use)` and `make_store(settings, stores)`: the
  settings checked where the run starts, its store made whole there;
* `target(run)`: which store and grouping the settings deliver to;
* `open(run)`, then `resume(position, state)` once per journal delivered
  into it (open or resume the tracker's run);
* `deliver(events, ids, ...)`: takes a batch or raises, and says how far
  the tracker has got and what of it is stored (`Progress`);
* `judge(exc)`: what an error means, a refusal of something in the data or
  one retrying cannot heal (`Failure`);
* `close(status)`: ends the tracker's run.

Delivery calls `deliver` with batches of at most `rules.max_batch` events
and their ids (`EventId`: the journal's writer and the byte offset after the
line, unique in the run and the same in every delivery). `deliver` takes the
whole batch or raises, and the same batch is offered again after a backoff
(or, when `judge` says the error is in the data, in halves down to the
events refused). So `deliver` must be safe to repeat: a tracker that can
store an id with a value does (trackio's `log_id`), the others make what they
send a function of the event (MLflow: timestamps fixed at capture make the
store ignore duplicates). The tracker's run is created on first delivery,
not in the constructor.

Delivery keeps the tracker's state: `state` (the tracker's run id and
whatever it needs to continue that run, a JSON-serialisable dict the backend
fills) is saved in the cursor as soon as it changes (at once when the
backend calls `save_state`), and handed back by `resume` when delivery
starts again, in any process. No backend writes files of its own in the
run's `cursors/` folder.

A tracker that takes a batch before it is safely stored (`rules.stores_later`:
W&B hands rows to its own writer process; MLflow's bulk SQLite writer stages
the rows of every run for one transaction; the storage mirror gathers lines
into segments) says so in what `deliver` returns: `Progress(taken, stored)`,
how far its run has got (a count it keeps) and up to where that is stored.
The cursor advances only over what is stored, together with the position it
stands for, and `resume` tells the backend that position when delivery
resumes from the cursor, so that it skips what the tracker already holds
beyond it. Delivery asks such a tracker how far it has stored with an empty
`deliver`, and at the end of a journal tells it not to wait any longer
(`store_now=True`). A tracker that keeps several batches in flight (MLflow's
server deliveries) and forgets them when one fails raises `Forgotten`:
delivery goes back to its cursor.
"""

from __future__ import annotations

import errno
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NamedTuple, Sequence

from rltrack.sinks.base import RunContext
from rltrack.core.events import KINDS, Event


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


class Forgotten(Exception):
    """Raised by `deliver` for the error of a batch taken but not stored
    (several in flight): the tracker forgot the batches after the last one
    it stored, and delivery sends them again from its cursor."""


class Lines(NamedTuple):
    """For a tracker that takes the journal's lines as they are
    (`Rules.takes_lines`): the bytes [`start`, `end`) of `writer`'s `journal`, whole lines."""

    writer: str | None
    journal: Path
    start: int
    end: int


class Progress(NamedTuple):
    """How far a tracker that stores later than it takes has got: `taken`,
    a count it keeps (W&B's history rows, batches), and up to which count
    that is `stored`. None, None: everything taken is stored."""

    taken: int | None = None
    stored: int | None = None


#: What a `deliver` returns when everything it took is stored (None is read the same).
STORED = Progress()


class Failure(NamedTuple):
    """What an error of a tracker means (`RemoteBackend.judge`): `refused`,
    why, when the tracker refuses something in the data of the batch (not its
    network, its server or the disk: delivery finds the events it refuses and
    delivers the rest); `fix`, what to do, when retrying cannot help
    (credentials refused, an unknown project: retried only after minutes,
    and said once where the user looks). Neither: it may pass, and the
    batch is retried with backoff."""

    refused: str | None = None
    fix: str | None = None


@dataclass(frozen=True)
class Rules:
    """What a tracker declares about what it takes."""

    #: Events per `deliver` call; each backend splits further to its tracker's limits.
    max_batch: int = 1000
    #: The tracker client's modules, imported by the agent on its main thread before this tracker's lane starts.
    client_modules: tuple[str, ...] = ()
    #: The tracker takes the journal's lines as they are (`deliver(..., lines=)`: a
    #: mirror of the journal, control lines included): nothing is left out for it.
    takes_lines: bool = False
    #: It refuses a value with an empty name (W&B: its `define_metric` requires one).
    named: bool = False
    #: Kinds whose values it stores in a file named after the value's key (W&B's media
    #: files): a NUL byte refused there, and a name whose parts a file name cannot hold.
    file_named: tuple[str, ...] = ()
    #: It takes a batch before it stores it, and says how far it has stored (`Progress`).
    stores_later: bool = False
    #: The value kinds it takes (rltrack.core.events.KINDS); an event of another kind is left out before
    #: sending and counted as dropped.
    kinds: tuple[str, ...] = KINDS


class RemoteBackend:
    """The contract (see the module's docstring)."""

    name = ""
    rules = Rules()

    @classmethod
    def validate(cls, settings: dict[str, Any], in_use: bool = False) -> None:
        """As `Backend.validate`: the training process checks a tracker's
        settings, the agent builds it. `in_use` (a tracker in `backends.use`):
        also what only this machine can tell (the tracker's package installed,
        credentials in the environment), raising ValueError or
        `MissingExtraError`; a table of a tracker not in use is spared that."""
        cls(**settings)

    @classmethod
    def make_store(cls, settings: dict[str, Any], stores: Path) -> None:
        """Makes the tracker's store whole where rltrack makes it (in `stores`,
        run.stores), when a run starts (`make_logger`, `rltrack run` before its
        command): before the first value, so that no client opening it races
        its making. Nothing for a tracker whose store makes itself safely
        (trackio makes its tables with `CREATE TABLE IF NOT EXISTS` under a
        lock of its own, which its dashboard takes too)."""

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

    def resume(self, position: int | None, state: dict[str, Any]) -> Progress:
        """Delivery of one journal (re)starts at a cursor saved at
        `position` (whatever the tracker's run holds beyond it is the start
        of what comes next; None: a cursor that has delivered nothing, so
        nothing beyond it is held) with the `state` saved there; returns how
        far the tracker's run has got. Called once per journal: the writers
        of a run share one backend, whose state is the first one handed over
        until it has its own."""
        if not self.state:
            self.state = dict(state)
        return STORED

    def deliver(self, events: list[Event], ids: list[EventId], *, lines: Lines | None = None, store_now: bool = False) -> Progress | None:
        """Takes `events` (`ids[i]` is the id of `events[i]`; `lines`: the
        journal's bytes they were read from, for a tracker that `takes_lines`)
        or raises. For a tracker that `stores_later`, delivery also calls it
        with no events, to learn how far it has stored, and with `store_now`
        at the end of a journal: store what it took without waiting any longer."""
        raise NotImplementedError

    def judge(self, exc: Exception) -> Failure:
        """What `exc` means for delivery (see `Failure`). Every tracker: text it
        cannot encode, a name too long for a file, a NUL byte in a file name
        are refusals; a missing package cannot heal."""
        in_data = (
            isinstance(exc, UnicodeError)
            or (isinstance(exc, OSError) and exc.errno == errno.ENAMETOOLONG)
            or (isinstance(exc, ValueError) and "null byte" in str(exc))
        )
        if in_data:
            return Failure(refused=f"refused by {self.name}: {error_text(exc)}")
        if isinstance(exc, ImportError):
            return Failure(fix=f"install what is missing ({exc.name or exc}) in the environment the agent runs in")
        return Failure()

    def close(self, status: str) -> None:
        """Ends the tracker's run with `status` (finished, failed, killed)."""
