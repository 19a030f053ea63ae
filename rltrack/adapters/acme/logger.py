"""Acme's loggers for rltrack: `RLTrackLogger` (one Acme logger's records to
an rltrack `Logger`), the factory Acme's experiments take
(`make_logger_factory`) and `tee` (Acme's own chain beside rltrack); the
package's docstring, rltrack.adapters.acme, says what arrives in rltrack.
"""

from __future__ import annotations

import importlib
import inspect
import threading
import time
from functools import partial
from typing import Any, Callable, Mapping

from rltrack.adapters.acme.stages import Stage, stage_for
from rltrack.frameworks.canonical import names_mode
from rltrack.core.events import DEFAULT_STEP_AXIS, Event
from rltrack.training.exits import exit_status
from rltrack.adapters.acme.keys import (
    SOURCE,
    STAGE_EVERY,
    axes,
    namespace_for,
    renames,
)


class RLTrackLogger:
    """An Acme logger (`write(data)`, `close()`) that sends each record to rltrack.

    `logger` is an `rltrack.Logger`; `label`, `steps_key` and `task_instance`
    are what Acme passes its logger factories. `close()` marks this Acme logger
    closed (later writes are dropped and counted in the run's report.json) and
    waits until what it wrote is in the run directory; it closes the rltrack
    Logger only if `close_logger=True`, since one Logger is usually shared by
    the actor, learner and evaluator loggers of one experiment.
    """

    def __init__(
        self,
        logger: Any,
        label: str,
        steps_key: str | None = None,
        task_instance: int = 0,
        *,
        close_logger: bool = False,
        on_close: Callable[[RLTrackLogger], None] | None = None,
        stage_every: int | None = None,
    ) -> None:
        _register_with_acme()
        self.logger = logger
        self.label = str(label)
        self.steps_key = steps_key
        self.task_instance = task_instance
        self.namespace = namespace_for(self.label)  # the stage: blocks, canonical twins, the local layout
        self.closed = False
        self._close_logger = close_logger
        self._on_close = on_close
        self._worker = str(0 if task_instance is None else task_instance)
        self._run = str(getattr(logger, "name", ""))
        self._writes = 0
        mode = names_mode(logger)
        self._axes = axes(steps_key, mode)
        staged = mode != "native" and self.namespace in STAGE_EVERY
        every = stage_every if stage_every is not None else STAGE_EVERY.get(self.namespace)
        if every is not None and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
            raise ValueError(f"stage_every={stage_every!r}: give the number of records per stage block (an int >= 1), or None for the default")
        self._stage: Stage | None = stage_for(logger, self.namespace, every) if staged else None
        self._renames = [] if staged else renames(self.namespace, mode)
        self._drop = {native for native, _ in renames(self.namespace, mode)} if staged and mode == "canonical" else set()
        self._swap = mode == "canonical"

    def write(self, data: Mapping[str, Any]) -> None:
        """Hands `data` to rltrack as one event: on the calling thread a dict
        copy, the step lookup and a queue append; the rest on the pipeline thread."""
        if self.closed:
            report = getattr(self.logger, "report", None)
            if report is not None:
                report.count("dropped", f"acme: write to the closed {self.label!r} logger")
            return
        values = dict(data)
        steps: dict[str, Any] = {}
        for key, axis in self._axes:
            value = values.get(key)
            if value is not None:
                steps[axis] = value
        if not steps:
            steps[DEFAULT_STEP_AXIS] = self._writes
        self._writes += 1
        record = partial(self._events, time.time(), values, steps)
        if self._stage is None:
            self.logger.emit_deferred(record)
        else:
            self._stage.add(values, steps, record)

    def _events(self, now: float, values: dict[str, Any], steps: dict[str, Any]) -> list[Event]:
        """Pipeline thread: the record's event, with the canonical renames."""
        twins = {}
        for native, canonical in self._renames:
            if native in values:
                twins[canonical] = values.pop(native) if self._swap else values[native]
        for native in self._drop:
            values.pop(native, None)
        label, stage = self.label, self.namespace
        if label == stage:  # the label is the stage's own name (`learner`): one record, as written and canonical
            values.update(twins)
            twins = {}
        events = [Event(now, values, "scalars", label, steps, SOURCE, self._worker, self._run, stage="" if label == stage else stage)] if values else []
        return events + ([Event(now, twins, "scalars", stage, steps, SOURCE, self._worker, self._run)] if twins else [])

    def end_stage(self) -> None:
        """Sends the stage block of the records written since the last one (e.g.
        after `eval_loop.run(num_episodes=n)`); nothing if there are none."""
        if self._stage is not None and not self.closed:
            self._stage.send()

    def close(self) -> None:
        """Ends this Acme logger; see the class docstring for what happens to the rltrack Logger."""
        if self.closed:
            return
        self.end_stage()
        self.closed = True
        if self._on_close is not None:
            self._on_close(self)
        if self._close_logger:
            self.logger.close()
        else:
            self.logger.flush(timeout=60)

    def __repr__(self) -> str:
        return f"RLTrackLogger(label={self.label!r}, steps_key={self.steps_key!r}, task_instance={self.task_instance!r}, run={self._run!r})"


