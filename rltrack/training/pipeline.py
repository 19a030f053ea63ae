"""The pipeline thread: what happens to each record after `Logger.write` returned.

The `Logger` (rltrack.training.logger) is the training thread's handle: it appends
records and control calls to a deque and returns. Its `Pipeline` drains that
deque on the process's one pipeline thread (`PIPELINES`, which runs the
pipelines of every logger of the process in turn, a `rltrack.core.turns.Turns`): it builds the `Event`,
fills in missing steps, normalises values, redacts, runs the filter chain,
appends to the run's journal (flushed to the operating system at least every
`FLUSH_EVERY`) and hands each batch to the sinks that live in this process
(memory, console, meta.json). Control calls (`Dump`, `Barrier`, `Close`,
...) travel through the same deque, so they stay in order with writes.
What the run's report gained is journaled as a `counts` line at each flush
(for the agent, which alone writes report.json), and the run's final status
as the journal's last line (`end`).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import abc, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, TypeVar

from rltrack.agent.link import AgentLink
from rltrack.sinks.base import Backend
from rltrack.core.events import DEFAULT_STEP_AXIS, Event
from rltrack.filters import FilterChain
from rltrack.journal import JournalWriter, control_line
from rltrack.core.redact import Redactor
from rltrack.core.refusals import fractional_step
from rltrack.core.report import Report
from rltrack.core.turns import Faults, Turns
from rltrack.core.values import normalize

#: The pipeline thread wakes at least this often when idle, and flushes the
#: journal and backends at least this often (so a crash loses < 0.5 s of events).
#: A burst wakes it at once (`MAX_BATCH`), and so do `flush` and `close`. Each
#: idle wake costs its process CPU, and a Tune driver holds a logger per trial:
#: one thread for them all wakes 4 times a second, where a thread per logger
#: woke 64 threads 4 times a second, each taking the GIL from Tune's loop.
IDLE_WAIT = 0.25
FLUSH_EVERY = 0.5
#: Records processed before they go to the journal and backends. Without a cap
#: a producer faster than the pipeline would keep everything in one batch, off
#: disk, until it paused.
MAX_BATCH = 1000
#: Events journaled but not yet handed to the in-process backends, at most;
#: beyond it they are fed even while the queue is still behind.
MAX_BACKLOG = 50_000
#: Seconds between the pipeline thread's checks that an agent runs (it starts
#: one if not), and looks at what the agent says of this run (an error that cannot heal is told at once).
AGENT_CHECK = 1.0

#: The kinds whose values can be strings once normalised (scalars and timings
#: are numbers by then): these pass the `Redactor` before the journal.
REDACTED_KINDS = ("text", "hparams")

T = TypeVar("T")


@dataclass
class Dump:
    steps: dict[str, int] | None


@dataclass
class Barrier:
    done: threading.Event = field(default_factory=threading.Event)


@dataclass
class Close:
    status: str


@dataclass
class RunInfo:
    info: dict[str, Any]


@dataclass
class Deferred:
    """Events an adapter builds on the pipeline thread: `build()` is called
    there, in queue order, and what it returns is processed like written events."""

    build: Callable[[], Iterable[Event]]


#: What the deque holds for records, as opposed to control calls: a record
#: `write` queued (a plain tuple), an event emitted, a deferred build.
_RECORDS = (tuple, Event, Deferred)


@dataclass
class Record:
    """An event that is already complete (steps set, values clean): it skips
    step filling and filters and goes straight to the journal and backends."""

    event: Event


class Pipeline:
    """The pipeline thread's work for one `Logger`: everything it holds is
    touched by that thread only, except `failed` (the training thread counts a
    checkpoint it could not save there too) and `finished`."""

    def __init__(
        self,
        queue: deque[Any],
        run_dir: Path,
        report: Report,
        chain: FilterChain,
        redactor: Redactor,
        sinks: list[Backend],
        journal: JournalWriter,
        agent: AgentLink | None,
        worker: str | None,
        last_steps: dict[str, int],
        namespace_counts: dict[str, int],
    ) -> None:
        self.run_dir = run_dir
        self.name = run_dir.name
        self.report = report
        self._queue = queue
        self._chain = chain
        self._redactor = redactor
        self._sinks = sinks
        self._journal = journal
        self._agent = agent
        self._worker = worker
        self._last_steps = last_steps
        self._namespace_counts = namespace_counts
        self._backlog: list[Event] = []  # journaled, not yet given to the in-process backends
        self._faults = Faults(report, lambda reason: print(f"rltrack: {reason} (further errors are counted in {run_dir / 'report.json'})", file=sys.stderr))
        #: Records written that will not reach the journal (their processing
        #: raised, or the journal could not take them); `close` says so.
        self.lost = 0
        #: Turns that raised outside any one record (see `fault`): what they held is unknown.
        self.faults = 0
        self._last_flush = self._last_check = time.monotonic()
        #: Set once the `Close` is done: the logger's `close` waits for it.
        self.finished = threading.Event()
        self.done = False

    @property
    def missing(self) -> int:
        """Records written that are not in the journal: lost on the way, or
        lines the journal could not keep (a disk full for long)."""
        return self.lost + self._journal.lost

    @property
    def behind(self) -> bool:
        return bool(self._queue)

    def step(self) -> bool:
        """One turn (on `PIPELINES`): up to `MAX_BATCH` records (and the control
        calls among them) to the journal and the sinks, and the flush and agent
        check when due. True while records wait; `done` once the `Close` is done."""
        batch: list[Event] = []
        while self._queue and len(batch) < MAX_BATCH:
            item = self._queue.popleft()
            if isinstance(item, _RECORDS):
                batch.extend(self._events_of(item))
                continue
            self._deliver(batch)
            self._feed_sinks()  # control items see every record written before them
            batch = []
            if isinstance(item, Close):
                self._finish(item.status)
                self.done = True
                self.finished.set()
                return False
            self._safely("pipeline", type(item).__name__.lower(), lambda: self._control(item), None)
        batch.extend(self._safely("pipeline", "tick", lambda: self._chain.tick(time.time()), []))
        self._deliver(batch)
        caught_up = not self._queue
        if caught_up:
            self._safely("journal", "flush", self._journal.flush, None)
        if caught_up or len(self._backlog) >= MAX_BACKLOG:
            self._feed_sinks()
        now = time.monotonic()
        if now - self._last_flush >= FLUSH_EVERY:
            self._flush_all()
            self._last_flush = now
        if self._agent is not None and now - self._last_check >= AGENT_CHECK:
            self._safely("agent", "start", self._agent.ensure_running, None)
            self._safely("agent", "state", self._agent.tell_errors, None)
            self._last_check = now
        return self.behind

    def fault(self, exc: Exception) -> None:
        """A fault outside any one record (each record's and control call's
        are contained where they happen) is counted, and the next turn goes
        on: one logger's fault must not stop the others', nor its own later records."""
        self.faults += 1
        self.failed("pipeline", "step", exc)

    def _events_of(self, item: tuple[Any, ...] | Event | Deferred) -> list[Event]:
        """The pipeline (`_process`) applied to a record `write` queued, to an
        event emitted, or to each event an adapter's deferred build returns;
        failures counted."""
        if isinstance(item, tuple):
            built = [self._written_event(item)]
        elif isinstance(item, Event):
            built = [item]
        else:
            try:
                built = list(item.build())
            except Exception as exc:
                self.lost += 1  # at least one record: what the adapter handed over
                self.failed("pipeline", "deferred", exc)
                return []
        out: list[Event] = []
        for event in built:  # a try per event, not a `_safely` closure: this runs for every record
            try:
                out += self._process(event)
            except Exception as exc:
                self.lost += 1
                self.failed("pipeline", "process", exc)
        return out

    def _written_event(self, written: tuple[Any, ...]) -> Event:
        """The event of a record `write` queued as (time, data, kind, namespace, step)."""
        time_, data, kind, namespace, step = written
        steps = {} if step is None else step if type(step) is dict else as_steps(step)  # `write` left ints as they were
        return Event(time_, data, kind, namespace, steps, run=self.name)

    def _prepare(self, event: Event) -> list[Event]:
        """Steps filled in, values normalised, text and hyperparameters redacted."""
        if event.steps:
            event.steps = self._clean_steps(event.steps)
            self._last_steps = event.steps
        elif self._last_steps:
            event.steps = dict(self._last_steps)
        else:  # no step was ever given: number the records of each namespace
            count = self._namespace_counts.get(event.namespace, 0)
            self._namespace_counts[event.namespace] = count + 1
            event.steps = {DEFAULT_STEP_AXIS: count}
        events = normalize(event, self.report)
        for clean in events:
            if clean.kind in REDACTED_KINDS:
                clean.data = self._redactor.mapping(clean.data)
        return events

    def _process(self, event: Event) -> list[Event]:
        out: list[Event] = []
        for clean in self._prepare(event):
            out += self._chain.process(clean)
        return out

    def _clean_steps(self, steps: dict[str, Any]) -> dict[str, int]:
        clean = {}
        for axis, value in steps.items():
            mistake = None if type(value) is int else fractional_step(axis, value)
            if mistake is not None:  # an event an adapter built (`emit`): the axis is dropped, not cut
                self.report.count("dropped", mistake)
                continue
            try:
                clean[str(axis)] = int(value)
            except Exception:  # a step's own `__int__` may raise anything: the axis is dropped, not the record
                self.report.count("dropped", f"step axis {axis!r}: {_shown(value)} is not an integer")
        return clean

    def _dump_steps(self, item: Dump) -> dict[str, int] | None:
        if not item.steps:
            return None
        self._last_steps = self._clean_steps(item.steps)
        return self._last_steps

    def _control(self, item: Any) -> None:
        if isinstance(item, Dump):
            steps = self._dump_steps(item)
            self._deliver(self._safely("pipeline", "dump", lambda: self._chain.dump(steps, time.time()), []))
            self._journal_control("dump")
            self._feed_sinks()
            self._each_sink("dump", lambda sink: sink.dump())
        elif isinstance(item, Barrier):
            self._flush_all()
            item.done.set()
        elif isinstance(item, Record):
            self._deliver([item.event])
            self._feed_sinks()
        elif isinstance(item, RunInfo):
            info = self._redactor.mapping(item.info)
            self._each_sink("info", lambda sink: sink.set_run_info(info))

    def _deliver(self, events: list[Event]) -> None:
        """Journal first: the backends get the events at `_feed_sinks`, once the
        queue is drained (or the backlog is large), so a burst reaches the
        journal on disk without waiting for text tables and event files."""
        if not events:
            return
        if self._worker is not None:  # every journaled event, filter-made ones too, names its writer
            for event in events:
                event.worker = self._worker
        try:
            self._journal.append(events)
        except Exception as exc:
            self.lost += len(events)
            self.failed("journal", "append", exc)
        self._backlog.extend(events)

    def _feed_sinks(self) -> None:
        if self._backlog:
            events, self._backlog = self._backlog, []
            self._each_sink("write", lambda sink: sink.write(events))

    def _flush_all(self) -> None:
        self._journal_counts()
        self._safely("journal", "flush", self._journal.flush, None)
        self._each_sink("flush", lambda sink: sink.flush())

    def _journal_control(self, control: str, **fields: Any) -> None:
        self._safely("journal", "append", lambda: self._journal.append_control(control_line(control, time.time(), **fields)), None)

    def _journal_counts(self) -> None:
        """A `counts` line with what the report gained since the last one, for
        the agent to add to report.json. A run no agent serves has none: its
        logger writes report.json itself (see rltrack.delivery.run_end)."""
        if self._agent is not None:
            counts = self.report.untold()
            if counts is not None:
                self._journal_control("counts", counts=counts)

    def _finish(self, status: str) -> None:
        """The rest to the journal and the sinks, which are closed; then the
        last counts and the `end` line, so that everything counted is in the journal."""
        self._deliver(self._safely("pipeline", "dump", lambda: self._chain.dump(None, time.time()), []))
        self._journal_control("dump")
        self._feed_sinks()
        self._each_sink("dump", lambda sink: sink.dump())
        self._each_sink("flush", lambda sink: sink.flush())
        self._each_sink("close", lambda sink: sink.close(status))
        self._journal_counts()
        self._journal_control("end", status=status)
        self._safely("journal", "close", self._journal.close, None)

    def _each_sink(self, what: str, call: Callable[[Backend], None]) -> None:
        for sink in self._sinks:
            self._safely(sink.name, what, lambda: call(sink), None)

    def _safely(self, who: str, what: str, call: Callable[[], T], default: T) -> T:
        """`call()`, or `default` if it raised: neither a backend nor a filter nor
        a full disk may stop the pipeline thread (it would silently end the run's logging)."""
        return self._faults.call(who, what, call, default)

    def failed(self, who: str, what: str, exc: Exception) -> None:
        """Counts the error in the report; prints the first one of each component."""
        self._faults.failed(who, what, exc)


#: The process's pipeline thread.
PIPELINES = Turns("rltrack-pipeline", IDLE_WAIT)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=PIPELINES.forget)


def _shown(value: Any) -> str:
    """`repr(value)` for a message, or its type's name when its own `__repr__` raises."""
    try:
        return repr(value)[:200]
    except Exception:
        return f"a {type(value).__name__}"


def as_steps(step: int | Mapping[str, int]) -> dict[str, Any]:
    """A `step` argument as a dict of axes (an int is axis "step"); raises
    ValueError for a step that is no whole number (`fractional_step`): cut,
    it would put values on steps they do not belong to. The exact types are
    tested first: an isinstance check against the Mapping ABC costs more
    than the rest of a `write`."""
    if type(step) is int:
        steps = {DEFAULT_STEP_AXIS: step}
    elif type(step) is dict or isinstance(step, abc.Mapping):
        steps = dict(step)
    else:
        steps = {DEFAULT_STEP_AXIS: step}
    for axis, value in steps.items():
        if type(value) is not int and (mistake := fractional_step(axis, value)) is not None:
            raise ValueError(mistake)
    return steps
