"""Neptune (the 1.x client), fed from the run's journal by a `DeliveryWorker`.

Why it is built this way:

* **Offline by default.** Hosted Neptune shut down in March 2026; the client
  still runs in `offline` and `debug` modes and against self-hosted servers
  (`async`, `sync`). Offline data go to `<dir>/.neptune/offline/run__*/`
  (`dir` defaults to the run directory), ready for `neptune sync` to a
  self-hosted server. The API token is read by the client from
  `NEPTUNE_API_TOKEN`, never from a config file.
* **Never on the training thread.** `neptune` (7 s to import here) is
  imported, and `init_run` called, on the first delivery, on the worker's
  thread. The client's own process hooks are off (stdout/stderr capture,
  traceback hook, hardware monitoring), and so are git and source-file
  capture: the Neptune run may be created long after training (`rltrack sync`
  replays journals), when they would describe the sync, not the training.
* **Grouping**: Neptune 1.x has no groups below a project (which names a
  workspace, so it is never derived): the run's task (its experiment,
  `RunContext.task`) is one of its tags, beside `tags`; the run is named
  after the rltrack run.
* **Series**: each value goes to `run["<namespace>/<key>"]` at the event's
  primary step with the event's wall time as timestamp; the other step axes
  of scalar records are series of their own (`<namespace>/<axis>`). One
  `extend` per series per batch, not one `append` per value.
* **Steps strictly increase per series**, as Neptune requires (its server
  rejects the rest; its offline client writes them anyway). A value whose step
  is not above its series' last step is not sent: when it repeats the last
  point exactly (same step and value: a re-delivered batch, or an axis carried
  by two records) it is ignored, otherwise it is counted in the report as
  dropped. The journal still has it, for trackers without that rule.
* **A batch sent again is not written twice**, even by another process
  (`rltrack sync` after a crash that came before the cursor was saved): in
  offline mode the run's folders are listed in the backend's `state` (which
  delivery keeps in the cursor), and a new session starts every series from the last point those folders
  hold; points at or before it are already there and are skipped uncounted.
* **NaN and ±inf** are skipped, as the client would do with a warning per
  value; here they are counted in the report instead. None values likewise.
* Text becomes string series (values over Neptune's 1000 characters cut and
  counted), images file series, videos and checkpoints uploaded files
  (`<namespace>/<key>/<step>`, `checkpoints/iteration_<N>`, `checkpoints/best`),
  histograms series of their min, max, mean and std (Neptune has no histogram
  type), hyperparameters fields under `parameters/` (lists and None as text).
  A value Neptune refuses (a key that changes type, a path that is already a
  field) is counted as dropped and the batch goes on.
* **Reserved namespaces are renamed, never written into**: a key in
  `sys/`, `monitoring/`, `source_code/` (Neptune's) or `parameters/`,
  `checkpoints/` (rltrack's fields) goes to `user_<namespace>/...`, listed in
  report.json's `renamed` (see `neptune_path`). A batch that fails (a
  server or disk error) is offered again; its counts and the series' last
  steps are recorded only once it has gone through, so a retry repeats nothing.
"""

from __future__ import annotations

import hashlib
import math
import os
import statistics
import threading
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

from rltrack.sinks.base import RunContext
from rltrack.trackers.neptune.queue import operations
from rltrack.trackers.remote import EventId, Failure, RemoteBackend, Rules, check_names, check_tags, error_text, raised
from rltrack.core.events import NUMERIC_KINDS, Event
from rltrack.core.optional import ensure_installed, require

MODES = ("offline", "debug", "async", "sync")
#: The modes that talk to a server, which needs a token and a project.
ONLINE_MODES = ("async", "sync")
#: The client's errors that retrying cannot heal: credentials, the project.
CANNOT_HEAL = (
    "NeptuneMissingApiTokenException", "NeptuneInvalidApiTokenException", "ProjectNotFound",
    "NeptuneMissingProjectNameException", "InactiveProjectException", "CannotSynchronizeOfflineRunsWithoutProject",
)  # fmt: skip
#: `init_run` reads where to put its files from this variable; it is process-wide.
_DATA_DIR_VAR = "NEPTUNE_DATA_DIRECTORY"
_DATA_DIR_LOCK = threading.Lock()


