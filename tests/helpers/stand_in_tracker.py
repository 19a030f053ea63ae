"""`FileTracker`, a stand-in for a remote tracker, written for these tests:
the agent runs it in its own process like MLflow or W&B, and it keeps what
it is given as JSON lines in `<run_dir>/<name>.jsonl`, where a test reads it
back (`received`, whole lines only: the agent may be appending). Like trackio it keeps each event's id (`EventId`, from delivery) with
the event and skips an event whose id it holds, so that delivery continuing
from a cursor after a killed agent stores nothing twice. Unlike a real tracker it can be told, on cue, to refuse its first
deliveries (`failures`, per agent process), to refuse every delivery
while a file exists (`fail_while`), to hang while a file exists
(`hang_while`), or to take `delay` seconds over each batch (a slow but
healthy tracker). The real trackers are tested against their own stores in
their own test modules.

Name it in a config as `"stand_in_tracker:FileTracker"`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from growing_files import whole_lines
from rltrack.trackers.remote import EventId, RemoteBackend, Rules
from rltrack.core.events import Event


class FileTracker(RemoteBackend):
    name = "filetracker"
    rules = Rules(max_batch=7)

    def __init__(self, failures: int = 0, hang_while: str | None = None, delay: float = 0.0, fail_while: str | None = None) -> None:
        self.failures = failures
        self.fail_while = None if fail_while is None else Path(fail_while)
        self.hang_while = None if hang_while is None else Path(hang_while)
        self.delay = delay
        self._held: set[str] | None = None  # the ids of what it holds

    def deliver(self, events: list[Event], ids: list[EventId]) -> None:
        while self.hang_while is not None and self.hang_while.exists():
            time.sleep(0.05)
        if self.failures or (self.fail_while is not None and self.fail_while.exists()):
            self.failures = max(0, self.failures - 1)
            raise ConnectionError("tracker down")
        time.sleep(self.delay)
        path = self.run.run_dir / f"{self.name}.jsonl"
        if self._held is None:
            self._held = {item for line in whole_lines(path) for item in json.loads(line)["ids"]}
        new = [(str(i), event) for i, event in zip(ids, events) if str(i) not in self._held]
        if new:
            with path.open("a") as f:
                f.write(json.dumps({"batch": [event.to_dict() for _, event in new], "ids": [i for i, _ in new]}) + "\n")
            self._held.update(i for i, _ in new)

    def close(self, status: str) -> None:
        (self.run.run_dir / f"{self.name}.status").write_text(status)


def received(run_dir: Path) -> list[Event]:
    """What the stand-in holds for `run_dir`, in the order it was given (the
    agent may be appending a batch: a torn last line is read at the next look)."""
    return [Event.from_dict(item) for line in whole_lines(run_dir / f"{FileTracker.name}.jsonl") for item in json.loads(line)["batch"]]


def batches(run_dir: Path) -> list[int]:
    return [len(json.loads(line)["batch"]) for line in whole_lines(run_dir / f"{FileTracker.name}.jsonl")]
