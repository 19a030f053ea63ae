"""The interface every backend implements, and what it is told about the run.

Backends are sinks: the pipeline thread hands them batches of events that
already went through the filters and into the journal. They never run on the
training thread: memory and console run on the training process's
pipeline thread (`in_training_process`), the others in the agent, which
feeds them from the journal (rltrack.delivery.files). `dump` marks the store-then-log point (a table per dump in
text logs and on the console); `close` ends the run with its final status.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rltrack.core.events import Event
from rltrack.core.report import Report


@dataclass
class RunContext:
    """What a backend may know about the run it is writing."""

    run_dir: Path
    name: str
    config: dict[str, Any]
    report: Report
    #: The writer's name when several processes write this run (config
    #: `run.worker`): files of its own carry it (see rltrack.journal).
    worker: str | None = None

    @property
    def stores(self) -> Path:
        """Where the trackers' default stores go (MLflow's SQLite file,
        trackio's directory, TensorBoard's logdir): config `run.stores`, which
        `make_logger` always fills with the runs root (the Tune adapter, which
        puts trials in a folder per experiment, keeps the user's root), else
        the directory above the run's."""
        stores = self.config.get("run", {}).get("stores")
        return Path(stores) if isinstance(stores, str) and stores else self.run_dir.parent.resolve()

    @property
    def task(self) -> str:
        """The experiment the run belongs to (config `run.task`, which
        `make_logger` always fills; the run's name for runs made before it
        did): every tracker groups the run under it (MLflow's experiment, W&B's
        project and group, Neptune's tags, trackio's project)."""
        task = self.config.get("run", {}).get("task")
        return task if isinstance(task, str) and task else self.name


class Backend:
    """Base class: subclasses override what they need. `name` is the config name."""

    name = ""
    #: True for a backend whose output lives in the training process (memory,
    #: the console); backends writing files run in the agent.
    in_training_process = False

    @classmethod
    def validate(cls, settings: dict[str, Any]) -> None:
        """Raises ValueError (or TypeError, `MissingExtraError`) for settings
        it cannot run with; `settings` holds every parameter of the
        constructor, defaults filled in. A class method: the training process
        checks the settings of a backend the agent builds without building it
        (see rltrack.delivery.construct), so the constructor only keeps them. Unless
        overridden (a backend of the user's own), the backend is built to
        check them."""
        cls(**settings)

    def open(self, run: RunContext) -> None:
        self.run = run

    def write(self, events: list[Event]) -> None:
        """Takes `events`. A backend the agent feeds takes all of them or,
        raising, none (a write keeps them in memory until `flush`): the files
        delivery then writes the batch again in halves to find the events it
        refuses (rltrack.delivery.files)."""

    def dump(self) -> None:
        pass

    def set_run_info(self, info: dict[str, Any]) -> None:
        """Framework bookkeeping about the run (trial id, host, ...); see Logger.set_run_info."""

    def flush(self) -> None:
        pass

    def close(self, status: str) -> None:
        pass

    def outputs(self) -> list[Path]:
        """The files this backend has written into so far (the agent deletes
        them to write them anew when it finds them half-written by an agent
        that was killed, see rltrack.delivery.files)."""
        return []
