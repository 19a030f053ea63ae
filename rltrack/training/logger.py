"""The `Logger`: the training thread's handle on a run.

`write` appends the record to a deque as a plain tuple (its time, a copy of
its data, kind, namespace and step); that is all the training thread pays.
Control calls (`dump`, `flush`, `close`, checkpoints, run info) go through the
same deque, so they stay in order with writes. The logger's `Pipeline`
(rltrack.training.pipeline) drains it on the process's pipeline thread: steps,
normalisation, redaction, filters, the run's journal and the backends that
live in this process (memory, console, meta.json).

Everything else happens in the agent (rltrack.agent.process), one process per machine
that reads the journal: the local files and every tracker. The logger
registers its run there and makes sure an agent runs (rltrack.agent.files);
`flush` waits for the agent to have written the local files, `close` for it to
have delivered everything, each for a bounded time (`run.close_timeout`).
"""

from __future__ import annotations

import math
import os
import sys
import time
import warnings
from collections import deque
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from rltrack.agent.files import LAUNCHER_WAITS_ENV
from rltrack.agent.link import AgentLink
from rltrack.sinks.base import Backend, RunContext
from rltrack.core.turns import time_left
from rltrack.core.events import KINDS, Event
from rltrack.training.exits import close_at_exit, closed_before_exit, exit_status
from rltrack.filters import FilterChain
from rltrack.journal import JournalWriter, journal_path
from rltrack.training.pipeline import (
    MAX_BATCH,
    PIPELINES,
    Barrier,
    Close,
    Deferred,
    Dump,
    Pipeline,
    Record,
    RunInfo,
    as_steps,
)
from rltrack.core.redact import Redactor
from rltrack.core.report import LOSSLESS, Report
from rltrack.training.resume import ResumeState
from rltrack.delivery.run_end import record_end
from rltrack.sinks.rundir import RunFiles, save_checkpoint

