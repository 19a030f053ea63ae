"""TensorBoard event files in a directory of the user's choice.

The local backend already writes `log/serial/` inside the run directory; this
backend is for users who keep all their event files under one `logdir`
(`<logdir>/<run name>/`), with the same writer. Without a `logdir` it is
`tensorboard/` beside the run directories (`<run.root>/tensorboard`), so a run
root moved elsewhere takes its TensorBoard files along. `tb_axes` works as
in the local backend (`rltrack.sinks.tfevents.check_tb_axes`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from rltrack.sinks.base import Backend, RunContext
from rltrack.sinks.tfevents import EventFileWriter, check_tb_axes
from rltrack.core.events import Event


class TensorBoardBackend(Backend):
    name = "tensorboard"

    def __init__(self, logdir: str | None = None, tb_axes: Sequence[str] | None = None) -> None:
        self.logdir = None if logdir is None else Path(logdir)
        self.tb_axes = None if tb_axes is None else tuple(tb_axes)

    @classmethod
    def validate(cls, settings: dict[str, Any]) -> None:
        logdir = settings["logdir"]
        if logdir is not None and (not isinstance(logdir, str) or not logdir):
            raise ValueError(f'logdir must be a directory path, e.g. logdir = "runs/tensorboard", got {logdir!r}')
        check_tb_axes(settings["tb_axes"])

    def open(self, run: RunContext) -> None:
        super().open(run)
        logdir = self.logdir or run.stores / "tensorboard"
        self.writer = EventFileWriter(logdir / run.name, self.tb_axes)

    def write(self, events: list[Event]) -> None:
        """Takes all of `events` or, raising, none of them (see `Backend.write`)."""
        mark = self.writer.mark()
        try:
            for event in events:
                self.writer.write(event)
        except Exception:
            self.writer.undo(mark)
            raise

    def outputs(self) -> list[Path]:
        return [self.writer.path]

    def flush(self) -> None:
        self.writer.flush()

    def close(self, status: str) -> None:
        self.writer.close()
