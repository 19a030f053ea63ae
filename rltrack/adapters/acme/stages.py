"""DI-engine's stage blocks from a live Acme logger's records: counted on the calling thread, computed on rltrack's.

An `RLTrackLogger` (rltrack.adapters.acme.logger) in a staged namespace hands each
record to a stage here instead of sending it straight away: the stage decides
on the calling thread when an interval ends (every `stage_every` records, or
for the evaluator when training moved on) and takes the records' values in
and computes the block on rltrack's pipeline thread, in order with everything
else written. Which keys count and how an interval becomes a block is
rltrack.adapters.acme.keys; the blocks' arithmetic is rltrack.frameworks.stages.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any, Callable, Mapping

import numpy as np

from rltrack.core.events import Event
from rltrack.adapters.acme.keys import SOURCE, STEP_AXES, episode_block, learner_name
from rltrack.frameworks.stages import CollectorStats, LearnerAverages, block_events


class Stage:
    """The raw records of one Acme logger since its last stage block.

    Split between two threads: the calling thread counts records and decides
    when a block is due (`add`, `send`: `records`, `steps`); the pipeline
    thread takes each record's values in (`take`) and computes the block
    (`block`), so the accumulators are touched by that thread alone. The
    queue keeps the order: a record's values are taken before its event is
    built, and a block is built after the values of its records and before
    its `Logger.dump`."""

    def __init__(self, logger: Any, namespace: str, every: int | None) -> None:
        self.logger = logger
        self.namespace = namespace
        self.every = every
        self.records = 0
        self.steps: dict[str, Any] = {}

    def add(self, values: Mapping[str, Any], steps: dict[str, Any], record: Callable[[], list[Event]]) -> None:
        """Calling thread: counts the record; `record` builds its event after its values are taken."""
        self.records += 1
        self.steps = steps
        if self.every is not None and self.records >= self.every:
            self.logger.emit_deferred(partial(self._take, values))
            self.send()
            self.logger.emit_deferred(record)
        else:
            self.logger.emit_deferred(partial(self._take, values, record))

    def send(self) -> None:
        """Calling thread: the block of the records counted so far, then `Logger.dump`."""
        if self.records:
            self.logger.emit_deferred(partial(self._block_events, time.time(), self.steps, self.block_context()))
            self.logger.dump(self.steps)
            self.records = 0

    def _take(self, values: Mapping[str, Any], then: Callable[[], list[Event]] | None = None) -> list[Event]:
        """Pipeline thread: takes a record's values in, then builds `then`'s events."""
        self.take(values)
        return [] if then is None else then()

    def _block_events(self, now: float, steps: dict[str, Any], context: Any) -> list[Event]:
        block, info_lines = self.block(context)
        return block_events(self.namespace, block, steps, now, self.logger.name, source=SOURCE, info_lines=info_lines)

    def block_context(self) -> Any:
        """What the block needs from the calling thread's state at `send`."""
        return None

    def take(self, values: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def block(self, context: Any) -> tuple[dict[str, Any], list[str]]:
        raise NotImplementedError


class EpisodeStage(Stage):
    """Collector / evaluator blocks from an environment loop's per-episode records."""

    def __init__(self, logger: Any, namespace: str, every: int | None) -> None:
        super().__init__(logger, namespace, every)
        self.collector = CollectorStats()
        self.train_counts: tuple[Any, ...] | None = None  # calling thread: the last record's training counters
        self._clear()

    def _clear(self) -> None:
        self.rewards: list[float] = []
        self.lengths: list[float] | None = []
        self.duration: float | None = 0.0

    def add(self, values: Mapping[str, Any], steps: dict[str, Any], record: Callable[[], list[Event]]) -> None:
        if self.namespace == "evaluator":
            counts = tuple(_number(values.get(key)) for key in STEP_AXES)
            if self.every is None and self.records and counts != self.train_counts:
                self.send()  # training moved on: this record starts the next evaluation
            self.train_counts = counts
        super().add(values, steps, record)

    def block_context(self) -> Any:
        return self.train_counts

    def take(self, values: Mapping[str, Any]) -> None:
        reward = _number(values.get("episode_return"))
        if reward is None:
            self.logger.report.count("dropped", f"acme {self.namespace} stage: an episode without a scalar episode_return")
            return
        self.rewards.append(reward)
        length = _number(values.get("episode_length"))
        speed = _number(values.get("steps_per_second"))
        if self.lengths is not None:
            self.lengths = None if length is None else [*self.lengths, length]
        if self.duration is not None:
            self.duration = None if length is None or not speed else self.duration + length / speed

    def block(self, context: Any) -> tuple[dict[str, Any], list[str]]:
        rewards, lengths, duration = self.rewards, self.lengths, self.duration
        self._clear()
        return episode_block(self.namespace, self.collector, rewards, lengths, duration, train_iter=context[1] if context else None)


class LearnerStage(Stage):
    """Learner blocks: each loss and the learning rate averaged over the interval's records."""

    def __init__(self, logger: Any, namespace: str, every: int | None) -> None:
        super().__init__(logger, namespace, every)
        self.averages = LearnerAverages()

    def take(self, values: Mapping[str, Any]) -> None:
        found: dict[str, float | None] = {}
        for key, value in values.items():
            name = learner_name(key)
            if name is not None:
                found[name] = _number(value)
        self.averages.add(found)

    def block(self, context: Any) -> tuple[dict[str, Any], list[str]]:
        return (self.averages.take() if self.averages else {}), []


def stage_for(logger: Any, namespace: str, every: int | None) -> Stage:
    """The stage of an Acme logger writing to `namespace`: learner averages, or per-episode blocks."""
    return (LearnerStage if namespace == "learner" else EpisodeStage)(logger, namespace, every)


def _number(value: Any) -> float | None:
    """A finite-or-not float from a Python/numpy/JAX scalar or 1-element array; None otherwise."""
    if type(value) in (int, float):  # the common case, without numpy's conversion
        return float(value)
    if value is None or isinstance(value, (str, bytes)):
        return None
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    return float(array.reshape(())) if array.size == 1 else None