class TeeLogger:
    """Writes every record to rltrack first, then to the wrapped Acme logger chain.

    rltrack sees every write, before Acme's own filters (TimeFilter, GatedFilter)
    thin it out: rltrack has its own filters, chosen in its config. The Acme
    chain receives the very same mapping it would have received without rltrack.
    """

    def __init__(self, acme_logger: Any, rltrack_logger: RLTrackLogger) -> None:
        _register_with_acme()
        self.acme_logger = acme_logger
        self.rltrack_logger = rltrack_logger

    def write(self, data: Mapping[str, Any]) -> None:
        self.rltrack_logger.write(data)
        self.acme_logger.write(data)

    def close(self) -> None:
        try:
            self.acme_logger.close()
        finally:
            self.rltrack_logger.close()

    def __repr__(self) -> str:
        return f"TeeLogger({self.acme_logger!r}, {self.rltrack_logger!r})"


def tee(
    acme_logger: Any,
    rltrack_logger: Any,
    *,
    label: str = "",
    steps_key: str | None = None,
    task_instance: int = 0,
) -> TeeLogger:
    """An Acme logger writing to both `acme_logger` (Terminal, CSV, filters, ...)
    and rltrack. `rltrack_logger` is what `make_logger_factory(...)(label, ...)`
    returns (an `RLTrackLogger`), or an `rltrack.Logger`, which is then wrapped
    with `label`, `steps_key` and `task_instance` (the wrapper does not close it)."""
    if not isinstance(rltrack_logger, RLTrackLogger):
        if not callable(getattr(rltrack_logger, "emit", None)):
            raise TypeError(
                f"tee(acme_logger, rltrack_logger): rltrack_logger must be an RLTrackLogger (what "
                f"make_logger_factory(...)(label, steps_key, task_instance) returns) or an rltrack.Logger, "
                f"got {type(rltrack_logger).__name__}"
            )
        rltrack_logger = RLTrackLogger(rltrack_logger, label, steps_key, task_instance)
    return TeeLogger(acme_logger, rltrack_logger)