class NeptuneBackend(RemoteBackend):
    """`[backends.neptune] project, mode, name, tags, dir`; the token comes from NEPTUNE_API_TOKEN."""

    name = "neptune"
    rules = Rules(client_modules=("neptune",))

    def __init__(
        self,
        project: str | None = None,
        mode: str = "offline",
        name: str | None = None,
        tags: Sequence[str] = (),
        dir: str | None = None,
        api_token: Any = None,
    ) -> None:
        self.project = project
        self.mode = mode
        self.run_name = name
        self.tags = list(tags)
        self.dir = dir
        self._neptune: Any = None  # the module, imported on the delivery thread
        self._run: Any = None
        self._last: dict[str, tuple[int, Any]] = {}  # series path -> (step, value) of its last point
        self._kinds: dict[str, str] = {}  # series path -> "float" | "string" | "file"
        self._counts: Counter[tuple[str, str]] = Counter()  # this batch's, reported once it is written
        self._earlier: dict[str, int] = {}  # series path -> last step held by earlier sessions' folders

    @classmethod
    def validate(cls, settings: dict[str, Any], in_use: bool = False) -> None:
        mode, project = settings["mode"], settings["project"]
        if settings["api_token"] is not None:
            raise ValueError("api_token must not be written in a config file; set the NEPTUNE_API_TOKEN environment variable instead")
        if mode not in MODES:
            raise ValueError(f"mode = {mode!r} is not a Neptune mode rltrack can write with; use one of {', '.join(MODES)}")
        check_names(project=project, name=settings["name"], dir=settings["dir"])
        check_tags(settings["tags"])
        if not in_use:
            return
        ensure_installed("neptune", "neptune", "The neptune backend")
        if mode in ONLINE_MODES and not os.environ.get("NEPTUNE_API_TOKEN"):
            raise ValueError(f'mode = "{mode}" needs NEPTUNE_API_TOKEN in the environment of the training process (a token in the config is refused), or use mode = "offline"')
        if mode in ONLINE_MODES and not (project or os.environ.get("NEPTUNE_PROJECT")):
            raise ValueError(f'mode = "{mode}" needs a project: set project = "workspace/project" (or NEPTUNE_PROJECT)')

    def target(self, run: RunContext) -> str:
        where = Path(self.dir).expanduser().resolve() if self.dir else "the run directory"
        return f"{self.mode} {self.project or ''} in {where}"

    def judge(self, exc: Exception) -> Failure:
        if raised(exc, *CANNOT_HEAL):
            return Failure(fix="set NEPTUNE_API_TOKEN (from the environment only: a token in the config is refused) and the project where the agent runs")
        return super().judge(exc)

    def open(self, run: RunContext) -> None:
        super().open(run)
        self._dir = Path(self.dir).expanduser() if self.dir else run.run_dir

    @property
    def data_dir(self) -> Path:
        """Where the client keeps its offline and async folders for this run."""
        return self._dir / ".neptune"

    def deliver(self, events: list[Event], ids: list[EventId]) -> None:
        if self._run is None:
            self._run = self._init()
        last = dict(self._last)  # committed, with the counts, only once the whole batch is written
        self._counts.clear()
        series: dict[str, tuple[list[Any], list[int], list[float]]] = {}
        for event in events:
            for path, value in self._values(event):
                self._plan(series, last, self._path(path), value, event)
        for path, (values, steps, times) in series.items():
            self._call(f"{path} ({len(values)} values)", lambda: self._run[path].extend(values, steps=steps, timestamps=times))
        self._last = last
        for (category, reason), n in self._counts.items():
            self.run.report.count(category, reason, n, section=self.name)

    def close(self, status: str) -> None:
        """Sets `sys/failed` and stops the run. A run that an earlier session
        started (a crashed one, synced with nothing left to send) is opened
        again to be marked failed, as the MLflow backend ends it FAILED."""
        if self._run is None:
            started_before = "folders" in self.state
            if status == "finished" or not started_before:
                return
            self._run = self._init()
        self._run["sys/failed"] = status != "finished"
        self._run.stop()
        self._run = None

    # ---- events to Neptune values -----------------------------------------

    def _init(self) -> Any:
        self._neptune = neptune = require("neptune", "neptune", "The neptune backend")
        folders: list[str] = list(self.state.get("folders", []))
        if self.mode == "offline":
            self._resume_from([self.data_dir / "offline" / name for name in folders])
        offline = self.data_dir / "offline"
        with _DATA_DIR_LOCK:
            before = set(os.listdir(offline)) if offline.is_dir() else set()
            run = self._init_run(neptune)
            if self.mode == "offline" and offline.is_dir():
                folders += sorted(set(os.listdir(offline)) - before)
        self.state = {**self.state, "folders": folders}
        self.save_state()  # before the first value: the next session must know this session's folder
        return run

    def _resume_from(self, folders: list[Path]) -> None:
        """Every series' last point in the folders of earlier sessions."""
        for folder in folders:
            if not folder.is_dir():
                continue
            for op, _ in operations(folder):
                if op.get("type") in ("LogFloats", "LogStrings") and op.get("values"):
                    point = op["values"][-1]
                    path = "/".join(op["path"])
                    self._last[path] = (int(point["step"]), point["value"])
                    self._earlier[path] = int(point["step"])

    def _init_run(self, neptune: Any) -> Any:
        """`init_run` with its data directory set; the caller holds `_DATA_DIR_LOCK`."""
        previous = os.environ.get(_DATA_DIR_VAR)
        os.environ[_DATA_DIR_VAR] = str(self.data_dir)
        try:
            return neptune.init_run(
                project=self.project,
                mode=self.mode,
                name=self.run_name or self.run.name,
                tags=list(dict.fromkeys([*self.tags, self.run.task])),  # the experiment: Neptune 1.x groups runs by tags
                capture_stdout=False,
                capture_stderr=False,
                capture_hardware_metrics=False,
                capture_traceback=False,
                fail_on_exception=False,
                git_ref=False,
                source_files=[],
            )
        finally:
            if previous is None:
                del os.environ[_DATA_DIR_VAR]
            else:
                os.environ[_DATA_DIR_VAR] = previous

    def _values(self, event: Event) -> list[tuple[str, Any]]:
        """The series points of one event as (path, value); fields and uploads are written here."""
        if event.kind in NUMERIC_KINDS:
            points = [(event.tag(k), v) for k, v in event.data.items()]
            if any(v is None for _, v in points):
                self._count("dropped", "None value", sum(v is None for _, v in points))
            axes = list(event.steps.items())[1:]
            return points + [(event.tag(a), v) for a, v in axes if a not in event.data]
        if event.kind == "text":
            return [(event.tag(k), self._text(v)) for k, v in event.data.items()]
        if event.kind == "histogram":
            return [(f"{event.tag(k)}/{name}", stat) for k, v in event.data.items() for name, stat in _summary(v).items()]
        if event.kind == "image":
            return [(event.tag(k), self._image(v)) for k, v in event.data.items()]
        if event.kind == "video":
            for key, value in event.data.items():
                self._upload(f"{event.tag(key)}/{event.primary_step}", value)
        elif event.kind == "hparams":
            self._call("parameters", lambda: self._run["parameters"].assign(self._neptune.utils.stringify_unsupported(event.data)))
        elif event.kind == "artifact":
            self._checkpoint(event)
        return []

    def _plan(self, series: dict[str, tuple[list[Any], list[int], list[float]]], last: dict[str, tuple[int, Any]], path: str, value: Any, event: Event) -> None:
        if value is None:
            return  # counted where it was found
        step = event.primary_step
        if isinstance(value, (int, float)):
            try:
                finite = math.isfinite(value)
            except OverflowError:  # an int beyond float range: Neptune's series are floats
                self._count("dropped", "integer too large for a 64-bit float")
                return
            if not finite:
                self._count("dropped", "non-finite value (Neptune takes finite floats only)")
                return
            kind = "float"
        else:
            kind = "string" if isinstance(value, str) else "file"
        if step is None:
            self._count("dropped", "event without a step")
            return
        if self._kinds.setdefault(path, kind) != kind:
            self._count("dropped", f"{path}: a {self._kinds[path]} series cannot take a {kind} value")
            return
        previous = last.get(path)
        if previous is not None and step <= previous[0]:
            if (step, value) != previous and step > self._earlier.get(path, step - 1):
                self._count("dropped", "step not above the series' last step (Neptune needs increasing steps)")
            return
        last[path] = (step, value)
        values, steps, times = series.setdefault(path, ([], [], []))
        values.append(value)
        steps.append(step)
        times.append(event.time)

    def _path(self, key: str) -> str:
        """The Neptune path of `key` (see `neptune_path`), its rename recorded."""
        path = neptune_path(key)
        if path != key:
            self.run.report.rename(self.name, key, path)
        return path

    def _count(self, category: str, reason: str, n: int = 1) -> None:
        self._counts[category, reason] += n

    def _text(self, value: Any) -> str:
        from neptune.types.series.string_series import (
            MAX_STRING_SERIES_VALUE_LENGTH as limit,
        )

        text = str(value)
        if len(text) > limit:
            self._count("cut", f"text cut to Neptune's {limit} characters")
        return text[:limit]

    def _image(self, value: Any) -> Any:
        """A `File` for a path (relative paths are in the run directory) or a pixel array."""
        File = self._neptune.types.File
        if isinstance(value, str):
            path = self._file(value)
            return None if path is None else File(str(path))
        import numpy

        try:
            return File.as_image(numpy.asarray(value))
        except Exception as exc:  # noqa: BLE001 - pixels the client cannot read are counted, not retried
            self._count("dropped", f"image: {type(exc).__name__}: {exc}")
            return None

    def _upload(self, path: str, value: Any) -> None:
        if not isinstance(value, str):
            self._count("dropped", "video that is not a file (Neptune takes videos as files)")
            return
        file = self._file(value)
        if file is not None:
            self._call(path, lambda: self._run[path].upload(str(file)))

    def _checkpoint(self, event: Event) -> None:
        path = self._file(str(event.data.get("path", "")))
        if path is None:
            return
        targets = [f"checkpoints/iteration_{event.data.get('iteration')}"] + (["checkpoints/best"] if event.data.get("best") else [])
        for target in targets:
            self._call(target, lambda: self._run[target].upload(str(path)))

    def _file(self, value: str) -> Path | None:
        path = self.run.run_dir / value
        if not path.is_file():
            self._count("dropped", "file missing")
            return None
        return path

    def _call(self, what: str, call: Any) -> Any:
        """Runs one client call; a value the client refuses is counted and skipped,
        anything else (a server or disk problem) is raised so the batch is retried."""
        from neptune.exceptions import MetadataInconsistency

        try:
            return call()
        except (ValueError, TypeError, AttributeError, MetadataInconsistency) as exc:  # AttributeError: a path that is a namespace
            self._count("dropped", f"{what}: {error_text(exc)}")
            return None


