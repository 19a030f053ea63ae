"""Agents of several nodes delivering to the embedded MLflow store of one shared root.

What docs/clusters.md advises for a root that several machines share is what
these tests run: each node's agent (its own `RLTRACK_AGENT_DIR` and
`RLTRACK_NODE`, as on its own machine) writes a SQLite store of its own in
the root (the first node `mlflow.db`, the others `mlflow.<node>.db`), so no
two machines ever write one SQLite file, and a store's schema is made by one
process at a time. Six "nodes" starting at once on a fresh root once raced
MLflow's schema migration and left the store half-migrated, with no value
in it; here, three rounds on a fresh root each: every `close()` True, every
value once, every store usable and whole, every run listed by `rltrack runs ls`.
A store that such a race left half-made is said in one sentence, with a
repair that works.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import textwrap
from pathlib import Path

import psutil
import pytest
from mlflow import MlflowClient
from reliability_helpers import PYTHON, child_env, mlflow_run, read_run_dir

from rltrack.trackers.mlflow.store import half_migrated

NODES = 6
RECORDS = 300
KEYS = 10

NODE = textwrap.dedent(
    """
    import sys
    import rltrack

    root, name, records, keys = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    config = {"run": {"root": root, "name": name, "task": "shared"}, "backends": {"use": ["mlflow"]}}
    log = rltrack.make_logger(config)
    print(f"RUN_DIR={log.run_dir}", flush=True)
    for step in range(records):
        log.write({f"k{k}": step * 100.0 + k for k in range(keys)}, step={"step": step}, namespace="learner")
    print(f"CLOSED={log.close(timeout=None)}", flush=True)
    """
)


def start_nodes(root: Path, agents: Path, nodes: list[str]) -> list[subprocess.Popen[str]]:
    """One training process per node, each with its node's agent, all at once."""
    return [
        subprocess.Popen(
            [PYTHON, "-c", NODE, str(root), f"run_{index}", str(RECORDS), str(KEYS)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=agents,
            env=child_env(agents, RLTRACK_AGENT_DIR=str(agents / f"agent_{index}"), RLTRACK_NODE=node),
        )  # fmt: skip
        for index, node in enumerate(nodes)
    ]


def stop_agents(agents: Path) -> None:
    """Ends the keepers, then the agents, that these tests' agent directories started."""
    for module in ("rltrack.agent.keeper", "rltrack.agent.process"):
        for process in psutil.process_iter(["cmdline"]):
            if module in (process.info["cmdline"] or []) and any(str(agents) in part for part in process.info["cmdline"]):
                process.terminate()


def leftover_tables(database: Path) -> list[str]:
    with sqlite3.connect(database) as db:
        return [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE name LIKE '%alembic_tmp%'")]


def check_round(root: Path, agents: Path, nodes: list[str]) -> None:
    runs = []
    for process in start_nodes(root, agents, nodes):
        out, err = process.communicate()  # no time bound: on a loaded machine six agents making six stores take minutes
        assert process.returncode == 0, err
        assert "CLOSED=True" in out, f"close() did not deliver everything:\n{out}\n{err[-3000:]}"
        runs.append(read_run_dir(out.splitlines()))
    for run_dir in runs:  # every value once, in the store of the node that wrote it
        client, run_id = mlflow_run(run_dir)
        for k in range(KEYS):
            stored = sorted((m.step, m.value) for m in client.get_metric_history(run_id, f"learner/k{k}"))
            assert stored == [(step, step * 100.0 + k) for step in range(RECORDS)], (run_dir, k)
    stores = sorted(root.glob("mlflow*.db"))
    distinct = sorted(set(nodes))
    assert (root / "mlflow.db.node").read_text() in distinct
    assert len(stores) == len(distinct)  # a store per node: mlflow.db and mlflow.<node>.db of the others
    listed = 0
    for store in stores:  # each store whole and usable: at the newest schema, nothing half-made left
        assert leftover_tables(store) == [] and half_migrated(store) is None
        client = MlflowClient(f"sqlite:///{store}")
        experiment = client.get_experiment_by_name("shared")
        listed += len(client.search_runs([experiment.experiment_id]))
    assert listed == len(nodes)
    shown = subprocess.run([PYTHON, "-m", "rltrack.cli", "runs", "ls", "--root", str(root), "--json"], capture_output=True, text=True, env=child_env(agents), cwd=agents, timeout=300)
    assert shown.returncode == 0, shown.stderr
    assert sorted(Path(row["path"]).name for row in json.loads(shown.stdout)) == sorted(f"run_{index}" for index in range(len(nodes)))


@pytest.mark.slow
def test_six_nodes_on_one_fresh_shared_root_three_rounds(tmp_path):
    agents = tmp_path / "agents"
    agents.mkdir()
    nodes = [f"node{index}" for index in range(NODES)]
    try:
        for round_ in range(3):
            check_round(tmp_path / f"round{round_}" / "runs", agents, nodes)
    finally:
        stop_agents(agents)


@pytest.mark.slow
def test_agents_of_one_node_make_its_store_once(tmp_path):
    """Several agents of one machine (other Python environments or
    tracker settings) share that node's store: its schema is made once."""
    agents = tmp_path / "agents"
    agents.mkdir()
    try:
        check_round(tmp_path / "runs", agents, ["same"] * 4)
    finally:
        stop_agents(agents)


def half_migrated_store(database: Path, experiment: str | None = None) -> None:
    """A store as two processes migrating it at once left it (seen here): the
    schema stopped at an old revision, a batch migration's temporary table
    behind; holding an `experiment` of a user's, if named."""
    from alembic import command
    from mlflow.store.db.utils import _get_alembic_config
    from mlflow.store.tracking.dbmodels.initial_models import Base as InitialBase
    import sqlalchemy

    uri = f"sqlite:///{database}"
    InitialBase.metadata.create_all(sqlalchemy.create_engine(uri))
    command.upgrade(_get_alembic_config(uri), "a8c4a736bde6")
    with sqlite3.connect(database) as db:
        db.execute("CREATE TABLE _alembic_tmp_latest_metrics (x INTEGER)")
        if experiment is not None:
            db.execute("INSERT INTO experiments (name, lifecycle_stage) VALUES (?, 'active')", (experiment,))


def local_run(root: Path) -> Path:
    import rltrack

    with rltrack.make_logger({"run": {"root": str(root), "name": "r"}, "backends": {"use": ["local"]}}) as log:
        for step in range(5):
            log.write({"x": float(step)}, step={"step": step})
    (root / "mlflow.db.node").write_text("here")
    return log.run_dir


def test_a_store_whose_making_was_cut_short_and_holds_nothing_is_made_again(tmp_path):
    run_dir = local_run(tmp_path / "runs")
    half_migrated_store(tmp_path / "runs" / "mlflow.db")
    done = subprocess.run([PYTHON, "-m", "rltrack.cli", "sync", str(run_dir), "--to", "mlflow"], capture_output=True, text=True,
                          env=child_env(tmp_path, RLTRACK_NODE="here"), cwd=tmp_path, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    client, run_id = mlflow_run(run_dir)
    assert sorted((m.step, m.value) for m in client.get_metric_history(run_id, "x")) == [(step, float(step)) for step in range(5)]
    assert leftover_tables(tmp_path / "runs" / "mlflow.db") == []


def test_a_store_half_made_when_its_disk_filled_is_retried_not_given_up(tmp_path):
    """A disk that fills while a fresh store's schema is made leaves it half
    made (`_alembic_tmp_*` behind) and holding nothing: the error is one to
    retry, since the next open makes the store again. Before, the repair
    sentence for a store holding runs came first and the lane gave up (CI)."""
    from sqlite3 import OperationalError

    from rltrack.trackers.mlflow.backend import MlflowBackend

    database = tmp_path / "mlflow.db"
    half_migrated_store(database)
    backend = MlflowBackend(tracking_uri=f"sqlite:///{database}")
    backend.tracking_uri = backend._tracking_uri
    assert backend.judge(OperationalError("database or disk is full")).fix is None
    with sqlite3.connect(database) as db:
        db.execute("INSERT INTO experiments (name, lifecycle_stage) VALUES ('a user''s', 'active')")
    assert "half-migrated" in (backend.judge(OperationalError("database or disk is full")).fix or "")


def test_a_half_migrated_store_is_said_in_one_sentence_with_a_repair_that_works(tmp_path):
    root = tmp_path / "runs"
    run_dir = local_run(root)
    half_migrated_store(root / "mlflow.db", experiment="a user's")  # it holds something: rltrack does not delete it
    env = child_env(tmp_path, RLTRACK_NODE="here")
    sync = [PYTHON, "-m", "rltrack.cli", "sync", str(run_dir), "--to", "mlflow"]
    failed = subprocess.run(sync, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert failed.returncode != 0
    said = [line for line in failed.stderr.splitlines() if "retrying cannot help" in line]
    assert len(said) == 1 and "half-migrated" in said[0] and "_alembic_tmp_latest_metrics" in said[0] and "mlflow db upgrade" in said[0], failed.stderr
    with sqlite3.connect(root / "mlflow.db") as db:  # the repair the sentence gives
        db.execute("DROP TABLE _alembic_tmp_latest_metrics")
    upgraded = subprocess.run([PYTHON, "-m", "mlflow", "db", "upgrade", f"sqlite:///{root / 'mlflow.db'}"], capture_output=True, text=True, env=env, timeout=300)
    assert upgraded.returncode == 0, upgraded.stderr
    repaired = subprocess.run(sync, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert repaired.returncode == 0, repaired.stderr
    client, run_id = mlflow_run(run_dir)
    assert sorted((m.step, m.value) for m in client.get_metric_history(run_id, "x")) == [(step, float(step)) for step in range(5)]
    assert client.get_experiment_by_name("a user's") is not None
