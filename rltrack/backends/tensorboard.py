"""TensorBoard event files in a directory of the user's choice.

The local backend already writes `log/serial/` inside the run directory; this
backend is for users who keep all their event files under one `logdir`
(`<logdir>/<run name>/`), with the same writer.
"""

from __future__ import annotations

from pathlib import Path

from rltrack.backends.base import Backend, RunContext
from rltrack.backends.tfevents import EventFileWriter
from rltrack.events import Event


class TensorBoardBackend(Backend):
    name = "tensorboard"

    def __init__(self, logdir: str = "runs/tensorboard") -> None:
        if not isinstance(logdir, str) or not logdir:
            raise ValueError(f"logdir must be a directory path, got {logdir!r}")
        self.logdir = Path(logdir)

    def open(self, run: RunContext) -> None:
        super().open(run)
        self.writer = EventFileWriter(self.logdir / run.name)

    def write(self, events: list[Event]) -> None:
        for event in events:
            self.writer.write(event)

    def flush(self) -> None:
        self.writer.flush()

    def close(self, status: str) -> None:
        self.writer.close()
