"""The embedded MLflow store (a SQLite file in the runs root): which file a
node writes, its schema made once, and a half-made one said with its repair.

Why this exists: a runs root is often shared by several machines (NFS, a
cluster's home), and every node's agent delivers to the default store in it.
MLflow creates a fresh SQLite store's schema with alembic migrations that
are not one transaction: six agents of six nodes starting on one fresh root
ran them at once and left the store half-migrated (`table _alembic_tmp_tags
already exists`, an old schema revision, no value stored), and SQLite's own
locking is not reliable across machines on a network file system. So:

* each node writes a store file of its own (`embedded_store`): the first node
  that delivers to the root claims `mlflow.db` (`mlflow.db.node` names it,
  made atomically), every other node writes `mlflow.<node>.db` beside it;
  the node is `RLTRACK_NODE`, else the host's name. Two machines never
  write one SQLite file.
* the store is made whole before a run's first value, by one process at a
  time (rltrack.trackers.mlflow.whole): under an `flock` on `<store>.lock`,
  which also holds between agents of one node (several Python environments,
  several users' settings).
* a store that holds runs and was left half-migrated is said in one
  sentence with its repair (`half_migrated`).
"""

from __future__ import annotations

import os
import re
import socket
import sqlite3
import tempfile
from pathlib import Path

NODE_ENV = "RLTRACK_NODE"
DEFAULT_STORE = "mlflow.db"


def node_name() -> str:
    """This machine's name among those sharing a runs root: `RLTRACK_NODE`, else the host's name."""
    return os.environ.get(NODE_ENV) or socket.gethostname() or "node"


def embedded_store(stores: Path) -> Path:
    """The SQLite file this node's deliveries write in the runs root `stores`:
    `mlflow.db` for the node that claimed it first (or claims it now), else
    `mlflow.<node>.db`."""
    node = node_name()
    claim = stores / (DEFAULT_STORE + ".node")
    if not claim.is_file():
        stores.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=stores, prefix=".mlflow.db.node.", delete=False) as made:
            made.write(node)
        os.chmod(made.name, 0o644)  # every node reads it, whoever runs there
        try:
            os.link(made.name, claim)  # atomic, also on NFS: of nodes claiming at once, one gets it
        except FileExistsError:
            pass
        finally:
            os.unlink(made.name)
    if claim.read_text() == node:
        return stores / DEFAULT_STORE
    return stores / f"mlflow.{re.sub(r'[^A-Za-z0-9._-]', '_', node)}.db"


def holds_nothing(database: Path) -> bool:
    """Whether the SQLite store `database` holds no run and no experiment of
    its own (False where that cannot be read)."""
    try:
        with sqlite3.connect(database.resolve().as_uri() + "?mode=ro", uri=True) as db:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            runs = db.execute("SELECT count(*) FROM runs").fetchone()[0] if "runs" in tables else 0
            experiments = (  # MLflow's own is 'Default'
                db.execute("SELECT count(*) FROM experiments WHERE name != 'Default'").fetchone()[0] if "experiments" in tables else 0
            )
    except sqlite3.Error:
        return False
    return bool(runs == 0 and experiments == 0)


def half_migrated(database: Path | None) -> str | None:
    """The repair, in one sentence, of a SQLite store that an interrupted
    schema upgrade left half-made (alembic's `_alembic_tmp_*` tables still
    there) while it holds runs; None for any other store, and for one that
    holds nothing yet: that one is made again (rltrack.trackers.mlflow.whole),
    as after a disk that filled while the store was being made."""
    if database is None or not database.is_file():
        return None
    try:
        with sqlite3.connect(database.resolve().as_uri() + "?mode=ro", uri=True) as db:
            left = [row[0] for row in db.execute(r"SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE '\_alembic\_tmp\_%' ESCAPE '\'")]
    except sqlite3.Error:
        return None
    if not left or holds_nothing(database):
        return None
    drops = "; ".join(f"DROP TABLE {name}" for name in sorted(left))
    return (
        f"the MLflow store {database} was left half-migrated by an interrupted schema upgrade (tables {', '.join(sorted(left))}); "
        f"repair it: stop the agents that deliver to it, back the file up, run sqlite3 {database} '{drops}' "
        f"and then mlflow db upgrade sqlite:///{database}"
    )