#: Namespaces of a Neptune run that are not the user's: Neptune's own (its
#: system fields, `sys/failed` and `sys/name` among them; hardware and console
#: monitoring; source code) and rltrack's (hyperparameters, checkpoints). A
#: series there would be dropped by the client (`sys/failed` is a Boolean, which
#: has no `extend`) or mixed into fields that are not the user's (`sys/x`).
RESERVED = frozenset({"sys", "monitoring", "source_code", "parameters", "checkpoints"})
#: What a key in a reserved namespace is prefixed with: `sys/failed` becomes `user_sys/failed`.
RENAMED = "user_"


def neptune_path(key: str) -> str:
    """The series path `key` gets in Neptune: itself unless it has empty parts
    (`a//b`, a leading or trailing `/`), which Neptune's client drops, so that
    `ns/a//b` and `ns/a/b` would write one series (then the parts that are
    left, the last one followed by `-` and 8 hex digits of the key's SHA-1),
    or starts in a `RESERVED` namespace (then prefixed with `user_`).
    A pure function of the key: the same in every process and replay."""
    parts = key.split("/")
    if not all(parts):
        suffix = "-" + hashlib.sha1(key.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        parts = [part for part in parts if part]
        parts[-1:] = [(parts[-1] if parts else "") + suffix]
    if parts[0] in RESERVED:
        parts[0] = RENAMED + parts[0]
    return "/".join(parts)


def _summary(values: list[float]) -> dict[str, float]:
    """What Neptune can chart of a histogram: its values' min, max, mean and std
    (NaN and ±inf are left out before, rltrack.core.refusals)."""
    if not values:
        return {}
    summary = {"min": min(values), "max": max(values)}
    try:
        summary.update(mean=statistics.fmean(values), std=statistics.pstdev(values))
    except OverflowError:  # values near the float limit: their sum overflows; min and max still say something
        pass
    return summary
