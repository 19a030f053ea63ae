"""MLflow backend: the journal delivered to an MLflow run with `MlflowClient.log_batch`.

Why it looks the way it does:

* It runs on a `DeliveryWorker` thread, never the training thread, and talks
  to MLflow only through `MlflowClient` with an explicit run id (the fluent
  `mlflow.log_*` API keeps its active run per thread). `mlflow` is imported on
  that thread at the first delivery; the constructor only checks it is installed.
* `deliver` may be repeated with the same events (after a failure, or by
  `rltrack sync` after a crash), so everything it sends is idempotent: metric
  timestamps are the events' capture times (the store ignores an identical
  (key, value, step, timestamp)), params are only ever sent with their first
  value, artifact files are named after the first event they hold. Counts
  for the report are kept aside and added only once a batch is acknowledged.
* The MLflow run is created on the first delivery and its id kept in the
  backend's `state`, which delivery saves in the cursor, so `rltrack sync`
  continues the same run.
* The MLflow experiment is `experiment`, by default the run's task (its
  experiment in rltrack, `RunContext.task`): seeds and trials of one
  experiment are runs of one MLflow experiment, named after their run.
* With no `tracking_uri` the store is `sqlite:///<run root>/mlflow.db` with
  artifacts in `<run root>/mlartifacts`: it works without a server. On a
  root that several nodes share, each node other than the first writes
  `mlflow.<node>.db` (see rltrack.trackers.mlflow.store).

Mapping (what users see in MLflow):

* scalars and timings: metric `<namespace>/<key>` at step = the primary step
  axis; every other axis is logged as metric `steps/<axis>` at that step
  (once per step and value, however many namespaces carry it). None is
  dropped, ±inf is stored by MLflow as ±1.8e308 (both counted); NaN is kept.
* hparams: params, flattened to `a/b`; values longer than 6000 characters are
  truncated. Params cannot change in MLflow: a later, different value keeps
  the first one as the param and puts the new one in tag `changed_param/<key>`.
* text: artifact `text/<key>/step_<N>_<ms>.txt` per key and delivered batch.
* checkpoints (artifact events with a `path` in the run directory): uploaded
  under the same relative directory; the best one is named in tag
  `rltrack.best_checkpoint`.
* images and videos (files the adapter saved under `media/` in the run
  directory): uploaded as artifacts under the same relative directory
  (`media/<namespace>/<key>_<step>.png`), which a re-delivered batch
  overwrites rather than doubles (see `MlflowBatch._media`).
* histograms: MLflow has no such type; counted as dropped.
* keys MLflow would refuse are renamed by `mlflow_key` and listed in the report.
"""

from __future__ import annotations

import threading
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rltrack.sinks.base import RunContext
from rltrack.trackers.mlflow.batch import MAX_TAG_VALUE, MlflowBatch, mlflow_key
from rltrack.trackers.mlflow.sqlite import SqliteMetricWriter, sqlite_path, store_file
from rltrack.trackers.mlflow.store import embedded_store, half_migrated
from rltrack.trackers.mlflow.whole import forget_store, make_whole
from rltrack.trackers.inflight import InFlight, shared_pool
from rltrack.trackers.remote import EventId, Failure, Forgotten, Lines, Progress, RemoteBackend, Rules, StoreNotReady, error_text, raised
from rltrack.core.events import KINDS, Event
from rltrack.core.optional import ensure_installed, require

STATUSES = {"finished": "FINISHED", "failed": "FAILED", "killed": "KILLED"}
PURPOSE = "The MLflow backend"
#: The most batches of one run that may be on their way to a server at once.
MAX_IN_FLIGHT = 32


#: The tracking URI schemes MLflow serves without a plugin; a database's may
#: name a driver too (`postgresql+psycopg2`). No scheme is a local path.
URI_SCHEMES = ("file", "databricks", "databricks-uc", "uc", "http", "https", "postgresql", "mysql", "sqlite", "mssql")
_DATABASES = ("postgresql", "mysql", "sqlite", "mssql")


