"""The queue-and-worker pieces the training pipeline and the agent share.

Three ideas were written out separately in the pipeline thread, the agent's
tracker lanes and its local files; each is here once:

* `Turns`: one daemon thread that steps several workers in turn (a worker
  has `step() -> bool`, True while more work waits right away, `done`, and
  `fault(exc)` for whatever its step let escape), drops the done ones, waits
  at most `idle` seconds (or until `wake` is set) when none is busy, and ends
  when it has no worker left (the next `add` starts it again). The process's
  pipeline thread (rltrack.training.pipeline) and each tracker lane of the agent
  (rltrack.agent.lanes) are one each.
* `Inbox`: a bounded queue whose overflow is dropped and counted, never
  waited for: the agent hands parsed journal batches to a tracker's worker
  through one, and a batch dropped is still in the journal on disk (the
  worker reads it from there). A logger's own queue (rltrack.training.logger) is not
  bounded so: a record dropped there would be in no journal.
* `Faults`: error containment: a call that raises is counted in the run's
  report and the first error of each component is told once; neither a sink
  nor a tracker nor a full disk may stop the thread that calls it.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Callable, Generic, Protocol, TypeVar

from rltrack.core.report import Report

T = TypeVar("T")


class Worker(Protocol):
    done: bool

    def step(self) -> bool: ...

    def fault(self, exc: Exception) -> None: ...


class Turns:
    """A daemon thread stepping its workers in turn until each is done."""

    def __init__(self, name: str, idle: float) -> None:
        self.name = name
        self.idle = idle
        self.wake = threading.Event()
        self._lock = threading.Lock()
        self._workers: list[Any] = []
        self._thread: threading.Thread | None = None

    def add(self, worker: Worker) -> None:
        with self._lock:
            self._workers.append(worker)
            if self._thread is None:
                self._thread = threading.Thread(target=self.run, name=self.name, daemon=True)
                self._thread.start()
        self.wake.set()

    def run(self) -> None:
        """The thread's body."""
        while True:
            with self._lock:
                self._workers = [worker for worker in self._workers if not worker.done]
                if not self._workers:
                    self._thread = None
                    return
                workers = list(self._workers)
            busy = False
            for worker in workers:
                try:
                    busy = worker.step() or busy
                except Exception as exc:  # one worker's fault must not stop the others', nor its own later turns
                    worker.fault(exc)
            if not busy:
                self.wake.wait(self.idle)
                self.wake.clear()

    def forget(self) -> None:
        """In a forked child: the parent's workers are the parent's, its thread
        did not come along, and its lock and event may have been held."""
        self.wake = threading.Event()
        self._lock = threading.Lock()
        self._workers = []
        self._thread = None


class Inbox(Generic[T]):
    """A queue of at most `bound` items; `put` beyond it drops the item and counts it in `dropped`."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.dropped = 0
        self._items: deque[T] = deque()

    def put(self, item: T) -> bool:
        if len(self._items) >= self.bound:
            self.dropped += 1
            return False
        self._items.append(item)
        return True

    def first(self) -> T | None:
        try:  # no test-then-index: the other thread may empty it in between
            return self._items[0]
        except IndexError:
            return None

    def take(self) -> None:
        """Removes the first item (only the consuming thread does)."""
        self._items.popleft()

    def clear(self) -> None:
        self._items.clear()

    def last(self) -> T | None:
        try:
            return self._items[-1]
        except IndexError:
            return None


def _type_and_message(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class Faults:
    """Counts each error in `report` ("errors") and tells the first of each
    component (`who`) through `tell`; `first` keeps that first reason."""

    def __init__(self, report: Report, tell: Callable[[str], None], text: Callable[[BaseException], str] = _type_and_message) -> None:
        self.report = report
        self.first: dict[str, str] = {}
        self._tell = tell
        self._text = text

    def failed(self, who: str, what: str, exc: BaseException) -> None:
        reason = f"{who}.{what}: {self._text(exc)}"
        self.report.count("errors", reason)
        if who not in self.first:
            self.first[who] = reason
            self._tell(reason)

    def call(self, who: str, what: str, call: Callable[[], T], default: T) -> T:
        """`call()`, or `default` once the error it raised is counted."""
        try:
            return call()
        except Exception as exc:
            self.failed(who, what, exc)
            return default


def time_left(deadline: float | None) -> float | None:
    """Seconds until `deadline` (a `time.monotonic()` time), never below 0; None: no limit."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())
