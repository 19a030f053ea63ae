"""Weights & Biases, fed from the run's journal by a `DeliveryWorker`.

Why it is built this way:

* **Never on the training thread.** `wandb` is imported, and `wandb.init`
  called, on the first delivery, which runs on the worker's thread. A hanging
  `init` is bounded by `init_timeout` and then retried with backoff; a hanging
  network is W&B's own background process's problem, and `Logger.close(timeout)`
  abandons a delivery that does not return.
* **W&B's `_step` numbers the run's rows, across sessions.** Each row is
  logged with `step=` the number of rows the W&B run already holds (earlier
  sessions' files included; not in `mode = "shared"`, where W&B ignores
  `step=` and numbers rows itself), so `_step` never goes back and a later session
  (a resumed run, `rltrack sync` after a crash) continues at the next number
  instead of restarting at 0. That is what `wandb sync` needs: it appends a
  later offline folder's history lines to the run's and keeps their `_step`
  values; wandb 0.31 moves them up only when they start below the run's next
  step, wandb 0.28 never does, so a folder restarting at 0 repeated steps the
  run held. Every session but the first passes `resume="allow"`, which the
  run record keeps offline, so that `wandb sync` resumes the run (config and
  summary merged); the first passes none, so its folder's steps stay as they
  are whatever was synced before. README, "W&B offline runs", has the details
  and the upload commands.
* **Each event's row** (its step axes as keys, values as W&B types, names
  W&B refuses left out, names it owns renamed) is made by a `RowMaker`
  (rltrack.trackers.wandb.rows); this module keeps the W&B run's life.
* **Grouping**: the W&B project is `project`, by default the run's task
  (its experiment in rltrack, `RunContext.task`, with the characters W&B
  refuses in project names replaced by `_`), and the W&B group is `group`, by
  default the task too, so that the experiment stays a group when several
  share one project; the W&B run is named after the rltrack run.
* **Offline by default.** This is the mode that works everywhere (no account,
  no network; hosted and self-hosted W&B both take the files later with
  `wandb sync <run_dir>/wandb/offline-run-*`). `mode = "online"` needs an
  API key (`WANDB_API_KEY` or `wandb login`; checked at `make_logger`).
  Files go to `dir`, by default the run directory, so a run directory holds
  everything of its run. A `dir` that is not writable is refused (at
  `make_logger`, and again before `wandb.init`): W&B would fall back without
  a word to the system's temporary directory, where nothing looks for it.
* **One W&B run per rltrack run**: the id of the W&B run, once created, is
  the backend's `state` (saved by delivery in the cursor) and resumed (`resume="allow"`), so
  `rltrack sync` after a crash continues the same run (online: at the
  resumed run's `starting_step`).
* **Every row exactly once, even after a crash.** `run.log` hands a row to
  W&B's own writer process, which stores it in the run's `.wandb` file a
  little later. The backend counts the rows it logged (`position`) and the
  rows that file holds (`Progress.stored`, read incrementally), so the
  journal cursor advances only over rows W&B has stored, and saves that
  count with it. Delivery that resumes from a cursor (a retry, `rltrack sync`
  after a crash, a resumed run) compares it with what the W&B run holds (the
  history records of the run's earlier offline files, or the resumed run's
  `starting_step` online) and skips that many rows before logging again:
  none is lost, none sent twice.
* **A failed `wandb.init`** leaves its id reserved in the process ("run ID is
  in use" on every retry): a new run is then tried with a fresh id, but a
  saved run is not, and waits for `rltrack sync` in a new process.
* System metrics, console capture, git and code saving are off: the W&B run
  may be created long after training (`rltrack sync` replays journals), when
  they would describe the sync, not the training; rltrack keeps git info in
  the run directory itself.
"""

from __future__ import annotations

import configparser
import errno
import functools
import netrc
import os
import re
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Sequence
from urllib.parse import urlsplit

