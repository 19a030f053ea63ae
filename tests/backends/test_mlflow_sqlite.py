"""The bulk SQLite metric writer stores exactly what MLflow's own store would.

The same metrics (NaN, ±inf, repeated and backwards steps, an exact duplicate
re-sent, several keys) go into one run through `MlflowClient.log_batch` and
into another run of the same SQLite store through `SqliteMetricWriter`; MLflow
then reads both back (`get_metric_history`, the run's latest metrics) and
must see no difference.
"""

from __future__ import annotations

import math
import random
import sqlite3

import pytest
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from rltrack.trackers.mlflow import sqlite as mlflow_sqlite
from rltrack.trackers.mlflow.sqlite import SqliteMetricWriter, sqlite_path


def generated_metrics(seed: int) -> list[tuple[str, float, int, int]]:
    rng = random.Random(seed)
    special = [math.nan, math.inf, -math.inf, 0.0, -1e308, 1e-300]
    rows = []
    for i in range(600):
        key = rng.choice(["loss", "reward/mean", "a b.c-d:e"])
        value = rng.choice(special) if rng.random() < 0.1 else rng.uniform(-10, 10)
        step = rng.choice([i, i, i - 50, 7])  # mostly rising, some backwards and repeated
        rows.append((key, value, 1_700_000_000_000 + rng.randrange(0, 5000), step))
    rows += rows[:40]  # a re-sent batch: exact duplicates
    return rows


def history(client: MlflowClient, run_id: str, key: str) -> list[tuple[int, int, float]]:
    out = [(m.step, m.timestamp, m.value) for m in client.get_metric_history(run_id, key)]
    return sorted(out, key=lambda t: (t[0], t[1], math.isnan(t[2]), 0.0 if math.isnan(t[2]) else t[2]))


def same(a: list[tuple[int, int, float]], b: list[tuple[int, int, float]]) -> bool:
    return len(a) == len(b) and all(
        x[:2] == y[:2] and (x[2] == y[2] or (math.isnan(x[2]) and math.isnan(y[2]))) for x, y in zip(a, b)
    )


@pytest.mark.parametrize("seed", [0, 1])
def test_bulk_rows_read_back_as_mlflows_own(tmp_path, seed):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("bulk")
    by_mlflow = client.create_run(experiment).info.run_id
    by_bulk = client.create_run(experiment).info.run_id
    rows = generated_metrics(seed)
    for start in range(0, len(rows), 1000):
        client.log_batch(by_mlflow, metrics=[Metric(k, v, ms, step) for k, v, ms, step in rows[start : start + 1000]])
    writer = SqliteMetricWriter.open(uri)
    assert writer is not None
    writer.write(by_bulk, rows[:300])
    writer.write(by_bulk, rows[300:])
    writer.write(by_bulk, rows[:40])  # re-sent again: ignored, as MLflow ignores it
    writer.close()  # stores what is staged

    for key in ("loss", "reward/mean", "a b.c-d:e"):
        assert same(history(client, by_bulk, key), history(client, by_mlflow, key)), key
    latest_mlflow = client.get_run(by_mlflow).data.metrics
    latest_bulk = client.get_run(by_bulk).data.metrics
    assert latest_mlflow.keys() == latest_bulk.keys()
    for key, value in latest_mlflow.items():
        assert value == latest_bulk[key] or (math.isnan(value) and math.isnan(latest_bulk[key])), key


def test_only_a_sqlite_file_with_mlflows_tables_is_written_in_bulk(tmp_path):
    assert sqlite_path("http://127.0.0.1:5000") is None
    assert SqliteMetricWriter.open(f"sqlite:///{tmp_path / 'missing.db'}") is None
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE metrics (key TEXT)").connection.commit()
    assert SqliteMetricWriter.open(f"sqlite:///{other}") is None  # not MLflow's layout: log_batch is used


