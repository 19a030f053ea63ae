"""An rltrack tracker plug-in: every scalar of every run in one SQLite file.

Why it exists: it is the smallest tracker a package of someone else's can
add (`[project.entry-points."rltrack.trackers"] example = ...`), and the
tracker contract tests run over it as over the built-in ones, so the plug-in
path is proved end to end, faults included. It keeps the contract of
`rltrack.trackers.remote.RemoteBackend` by storing each value under its
event's id (`INSERT OR IGNORE`): a batch delivered again adds nothing.
It takes scalars and hyperparameters only, and says so in its rules
(`Rules(kinds=...)`): delivery leaves the other kinds out and counts each
as dropped, with why.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from rltrack.core.events import Event
from rltrack.sinks.base import RunContext
from rltrack.trackers.remote import EventId, RemoteBackend, Rules

SCHEMA = """CREATE TABLE IF NOT EXISTS scalars (
    run TEXT NOT NULL, event TEXT NOT NULL, key TEXT NOT NULL, step INTEGER NOT NULL, value REAL,
    PRIMARY KEY (run, event, key))"""


class ExampleTracker(RemoteBackend):
    """`[backends.example] path` (default `<run.root>/example.db`)."""

    name = "example"
    rules = Rules(kinds=("scalars", "hparams"))

    def __init__(self, path: str | None = None) -> None:
        self.path = path

    def _file(self, run: RunContext) -> Path:
        return Path(self.path) if self.path else run.stores / "example.db"

    def target(self, run: RunContext) -> str:
        return str(self._file(run))

    def deliver(self, events: list[Event], ids: list[EventId]) -> None:
        run = self.state.setdefault("run", self.run.name)
        values = [
            (str(event_id), event.tag(key), event.primary_step, value)
            for event, event_id in zip(events, ids)
            if event.kind == "scalars"
            for key, value in event.data.items()
        ]
        rows = [(run, *value) for value in values if value[-1] is not None]
        with sqlite3.connect(self._file(self.run), timeout=60) as db:
            db.execute(SCHEMA)
            db.executemany("INSERT OR IGNORE INTO scalars VALUES (?, ?, ?, ?, ?)", rows)
        # counted once the batch is stored (a batch that failed is offered again)
        if len(rows) < len(values):
            self.run.report.count("dropped", "None value", len(values) - len(rows), section=self.name)


def values(path: Path, key: str) -> list[tuple[int, float]]:
    """What the store holds under `key`, in delivery order (for the tests)."""
    with sqlite3.connect(path) as db:
        return list(db.execute("SELECT step, value FROM scalars WHERE key = ? ORDER BY rowid", (key,)))