#: `run.close_timeout` when the config leaves it out.
DEFAULT_CLOSE_TIMEOUT = 5.0
#: The longest `flush(timeout=None)` waits for the agent to write the local files.
FLUSH_LIMIT = 120.0


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
        redactor = redactor or Redactor()
        worker: str | None = config.get("run", {}).get("worker")
        self._worker = worker
        names = [*(b.name for b in backends), *(files or {}), *(trackers or {})]
        sinks: list[Backend] = [RunFiles(tracked, names, redactor, resumed), *backends]
        self._queue: deque[Any] = deque()
        self._wake = PIPELINES.wake
        self._closed = False
        self._complete = False
        #: What the agent had not delivered when `close` stopped waiting: {"files" or tracker: its last error}.
        self.behind: dict[str, str | None] = {}
        self._warned_closed = False
        self._journal_path = journal_path(run_dir, worker)
        state = ResumeState.from_journal(self._journal_path) if resumed else ResumeState()
        self._best_metric = state.best_metric
        context = RunContext(run_dir=run_dir, name=self.name, config=config, report=report, worker=worker)
        for sink in sinks:
            sink.open(context)
        journal = JournalWriter(self._journal_path)
        self._agent = AgentLink(run_dir, self.name, worker, config, dict(files or {}), dict(trackers or {})) if files or trackers else None
        self._pipeline = Pipeline(
            self._queue, run_dir, report, chain, redactor, sinks, journal, self._agent, worker, state.last_steps, state.namespace_counts
        )
        PIPELINES.add(self._pipeline)
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
        Without a step the record takes the last steps given to this logger.
        A step that is no whole number (0.25) raises ValueError: cut, values
        would land on steps they do not belong to."""
        if kind not in KINDS:
            raise ValueError(f"kind={kind!r} is not one of {', '.join(KINDS)}")
        if type(step) is not int and step is not None:
            step = as_steps(step)  # a mapping is copied now: the caller may change it afterwards; a fractional step raises
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
            self._hand_over(Deferred(build))

    def dump(self, step: int | Mapping[str, int] | None = None) -> None:
        """The store-then-log point: aggregating filters emit, tables are printed."""
        steps = None if step is None else as_steps(step)
        if self._accepting():
            self._hand_over(Dump(steps))

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
            self._pipeline.failed("checkpoint", "save", exc)
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
            self._hand_over(Record(event))

    def set_run_info(self, info: Mapping[str, Any]) -> None:
        """Adds framework bookkeeping (trial id, hostname, ...) to meta.json's
        "info", where run databases index it, instead of sending it as metrics."""
        if self._accepting():
            self._hand_over(RunInfo(dict(info)))

    def _hand_over(self, item: Any) -> None:
        """Queues `item` for the pipeline thread, and wakes it when a burst
        fills a batch: it need not wait out its interval (`IDLE_WAIT`) while
        records pile up in memory."""
        queue = self._queue
        queue.append(item)
        if len(queue) == MAX_BATCH:  # == : once per burst, as the thread only sleeps on an empty queue
            self._wake.set()

    @property
    def closed(self) -> bool:
        """Whether `close` was called: records given now are dropped."""
        return self._closed

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
            return self._pipeline.finished.is_set()
        deadline = time.monotonic() + (FLUSH_LIMIT if timeout is None else timeout)
        if not self._pipeline.finished.is_set():
            barrier = Barrier()
            self._queue.append(barrier)
            self._wake.set()
            if not barrier.done.wait(time_left(deadline)):
                return False
        if self._agent is None:
            return True
        return self._agent.wait_for_files(self._journal_path, deadline)

    def close(self, timeout: float | None | str = "config", status: str = "finished", *, quiet: bool = False) -> bool:
        """Emits what aggregating filters hold, writes the rest to the journal,
        closes the in-process backends and journals the run's counts and its
        end with `status` (always, whatever `timeout`: that is the process's
        own disk, at most `FLUSH_LIMIT`; the agent writes them into
        report.json and meta.json, or this logger when no agent serves the
        run, see rltrack.delivery.run_end); then waits for the agent to write the local files and
        deliver every tracker, until `timeout` seconds after the call
        (default: `run.close_timeout`; None: until every tracker has
        everything). What is still pending then is
        delivered by the agent afterwards; one line on stderr and report.json
        say so, and how to finish it at once (`quiet`: not that line, the caller
        says it, from `behind`; see `still_behind`). Returns True when
        everything was written and delivered. Idempotent."""
        if self._closed:
            return self._complete
        self._closed = True
        closed_before_exit(self)
        if timeout == "config":
            timeout = self.close_timeout
        deadline = None if timeout is None else time.monotonic() + float(timeout)
        self._queue.append(Close(status))
        self._wake.set()
        # The journal and the run's status are local writes, not a wait on a
        # tracker: they are completed whatever `timeout` says (a record given
        # to `write` is never lost to a short timeout), bounded by FLUSH_LIMIT
        # or by a longer `timeout`.
        drain_limit = None if timeout is None else max(FLUSH_LIMIT, float(timeout))
        complete = self._pipeline.finished.wait(drain_limit)
        if not complete:
            print(f"rltrack: {self.run_dir}: {len(self._queue)} records not yet in the journal after {drain_limit:.0f} s (the disk is slow or full)", file=sys.stderr)
        missing = self._pipeline.missing
        if missing or self._pipeline.faults:
            print(f"rltrack: {self.run_dir}: {missing or 'some'} records written are not in the journal (the reasons are counted as core.errors in report.json)", file=sys.stderr)
        journal_whole = not (missing or self._pipeline.faults)
        if self._agent is None:  # no other process writes this run's report.json and meta.json's end
            try:
                record_end(self.run_dir, self._worker, os.getpid(), status, self.report.as_dict(), [])
            except OSError as exc:  # a full disk or a vanished run directory must not raise into the training script
                print(f"rltrack: could not save {self.run_dir / 'report.json'}: {exc}", file=sys.stderr)
                return False
        elif complete:
            self.behind = self._agent.finish(status, deadline, self._journal_path)
            if self.behind and not quiet and not (os.environ.get(LAUNCHER_WAITS_ENV) and not self._agent.gave_up):  # `rltrack run` waits on and says it
                self._agent.say_left_behind(self.behind)
            complete = not self.behind
            if self._agent.gave_up:  # the agent is done with this writer: report.json holds its counts and the agent's
                try:
                    self.report = Report.load(self.run_dir / "report.json")  # with the agent's counts (the trackers' renames, ...)
                except (OSError, ValueError) as exc:  # the training script must not fail on a damaged report
                    print(f"rltrack: could not read {self.run_dir / 'report.json'}: {exc}", file=sys.stderr)
        summary = self.report.summary(leave_out=(*LOSSLESS, "errors", "pending"))  # errors and pending have lines of their own
        if summary:  # said once, and only when something was lost, refused or renamed (lossless conversions: report.json)
            print(f"rltrack: {self.run_dir}: values changed on the way (details in report.json):\n{summary}", file=sys.stderr)
        self._complete = complete = complete and journal_whole
        return complete

    def still_behind(self, deadline: float | None) -> dict[str, str | None]:
        """After a `close` that left something behind (`behind`), waits again
        until `deadline` (a `time.monotonic()` time; None: no limit) for the
        agent to finish, and returns what is still behind: a caller closing
        many runs (a Tune sweep) says what is left once, at the end."""
        if self.behind and self._agent is not None:
            self.behind = self._agent.left_behind(deadline, self._journal_path)
        return self.behind

    def __enter__(self) -> Logger:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.close(status=exit_status(exc))
