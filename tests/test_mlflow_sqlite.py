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

from rltrack.backends.mlflow_sqlite import SqliteMetricWriter, sqlite_path


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
    writer.close()

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
