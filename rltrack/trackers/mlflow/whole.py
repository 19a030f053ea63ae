"""An MLflow SQLite store made whole (fully migrated) before the first value
is written, and never migrated where anyone may be opening it.

Why this exists: MLflow makes a SQLite store's schema with alembic
migrations that are not one transaction, and every MLflow client migrates a
store it finds unmade. When the agent made the store lazily, after the
script had started, a user's `MlflowClient` opening it the moment the run
ended raced the agent's migration: `table _alembic_tmp_experiments already
exists`, 0 runs, a leftover `_alembic_tmp_*` table. So:

* the store is made when the run starts (`make_logger`, `rltrack run` before
  it starts the command, the agent before its first delivery to a store not
  yet there), by `make_whole`, under the store's lock (`<store>.lock`, see
  rltrack.trackers.mlflow.store), within `STORE_WAIT` seconds, or it raises
  `StoreNotReady` saying what to do;
* it is made in a private file beside it (`.<name>.making.<pid>`) and linked
  into place only if no file is there yet (`os.link`: atomic, on NFS too): a
  client that opens the store sees no file or a whole one, never one being
  migrated; a store some other client made meanwhile is kept. MLflow's own
  migrations make it, in a child process (`python -m
  rltrack.trackers.mlflow.whole FILE`) unless this process has imported
  MLflow already: importing MLflow costs about 2 s of CPU and 100 MB, which
  a training process should not pay for the store;
* a store some other process is making (a user's MLflow) is waited for; one
  left half-made that holds nothing (unchanged for `ABANDONED` s) is made
  again; one that holds runs and was left half-migrated is refused with its
  repair (`half_migrated`). A store made by an older MLflow is refused with
  the command that upgrades it, not upgraded here: the upgrade changes a
  user's data for good, and MLflow asks for a backup first; one made by a
  newer MLflow is refused with what to install.
* whether a store is whole is read without MLflow (`condition`): alembic's
  revision is the head of the installed MLflow's migrations (read from their
  files) and no `_alembic_tmp_*` table is left.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sqlite3
import subprocess
import sys
import time
from functools import lru_cache
from pathlib import Path

from rltrack.core.locks import hold
from rltrack.core.optional import require
from rltrack.trackers.mlflow.sqlite import sqlite_path
from rltrack.trackers.mlflow.store import half_migrated, holds_nothing
from rltrack.trackers.remote import StoreNotReady

PURPOSE = "The MLflow backend"
#: Seconds `make_whole` waits at most: for the store's lock, another process making it, and making it.
STORE_WAIT = 120.0
#: Seconds a half-made store that holds nothing stays unchanged before it is taken as abandoned and made again.
ABANDONED = 10.0


@lru_cache(maxsize=1)
def migrations() -> tuple[str | None, frozenset[str]]:
    """The head revision of the installed MLflow's schema migrations (None:
    not one head found) and every revision it knows, read from the
    migration files, without importing MLflow."""
    spec = importlib.util.find_spec("mlflow")
    if spec is None or not spec.submodule_search_locations:
        return None, frozenset()
    versions = Path(next(iter(spec.submodule_search_locations)), "store", "db_migrations", "versions")
    revisions, downs = set(), set()
    for file in versions.glob("*.py"):
        text = file.read_text(encoding="utf-8")
        revision = re.search(r"^revision\s*=\s*['\"](\w+)['\"]", text, re.M)
        down = re.search(r"^down_revision\s*=\s*(.+)$", text, re.M)
        if revision:
            revisions.add(revision.group(1))
            downs.update(re.findall(r"['\"](\w+)['\"]", down.group(1)) if down else ())
    heads = revisions - downs
    return (next(iter(heads)) if len(heads) == 1 else None), frozenset(revisions)


def condition(database: Path) -> str:
    """What the SQLite store `database` is now: "missing", "whole", "making"
    (being made, or its making cut short, holding nothing), "half" (left
    half-migrated, holding runs), "old" (an older MLflow's schema, holding
    runs), "newer" (a schema the installed MLflow does not know)."""
    if not database.is_file():
        return "missing"
    head, known = migrations()
    try:
        with sqlite3.connect(database.resolve().as_uri() + "?mode=ro", uri=True, timeout=1.0) as db:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            row = db.execute("SELECT version_num FROM alembic_version").fetchone() if "alembic_version" in tables else None
    except sqlite3.DatabaseError as exc:
        if "not a database" in str(exc):
            raise StoreNotReady(f"{database} is not an SQLite database", f"move {database} away, or set tracking_uri to another store") from None
        return "making"  # locked by the process making it
    revision = row[0] if row else None
    if any(name.startswith("_alembic_tmp_") for name in tables):
        return "making" if holds_nothing(database) else "half"
    if revision is None:
        return "making"
    if revision == head or (head is None and revision in known):
        return "whole"
    if revision in known:
        return "making" if holds_nothing(database) else "old"
    return "newer"


def make_whole(database: Path, wait: float = STORE_WAIT) -> None:
    """Makes the SQLite store `database` whole unless it is (see the module's
    docstring); raises `StoreNotReady` if it cannot within `wait` seconds."""
    if condition(database) == "whole":
        return
    database.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + wait
    lock = database.with_name(database.name + ".lock")
    fd = hold(lock, wait)
    if fd is None:
        raise StoreNotReady(f"another process held {lock} for over {wait:.0f} s while making the MLflow store {database}")
    try:
        seen, since = None, time.monotonic()
        while (state := condition(database)) != "whole":
            if state == "missing":
                _make(database, deadline)
                continue
            if state != "making":
                raise _refusal(database, state)
            mark = [_mark(database.with_name(database.name + suffix)) for suffix in ("", "-journal", "-wal")]
            if mark != seen:
                seen, since = mark, time.monotonic()
            elif time.monotonic() - since >= ABANDONED and holds_nothing(database):
                database.unlink()  # its making was cut short (a process killed midway, a full disk): made again
                continue
            if time.monotonic() > deadline:
                raise StoreNotReady(f"the MLflow store {database} was still being made by another process after {wait:.0f} s")
            time.sleep(0.05)
    finally:
        os.close(fd)


def _refusal(database: Path, state: str) -> StoreNotReady:
    if state == "half":
        repair = half_migrated(database) or f"repair {database}: mlflow db upgrade sqlite:///{database}"
        return StoreNotReady(repair, repair)
    if state == "old":
        repair = f"back the store up (cp {database} {database}.bak), then upgrade its schema: mlflow db upgrade sqlite:///{database}"
        return StoreNotReady(f"the MLflow store {database} was made by an older MLflow; {repair}", repair)
    repair = "install the MLflow that made it (pip install -U mlflow), or set tracking_uri to another store"
    return StoreNotReady(f"the MLflow store {database} was made by a newer MLflow than the one installed; {repair}", repair)


def _mark(path: Path) -> tuple[int, int] | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_size, info.st_mtime_ns


def _make(database: Path, deadline: float) -> None:
    """Makes the store in a private file and links it into place unless a store is there by then."""
    making = database.with_name(f".{database.name}.making.{os.getpid()}")
    making.unlink(missing_ok=True)
    try:
        if "mlflow" in sys.modules:
            make_file(making)
        else:
            _make_in_child(database, making, deadline)
        try:
            os.link(making, database)
        except FileExistsError:  # made by another client meanwhile: theirs stays
            pass
    finally:
        for leftover in (making, making.with_name(making.name + "-journal")):
            leftover.unlink(missing_ok=True)


def _make_in_child(database: Path, making: Path, deadline: float) -> None:
    command = [sys.executable, "-m", "rltrack.trackers.mlflow.whole", str(making)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=max(1.0, deadline - time.monotonic()), check=False)
    except subprocess.TimeoutExpired:
        raise StoreNotReady(f"making the MLflow store {database} did not end in time (the bound is {STORE_WAIT:.0f} s)") from None
    if done.returncode != 0:
        said = [line for line in done.stderr.splitlines() if line.strip()]
        raise StoreNotReady(f"MLflow could not make the store {database}: {said[-1] if said else f'exit code {done.returncode}'}")


def make_file(path: Path) -> None:
    """Makes the SQLite store `path` with MLflow's own migrations, and lets go
    of what MLflow keeps of it in this process."""
    uri = f"sqlite:///{path}"
    require("mlflow", "mlflow", PURPOSE).MlflowClient(uri).search_experiments(max_results=1)
    forget_store(uri)


def forget_store(tracking_uri: str) -> None:
    """Drops what MLflow keeps of a SQLite store for the process: the store
    of each URI (an `lru_cache` of `TrackingStoreRegistry`, which every client
    of the URI asks) and its SQLAlchemy engine (a class-level map of engines
    by URI, disposed here), whose pooled connections would still point at a
    deleted or renamed file ("attempt to write a readonly database"). Private parts
    of MLflow, named as in the tested releases: `_engine_map` (3.17),
    `_db_uri_sql_alchemy_engine_map` (2.22), each with `<name>_lock`;
    tests/backends/test_mlflow_sqlite.py fails if they move."""
    store = require("mlflow.store.tracking.sqlalchemy_store", "mlflow", PURPOSE).SqlAlchemyStore
    registry = require("mlflow.tracking._tracking_service.registry", "mlflow", PURPOSE).TrackingStoreRegistry
    database = sqlite_path(tracking_uri)
    for name in ("_engine_map", "_db_uri_sql_alchemy_engine_map"):
        engines = getattr(store, name, None)
        if engines is not None:
            with getattr(store, name + "_lock"):
                for uri in [uri for uri in engines if sqlite_path(uri) == database]:
                    engines.pop(uri).dispose()
    registry._get_store_with_resolved_uri.cache_clear()  # every URI's: the others are made again, from their engines


if __name__ == "__main__":
    make_file(Path(sys.argv[1]))