def check_uri(uri: str) -> None:
    """A `tracking_uri` MLflow can open, checked without MLflow and without
    the network: a known scheme (or one a plugin registers), a database URI
    in SQLAlchemy's `scheme://` form, a server's host. What only the server
    can tell (down, credentials refused) is found by the first delivery."""
    parts = urlsplit(uri)
    scheme = parts.scheme.lower().split("+")[0]
    example = "e.g. 'http://127.0.0.1:5000', 'sqlite:////abs/path/mlflow.db', 'postgresql://user@host/db', or leave it out (sqlite:///<root>/mlflow.db)"
    if scheme and scheme not in URI_SCHEMES and scheme not in _plugin_schemes():
        raise ValueError(f"tracking_uri = {uri!r} is not a URI MLflow can open (unknown scheme {parts.scheme!r}); {example}")
    if scheme in _DATABASES and not uri.partition(":")[2].startswith("//"):
        raise ValueError(f"tracking_uri = {uri!r} is not a database URI (a database URI starts with '{parts.scheme}://'); {example}")
    if scheme in ("http", "https") and not parts.hostname:
        raise ValueError(f"tracking_uri = {uri!r} names no server; {example}")


def _plugin_schemes() -> set[str]:
    """The tracking store schemes installed plugins register with MLflow."""
    return {entry.name for entry in metadata.entry_points(group="mlflow.tracking_store")}