from rltrack.sinks.base import RunContext
from rltrack.trackers.remote import EventId, Failure, Lines, Progress, RemoteBackend, Rules, SessionLost, check_names, check_tags, raised
from rltrack.trackers.wandb.files import HistoryFile, rows_in_files
from rltrack.trackers.wandb.rows import MEDIA_KINDS, RowMaker
from rltrack.core.events import Event
from rltrack.core.optional import ensure_installed, require

MODES = ("offline", "online", "disabled", "shared")
#: `finish(exit_code=...)` per final status; "killed" and anything else get 255.
EXIT_CODES = {"finished": 0, "failed": 1}
KILLED_EXIT_CODE = 255
#: Characters W&B refuses in a project name, and its longest.
_PROJECT_UNSAFE = re.compile(r"[/\\#?%:]")
MAX_PROJECT = 128
#: Seconds W&B may hold rows it took without storing any, its folder's disk
#: seen full meanwhile, before its session counts as lost (its writer process
#: stops for good when that disk fills) and a new session takes the rest from
#: the cursor. Were a healthy W&B taken for lost, that would cost only a new
#: session: nothing is doubled.
STALL = 20.0
#: Free bytes W&B's folder needs before a session is started: on a full disk
#: `wandb.init` starts a writer that stops at once, or fails and keeps its id.
MIN_FREE = 1 << 20


def wandb_project(task: str) -> str:
    """A task as a W&B project name."""
    return _PROJECT_UNSAFE.sub("_", task)[:MAX_PROJECT]


class DirNotWritable(OSError):
    """The W&B directory cannot take W&B's files: W&B would fall back, without a word, to the system's temporary directory."""


def _check_dir(dir: str) -> None:
    """`dir` can hold W&B's files: it is a writable directory, or the nearest
    directory above it that exists is (W&B creates the rest). A local look at
    `make_logger`; the agent looks again before `wandb.init`."""
    path = Path(dir).expanduser().absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    if not path.is_dir() or not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(
            f"dir = {dir!r} is not writable ({path} is not a writable directory): W&B would fall back to "
            f"{tempfile.gettempdir()}/wandb without a word, where neither `rltrack sync` nor `wandb sync` finds the run; "
            "choose a writable directory, or leave dir out (the run directory)"
        )


