"""Metrics written straight into an MLflow SQLite store, in bulk.

Why this exists: MLflow's SQLAlchemy store builds an ORM object, validates and
flushes each metric on its own (about 150 µs a metric here), so even
`log_batch` with 1000 metrics a call is only ~10x faster than one
`log_metrics` call per record, and that work costs the agent's CPU, which
it shares with training. The embedded default store is a SQLite file that
only the agent writes metrics into while it runs, so its delivery writes the very rows
`SqlAlchemyStore._log_metrics` would (table `metrics`, and `latest_metrics`
updated by the same "(step, timestamp, value) is greater" rule) in one
transaction. The MLflow UI, `get_metric_history`
and `search_runs` read them as they read MLflow's own. An exact duplicate (a
re-sent batch, timestamps fixed at capture) is ignored by the primary key, as
MLflow's store ignores it.

Only used for `sqlite:///` stores whose schema revision (alembic's
`version_num`) is one this module was tested with, `TESTED_SCHEMAS`, and whose
two tables have exactly the columns written here (both checked when opened):
a user's MLflow of another release may change what these tables mean (a new
column, an index, another rule for `latest_metrics`), so any other store goes
through `MlflowClient.log_batch`, slower but MLflow's own code. Params, tags,
artifacts and run status always do.

Every run of one store file shares one writer (`shared` / `release`): a
SQLite connection keeps a page cache of up to 2 MB, so a connection per run
cost an agent serving a 64-trial sweep about 130 MB.

The writer stages the rows of every run and commits them together (`commit`:
once the oldest staged row has waited `COMMIT_EVERY` seconds, or
`COMMIT_ROWS` rows wait): a SQLite transaction costs ~0.8 ms of CPU here
whatever its size (its journal file, syncs and locks), and a sweep's trials
each report about once a second, so a transaction per run and batch was
most of the agent's CPU in a 64-trial sweep. Each `write` returns a ticket,
and `commit` the highest ticket stored: the backend's cursor advances only
over batches whose ticket is stored (the `stored` of what `RemoteBackend.deliver` returns).

The rows go in `ROWS_PER_INSERT` at a time, one `INSERT ... VALUES (...),
(...)` each: each `metrics` row is four B-tree inserts (the table, its
six-column primary key, two indexes), and SQLite keeps the four cursors open
over the rows of one statement, while `executemany` opens them again and
binds, steps and resets the statement once per row. 1,000 rows a statement
are no faster than 100 here; 100 rows are 600 parameters, within the 999 an
SQLite before 3.32 allows. The rows left over (fewer than 100) take the
one-row statement.
"""

from __future__ import annotations

import math
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Iterable

#: MLflow's SQL stores cannot hold infinities and write the largest double instead.
SQL_MAX = 1.7976931348623157e308

#: Seconds the oldest staged row waits for its transaction, at most (while deliveries go on).
COMMIT_EVERY = 1.0
#: Staged rows that are committed at once, however young.
COMMIT_ROWS = 20_000

#: MLflow schema revisions (alembic `version_num`) the bulk writer was tested on,
#: with the MLflow release that creates each: the oldest and newest supported
#: (requirements/constraints-oldest.txt, requirements/constraints.txt). A new
#: MLflow in the constraints fails tests/backends/test_mlflow_sqlite.py until its
#: revision is added here, after the bulk tests pass on it.
TESTED_SCHEMAS = {
    "0584bdc529eb": "mlflow 2.22.0",
    "dc11669786a5": "mlflow 3.17.2",
}

METRIC_COLUMNS = ("key", "value", "timestamp", "run_uuid", "step", "is_nan")
LATEST_COLUMNS = ("key", "value", "timestamp", "step", "is_nan", "run_uuid")

#: `metrics` rows one INSERT statement carries (see the module's docstring).
ROWS_PER_INSERT = 100

_INSERT_METRIC = "INSERT OR IGNORE INTO metrics (key, value, timestamp, run_uuid, step, is_nan) VALUES (?, ?, ?, ?, ?, ?)"
_INSERT_METRICS = _INSERT_METRIC + ", (?, ?, ?, ?, ?, ?)" * (ROWS_PER_INSERT - 1)
_UPSERT_LATEST = """
INSERT INTO latest_metrics (key, value, timestamp, step, is_nan, run_uuid) VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (key, run_uuid) DO UPDATE SET
    value = excluded.value, timestamp = excluded.timestamp, step = excluded.step, is_nan = excluded.is_nan
WHERE (excluded.step, excluded.timestamp, excluded.value) > (latest_metrics.step, latest_metrics.timestamp, latest_metrics.value)
"""


def sqlite_path(tracking_uri: str) -> Path | None:
    """The database file of a `sqlite:///<path>` URI (None for any other URI)."""
    prefix = "sqlite:///"
    if not tracking_uri.startswith(prefix) or "?" in tracking_uri:
        return None
    return Path(tracking_uri[len(prefix):])


def store_file(tracking_uri: str) -> tuple[str, int, int] | None:
    """The identity (path, device, inode) of a `sqlite:///` store's file as
    it is now: None for another URI or a file not (yet) there. It changes
    when the file is deleted and created anew at the same path."""
    path = sqlite_path(tracking_uri)
    if path is None:
        return None
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (str(path), info.st_dev, info.st_ino)