class MlflowBackend(RemoteBackend):
    """`[backends.mlflow] tracking_uri, experiment, run_name, tags, in_flight`."""

    name = "mlflow"
    #: Stores later than it takes: the bulk SQLite writer's transaction, several batches in flight to a server.
    rules = Rules(client_modules=("mlflow",), stores_later=True, kinds=tuple(kind for kind in KINDS if kind != "histogram"))

    def __init__(
        self,
        tracking_uri: str | None = None,
        experiment: str | None = None,
        run_name: str | None = None,
        tags: dict[str, Any] | None = None,
        bulk_sqlite: bool = True,
        in_flight: int = 4,
    ) -> None:
        self._tracking_uri = tracking_uri
        self.experiment = experiment
        self.run_name = run_name
        self.tags = {str(k): str(v) for k, v in (tags or {}).items()}
        self.bulk_sqlite = bulk_sqlite  # metrics into a SQLite store in bulk (rltrack.trackers.mlflow.sqlite)
        self.in_flight = in_flight  # batches sent to a server at once (rltrack.trackers.inflight)

    @classmethod
    def validate(cls, settings: dict[str, Any], in_use: bool = False) -> None:
        tracking_uri, experiment, run_name, tags = settings["tracking_uri"], settings["experiment"], settings["run_name"], settings["tags"]
        if tracking_uri is not None and (not isinstance(tracking_uri, str) or not tracking_uri):
            raise ValueError(f"tracking_uri = {tracking_uri!r} must be a URI such as 'http://127.0.0.1:5000' or 'sqlite:///mlflow.db'")
        if tracking_uri is not None:
            check_uri(tracking_uri)
        if experiment is not None and (not isinstance(experiment, str) or not experiment):
            raise ValueError(f"experiment = {experiment!r} must be a non-empty experiment name (or left out: the run's task)")
        if run_name is not None and (not isinstance(run_name, str) or not run_name):
            raise ValueError(f"run_name = {run_name!r} must be a non-empty string (or left out: the run directory's name)")
        if tags is not None and not isinstance(tags, dict):
            raise ValueError(f"tags = {tags!r} must be a table of tag names to values, e.g. tags = {{team = \"rl\"}}")
        if not isinstance(settings["bulk_sqlite"], bool):
            raise ValueError(f"bulk_sqlite = {settings['bulk_sqlite']!r} must be true or false")
        in_flight = settings["in_flight"]
        if isinstance(in_flight, bool) or not isinstance(in_flight, int) or not 1 <= in_flight <= MAX_IN_FLIGHT:
            raise ValueError(
                f"in_flight = {in_flight!r} must be a whole number from 1 to {MAX_IN_FLIGHT}: the batches sent to an MLflow server "
                "at once (1: one at a time), e.g. in_flight = 4"
            )
        if in_use:
            ensure_installed("mlflow", "mlflow", PURPOSE)

    def target(self, run: RunContext) -> str:
        return f"{self._store_uri(run)} experiment {self.experiment or run.task}"

    def _store_uri(self, run: RunContext) -> str:
        return self._tracking_uri or f"sqlite:///{embedded_store(run.stores)}"

    @classmethod
    def make_store(cls, settings: dict[str, Any], stores: Path) -> None:
        """Makes the run's SQLite store whole before its first value (see rltrack.trackers.mlflow.whole)."""
        database = sqlite_path(settings.get("tracking_uri") or f"sqlite:///{embedded_store(stores)}")
        if database is not None:
            make_whole(database)

    def judge(self, exc: Exception) -> Failure:
        if isinstance(exc, StoreNotReady) and exc.repair:
            return Failure(fix=exc.repair)
        if raised(exc, "UnsupportedModelRegistryStoreURIException", "ArgumentError"):
            return Failure(fix=f"fix tracking_uri ({self.tracking_uri!r})")
        if getattr(exc, "error_code", None) in ("UNAUTHENTICATED", "PERMISSION_DENIED"):
            return Failure(fix="set the credentials the server takes (MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, or MLFLOW_TRACKING_TOKEN)")
        if "out-of-date database schema" in str(exc):  # made by an older MLflow, or an upgrade killed midway
            return Failure(fix=f"back the store up, then upgrade its schema: mlflow db upgrade {self.tracking_uri}")
        fix = half_migrated(sqlite_path(self.tracking_uri))
        return Failure(fix=fix) if fix else super().judge(exc)

    def open(self, run: RunContext) -> None:
        super().open(run)
        self.tracking_uri = self._store_uri(run)
        self.experiment_name = self.experiment or run.task
        self._client: Any = None
        self._run_id: str | None = None
        self._params: dict[str, str] = {}  # what the MLflow run holds
        self._axes: dict[str, tuple[int, float]] = {}  # steps/<axis> metric -> last (step, value) sent
        self._stamps: dict[str, tuple[int, int]] = {}  # metric -> (step, timestamp) of its last value sent
        self._renamed: set[str] = set()
        self._last_ms: int | None = None  # capture time of the last event delivered by this process
        self._bulk: SqliteMetricWriter | None = None  # opened with the run: the store's file exists then
        self._ticket = 0  # the bulk writer's (or `_flight`'s) ticket for the last batch
        self._flight: InFlight | None = None  # batches on their way to a server, several at once
        self._acked: tuple[dict[str, str], dict[str, tuple[int, float]], dict[str, tuple[int, int]]] = ({}, {}, {})  # `_params`, `_axes`, `_stamps` as the server acknowledged them

    # ---- delivery ------------------------------------------------------------

    def deliver(self, events: list[Event], ids: list[EventId], *, lines: Lines | None = None, store_now: bool = False) -> Progress:
        """Sends `events`; how far the bulk writer or the batches in flight
        have got (a batch in flight that failed: `Forgotten`, the books back
        to what the server acknowledged)."""
        try:
            if events:
                self._send(events)
            if store_now:
                self._store_now()
            return Progress(self._position(), self._durable_position())
        except Exception as exc:
            if self._rewind():
                raise Forgotten(error_text(exc)) from exc
            raise

    def _send(self, events: list[Event]) -> None:
        self._check_reachable()
        client = self._mlflow_client()
        run_id = self._run_id
        if run_id is None:
            run_id = self._start_run(events[0])
            self._bulk = SqliteMetricWriter.shared(self.tracking_uri) if self.bulk_sqlite else None
            if self._bulk is None and self.in_flight > 1 and self.tracking_uri.startswith(("http://", "https://")):
                self._flight = InFlight(shared_pool(self.tracking_uri, self.in_flight), self.in_flight)
                self._acked = (dict(self._params), {}, {})
        batch = MlflowBatch(events, self.run.run_dir, self._params, self._axes, self._stamps)
        if self._bulk is not None:
            self._ticket = self._bulk.write(run_id, batch.metrics)
            batch.metrics = []
        requests = list(batch.requests(require("mlflow.entities", "mlflow", PURPOSE)))

        def send() -> None:
            for request in requests:
                client.log_batch(run_id, **request)
            for artifact_file, text in batch.texts.items():
                client.log_text(run_id, text, artifact_file)
            for local, artifact_dir in batch.files:
                client.log_artifact(run_id, str(local), artifact_dir)

        if self._flight is None:
            send()
            self._stored(batch, (self._params, self._axes, self._stamps))
        else:  # the next batch is built on this one's params and stamps; `rewind` goes back to what was acknowledged
            self._ticket = self._flight.submit(send, lambda: self._stored(batch, self._acked))
            self._stored_books(batch, (self._params, self._axes, self._stamps))

    def _stored_books(self, batch: MlflowBatch, books: tuple[dict[str, str], dict[str, tuple[int, float]], dict[str, tuple[int, int]]]) -> None:
        params, axes, stamps = books
        params.update(batch.params)
        axes.update(batch.axes)
        stamps.update(batch.stamps)

    def _stored(self, batch: MlflowBatch, books: tuple[dict[str, str], dict[str, tuple[int, float]], dict[str, tuple[int, int]]]) -> None:
        """Records a batch MLflow acknowledged: into `books` (what the run
        holds), the last time, the report's counts and renames."""
        self._stored_books(batch, books)
        self._last_ms = max(self._last_ms or 0, batch.last_ms)
        for (category, reason), n in batch.counts.items():
            self.run.report.count(category, reason, n, section=self.name)
        for old, new in batch.renames.items():
            if old not in self._renamed:
                self._renamed.add(old)
                self.run.report.rename(self.name, old, new)

    def close(self, status: str) -> None:
        """Ends the MLflow run with FINISHED / FAILED / KILLED. Skipped when
        no run was ever created, or when a resumed session delivered nothing
        and the run already ended with this status."""
        if self._flight is not None:
            self._flight.drain()  # if a batch failed, the delivery goes back to its cursor and ends the run later
        if self._bulk is not None:
            self._store_now()  # if it fails, the status waits; the next `deliver` tries the rows again
            self._bulk.release()
            self._bulk = None
        if self._run_id is None:
            state = self._saved_state()
            if state is None or (self._last_ms is None and state.get("status") == status):
                return
            self._run_id = state["run_id"]
        self._mlflow_client().set_terminated(self._run_id, STATUSES.get(status, "FAILED"), end_time=self._last_ms)
        self.state = {**self.state, "status": status}

    def resume(self, position: int | None, state: dict[str, Any]) -> Progress:
        super().resume(position, state)
        return Progress(self._position(), None)

    def _position(self) -> int | None:
        """With the bulk SQLite writer: the ticket of this run's last batch
        (a count of the writer's, for this process only; `resume`
        has nothing to skip, the store ignores a row it holds); with several
        batches in flight, the ticket of the last one sent."""
        return self._ticket if self._bulk is not None or self._flight is not None else None

    def _store_now(self) -> None:
        if self._bulk is not None:
            self._bulk.commit(force=True)
        if self._flight is not None:
            self._flight.drain()

    def _durable_position(self) -> int | None:
        """The writer's last stored ticket, committing its staged rows of
        every run first when they are due (see rltrack.trackers.mlflow.sqlite);
        with batches in flight, the last ticket acknowledged after all before it."""
        if self._flight is not None:
            return self._flight.collect()
        return self._bulk.commit() if self._bulk is not None else None

    def _rewind(self) -> bool:
        """A batch in flight failed: forget the batches sent after the last
        one acknowledged in order (the delivery sends them again from its cursor)."""
        if self._flight is None or not self._flight.rewind():
            return False
        self._params, self._axes, self._stamps = (dict(book) for book in self._acked)  # type: ignore[assignment]
        self._ticket = self._flight.sent
        return True

    # ---- the MLflow run ------------------------------------------------------------

    def _mlflow_client(self) -> Any:
        if self._client is None:
            self._client = _shared_client(self.tracking_uri)
        return self._client

    def _check_reachable(self) -> None:
        """Fails fast when an MLflow server does not answer at all. Without
        this, MLflow's HTTP client retries a refused connection for minutes
        inside one call; this way the worker's own backoff takes over and the
        error is reported at once. Any HTTP answer counts as reachable."""
        if not self.tracking_uri.startswith(("http://", "https://")):
            return
        requests = require("requests", "mlflow", PURPOSE)
        try:
            requests.get(self.tracking_uri.rstrip("/") + "/health", timeout=5)
        except requests.RequestException as exc:
            raise ConnectionError(f"MLflow server {self.tracking_uri} is not reachable: {exc}") from None

    def _start_run(self, first: Event) -> str:
        """Continues the run saved in the run directory, if it is in this
        store and not deleted; otherwise creates one (start time = first event)."""
        client = self._mlflow_client()
        state = self._saved_state()
        if state is not None:
            try:
                found = client.get_run(state["run_id"])
            except Exception as exc:  # noqa: BLE001 - only "no such run" means: make a new one
                if getattr(exc, "error_code", None) != "RESOURCE_DOES_NOT_EXIST":
                    raise
            else:
                if found.info.lifecycle_stage == "active":
                    self._run_id = found.info.run_id
                    self._params = dict(found.data.params)
                    if found.info.status != "RUNNING":  # a resumed run is running again until it closes
                        client.update_run(self._run_id, status="RUNNING")
                    return found.info.run_id
        tags = {self._tag_key(k): v[:MAX_TAG_VALUE] for k, v in self.tags.items()}
        tags["rltrack.run_dir"] = str(self.run.run_dir.resolve())
        created = client.create_run(
            self._experiment_id(), start_time=int(first.time * 1000), tags=tags, run_name=self.run_name or self.run.name
        )
        self._run_id = created.info.run_id
        if self.state.get("run_id"):  # the MLflow run was deleted, or is in another store
            self.run.report.count(
                "incomplete",
                f"MLflow run {self._run_id} starts where an earlier {self.name} delivery stopped; to give it the "
                f"whole run, delete its cursors (cursors/{self.name}*.json) and run rltrack sync again",
                section=self.name,
            )
        self.state = {"tracking_uri": self.tracking_uri, "run_id": self._run_id}
        self.save_state()  # before the first value: a kill then must not make the next delivery create another MLflow run
        return created.info.run_id

    def _tag_key(self, key: str) -> str:
        new = mlflow_key(key)
        if new != key:
            self.run.report.rename(self.name, key, new)
        return new

    def _experiment_id(self) -> str:
        client = self._mlflow_client()
        found = client.get_experiment_by_name(self.experiment_name)
        if found is not None:
            return str(found.experiment_id)
        try:
            return str(client.create_experiment(self.experiment_name, artifact_location=self._artifact_location()))
        except Exception:  # another process may have created it meanwhile
            found = client.get_experiment_by_name(self.experiment_name)
            if found is None:
                raise
            return str(found.experiment_id)

    def _artifact_location(self) -> str | None:
        """For a SQLite store, `mlartifacts/` beside the database file (MLflow
        would use ./mlruns under whatever the current directory is); for a
        server, its own default."""
        if not self.tracking_uri.startswith("sqlite:///"):
            return None
        database = Path(self.tracking_uri[len("sqlite:///") :])
        return (database.parent.resolve() / "mlartifacts").as_uri()

    def _saved_state(self) -> dict[str, Any] | None:
        """The run this directory was delivered to before, if in this store."""
        return self.state if self.state.get("run_id") and self.state.get("tracking_uri") == self.tracking_uri else None


_CLIENTS: dict[str, tuple[Any, Any]] = {}  # tracking URI -> (its SQLite file's identity, client)
_CLIENTS_LOCK = threading.Lock()


def _shared_client(tracking_uri: str) -> Any:
    """One `MlflowClient` per store for every run the agent delivers. A SQLite
    store is made whole first if it is not (`make_whole`: never migrated in
    place, see rltrack.trackers.mlflow.whole); one deleted and made anew at
    the same path (the run root removed and a run started again while the
    agent was still up) gets a client of its own, see `forget_store`."""
    with _CLIENTS_LOCK:
        held = _CLIENTS.get(tracking_uri)
        if held is not None and (sqlite_path(tracking_uri) is None or held[0] == store_file(tracking_uri)):
            return held[1]
        database = sqlite_path(tracking_uri)
        if held is not None:
            forget_store(tracking_uri)
        if database is not None:
            make_whole(database)
        client = require("mlflow", "mlflow", PURPOSE).MlflowClient(tracking_uri)
        client.search_experiments(max_results=1)
        _CLIENTS[tracking_uri] = (store_file(tracking_uri), client)
        return client
