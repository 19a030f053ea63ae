"""Prints a table of the latest values per namespace at each dump, SB3 style."""

from __future__ import annotations

import sys
from typing import Any, TextIO

from rltrack.sinks.base import Backend
from rltrack.sinks.local import DEFAULT_NAMESPACE
from rltrack.sinks.tables import TABLE_SECONDS, LatestValues, Pending, format_table
from rltrack.core.events import NUMERIC_KINDS, Event


class ConsoleBackend(Backend):
    name = "console"
    in_training_process = True

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self._tables = LatestValues(min_seconds=TABLE_SECONDS)

    @classmethod
    def validate(cls, settings: dict[str, Any]) -> None:
        """Nothing to check."""

    def write(self, events: list[Event]) -> None:
        for event in events:
            if event.kind in NUMERIC_KINDS:
                for namespace, pending in self._tables.add(event.namespace, event.time, event.steps, event.data):
                    self._print(namespace, pending)

    def dump(self) -> None:
        for namespace, pending in self._tables.take_all():
            self._print(namespace, pending)

    def _print(self, namespace: str, pending: Pending) -> None:
        stream = self._stream or sys.stdout
        stream.write(f"{pending.heading()}\n{format_table(namespace or DEFAULT_NAMESPACE, pending.values)}\n")

    def flush(self) -> None:
        (self._stream or sys.stdout).flush()

    def close(self, status: str) -> None:
        self.dump()
        self.flush()