class SqliteMetricWriter:
    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self._lock = threading.Lock()  # runs delivered by several threads take turns on the one connection
        self._users = 0
        self._key: tuple[str, int, int] | None = None
        self._rows: list[str | float | int] = []  # staged for `metrics`: the METRIC_COLUMNS of each row in turn, flat
        self._latest: dict[tuple[str, str], tuple[tuple[int, int, float], int]] = {}  # staged for `latest_metrics`: (run, key) -> ((step, ms, value), is_nan)
        self._staged_at: float | None = None  # `time.monotonic()` of the oldest staged row
        self._tickets = 0  # writes staged so far
        self.committed = 0  # the last ticket stored

    @classmethod
    def shared(cls, tracking_uri: str) -> SqliteMetricWriter | None:
        """The one writer of the store's file (opened on first use), or None
        as `open` gives; every call is matched by a `release`. A file
        replaced at the same path (deleted and created anew) gets a writer of
        its own."""
        key = store_file(tracking_uri)
        if key is None:
            return None
        with _SHARED_LOCK:
            writer = _SHARED.get(key)
            if writer is None:
                writer = cls.open(tracking_uri)
                if writer is None:
                    return None
                writer._key = key
                _SHARED[key] = writer
            writer._users += 1
            return writer

    def release(self) -> None:
        """Ends one `shared` use; the last closes the connection."""
        with _SHARED_LOCK:
            self._users -= 1
            if self._users > 0:
                return
            _SHARED.pop(self._key, None)
        self.close()

    @classmethod
    def open(cls, tracking_uri: str) -> SqliteMetricWriter | None:
        """A writer for the store, or None when it is not a SQLite file of a
        tested schema revision whose tables have the layout this module
        writes (then use log_batch)."""
        path = sqlite_path(tracking_uri)
        if path is None or not path.is_file():
            return None
        db = sqlite3.connect(path, timeout=60.0, isolation_level=None, check_same_thread=False)
        try:
            if schema_revision(db) in TESTED_SCHEMAS and _columns(db, "metrics") == set(METRIC_COLUMNS) and _columns(db, "latest_metrics") == set(LATEST_COLUMNS):
                return cls(db)
        except sqlite3.Error:
            pass
        db.close()
        return None

    def write(self, run_id: str, metrics: Iterable[tuple[str, float, int, int]]) -> int:
        """Stages `(key, value, timestamp_ms, step)` rows of run `run_id`;
        returns their ticket, stored once `committed` reaches it."""
        with self._lock:
            rows, latest = self._rows, self._latest
            for key, value, ms, step in metrics:
                if -SQL_MAX <= value <= SQL_MAX:  # finite (a NaN fails every comparison)
                    stored, is_nan = value, 0
                elif value != value:
                    stored, is_nan = 0.0, 1
                else:
                    stored, is_nan = math.copysign(SQL_MAX, value), 0
                rows += (key, stored, ms, run_id, step, is_nan)
                point = (step, ms, stored)
                held = latest.get((run_id, key))
                if held is None or point > held[0]:
                    latest[run_id, key] = (point, is_nan)
            self._tickets += 1
            if not self._rows:  # nothing to store: stored already
                self.committed = self._tickets
            elif self._staged_at is None:
                self._staged_at = time.monotonic()
            return self._tickets

    def commit(self, force: bool = False) -> int:
        """Stores what is staged, in one transaction, when it is due (or
        `force`); returns `committed`. On an error the rows stay staged for
        the next call."""
        with self._lock:
            due = self._staged_at is not None and (force or len(self._rows) >= COMMIT_ROWS * len(METRIC_COLUMNS) or time.monotonic() - self._staged_at >= COMMIT_EVERY)
            if due:
                latest = [(key, value, ms, step, nan, run_id) for (run_id, key), ((step, ms, value), nan) in self._latest.items()]
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    _insert_metrics(self._db, self._rows)
                    self._db.executemany(_UPSERT_LATEST, latest)
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
                self._db.execute("COMMIT")
                self._rows, self._latest, self._staged_at, self.committed = [], {}, None, self._tickets
            return self.committed

    def close(self) -> None:
        """Stores what is staged, then closes the connection."""
        try:
            self.commit(force=True)
        finally:
            self._db.close()


def _insert_metrics(db: sqlite3.Connection, rows: list[str | float | int]) -> None:
    """Inserts the flat `rows`, `ROWS_PER_INSERT` rows a statement, then the rest one by one."""
    width, columns = ROWS_PER_INSERT * len(METRIC_COLUMNS), len(METRIC_COLUMNS)
    whole = len(rows) - len(rows) % width
    for start in range(0, whole, width):
        db.execute(_INSERT_METRICS, rows[start : start + width])
    db.executemany(_INSERT_METRIC, (rows[start : start + columns] for start in range(whole, len(rows), columns)))


_SHARED: dict[tuple[str, int, int], SqliteMetricWriter] = {}
_SHARED_LOCK = threading.Lock()


def schema_revision(db: sqlite3.Connection) -> str | None:
    """The store's MLflow schema revision (None: not an MLflow store)."""
    row = db.execute("SELECT version_num FROM alembic_version").fetchone()
    return str(row[0]) if row else None


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
