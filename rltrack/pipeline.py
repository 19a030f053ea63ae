"""The `Logger`: the training thread's handle, and the pipeline thread behind it.

`write` appends the record to a deque as a plain tuple (its time, a copy of
its data, kind, namespace and step); that is all the training thread pays.
A daemon thread drains the deque: it builds the `Event`, fills in missing steps,
normalises values, redacts, runs the filter chain, appends to the run's journal
(flushed to the operating system at least every `FLUSH_EVERY`) and hands each
batch to the backends that live in this process (memory, console, meta.json).
Control calls (`dump`, `flush`, `close`, checkpoints) travel through the same
deque, so they stay in order with writes.

Everything else happens in the agent (rltrack.agent), one process per machine
that reads the journal: the local files and every tracker. The logger
registers its run there and makes sure an agent runs (rltrack.agent_files);
`flush` waits for the agent to have written the local files, `close` for it to
have delivered everything, each for a bounded time (`run.close_timeout`).
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
import warnings
from collections import abc, deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, TypeVar

from rltrack.agent_link import AgentLink
from rltrack.backends.base import Backend, RunContext
from rltrack.delivery import merge_into_report_file, time_left
from rltrack.events import DEFAULT_STEP_AXIS, KINDS, Event
from rltrack.exits import close_at_exit, closed_before_exit, exit_status
from rltrack.filters import FilterChain
from rltrack.journal import JournalWriter, journal_path
from rltrack.redact import Redactor
from rltrack.report import Report
from rltrack.resume import ResumeState
from rltrack.rundir import RunFiles, save_checkpoint
from rltrack.values import normalize

#: The pipeline thread wakes at least this often when idle, and flushes the
#: journal and backends at least this often (so a crash loses < 0.5 s of events).
IDLE_WAIT = 0.05
FLUSH_EVERY = 0.5
#: Records processed before they go to the journal and backends. Without a cap
#: a producer faster than the pipeline would keep everything in one batch, off
#: disk, until it paused.
MAX_BATCH = 1000
#: Events journaled but not yet handed to the in-process backends, at most;
#: beyond it they are fed even while the queue is still behind.
MAX_BACKLOG = 50_000
#: Seconds between the pipeline thread's checks that an agent runs (it starts one if not).
AGENT_CHECK = 1.0
#: `run.close_timeout` when the config leaves it out.
DEFAULT_CLOSE_TIMEOUT = 5.0
#: The longest `flush(timeout=None)` waits for the agent to write the local files.
FLUSH_LIMIT = 120.0

#: The kinds whose values can be strings once normalised (scalars and timings
#: are numbers by then): these pass the `Redactor` before the journal.
REDACTED_KINDS = ("text", "hparams")

T = TypeVar("T")


@dataclass
class _Dump:
    steps: dict[str, int] | None


@dataclass
class _Barrier:
    done: threading.Event = field(default_factory=threading.Event)


@dataclass
class _Close:
    status: str


@dataclass
class _RunInfo:
    info: dict[str, Any]


@dataclass
class _Deferred:
    """Events an adapter builds on the pipeline thread: `build()` is called
    there, in queue order, and what it returns is processed like written events."""

    build: Callable[[], Iterable[Event]]


#: What the deque holds for records, as opposed to control calls: a record
#: `write` queued (a plain tuple), an event emitted, a deferred build.
_RECORDS = (tuple, Event, _Deferred)


@dataclass
class _Record:
    """An event that is already complete (steps set, values clean): it skips
    step filling and filters and goes straight to the journal and backends."""

    event: Event


class Logger:
    """Logs from any training loop; build it with `rltrack.make_logger`."""

    def __init__(
        self,
        run_dir: Path,
        config: dict[str, Any],
        chain: FilterChain,
        backends: list[Backend],
        report: Report,
        tracked: list[str],
        redactor: Redactor | None = None,
        *,
        resumed: bool = False,
        files: Mapping[str, Mapping[str, Any]] | None = None,
        trackers: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        """`backends`: those living in this process (memory, console);
        `files` and `trackers`: the settings of the file backends and the
        trackers by name, which the agent runs from the journal."""
        self.run_dir = run_dir
        self.name = run_dir.name
        self.config = config
        self.report = report
        self.backends = {b.name: b for b in backends}
        self.close_timeout: float | None = config.get("run", {}).get("close_timeout", DEFAULT_CLOSE_TIMEOUT)
        self._chain = chain
        self._redactor = redactor or Redactor()
        self._worker: str | None = config.get("run", {}).get("worker")
        names = [*(b.name for b in backends), *(files or {}), *(trackers or {})]
        self._sinks: list[Backend] = [RunFiles(tracked, names, self._redactor, resumed), *backends]
        self._queue: deque[Any] = deque()
        self._backlog: list[Event] = []  # journaled, not yet given to the in-process backends
        self._wake = threading.Event()
        self._closed = False
        self._complete = False
        self._warned_closed = False
        self._journal_path = journal_path(run_dir, self._worker)
        state = ResumeState.from_journal(self._journal_path) if resumed else ResumeState()
        self._best_metric = state.best_metric
        self._last_steps = state.last_steps
        self._namespace_counts = state.namespace_counts
        self._reported: set[str] = set()
        self._context = RunContext(run_dir=run_dir, name=self.name, config=config, report=report, worker=self._worker)
        for sink in self._sinks:
            sink.open(self._context)
        self._journal = JournalWriter(self._journal_path)
        self._agent = AgentLink(run_dir, self.name, self._worker, config, dict(files or {}), dict(trackers or {})) if files or trackers else None
        self._thread = threading.Thread(target=self._loop, name=f"rltrack-{self.name}", daemon=True)
        self._thread.start()
        close_at_exit(self)

    # ---- the training thread's side -------------------------------------

    def write(
        self,
        data: Mapping[str, Any],
        *,
        step: int | Mapping[str, int] | None = None,
        namespace: str = "",
        kind: str = "scalars",
    ) -> None:
        """Hand over one record; returns in microseconds. `step` is an int (axis
        "step") or a mapping of named axes, the first being the primary one.
        Without a step the record takes the last steps given to this logger."""
        if kind not in KINDS:
            raise ValueError(f"kind={kind!r} is not one of {', '.join(KINDS)}")
        if type(step) is not int and step is not None:
            step = _as_steps(step)  # a mapping is copied now: the caller may change it afterwards
        if self._accepting():  # a tuple, not an Event: building one here would cost this thread half of `write`
            self._hand_over((time.time(), dict(data), kind, namespace, step))

    def emit(self, event: Event) -> None:
        """Hand over an event an adapter built itself."""
        if self._accepting():
            self._hand_over(event)

    def emit_deferred(self, build: Callable[[], Iterable[Event]]) -> None:
        """Hand over work an adapter would otherwise do on the training thread
        (routing keys to namespaces, canonical names): `build` runs on the
        pipeline thread, in order with everything else written, and returns the
        events. It must only use what the caller handed over (copies of the
        framework's values), never state the training thread keeps changing.
        An exception in it is counted in the report, like a filter's."""
        if self._accepting():
            self._hand_over(_Deferred(build))

    def dump(self, step: int | Mapping[str, int] | None = None) -> None:
        """The store-then-log point: aggregating filters emit, tables are printed."""
        steps = None if step is None else _as_steps(step)
        if self._accepting():
            self._hand_over(_Dump(steps))

    def log_hparams(self, hparams: Mapping[str, Any]) -> None:
        self.write(hparams, kind="hparams")

    def log_text(self, key: str, text: str, step: int | Mapping[str, int] | None = None, *, namespace: str = "") -> None:
        self.write({key: text}, step=step, namespace=namespace, kind="text")

    @contextmanager
    def timer(self, stage: str, *, step: int | Mapping[str, int] | None = None, namespace: str = "time") -> Iterator[None]:
        """Records how long the block took, in seconds, as a `timing` event."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.write({stage: time.perf_counter() - start}, step=step, namespace=namespace, kind="timing")

    def log_checkpoint(
        self,
        obj_or_path: Any,
        *,
        iteration: int,
        metric: float | None = None,
        higher_is_better: bool = True,
    ) -> str | None:
        """Saves `ckpt/iteration_<N>.pth.tar` and, if `metric` is the best so far,
        `ckpt/ckpt_best.pth.tar`, before returning (see `rundir.save_checkpoint`):
        a path is copied, any other object saved with `torch.save`. A NaN metric
        is never the best. Returns the file's path relative to the run directory
        (an evaluator's `ckpt_name`), or None if it was not written: write
        errors are counted and reported, not raised."""
        if not self._accepting():
            return None
        if isinstance(obj_or_path, (str, os.PathLike)) and not Path(obj_or_path).is_file():
            raise FileNotFoundError(
                f"log_checkpoint: {str(obj_or_path)!r} is not a file; pass the path of a saved "
                "checkpoint, or the object to save (e.g. model.state_dict())"
            )
        iteration = int(iteration)
        metric = None if metric is None else float(metric)
        best = metric is not None and not math.isnan(metric) and (
            self._best_metric is None or (metric > self._best_metric if higher_is_better else metric < self._best_metric)
        )
        try:
            path = save_checkpoint(self.run_dir, obj_or_path, iteration, best)
        except OSError as exc:
            self._failed("checkpoint", "save", exc)
            return None
        if best:
            self._best_metric = metric
        relative = path.relative_to(self.run_dir).as_posix()
        data = {"path": relative, "iteration": iteration, "metric": metric, "best": best}
        self.emit_complete(Event(time.time(), data, "artifact", "ckpt", {"iteration": iteration}, run=self.name))
        return relative

    def emit_complete(self, event: Event) -> None:
        """Hand over an event that is already complete (steps set, values
        clean, such as a checkpoint's): it skips step filling and filters."""
        if self._accepting():
            self._hand_over(_Record(event))

    def set_run_info(self, info: Mapping[str, Any]) -> None:
        """Adds framework bookkeeping (trial id, hostname, ...) to meta.json's
        "info", where run databases index it, instead of sending it as metrics."""
        if self._accepting():
            self._hand_over(_RunInfo(dict(info)))

    def _hand_over(self, item: Any) -> None:
        """Queues `item` for the pipeline thread, and wakes it when a burst
        fills a batch: it need not wait out its interval (`SEND_EVERY`) while
        records pile up in memory."""
        queue = self._queue
        queue.append(item)
        if len(queue) == MAX_BATCH:  # == : once per burst, as the thread only sleeps on an empty queue
            self._wake.set()

    def _accepting(self) -> bool:
        """False once closed: no thread takes records any more, so they are dropped
        (with one warning) instead of piling up in memory for the rest of the process."""
        if not self._closed:
            return True
        if not self._warned_closed:
            self._warned_closed = True
            warnings.warn(f"rltrack: {self.run_dir} is closed; records given after close() are dropped", RuntimeWarning, stacklevel=3)
        return False

    def flush(self, timeout: float | None = None) -> bool:
        """Waits until everything written so far is in the journal, the
        in-process backends and the local files the agent writes. Returns
        False if `timeout` (None: `FLUSH_LIMIT`) passed first. Tables (text
        logs, console, progress.csv rows) are still completed at the next
        `dump`, new step or close, so that a row never holds half a step."""
        if self._closed:  # close waited for everything it could
            return not self._thread.is_alive()
        deadline = time.monotonic() + (FLUSH_LIMIT if timeout is None else timeout)
        if self._thread.is_alive():
            barrier = _Barrier()
            self._queue.append(barrier)
            self._wake.set()
            if not barrier.done.wait(time_left(deadline)):
                return False
        if self._agent is None:
            return True
        return self._agent.wait_for_files(self._journal_path, deadline)

    def close(self, timeout: float | None | str = "config", status: str = "finished") -> bool:
        """Emits what aggregating filters hold, writes the rest to the journal,
        closes the in-process backends and marks the run `status` (always,
        whatever `timeout`: that is the process's own disk, at most
        `FLUSH_LIMIT`); then waits for the agent to write the local files and
        deliver every tracker, until `timeout` seconds after the call
        (default: `run.close_timeout`; None: until every tracker has
        everything). What is still pending then is
        delivered by the agent afterwards; one line on stderr and report.json
        say so, and how to finish it at once. Returns True when everything was
        written and delivered. Idempotent."""
        if self._closed:
            return self._complete
        self._closed = True
        closed_before_exit(self)
        if timeout == "config":
            timeout = self.close_timeout
        deadline = None if timeout is None else time.monotonic() + float(timeout)
        self._queue.append(_Close(status))
        self._wake.set()
        # The journal and the run's status are local writes, not a wait on a
        # tracker: they are completed whatever `timeout` says (a record given
        # to `write` is never lost to a short timeout), bounded by FLUSH_LIMIT
        # or by a longer `timeout`.
        drain_limit = None if timeout is None else max(FLUSH_LIMIT, float(timeout))
        self._thread.join(drain_limit)
        complete = not self._thread.is_alive()
        if not complete:
            print(f"rltrack: {self.run_dir}: {len(self._queue)} records not yet in the journal after {drain_limit:.0f} s (the disk is slow or full)", file=sys.stderr)
        try:
            merge_into_report_file(self.run_dir, self.report.as_dict(), [])
        except OSError as exc:  # a full disk or a vanished run directory must not raise into the training script
            print(f"rltrack: could not save {self.run_dir / 'report.json'}: {exc}", file=sys.stderr)
            return False
        if self._agent is not None and complete:
            complete = self._agent.finish(status, deadline, self._journal_path)
            try:
                self.report = Report.load(self.run_dir / "report.json")  # with the agent's counts (the trackers' renames, ...)
            except (OSError, ValueError) as exc:  # the training script must not fail on a damaged report
                print(f"rltrack: could not read {self.run_dir / 'report.json'}: {exc}", file=sys.stderr)
        summary = self.report.summary(leave_out=("delivered", "errors", "pending"))  # errors and pending have lines of their own
        if summary:  # said once, and only when something was renamed, converted or dropped
            print(f"rltrack: {self.run_dir}: values changed on the way (details in report.json):\n{summary}", file=sys.stderr)
        self._complete = complete
        return complete

    def __enter__(self) -> Logger:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.close(status=exit_status(exc))

    # ---- the pipeline thread's side --------------------------------------

    def _loop(self) -> None:
        last_flush = last_check = time.monotonic()
        while True:
            batch: list[Event] = []
            while self._queue and len(batch) < MAX_BATCH:
                item = self._queue.popleft()
                if isinstance(item, _RECORDS):
                    batch.extend(self._events_of(item))
                    continue
                self._deliver(batch)
                self._feed_sinks()  # control items see every record written before them
                batch = []
                if isinstance(item, _Close):
                    self._finish(item.status)
                    return
                self._control(item)
            batch.extend(self._safely("pipeline", "tick", lambda: self._chain.tick(time.time()), []))
            self._deliver(batch)
            caught_up = not self._queue
            if caught_up:
                self._safely("journal", "flush", self._journal.flush, None)
            if caught_up or len(self._backlog) >= MAX_BACKLOG:
                self._feed_sinks()
            now = time.monotonic()
            if now - last_flush >= FLUSH_EVERY:
                self._flush_all()
                last_flush = now
            if self._agent is not None and now - last_check >= AGENT_CHECK:
                self._safely("agent", "start", self._agent.ensure_running, None)
                last_check = now
            if not self._queue:
                self._wake.wait(IDLE_WAIT)
                self._wake.clear()

    def _events_of(self, item: tuple[Any, ...] | Event | _Deferred) -> list[Event]:
        """The pipeline (`_process`) applied to a record `write` queued, to an
        event emitted, or to each event an adapter's deferred build returns;
        failures counted."""
        if isinstance(item, tuple):
            built = [self._written_event(item)]
        elif isinstance(item, Event):
            built = [item]
        else:
            built = self._safely("pipeline", "deferred", lambda: list(item.build()), [])
        out: list[Event] = []
        for event in built:  # a try per event, not a `_safely` closure: this runs for every record
            try:
                out += self._process(event)
            except Exception as exc:
                self._failed("pipeline", "process", exc)
        return out

    def _written_event(self, written: tuple[Any, ...]) -> Event:
        """The event of a record `write` queued as (time, data, kind, namespace, step)."""
        time_, data, kind, namespace, step = written
        steps = {} if step is None else step if type(step) is dict else _as_steps(step)  # `write` left ints as they were
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
            try:
                clean[str(axis)] = int(value)
            except (TypeError, ValueError, OverflowError):
                self.report.count("dropped", f"step axis {axis!r}: {value!r} is not an integer")
        return clean

    def _dump_steps(self, item: _Dump) -> dict[str, int] | None:
        if not item.steps:
            return None
        self._last_steps = self._clean_steps(item.steps)
        return self._last_steps

    def _control(self, item: Any) -> None:
        if isinstance(item, _Dump):
            steps = self._dump_steps(item)
            self._deliver(self._safely("pipeline", "dump", lambda: self._chain.dump(steps, time.time()), []))
            self._safely("journal", "append", lambda: self._journal.append_dump(time.time()), None)
            self._feed_sinks()
            self._each_sink("dump", lambda sink: sink.dump())
        elif isinstance(item, _Barrier):
            self._flush_all()
            item.done.set()
        elif isinstance(item, _Record):
            self._deliver([item.event])
            self._feed_sinks()
        elif isinstance(item, _RunInfo):
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
        self._safely("journal", "append", lambda: self._journal.append(events), None)
        self._backlog.extend(events)

    def _feed_sinks(self) -> None:
        if self._backlog:
            events, self._backlog = self._backlog, []
            self._each_sink("write", lambda sink: sink.write(events))

    def _flush_all(self) -> None:
        self._safely("journal", "flush", self._journal.flush, None)
        self._each_sink("flush", lambda sink: sink.flush())

    def _finish(self, status: str) -> None:
        self._deliver(self._safely("pipeline", "dump", lambda: self._chain.dump(None, time.time()), []))
        self._safely("journal", "append", lambda: self._journal.append_dump(time.time()), None)
        self._feed_sinks()
        self._each_sink("dump", lambda sink: sink.dump())
        self._flush_all()
        self._safely("journal", "close", self._journal.close, None)
        self._each_sink("close", lambda sink: sink.close(status))

    def _each_sink(self, what: str, call: Callable[[Backend], None]) -> None:
        for sink in self._sinks:
            self._safely(sink.name, what, lambda: call(sink), None)

    def _safely(self, who: str, what: str, call: Callable[[], T], default: T) -> T:
        """`call()`, or `default` if it raised: neither a backend nor a filter nor
        a full disk may stop the pipeline thread (it would silently end the run's logging)."""
        try:
            return call()
        except Exception as exc:
            self._failed(who, what, exc)
            return default

    def _failed(self, who: str, what: str, exc: Exception) -> None:
        """Counts the error in the report; prints the first one of each component."""
        reason = f"{who}.{what}: {type(exc).__name__}: {exc}"
        self.report.count("errors", reason)
        if who not in self._reported:
            self._reported.add(who)
            print(f"rltrack: {reason} (further errors are counted in {self.run_dir / 'report.json'})", file=sys.stderr)


def _as_steps(step: int | Mapping[str, int]) -> dict[str, Any]:
    """A `step` argument as a dict of axes (an int is axis "step"). The exact
    types are tested first: an isinstance check against the Mapping ABC costs
    more than the rest of a `write`."""
    if type(step) is int:
        return {DEFAULT_STEP_AXIS: step}
    if type(step) is dict or isinstance(step, abc.Mapping):
        return dict(step)
    return {DEFAULT_STEP_AXIS: step}