class RLTrackLoggerFactory:
    """An Acme logger factory: `factory(label, steps_key=None, task_instance=0)`.

    All loggers it makes share one rltrack `Logger`, hence one run directory and
    one tracker run per experiment (what Acme users know from one experiment's
    TensorBoard directory): labels become namespaces and task instances become
    worker ids inside that run. The run is created on the first call, not
    before. Closing the Acme loggers does not end the run, because Acme creates
    and closes its loggers independently of each other; end it with
    `factory.close()` (or `with make_logger_factory(...) as factory:`), or let
    rltrack close it at interpreter exit. The sharing is per process: in a
    multi-process Launchpad program every process that calls the factory makes
    its own run (name them apart with `run.name`).

    With `acme_factory` (e.g. `acme.utils.experiment_utils.make_experiment_logger`
    or `acme.utils.loggers.make_default_logger`), each call returns
    `tee(acme_factory(label, ...), ours)`, keeping Acme's terminal and CSV output.
    `steps_key` and `task_instance` are passed to it by keyword when its
    signature has them (`instance` also works), so Acme 0.4.0's two-argument
    factories and later three-argument ones both fit.
    """

    def __init__(
        self,
        config: Any = None,
        *,
        acme_factory: Callable[..., Any] | None = None,
        **overrides: Any,
    ) -> None:
        from rltrack.training.config import load_config

        load_config(config, **overrides)  # a config mistake shows here, not in a worker later
        self._config = config
        self._overrides = overrides
        self._acme_factory = acme_factory
        self._logger: Any = None
        self._closed = False
        self._lock = threading.Lock()
        self.made: list[RLTrackLogger] = []

    @property
    def logger(self) -> Any:
        """The shared rltrack `Logger` (created on first use)."""
        with self._lock:
            if self._logger is None:
                from rltrack.training.config import make_logger

                self._logger = make_logger(self._config, **self._overrides)
                self._logger.set_run_info({"framework": "acme", "acme_version": _acme_version()})
            return self._logger

    def __call__(
        self,
        label: str,
        steps_key: str | None = None,
        task_instance: int | None = 0,
        *,
        instance: int | None = None,
    ) -> Any:
        if instance is not None:
            task_instance = instance
        task_instance = 0 if task_instance is None else task_instance
        if self._closed:
            raise RuntimeError(
                f"this logger factory's run was closed; make a new factory (make_logger_factory(...)) "
                f"for a new experiment instead of asking the old one for a {label!r} logger"
            )
        ours = RLTrackLogger(self.logger, label, steps_key, task_instance)
        with self._lock:
            self.made.append(ours)
        if self._acme_factory is None:
            return ours
        return TeeLogger(_call_acme_factory(self._acme_factory, label, steps_key, task_instance), ours)

    def close(self, status: str = "finished") -> None:
        """Ends the shared run (marks it `status`); idempotent."""
        with self._lock:
            logger = self._logger
            self._closed = True
        if logger is not None:
            for made in list(self.made):
                made.end_stage()
                made.closed = True
            logger.close(status=status)

    def __enter__(self) -> RLTrackLoggerFactory:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.close(status=exit_status(exc))


def make_logger_factory(config: Any = None, *, acme_factory: Callable[..., Any] | None = None, **overrides: Any) -> RLTrackLoggerFactory:
    """A logger factory with Acme's signature `(label, steps_key=None, task_instance=0)`.
    `config` and `overrides` are those of `rltrack.make_logger`; see `RLTrackLoggerFactory`."""
    return RLTrackLoggerFactory(config, acme_factory=acme_factory, **overrides)


# ---- helpers ------------------------------------------------------------------

_ACME_BASE: Any = None


def _register_with_acme() -> None:
    """Registers our loggers as virtual subclasses of Acme's `Logger`, once Acme imports."""
    global _ACME_BASE
    if _ACME_BASE is not None:
        return
    try:
        base = importlib.import_module("acme.utils.loggers.base").Logger
    except Exception:  # Acme missing, or unimportable here (e.g. no launchpad): a plain logger then
        return
    base.register(RLTrackLogger)
    base.register(TeeLogger)
    _ACME_BASE = base


def _acme_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("dm-acme")
    except Exception:
        return None


def _call_acme_factory(factory: Callable[..., Any], label: str, steps_key: str | None, task_instance: int) -> Any:
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # builtins, some C callables
        return factory(label, steps_key, task_instance)
    kwargs: dict[str, Any] = {}
    if "steps_key" in params and steps_key is not None:
        kwargs["steps_key"] = steps_key
    if "task_instance" in params:
        kwargs["task_instance"] = task_instance
    elif "instance" in params:
        kwargs["instance"] = task_instance
    return factory(label, **kwargs)
