"""The experiment database: one SQLite file per runs root, `<root>/rltrack_index.db`,
or, for a root the user cannot write (a read-only mount, a colleague's
results, an archive), `<cache>/index/<hash of the root>/rltrack_index.db`
(`<cache>`: `RLTRACK_CACHE_DIR`, else `$XDG_CACHE_HOME/rltrack`, else
`~/.cache/rltrack`), rebuilt from the runs like any index.

The run directories are the source of truth; the index is a cache of what
queries need, so `runs ls` over thousands of runs reads one file instead of
thousands of directories. It can always be rebuilt (`rebuild`, or
`rltrack runs index --rebuild`), and a rebuilt index equals one kept up to
date incrementally (`rows()` is what both are compared on).

Tables:

    runs    one row per run: id (readable, see rltrack.runs.run), path (relative
            to the root), task, start_time, start_unix, host, ip, status, source,
            writer, archived, signature (mtime and size of the files the run's
            format names; a changed signature means the run changed),
            fields_json (the run's fields as one JSON object: what a query
            returns, read in one row per run)
    fields  (run, name, value), what `where` filters on: the run's hyperparameters (flat `a/b` names;
            `hp/<name>` when a name is one of the runs columns), and for each
            of `MAIN_METRICS` present its final value (`<metric>`) and best
            value (`best/<metric>`)
    series  (run, metric, axis, x_name, x, y): a metric's cleaned series (float64 bytes; x on
            the axis asked, "" for the primary one, whose name is x_name) as
            `rltrack compare` read it (rltrack.runs.series_cache), kept until
            the run's row is replaced (ON DELETE CASCADE: the run changed or went)

Staying current: `refresh(root)` (what the CLI and `query` do when they open
the index) stats every run directory's signature files and re-reads only the
runs whose signature changed, adds new runs and drops rows whose directory is
gone. `update_run(run_dir)` refreshes one run, for a Logger opening or closing.
Runs under `<root>/archive/` are indexed with `archived = 1`.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import sys
from contextlib import closing
from pathlib import Path
from typing import Any, Iterator

from rltrack.runs.readers import RunFormat, find_runs, format_of
from rltrack.runs.run import MAIN_METRICS, Run, open_run

INDEX_NAME = "rltrack_index.db"
ARCHIVE_DIR = "archive"
#: The runs table's columns a query shows, in this order (the row id and signature are internal).
RUN_COLUMNS = ("id", "task", "start_time", "host", "ip", "status", "source", "writer", "archived", "path")
HPARAM_PREFIX = "hp/"
#: Runs stored per transaction while refreshing.
COMMIT_EVERY = 500
BEST_PREFIX = "best/"

#: Bumped whenever the tables change, or what a reader makes of a directory (3: DI-engine's
#: twins one value, tasks of event-file folders without their time; 4: the series table);
#: an index of another version is rebuilt.
SCHEMA_VERSION = 4

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    rowid INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    path TEXT NOT NULL UNIQUE,
    task TEXT NOT NULL,
    start_time TEXT NOT NULL,
    start_unix REAL NOT NULL,
    host TEXT NOT NULL,
    ip TEXT NOT NULL,
    status TEXT NOT NULL,
    source TEXT NOT NULL,
    writer TEXT NOT NULL,
    archived INTEGER NOT NULL,
    signature TEXT NOT NULL,
    fields_json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_by_task ON runs (task, start_unix);
CREATE TABLE IF NOT EXISTS fields (
    run INTEGER NOT NULL REFERENCES runs (rowid) ON DELETE CASCADE,
    name TEXT NOT NULL,
    value,
    PRIMARY KEY (run, name)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS fields_by_name ON fields (name, value);
CREATE TABLE IF NOT EXISTS series (
    run INTEGER NOT NULL REFERENCES runs (rowid) ON DELETE CASCADE,
    metric TEXT NOT NULL,
    axis TEXT NOT NULL,
    x_name TEXT NOT NULL,
    x BLOB NOT NULL,
    y BLOB NOT NULL,
    PRIMARY KEY (run, metric, axis)
) WITHOUT ROWID;
"""


def index_path(root: Path) -> Path:
    """The root's own index where this process can write it (opened for
    appending: `os.access` says yes to root on a read-only directory), else
    one in the user's cache."""
    own = root / INDEX_NAME
    if not root.is_dir():
        return own
    try:
        with open(own, "ab"):
            return own
    except OSError:
        return cache_folder("index", str(root.resolve())) / INDEX_NAME