class WandbBackend(RemoteBackend):
    """`[backends.wandb] project, entity, group, name, mode, tags, dir, init_timeout`."""

    name = "wandb"
    #: W&B's writer process stores the rows it takes later; its `define_metric` requires a name, and it names
    #: the file of a text, image or video value after the value's key (rltrack.trackers.wandb.rows).
    rules = Rules(client_modules=("wandb",), named=True, file_named=MEDIA_KINDS, stores_later=True)

    def __init__(
        self,
        project: str | None = None,
        entity: str | None = None,
        group: str | None = None,
        name: str | None = None,
        mode: str = "offline",
        tags: Sequence[str] = (),
        dir: str | None = None,
        init_timeout: float = 90.0,
    ) -> None:
        self.settings = {"project": project, "entity": entity, "group": group, "name": name, "mode": mode, "tags": list(tags)}
        self.dir = dir
        self.init_timeout = float(init_timeout)
        self._wandb: Any = None  # the module, imported on the delivery thread
        self._run: Any = None
        self._rows: int | None = None  # history rows logged to the W&B run, earlier sessions included; None: not yet counted
        self._resume_at: int | None = None  # the position of the cursor delivery continues from
        self._skip = 0  # rows of what comes next that the W&B run already holds
        self._file: HistoryFile | None = None  # this session's `.wandb` file, read as W&B stores rows
        self._rows_before_file = 0  # rows the W&B run held before this session's file
        self._failed_id: str | None = None  # W&B keeps this id reserved in this process
        self._stored = (0, 0.0)  # rows stored, and since when (`time.monotonic()`): W&B's progress, see `_watch`
        self._disk_full = False  # W&B's folder's disk was seen full since W&B last stored a row

    @classmethod
    def validate(cls, settings: dict[str, Any], in_use: bool = False) -> None:
        mode, dir, init_timeout = settings["mode"], settings["dir"], settings["init_timeout"]
        if mode not in MODES:
            raise ValueError(f"mode = {mode!r} is not a W&B mode; use one of {', '.join(MODES)}")
        check_names(**{key: settings[key] for key in ("project", "entity", "group", "name", "dir")})
        if dir is not None:
            _check_dir(dir)
        check_tags(settings["tags"])
        if not isinstance(init_timeout, (int, float)) or init_timeout <= 0:
            raise ValueError(f"init_timeout = {init_timeout!r} must be a positive number of seconds")
        if in_use:
            _check_environment(mode)

    def target(self, run: RunContext) -> str:
        where = Path(self.dir).expanduser().resolve() if self.dir else "the run directory"
        project = self.settings["project"] or wandb_project(run.task)
        return f"{self.settings['mode']} {self.settings['entity'] or ''}/{project} group {self.settings['group'] or run.task} in {where}"

    def open(self, run: RunContext) -> None:
        super().open(run)
        self._dir = Path(self.dir).expanduser() if self.dir else run.run_dir
        self._maker = RowMaker(run, self.name)

    def deliver(self, events: list[Event], ids: list[EventId], *, lines: Lines | None = None, store_now: bool = False) -> Progress:
        """Logs a row per event (none: how far W&B has stored; W&B's writer
        stores what it took by itself, `store_now` asks nothing more of it)."""
        if events:
            self._deliver(events)
        return Progress(self._position(), self._durable_position())

    def _deliver(self, events: list[Event]) -> None:
        if self._run is None:
            self._run = self._init([e for e in events if e.kind == "hparams"])
        skip, done = self._skip, 0
        try:
            for event in events:
                try:
                    row = self._maker.row(event)
                except (ValueError, TypeError) as exc:  # W&B refuses this event: count it, keep going
                    self.run.report.count("dropped", f"{event.kind} event: {type(exc).__name__}: {exc}", section=self.name)
                    continue
                if row is None:
                    continue
                if skip > 0:
                    skip -= 1
                else:
                    self._log(row)
                done += 1
        except BaseException:  # the batch comes again: its first `done` rows are in the W&B run by then
            self._skip = max(self._skip, done)
            raise
        self._skip = skip

    def close(self, status: str) -> None:
        if self._run is not None:
            self._run.finish(exit_code=EXIT_CODES.get(status, KILLED_EXIT_CODE))
            self._run = None

    def judge(self, exc: Exception) -> Failure:
        if raised(exc, "AuthenticationError"):
            return Failure(fix="set a valid WANDB_API_KEY (or run `wandb login`) where the agent runs")
        if raised(exc, "UsageError"):
            return Failure(fix="fix the setting the error names")
        if isinstance(exc, DirNotWritable):
            return Failure(fix=f"make {self._dir} writable, or set [backends.wandb] dir to a writable directory (left out: the run directory)")
        return super().judge(exc)

    def _position(self) -> int:
        if self._rows is None:  # before `wandb.init`: what the saved run's files hold
            self._rows = rows_in_files(self._files_of(self.state.get("id")))
        return self._rows

    def _durable_position(self) -> int:
        if self._file is None:
            return self._position()
        try:
            stored = self._rows_before_file + self._file.count()
        except OSError:  # W&B moved or removed its file: nothing more is known to be stored
            return self._rows_before_file + self._file.rows
        self._watch(stored)
        return stored

    def _watch(self, stored: int) -> None:
        """Raises `SessionLost` (the session let go) when W&B has stored none
        of the rows it holds for `STALL` seconds and its folder's disk was
        seen full meanwhile (a W&B only slow, on a busy machine, keeps its session)."""
        now = time.monotonic()
        if stored >= self._position() or stored != self._stored[0]:
            self._stored, self._disk_full = (stored, now), False
            return
        self._disk_full = self._disk_full or _free_bytes(self._dir) < MIN_FREE
        if self._disk_full and now - self._stored[1] > STALL:
            waiting = self._position() - stored
            self._let_go()
            raise SessionLost(
                f"W&B stored none of the {waiting} rows it took for {STALL:.0f} s and the disk of {self._dir} filled "
                "meanwhile (W&B's writer stops for good then); a new W&B session takes them"
            )

    def _let_go(self) -> None:
        """Ends this session; the next `deliver` starts another, which counts the rows the run's files hold."""
        run, self._run, self._file, self._rows, self._skip = self._run, None, None, None, 0
        if run is not None:
            run.finish(exit_code=EXIT_CODES["failed"])

    def resume(self, position: int | None, state: dict[str, Any]) -> Progress:
        super().resume(position, state)
        self._resume_at = position
        if self._run is not None:
            self._skip_held()
        return Progress(self._position(), None)

    def _skip_held(self) -> None:
        """Rows the W&B run holds beyond the cursor's position are the first
        rows of what the cursor delivers next: they are skipped, not logged again."""
        if self._resume_at is None:
            return
        held = self._position() - self._resume_at
        if held < 0:  # the run's files hold less than was stored: removed by hand, or W&B lost them
            self.run.report.count("lost", "rows the W&B run's files no longer hold", -held, section=self.name)
        self._skip, self._resume_at = max(0, held), None

    def _log(self, row: dict[str, Any]) -> None:
        # the next row of the W&B run, earlier sessions included; in shared mode W&B ignores step= (warning) and numbers rows itself
        step = None if self.settings["mode"] == "shared" else self._position()
        # commit: stored now, not held until the next step. A media file named after a key too long for
        # the file system raises ENAMETOOLONG: delivery counts that event as refused (`refuses`).
        self._run.log(row, step=step, commit=True)
        self._rows = self._position() + 1

    # ---- one event ------------------------------------------------------

    def _init(self, hparams: list[Event]) -> Any:
        self._wandb = wandb = require("wandb", "wandb", "The wandb backend")
        _list_packages_once(wandb)
        _no_launch_inputs(wandb)
        try:
            self._dir.mkdir(parents=True, exist_ok=True)
        except OSError:
            pass  # said below, with the fix
        if self._dir.is_dir() and (free := _free_bytes(self._dir)) < MIN_FREE:
            raise OSError(errno.ENOSPC, f"{free} bytes free in {self._dir}: W&B's writer needs space to start; tried again later")
        if not os.access(self._dir, os.W_OK | os.R_OK | os.X_OK):
            raise DirNotWritable(
                f"{self._dir} is not writable here; W&B would write to {tempfile.gettempdir()}/wandb instead, where neither "
                "`rltrack sync` nor `wandb sync <run_dir>/wandb/offline-run-*` looks, readable by every user"
            )
        config: dict[str, Any] = {}
        for event in hparams:
            config.update(event.data)
        settings = wandb.Settings(
            init_timeout=self.init_timeout,
            console="off",
            x_disable_stats=True,
            x_disable_machine_info=True,
            disable_git=True,
            save_code=False,
            disable_job_creation=True,
        )
        run_id = self._run_id()
        resume = "allow" if run_id == self.state.get("id") else None  # a run an earlier session created
        if self.settings["mode"] == "offline":  # the saved run's earlier files (a new id has none), before this session's file exists
            self._position()
        try:
            run = wandb.init(
                **{k: v for k, v in self.settings.items() if k not in ("name", "project", "group")},
                project=self.settings["project"] or wandb_project(self.run.task),
                group=self.settings["group"] or self.run.task,
                name=self.settings["name"] or self.run.name,
                id=run_id,
                resume=resume,
                reinit="create_new",
                dir=str(self._dir),
                config=config,
                settings=settings,
            )
        except Exception:
            self._failed_id = run_id
            raise
        if self.settings["mode"] != "offline":
            self._rows = int(getattr(run, "starting_step", 0) or 0)
        self._rows_before_file = self._rows
        self._file = HistoryFile(Path(run.settings.sync_file))
        self._stored = (self._rows, time.monotonic())
        self.state = {**self.state, "id": run_id}
        self.save_state()  # before the first row: a kill then must not make the next session start another W&B run
        self._skip_held()
        self._maker.begin(wandb, run)
        return run

    def _files_of(self, run_id: str | None) -> list[Path]:
        """The offline `.wandb` files of W&B run `run_id` under `dir`, oldest
        first: `offline-run-<time>-<id>`, and `...-<id>-<n>` for a session
        started within the same second as an earlier one."""
        return [] if run_id is None else sorted(self._dir.glob(f"wandb/offline-run-*/run-{run_id}.wandb"))

    def _run_id(self) -> str:
        """The saved run's id, else a fresh one. A saved id whose `init` failed
        in this process cannot be retried here (W&B holds it as "in use")."""
        saved = self.state.get("id")
        if saved is not None and saved == self._failed_id:
            raise RuntimeError(
                f"wandb.init of W&B run {saved} failed earlier in this process, and W&B keeps the id reserved "
                f"until the process ends; deliver the rest with: rltrack sync {self.run.run_dir} --to {self.name}"
            )
        return str(saved or uuid.uuid4().hex[:16])


