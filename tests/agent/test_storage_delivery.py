"""`run.delivery = "from-storage"`: nodes only mirror to storage; `rltrack
deliver` (two of them, each owning a share of the runs) feeds the trackers
from there. Against moto's S3 server and a real MLflow SQLite store, read
back with MlflowClient."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import rltrack
from rltrack.training.config import ConfigError

pytest_plugins = ["s3_server"]


def deliver(uri: str, share: str, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rltrack.cli", "deliver", uri, "--share", share, "--once"], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "RLTRACK_CACHE_DIR": str(cache)})  # fmt: skip


@pytest.mark.slow
def test_nodes_write_only_storage_and_two_deliverers_feed_mlflow_every_value_once(tmp_path: Path, s3) -> None:
    from mlflow import MlflowClient
    from mlflow_server import sqlite_store

    store = sqlite_store(tmp_path / "mlflow.db")
    names = {"node_a": ["a0", "a1"], "node_b": ["b0", "b1"]}
    for node, runs in names.items():  # two nodes' roots, one storage
        for index, name in enumerate(runs):
            config = {
                "run": {"root": str(tmp_path / node), "name": name, "task": "fleet", "storage": s3.uri("exp"), "delivery": "from-storage", "close_timeout": 300},
                "backends": {"use": ["local", "mlflow"], "mlflow": {"tracking_uri": store}, "storage": {"every": 0.2}},
            }
            with rltrack.make_logger(config) as logger:
                for step in range(30):
                    logger.write({"v": index * 1000 + step}, step=step)
            assert logger.close() is True
    client = MlflowClient(store)
    assert client.search_experiments(filter_string="name = 'fleet'") == []  # no node wrote to MLflow
    for _ in range(2):  # a second round of both deliverers sends nothing twice
        for share in ("0/2", "1/2"):
            done = deliver(s3.uri("exp"), share, tmp_path / "cache")
            assert done.returncode == 0, done.stderr
    (experiment,) = client.search_experiments(filter_string="name = 'fleet'")
    runs = client.search_runs([experiment.experiment_id])
    assert sorted(run.info.run_name for run in runs) == ["a0", "a1", "b0", "b1"]
    for run in runs:
        index = int(run.info.run_name[1])
        assert [m.value for m in client.get_metric_history(run.info.run_id, "v")] == [index * 1000 + step for step in range(30)]
        assert run.info.status == "FINISHED"


def test_from_storage_needs_storage(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match='run.delivery = "from-storage" needs run.storage'):
        rltrack.make_logger({"run": {"root": str(tmp_path), "delivery": "from-storage"}})
    with pytest.raises(ConfigError, match="run.delivery = 'nodes' is not allowed; use one of 'agent', 'from-storage'"):
        rltrack.make_logger({"run": {"root": str(tmp_path), "delivery": "nodes"}})