def cache_folder(kind: str, key: str) -> Path:
    """`<cache>/<kind>/<hash of key>/`: what rltrack keeps for the user about a root or URI."""
    base = os.environ.get("RLTRACK_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rltrack"
    return Path(base).expanduser() / kind / hashlib.sha256(key.encode()).hexdigest()[:16]


class RootError(ValueError):
    """The runs root does not exist or cannot hold its index; the message says which and what to do."""


def connect(root: Path) -> sqlite3.Connection:
    """The index of `root` (created empty if missing); several processes may write it.
    An index made by another version of this schema is emptied (the next refresh
    fills it again from the run directories). A root that does not exist is
    never created (a mistyped --root would look like a root without runs), and
    one where the index cannot be written is a `RootError` too."""
    if not root.is_dir():
        raise RootError(
            f"no runs root at {root}: {'it is a file' if root.exists() else 'it does not exist'}; "
            "pass --root the directory that holds your run directories (run.root in the config, default ./runs)"
        )
    try:
        index = index_path(root)
        index.parent.mkdir(parents=True, exist_ok=True, mode=0o700)  # the user's cache, for a root the user cannot write
        db = sqlite3.connect(index, timeout=30.0)
        db.execute("PRAGMA foreign_keys = ON")
        if db.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
            with db:
                db.executescript("DROP TABLE IF EXISTS series; DROP TABLE IF EXISTS fields; DROP TABLE IF EXISTS runs;")
                db.executescript(_SCHEMA)
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    except (sqlite3.OperationalError, OSError) as exc:
        raise RootError(
            f"the index of runs root {root} cannot be written at {index_path(root)} ({exc}); "
            "set RLTRACK_CACHE_DIR to a directory you can write"
        ) from None
    return db


def signature(run_format: RunFormat, path: Path) -> str:
    """mtime_ns and size of each file the format names; "" for a missing file."""
    parts = []
    for file in run_format.signature_files(path):
        try:
            stat = os.stat(file)
        except OSError:
            parts.append("")
        else:
            parts.append(f"{stat.st_mtime_ns}:{stat.st_size}")
    return "|".join(parts)


def _relative(root: Path, path: Path) -> str:
    return Path(os.path.relpath(path, root)).as_posix()


def _field_value(value: Any) -> Any:
    """What SQLite stores: numbers and text as they are, booleans as 0/1, other values as JSON text."""
    if value is None or isinstance(value, (int, float, str)):
        return int(value) if isinstance(value, bool) else value
    return json.dumps(value, default=str)


def run_fields(run: Run) -> dict[str, Any]:
    """The `fields` rows of one run: hyperparameters, then final and best main metrics."""
    fields: dict[str, Any] = {}
    for name, value in {**run.hparams, **run.tracked}.items():
        fields[HPARAM_PREFIX + name if name in RUN_COLUMNS else name] = _field_value(value)
    for metric in MAIN_METRICS:
        summary = run.summary.get(metric)
        if summary is not None:
            fields[metric] = summary["final"]
            fields[BEST_PREFIX + metric] = summary["best"]
    return fields


def _store(db: sqlite3.Connection, path: str, run: Run, stamp: str) -> None:
    """(Re)writes the rows of `run`, whose directory is `path` relative to the root."""
    archived = int(path == ARCHIVE_DIR or path.startswith(ARCHIVE_DIR + "/"))
    run_id = _free_id(db, run.id, path)
    fields = run_fields(run)
    db.execute("DELETE FROM runs WHERE path = ?", (path,))
    cursor = db.execute(
        "INSERT INTO runs (id, path, task, start_time, start_unix, host, ip, status, source, writer, archived, signature, fields_json)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (run_id, path, run.task, run.start_time.isoformat(), run.info.start_unix, run.host, run.ip,
         run.status, run.source, run.writer, archived, stamp, json.dumps(fields)),
    )
    db.executemany("INSERT INTO fields (run, name, value) VALUES (?, ?, ?)", [(cursor.lastrowid, n, v) for n, v in fields.items()])


def _free_id(db: sqlite3.Connection, run_id: str, path: str) -> str:
    """`run_id`, or `run_id #2`, `#3`, ... when another directory already has it."""
    candidate, n = run_id, 1
    while (row := db.execute("SELECT path FROM runs WHERE id = ?", (candidate,)).fetchone()) is not None and row[0] != path:
        n += 1
        candidate = f"{run_id} #{n}"
    return candidate


def refresh(root: Path, db: sqlite3.Connection | None = None) -> dict[str, int]:
    """Brings the index of `root` up to date; returns counts of added, updated, removed, unreadable runs."""
    root = Path(root)
    with closing(db if db is not None else connect(root)) as conn:
        try:
            return _refresh(conn, root)
        except sqlite3.OperationalError as exc:  # an index file that is there but read-only
            raise RootError(f"the index of runs root {root} cannot be updated at {index_path(root)} ({exc}); "
                            "set RLTRACK_CACHE_DIR to a directory you can write") from None


