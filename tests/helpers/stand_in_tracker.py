"""`FileTracker`, a stand-in for a remote tracker, written for these tests:
the agent runs it in its own process like MLflow or W&B, and it keeps what
it is given as JSON lines in `<run_dir>/<name>.jsonl`, where a test reads it
back. Like W&B it says how many values its run holds (`position`), so that
delivery continuing from a cursor after a killed agent skips what it holds
beyond the cursor instead of storing it twice. Unlike a real tracker it can be told, on cue, to refuse its first
deliveries (`failures`, per agent process), to hang while a file exists
(`hang_while`), or to take `delay` seconds over each batch (a slow but
healthy tracker). The real trackers are tested against their own stores in
their own test modules.

Name it in a config as `"stand_in_tracker:FileTracker"`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from rltrack.backends.remote import RemoteBackend
from rltrack.events import Event


class FileTracker(RemoteBackend):
    name = "filetracker"
    max_batch = 7

    def __init__(self, failures: int = 0, hang_while: str | None = None, delay: float = 0.0) -> None:
        self.failures = failures
        self.hang_while = None if hang_while is None else Path(hang_while)
        self.delay = delay
        self._skip = 0

    def deliver(self, events: list[Event]) -> None:
        while self.hang_while is not None and self.hang_while.exists():
            time.sleep(0.05)
        if self.failures:
            self.failures -= 1
            raise ConnectionError("tracker down")
        time.sleep(self.delay)
        skipped = min(self._skip, len(events))
        self._skip -= skipped
        if events[skipped:]:
            with (self.run.run_dir / f"{self.name}.jsonl").open("a") as f:
                f.write(json.dumps({"batch": [event.to_dict() for event in events[skipped:]]}) + "\n")

    def position(self) -> int:
        return len(received(self.run.run_dir))

    def continue_from(self, position: int | None) -> None:
        self._skip = self.position() - (position or 0)

    def close(self, status: str) -> None:
        (self.run.run_dir / f"{self.name}.status").write_text(status)


def received(run_dir: Path) -> list[Event]:
    """What the stand-in holds for `run_dir`, in the order it was given."""
    path = run_dir / f"{FileTracker.name}.jsonl"
    if not path.is_file():
        return []
    return [Event.from_dict(item) for line in path.read_text().splitlines() for item in json.loads(line)["batch"]]


def batches(run_dir: Path) -> list[int]:
    path = run_dir / f"{FileTracker.name}.jsonl"
    return [len(json.loads(line)["batch"]) for line in path.read_text().splitlines()] if path.is_file() else []
