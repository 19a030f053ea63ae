"""The MLflow SQLite store is made whole when a run starts, never migrated in place
(rltrack.trackers.mlflow.whole): made by MLflow's own migrations in a child
when the process has not imported MLflow, a store of an older MLflow refused
with the command that upgrades it (which then works), one of a newer MLflow
refused with what to install, before a run directory is made."""

from __future__ import annotations

import sqlite3
import subprocess
import textwrap
from pathlib import Path

import pytest
from mlflow import MlflowClient
from reliability_helpers import PYTHON, child_env

import rltrack
from rltrack.trackers.mlflow.whole import condition, make_whole, migrations
from rltrack.trackers.remote import StoreNotReady


def tables(database: Path) -> set[str]:
    with sqlite3.connect(database) as db:
        return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def revision(database: Path) -> str:
    with sqlite3.connect(database) as db:
        return str(db.execute("SELECT version_num FROM alembic_version").fetchone()[0])


def test_a_training_process_has_the_store_made_whole_without_importing_mlflow(tmp_path):
    config = {"run": {"root": str(tmp_path / "runs"), "name": "r"}, "backends": {"use": ["mlflow"]}}
    script = textwrap.dedent(
        f"""
        import sys
        import rltrack
        log = rltrack.make_logger({config!r})
        assert "mlflow" not in sys.modules, "make_logger imported MLflow"
        log.close(timeout=0)
        """
    )
    done = subprocess.run([PYTHON, "-c", script], capture_output=True, text=True, env=child_env(tmp_path), cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    database = tmp_path / "runs" / "mlflow.db"
    assert condition(database) == "whole"
    assert revision(database) == migrations()[0]
    assert not [name for name in tables(database) if name.startswith("_alembic_tmp_")]
    assert not list(database.parent.glob(".mlflow.db.making.*"))
    assert MlflowClient(f"sqlite:///{database}").search_experiments()  # MLflow opens it as its own


def old_store(database: Path) -> None:
    """A store an older MLflow made (its schema at an earlier revision), holding a user's experiment."""
    from alembic import command
    from mlflow.store.db.utils import _get_alembic_config
    from mlflow.store.tracking.dbmodels.initial_models import Base as InitialBase
    import sqlalchemy

    uri = f"sqlite:///{database}"
    engine = sqlalchemy.create_engine(uri)
    InitialBase.metadata.create_all(engine)
    command.upgrade(_get_alembic_config(uri), "a8c4a736bde6")
    engine.dispose()
    with sqlite3.connect(database) as db:
        db.execute("INSERT INTO experiments (name, lifecycle_stage) VALUES ('a user''s', 'active')")


def test_a_store_of_an_older_mlflow_is_refused_with_the_upgrade_that_then_works(tmp_path):
    root = tmp_path / "runs"
    root.mkdir()
    old_store(root / "mlflow.db")
    (root / "mlflow.db.node").write_text("here")
    config = {"run": {"root": str(root), "name": "r"}, "backends": {"use": ["mlflow"]}}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RLTRACK_NODE", "here")
        with pytest.raises(StoreNotReady, match=r"older MLflow.*mlflow db upgrade sqlite:///") as refused:
            rltrack.make_logger(config)
        assert not (root / "r").exists()  # refused before a run directory is made
        assert revision(root / "mlflow.db") == "a8c4a736bde6"  # left as it was: rltrack does not upgrade a user's data
        command = str(refused.value).rpartition("upgrade its schema: ")[2].split()
        upgraded = subprocess.run([PYTHON, "-m", *command], capture_output=True, text=True, env=child_env(tmp_path), timeout=300)
        assert upgraded.returncode == 0, upgraded.stderr
        make_whole(root / "mlflow.db")
        assert condition(root / "mlflow.db") == "whole"
        assert MlflowClient(f"sqlite:///{root / 'mlflow.db'}").get_experiment_by_name("a user's") is not None


def test_a_store_of_a_newer_mlflow_is_refused_by_make_logger_and_rltrack_run(tmp_path):
    database = tmp_path / "runs" / "mlflow.db"
    make_whole(database)
    with sqlite3.connect(database) as db:
        db.execute("UPDATE alembic_version SET version_num = 'ffffffffffff'")
    (tmp_path / "runs" / "mlflow.db.node").write_text("here")
    config = tmp_path / "rltrack.toml"
    config.write_text(f'[run]\nroot = "{tmp_path / "runs"}"\n[backends]\nuse = ["mlflow"]\n')
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RLTRACK_NODE", "here")
        with pytest.raises(StoreNotReady, match="newer MLflow"):
            rltrack.make_logger(str(config))
    done = subprocess.run([PYTHON, "-m", "rltrack.cli", "run", "--config", str(config), "--", PYTHON, "-c", "print('ran')"],
                          capture_output=True, text=True, env=child_env(tmp_path, RLTRACK_NODE="here"), cwd=tmp_path, timeout=300)  # fmt: skip
    assert done.returncode == 2 and "newer MLflow" in done.stderr and "ran" not in done.stdout, done.stderr


def test_a_store_a_users_mlflow_made_is_kept(tmp_path):
    database = tmp_path / "mlflow.db"
    client = MlflowClient(f"sqlite:///{database}")
    experiment = client.create_experiment("mine")
    made = database.stat().st_ino
    make_whole(database)
    assert database.stat().st_ino == made
    assert client.get_experiment(experiment).name == "mine"