def test_runs_of_one_store_share_one_connection_until_the_last_lets_go(tmp_path):
    """An agent serving a sweep opened a connection (and its page cache) per
    run; now every run of one store file writes through one, and a store
    file replaced at the same path is not written through the old one."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("shared")
    runs = [client.create_run(experiment).info.run_id for _ in range(3)]
    writers = [SqliteMetricWriter.shared(uri) for _ in runs]
    assert writers[0] is not None and all(w is writers[0] for w in writers)
    for i, (writer, run_id) in enumerate(zip(writers, runs)):
        writer.write(run_id, [("loss", float(i), 1_700_000_000_000, 0)])
    for writer in writers[:-1]:
        writer.release()
    writers[-1].write(runs[0], [("loss", 9.0, 1_700_000_000_001, 1)])  # still open for the last user
    writers[-1].release()  # stores the staged rows of every run
    writers[-1].write(runs[0], [("loss", 1.0, 1_700_000_000_002, 2)])
    with pytest.raises(sqlite3.ProgrammingError):  # the last release closed it
        writers[-1].commit(force=True)
    assert [m.value for m in client.get_metric_history(runs[0], "loss")] == [0.0, 9.0]
    assert [[m.value for m in client.get_metric_history(r, "loss")] for r in runs[1:]] == [[1.0], [2.0]]
    kept = SqliteMetricWriter.shared(uri)
    (tmp_path / "mlflow.db").rename(tmp_path / "old.db")
    fresh_client = MlflowClient(f"sqlite:///{tmp_path / 'new.db'}")  # builds MLflow's tables in a new file ...
    fresh_client.create_experiment("x")
    (tmp_path / "new.db").rename(tmp_path / "mlflow.db")  # ... now at the old path
    assert SqliteMetricWriter.shared(uri) is not kept


def test_the_rows_of_every_run_are_stored_together_once_due(tmp_path, monkeypatch):
    """A transaction per run and batch was most of the agent's CPU in a
    64-trial sweep: the writer stages the rows of every run and stores them
    in one transaction once the oldest has waited COMMIT_EVERY seconds (or
    when asked to now); a ticket is stored once `committed` reaches it, and
    rows whose transaction failed stay staged for the next try."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("staged")
    runs = [client.create_run(experiment).info.run_id for _ in range(4)]
    writer = SqliteMetricWriter.open(uri)
    assert writer is not None
    tickets = [writer.write(run_id, [("loss", float(i), 1_700_000_000_000 + i, i)]) for i, run_id in enumerate(runs)]
    assert tickets == [1, 2, 3, 4]
    assert writer.commit() == 0  # not due yet: nothing stored
    assert all(client.get_metric_history(run_id, "loss") == [] for run_id in runs)
    monkeypatch.setattr(mlflow_sqlite, "COMMIT_EVERY", 0.0)
    assert writer.commit() == 4
    assert [[m.value for m in client.get_metric_history(r, "loss")] for r in runs] == [[0.0], [1.0], [2.0], [3.0]]
    assert client.get_run(runs[3]).data.metrics == {"loss": 3.0}

    writer.write(runs[0], [("loss", 5.0, 1_700_000_000_005, 5)])
    blocker = sqlite3.connect(tmp_path / "mlflow.db", isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # another writer holds the store
    writer._db.execute("PRAGMA busy_timeout = 0")
    with pytest.raises(sqlite3.OperationalError):
        writer.commit()
    assert writer.committed == 4
    blocker.execute("ROLLBACK")
    assert writer.commit() == 5  # the staged row was kept for this try
    assert [m.value for m in client.get_metric_history(runs[0], "loss")] == [0.0, 5.0]
    assert writer.write(runs[1], []) == 6 and writer.committed == 6  # nothing to store: stored at once
    writer.close()


def test_a_store_deleted_and_made_again_while_the_agent_is_up_gets_the_new_runs(tmp_path):
    """`rm -rf runs` and the script run again within the agent's idle time:
    the agent made the first store's client, and MLflow keeps one engine per
    URI whose connections still point at the deleted file. The second run
    must land in the new file (read back with sqlite3: this process's own
    MLflow engine for the URI has the same stale connections)."""
    import shutil

    import rltrack

    root = tmp_path / "runs"
    for attempt in (1, 2):
        shutil.rmtree(root, ignore_errors=True)
        settings = {"run": {"root": str(root), "name": "again", "close_timeout": 60}, "backends": {"use": ["local", "mlflow"]}}
        with rltrack.make_logger(settings) as logger:
            for i in range(10):
                logger.write({"x": float(attempt * 100 + i)}, step=i)
        assert logger.close() is True  # delivered within close_timeout (a second close returns the first's answer)
        with sqlite3.connect(root / "mlflow.db") as db:
            values = [v for (v,) in db.execute("SELECT value FROM metrics WHERE key = 'x' ORDER BY step")]
            statuses = [s for (s,) in db.execute("SELECT status FROM runs")]
        assert values == [float(attempt * 100 + i) for i in range(10)]
        assert statuses == ["FINISHED"]


def test_the_store_mlflow_makes_here_has_a_schema_the_writer_was_tested_on(tmp_path):
    """The MLflow installed here (the newest in requirements/constraints.txt,
    the oldest in constraints-oldest.txt) makes a store the bulk writer takes:
    a new MLflow in the constraints fails here until its schema is checked
    and added to TESTED_SCHEMAS."""
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    MlflowClient(uri).search_experiments()  # creates the store at MLflow's own head revision
    with sqlite3.connect(sqlite_path(uri)) as db:
        revision = mlflow_sqlite.schema_revision(db)
    assert mlflow_sqlite.TESTED_SCHEMAS.get(revision) == f"mlflow {mlflow.__version__}", revision
    writer = SqliteMetricWriter.open(uri)
    assert writer is not None
    writer.close()


def test_a_store_of_an_untested_schema_gets_its_metrics_through_mlflows_client(tmp_path, monkeypatch):
    """A store of another MLflow release (here: the writer told it knows no
    revision) is never written directly: the backend delivers through
    `MlflowClient.log_batch`, at once, every value."""
    from rltrack.sinks.base import RunContext
    from rltrack.trackers.mlflow.backend import MlflowBackend
    from rltrack.delivery.worker import DeliveryWorker
    from rltrack.core.events import Event
    from rltrack.core.report import Report

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    MlflowClient(uri).search_experiments()
    assert SqliteMetricWriter.open(uri) is not None  # the tested revision: bulk
    monkeypatch.setattr(mlflow_sqlite, "TESTED_SCHEMAS", {})
    assert SqliteMetricWriter.open(uri) is None
    monkeypatch.setattr(mlflow_sqlite, "COMMIT_EVERY", 3600.0)  # a bulk writer would still hold the rows
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "meta.json").write_text("{}")
    (run_dir / "journal.jsonl").write_text("".join(Event(1.0 + i, {"x": float(i), "y": -float(i)}, steps={"step": i}).to_json() + "\n" for i in range(50)))
    backend = MlflowBackend(tracking_uri=uri)
    backend.open(RunContext(run_dir, "untested", {}, Report()))
    worker = DeliveryWorker(backend, run_dir, close_at_end=False)
    worker.step()
    assert backend._bulk is None
    (run,) = MlflowClient(uri).search_runs([e.experiment_id for e in MlflowClient(uri).search_experiments()])
    for key, sign in (("x", 1.0), ("y", -1.0)):
        assert [(m.step, m.value) for m in MlflowClient(uri).get_metric_history(run.info.run_id, key)] == [(i, sign * i) for i in range(50)]
    assert worker.cursor.offset == (run_dir / "journal.jsonl").stat().st_size
    worker.give_up()
    backend.close("finished")
