"""Hugging Face trackio, fed from the run's journal by a `DeliveryWorker`.

Why it is built this way:

* **trackio's own storage call, synchronously.** `trackio.init/log/finish`
  queue rows for a background thread that writes them every 0.5 s and turns
  any failure into a warning, with a random id per row: a batch could be lost
  without the worker knowing, or stored twice when it is offered again. So
  the backend makes the call that thread makes, `SQLiteStorage.bulk_log`
  (one transaction, raises on failure), and gives every row its event's id
  from delivery (`log_id` = the trackio run's id, the journal's writer and
  the line's offset; trackio's table keeps it unique with `INSERT OR
  IGNORE`): a batch delivered again, even by `rltrack sync` in another
  process after a kill, adds nothing, and two equal events are two rows.
* **Where the store is.** trackio reads its directory from `TRACKIO_DIR`
  once, at import, into module constants (`trackio.utils.TRACKIO_DIR`,
  `MEDIA_DIR`, and copies in other modules). One agent serves runs whose
  stores differ, so every trackio call here runs under `_STORE_LOCK` with
  those constants pointed at this backend's `dir` (default
  `<run.root>/trackio`, beside `mlflow.db`, not `~/.cache/huggingface`).
  `TRACKIO_DIR=<dir> trackio show` opens the dashboard on it.
* **One trackio run per rltrack run**, in project `project` (default: the
  run's task, else its name). Its name and id are the backend's `state`,
  which delivery keeps in the cursor, so a resumed run and `rltrack sync`
  continue it.
* **Rows**: one per event at its primary step, with the other step axes as
  metrics beside the values (as W&B; a key of the empty namespace named
  like an axis, with another value, becomes `<key>_value`). Keys trackio
  reserves (`step`, `time`, ... and `__*`) get trackio's `__` prefix. Text is
  `trackio.Markdown`, histograms `trackio.Histogram`, images `trackio.Image`
  (saved under `<dir>/media`; a re-delivered image leaves its first file
  unreferenced), videos `trackio.Video`; hyperparameters are the run's
  config (kept in the state too, so config that came without rows is
  written with the next rows even after a crash). Checkpoints stay in the
  run directory. Every conversion, rename and drop is in the report.
* **64-bit integers only**, as trackio's store (orjson, SQLite) takes: a
  value beyond is stored as a float (counted as converted; beyond a float,
  dropped); an event with a step beyond is left out of every delivery and
  counted as refused with its place in the journal (rltrack.core.refusals).
* **No status.** trackio keeps none for a run (`finish` only flushes), so
  `close` has nothing to write.
* **Remote** (`space_id`, or `server_url` of a self-hosted trackio server with
  its `?write_token=`): rows go to its `/bulk_log` endpoint, which stores
  them with the same ids; media are not uploaded (counted as dropped).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rltrack.sinks.base import RunContext
from rltrack.trackers.remote import EventId, RemoteBackend, Rules, check_names
from rltrack.core.events import KINDS, NUMERIC_KINDS, Event
from rltrack.core.optional import ensure_installed, require
from rltrack.core.refusals import INT64

PURPOSE = "The trackio backend"
#: trackio's module constants holding its directory (see the module docstring).
_DIR_CONSTANTS = {"TRACKIO_DIR": "", "MEDIA_DIR": "media", "ARTIFACTS_DIR": "artifacts"}
_STORE_LOCK = threading.Lock()
#: trackio's modules, and how many modules the process had when they were listed.
_MODULES: tuple[int, list[Any]] = (0, [])


def _trackio_modules() -> list[Any]:
    """trackio's imported modules (the caller holds `_STORE_LOCK`), listed
    again only when the process imported more: the agent holds thousands of
    modules (MLflow's, W&B's), and going over them for every batch was most
    of its CPU per trackio batch."""
    global _MODULES
    if _MODULES[0] != len(sys.modules):
        _MODULES = (len(sys.modules), [m for name, m in list(sys.modules.items()) if name == "trackio" or name.startswith("trackio.")])
    return _MODULES[1]


class TrackioBackend(RemoteBackend):
    """`[backends.trackio] project, name, dir, space_id, server_url`."""

    name = "trackio"
    #: Checkpoints stay in the run directory: trackio takes none from rltrack.
    rules = Rules(client_modules=("trackio",), kinds=tuple(kind for kind in KINDS if kind != "artifact"))

    def __init__(
        self,
        project: str | None = None,
        name: str | None = None,
        dir: str | None = None,
        space_id: str | None = None,
        server_url: str | None = None,
    ) -> None:
        self.project = project
        self.run_name = name
        self.dir = dir
        self.space_id = space_id
        self.server_url = server_url
        self._trackio: Any = None  # the module, imported on the delivery thread
        self._remote: Any = None  # a trackio RemoteClient, for space_id / server_url
        self._hf_token: str | None = (
            None  # a Space's Hugging Face token (from the environment or `hf auth login`)
        )
        self._started = False  # `state` names the trackio run of this store

    @classmethod
    def validate(cls, settings: dict[str, Any], in_use: bool = False) -> None:
        space_id, server_url = settings["space_id"], settings["server_url"]
        check_names(**settings)
        if space_id is not None and server_url is not None:
            raise ValueError(
                "space_id and server_url both given: trackio writes to one remote, choose one"
            )
        if server_url is not None and not server_url.startswith(
            ("http://", "https://")
        ):
            raise ValueError(
                f"server_url = {server_url!r} must be an http(s) URL, e.g. 'http://127.0.0.1:7860/?write_token=...'"
            )
        if in_use:
            ensure_installed("trackio", "trackio", PURPOSE)

    def target(self, run: RunContext) -> str:
        where = self.space_id or self.server_url or str(self._store_dir(run))
        return f"{where} project {self.project or run.task}"

    def _store_dir(self, run: RunContext) -> Path:
        return Path(self.dir).expanduser().resolve() if self.dir else run.stores / "trackio"

    def open(self, run: RunContext) -> None:
        super().open(run)
        self.store = self._store_dir(run)

    def deliver(self, events: list[Event], ids: list[EventId]) -> None:
        with _STORE_LOCK, self._at_store():
            state = self.state if self._started else self._start()
            rows: list[tuple[EventId, Event, dict[str, Any]]] = []
            config = dict(state["config"])
            counts: Counter[tuple[str, str]] = Counter()
            renames: dict[str, str] = {}
            for event_id, event in zip(ids, events):
                if event.kind == "hparams":
                    config.update(event.data)
                else:
                    row = self._row(event, state, counts, renames)
                    if row:
                        rows.append((event_id, event, row))
            if rows:
                self._write(state, rows, config)
            self.state = {**state, "config": config}
        for (category, reason), n in counts.items():
            self.run.report.count(category, reason, n, section=self.name)
        for old, new in renames.items():
            self.run.report.rename(self.name, old, new)

    # ---- the trackio run ---------------------------------------------------

    def _start(self) -> dict[str, Any]:
        """The saved trackio run, or a new one named after the rltrack run."""
        self._trackio = require("trackio", "trackio", PURPOSE)
        saved = self.state
        project = self.project or self.run.task
        if saved.get("project") != project or saved.get("store") != self._where():
            saved = {}  # delivered to another project or store before: a new trackio run there
        from trackio.sqlite_storage import SQLiteStorage

        SQLiteStorage.validate_project_name(project)
        name = saved.get("name") or self.run_name or self.run.name
        run_id = saved.get("id") or _run_id(self.run.run_dir, project)
        self.state = {
            **saved,
            "project": project,
            "name": name,
            "id": run_id,
            "store": self._where(),
            "config": saved.get("config", {}),
        }
        if self.space_id or self.server_url:
            self._remote = self._connect()
        self._started = True
        return self.state

    def _where(self) -> str:
        return self.space_id or self.server_url or str(self.store)

    def _connect(self) -> Any:
        from trackio.remote_client import RemoteClient
        from trackio.utils import parse_trackio_server_url

        if self.server_url:
            url, token = parse_trackio_server_url(self.server_url)
            return RemoteClient(url, hf_token=None, write_token=token, verbose=False)
        import huggingface_hub

        self._hf_token = huggingface_hub.utils.get_token()
        return RemoteClient(self.space_id, hf_token=self._hf_token, verbose=False)

    @contextmanager
    def _at_store(self) -> Iterator[None]:
        """trackio's directory constants point at `self.store` meanwhile; the caller holds `_STORE_LOCK`."""
        previous = os.environ.get("TRACKIO_DIR")
        os.environ["TRACKIO_DIR"] = str(self.store)  # read by trackio's first import
        require("trackio", "trackio", PURPOSE)
        saved: list[tuple[Any, str, Any]] = []
        for module in _trackio_modules():
            for constant, sub in _DIR_CONSTANTS.items():
                if isinstance(getattr(module, constant, None), Path):
                    saved.append((module, constant, getattr(module, constant)))
                    setattr(module, constant, self.store / sub if sub else self.store)
        try:
            yield
        finally:
            for module, constant, value in saved:
                setattr(module, constant, value)
            if previous is None:
                del os.environ["TRACKIO_DIR"]
            else:
                os.environ["TRACKIO_DIR"] = previous

    def _write(
        self,
        state: dict[str, Any],
        rows: list[tuple[EventId, Event, dict[str, Any]]],
        config: dict[str, Any],
    ) -> None:
        if (
            "created" not in state
        ):  # trackio's config keys of its own, as `trackio.init` sets them
            state["created"] = _iso(rows[0][1].time)
        config = {**config, "_Created": state["created"], "_Group": None}
        ids = [f"{state['id']}@{event_id}" for event_id, _, _ in rows]
        if self._remote is not None:
            logs = [
                {"project": state["project"], "run": state["name"], "run_id": state["id"], "metrics": row, "step": event.primary_step,
                 "config": config if i == 0 else None, "log_id": log_id}
                for i, ((_, event, row), log_id) in enumerate(zip(rows, ids))
            ]  # fmt: skip
            self._remote.predict(
                api_name="/bulk_log", logs=logs, hf_token=self._hf_token
            )
            return
        from trackio.sqlite_storage import SQLiteStorage

        SQLiteStorage.bulk_log(
            project=state["project"],
            run=state["name"],
            run_id=state["id"],
            metrics_list=[row for _, _, row in rows],
            steps=[event.primary_step for _, event, _ in rows],
            timestamps=[_iso(event.time) for _, event, _ in rows],
            config=config,
            log_ids=ids,
        )

    # ---- one event -----------------------------------------------------------

    def _row(
        self,
        event: Event,
        state: dict[str, Any],
        counts: Counter[tuple[str, str]],
        renames: dict[str, str],
    ) -> dict[str, Any]:
        """The trackio row of one event: its values by key, the other step axes beside them."""
        from trackio.utils import RESERVED_KEYS

        axes = list(event.steps.items())[1:]
        row: dict[str, Any] = {}
        for key, value in event.data.items():
            tag = event.tag(key)
            if tag in event.steps and value != event.steps[tag]:
                renames[tag] = tag = f"{tag}_value"
            if tag in RESERVED_KEYS or tag.startswith("__"):
                renames[tag] = tag = f"__{tag}"
            try:
                converted = self._convert(event, value, state, counts)
            except Exception as exc:  # noqa: BLE001 - a value trackio refuses is counted, the rest still goes
                counts[
                    "dropped", f"{event.kind} value: {type(exc).__name__}: {exc}"
                ] += 1
                continue
            if converted is not None:
                row[tag] = converted
        if row and event.kind in NUMERIC_KINDS:
            row.update((axis, step) for axis, step in axes if axis not in row)
        return row

    def _convert(
        self,
        event: Event,
        value: Any,
        state: dict[str, Any],
        counts: Counter[tuple[str, str]],
    ) -> Any:
        """The trackio value of one event value; None (counted) when there is none."""
        trackio = self._trackio
        if event.kind in NUMERIC_KINDS:
            if value is None:
                counts["dropped", "None value"] += 1
            elif type(value) is int and not INT64[0] <= value <= INT64[1]:  # orjson: "Integer exceeds 64-bit range"
                try:
                    value = float(value)
                except OverflowError:
                    counts["dropped", "integer too large for a 64-bit float"] += 1
                    return None
                counts["converted", "integer beyond 64 bits stored as a float"] += 1
            return value
        if event.kind == "text":
            return trackio.Markdown(str(value))._to_dict()
        if event.kind == "histogram":
            return trackio.Histogram(value)._to_dict() if value else None  # NaN and ±inf are left out before (rltrack.core.refusals)
        # image, video (the kinds trackio takes: `TrackioBackend.rules`)
        if self._remote is not None:
            counts["dropped", f"{event.kind}: media are written to a local trackio store only"] += 1
            return None
        media = trackio.Image(self._media(value)) if event.kind == "image" else trackio.Video(self._media(value))
        media._save(state["project"], state["name"], event.primary_step or 0)
        return media._to_dict()

    def _media(self, value: Any) -> Any:
        """A file path (relative paths are inside the run directory; an adapter's
        `{"path": ...}` record), or a uint8 pixel array."""
        if isinstance(value, dict):
            value = value.get("path")
        if isinstance(value, str):
            path = self.run.run_dir / value
            if not path.is_file():
                raise FileNotFoundError(f"no file {path}")
            return str(path)
        import numpy

        return numpy.asarray(value, dtype=numpy.uint8)


def _run_id(run_dir: Path, project: str) -> str:
    """The trackio run id of an rltrack run: a hash of its directory, the
    project and when the run began (meta.json's `start_unix`, which a resumed
    run keeps), the same in every process (a delivery killed before the state
    was saved continues the same trackio run), and another for a directory
    made again at the same path: that is another run, with rows of its own
    (it merged into the old one, whose log ids it shared)."""
    try:
        began = json.loads((run_dir / "meta.json").read_text()).get("start_unix")
    except (OSError, ValueError):
        began = None
    return hashlib.sha1(f"{run_dir.resolve()}\0{project}\0{began}".encode()).hexdigest()[:32]


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat()