def _free_bytes(folder: Path) -> int:
    """Bytes free for this user on `folder`'s disk (as much as wanted when it cannot be said)."""
    try:
        stats = os.statvfs(folder)
    except OSError:
        return MIN_FREE
    return stats.f_bavail * stats.f_frsize


def _check_environment(mode: str) -> None:
    """What only this machine can tell: wandb installed, an API key where a mode needs one."""
    ensure_installed("wandb", "wandb", "The wandb backend")
    if mode in ("online", "shared") and not _has_api_key():
        raise ValueError(
            f'mode = "{mode}" needs a W&B API key and none is set: set WANDB_API_KEY (or run `wandb login`) in the environment '
            'of the training process, or use mode = "offline" and upload later with `wandb sync`'
        )


def _has_api_key() -> bool:
    """Whether W&B will find an API key, looked for where wandb looks,
    without importing it: the environment, the netrc entry of its server, its
    settings file. No network: whether the server takes the key is found by
    the first delivery."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    host = urlsplit(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname or ""
    for path in (os.environ.get("NETRC"), "~/.netrc", "~/_netrc"):
        try:
            if path and netrc.netrc(os.path.expanduser(path)).authenticators(host):
                return True
        except (OSError, netrc.NetrcParseError):
            continue
    config_dir = os.environ.get("WANDB_CONFIG_DIR") or os.path.join(os.environ.get("XDG_CONFIG_HOME") or "~/.config", "wandb")
    try:
        settings = configparser.ConfigParser()
        settings.read(os.path.join(os.path.expanduser(config_dir), "settings"))
        return bool(settings.get("default", "api_key", fallback=""))
    except configparser.Error:
        return False


def _list_packages_once(wandb: Any) -> None:
    """Makes wandb list the installed packages once per process. At each
    run's start wandb reads the metadata of every installed distribution for
    the run's requirements.txt (`wandb.util.working_set`): in an agent
    starting a sweep's runs that was a sixth of its CPU, for the same list
    each time (one process, one environment). Every run still gets the list."""
    util = wandb.util
    if getattr(util.working_set, "rltrack_once", False):
        return
    read = functools.cache(lambda original=util.working_set: tuple(original()))

    def working_set() -> Any:
        return iter(read())

    working_set.rltrack_once = True  # type: ignore[attr-defined]
    util.working_set = working_set


def _no_launch_inputs(wandb: Any) -> None:
    """Skips W&B Launch's inputs at `wandb.init`: W&B applies the inputs a
    Launch job staged in the same process, and rltrack's delivery runs in
    its own (the agent, `rltrack sync`), where none is ever staged. Looking
    imports W&B Launch and its API models: 0.6 s of CPU in an agent that holds
    MLflow's and trackio's modules (pydantic reads every model's docstrings
    through `inspect.getmodule`, which walks every module), a sixth of the
    agent's start, at each start."""
    run = getattr(getattr(wandb.sdk, "wandb_run", None), "Run", None)
    if run is not None and hasattr(run, "_detect_and_apply_job_inputs"):
        run._detect_and_apply_job_inputs = lambda self: None
