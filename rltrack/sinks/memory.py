"""Keeps every event in the process, for notebooks and tests."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rltrack.sinks.base import Backend
from rltrack.core.events import NUMERIC_KINDS, Event
from rltrack.core.optional import require

if TYPE_CHECKING:
    import pandas


class MemoryBackend(Backend):
    """`events`: every event; `metrics[tag]`: the values of each scalar, in order;
    `steps[tag]`: their primary steps; `df`: one row per scalar record.
    The pipeline thread fills them: read them after `Logger.flush()` or `close()`."""

    name = "memory"
    in_training_process = True

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.metrics: dict[str, list[Any]] = {}
        self.steps: dict[str, list[int | None]] = {}
        self.status: str | None = None

    @classmethod
    def validate(cls, settings: dict[str, Any]) -> None:
        """Nothing to check."""

    def write(self, events: list[Event]) -> None:
        self.events.extend(events)
        for event in events:
            if event.kind in NUMERIC_KINDS:
                for key, value in event.data.items():
                    tag = event.tag(key)
                    self.metrics.setdefault(tag, []).append(value)
                    self.steps.setdefault(tag, []).append(event.primary_step)

    def close(self, status: str) -> None:
        self.status = status

    @property
    def df(self) -> pandas.DataFrame:
        pd = require("pandas", "pandas", "MemoryBackend.df")
        rows = [
            {"time": e.time, "namespace": e.namespace, **e.steps, **{e.tag(k): v for k, v in e.data.items()}}
            for e in self.events
            if e.kind in NUMERIC_KINDS
        ]
        return pd.DataFrame(rows)