def _refresh(db: sqlite3.Connection, root: Path) -> dict[str, int]:
    """Re-reads changed runs, committing every COMMIT_EVERY runs (a commit per run
    would wait for the disk thousands of times when an index is built)."""
    known = dict(db.execute("SELECT path, signature FROM runs").fetchall())
    counts = {"added": 0, "updated": 0, "removed": 0, "unreadable": 0}
    seen: set[str] = set()
    for path, relative, run_format in find_runs(root):
        seen.add(relative)
        stamp = signature(run_format, path)
        if known.get(relative) == stamp:
            continue
        try:
            _store(db, relative, Run(path, run_format), stamp)
        except (OSError, ValueError, KeyError, TypeError) as exc:  # a damaged run is skipped, never fatal
            counts["unreadable"] += 1
            _warn(f"{path}: not indexed ({type(exc).__name__}: {exc})")
            continue
        counts["updated" if relative in known else "added"] += 1
        if (counts["updated"] + counts["added"]) % COMMIT_EVERY == 0:
            db.commit()
    gone = [p for p in known if p not in seen]
    db.executemany("DELETE FROM runs WHERE path = ?", [(p,) for p in gone])
    db.commit()
    counts["removed"] = len(gone)
    return counts


def rebuild(root: Path) -> dict[str, int]:
    """Throws the index away and builds it again from the run directories."""
    root = Path(root)
    for suffix in ("", "-journal", "-wal", "-shm"):
        Path(str(index_path(root)) + suffix).unlink(missing_ok=True)
    return refresh(root)


def update_run(run_dir: str | Path, root: str | Path | None = None) -> bool:
    """(Re-)indexes one run directory in the index of `root` (default: the nearest
    parent that has an index, else the run's parent). For a Logger at open and
    close: never raises, returns False (with a warning) when it could not."""
    run_dir = Path(run_dir).resolve()
    try:
        base = Path(root).resolve() if root is not None else _index_root(run_dir)
        run_format = format_of(run_dir)
        if run_format is None:
            raise ValueError("not a run directory")
        with closing(connect(base)) as db, db:
            _store(db, _relative(base, run_dir), Run(run_dir, run_format), signature(run_format, run_dir))
    except (OSError, ValueError, KeyError, TypeError, sqlite3.Error) as exc:
        _warn(f"{run_dir}: index not updated ({type(exc).__name__}: {exc})")
        return False
    return True


def _index_root(run_dir: Path) -> Path:
    for parent in run_dir.parents:
        if (parent / INDEX_NAME).is_file():
            return parent
    return run_dir.parent


def rows(root: Path) -> list[dict[str, Any]]:
    """Every indexed run as one dict (runs columns + fields), sorted by path: what a
    rebuilt and an incrementally kept index are compared on."""
    with closing(connect(Path(root))) as db:
        return list(_rows(db, "SELECT rowid, * FROM runs ORDER BY path", ()))


def _rows(db: sqlite3.Connection, sql: str, params: tuple[Any, ...]) -> Iterator[dict[str, Any]]:
    db.row_factory = sqlite3.Row
    for row in db.execute(sql, params).fetchall():
        out = {k: row[k] for k in row.keys() if k not in ("rowid", "signature", "fields_json")}
        out.update(db.execute("SELECT name, value FROM fields WHERE run = ? ORDER BY name", (row["rowid"],)).fetchall())
        yield out
    db.row_factory = None


def resolve(root: str | Path, id_or_path: str | Path) -> Path:
    """A run directory: `id_or_path` itself when it is a directory, else the run under
    `root` whose folder path (relative to `root`, e.g. `cartpole_dqn_seed0` or
    `cleanrl/CartPole-v1__ppo__1__1764244800`) or id is `id_or_path`, or whose id
    begins with it, if only one does."""
    candidate = Path(id_or_path)
    if candidate.is_dir():
        return candidate
    root = Path(root)
    text = str(id_or_path)
    with closing(connect(root)) as db:
        matches = _matches(db, text)
        if len(matches) != 1:  # perhaps a run the index does not know yet
            _refresh(db, root)
            matches = _matches(db, text)
    if len(matches) == 1:
        return root / matches[0][0]
    if not matches:
        raise LookupError(
            f"no run {text!r}: it is not a directory, and no run folder under {root} is {text!r} nor does a run id begin with it; "
            f"list the ids and folders with `rltrack runs ls --root {root} --columns path`"
        )
    raise LookupError(f"{text!r} is the beginning of several run ids under {root}; give more of the id (see `rltrack runs ls --root {root}`)")


def load(path_or_id: str | Path, root: str | Path | None = None) -> Run:
    """A run directory, or a run id (or its unique beginning) looked up in the index under `root` (default ./runs)."""
    return open_run(resolve(Path(root) if root is not None else Path("runs"), path_or_id))


def _matches(db: sqlite3.Connection, text: str) -> list[tuple[str]]:
    """Paths of the run whose folder (relative to the root) or id is `text`, else of
    those whose id begins with it."""
    folder = Path(text).as_posix()
    exact = db.execute("SELECT path FROM runs WHERE path = ? OR id = ?", (folder, text)).fetchall()
    return exact or db.execute("SELECT path FROM runs WHERE substr(id, 1, ?) = ? ORDER BY id LIMIT 11", (len(text), text)).fetchall()


def _warn(message: str) -> None:
    print(f"rltrack index: {message}", file=sys.stderr)
