"""The two ways Tune and RLlib results reach rltrack: `RLTrackCallback`, one
run per trial, and `log_result`, for a plain RLlib loop; and `record_episodes`,
the RLlib callback that hands over each finished episode (the package's
docstring, rltrack.adapters.tune, says what arrives in rltrack).

`RLTrackCallback` is built on Ray's `LoggerCallback` on first access
(rltrack.adapters.on_access), from the plain class `TrialLoggers`, so that
this module imports without Ray.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import threading
import time
import traceback
import weakref
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from rltrack.adapters.on_access import subclass_on_access
from rltrack.core.storage import join, uri_of
from rltrack.frameworks.canonical import names_mode
from rltrack.adapters.tune.keys import (
    DEFAULT_STORAGE_PATH,
    EPISODE_SERIES,
    SOURCE_RLLIB,
    SOURCE_TUNE,
    is_rllib_result,
)
from rltrack.adapters.tune.results import (
    RunState,
    is_mapping,
    result_events,
    result_steps,
    split_result,
)
from rltrack.training.logger import FLUSH_LIMIT

if TYPE_CHECKING:
    from rltrack.training.logger import Logger


def record_episodes(*, episode: Any, metrics_logger: Any, **kwargs: Any) -> None:
    """An RLlib `on_episode_end` callback: logs the finished episode's return and
    length (`env_runners/rltrack/episode_return`, `.../episode_length`), so the
    collector and evaluator blocks are computed from the individual episodes.
    The length is the episode's env step count `t` (`env_t` for multi-agent
    episodes), which holds across the chunks RLlib cuts episodes into; the
    return sums the earlier chunks (`prev_episode_chunks`) too."""
    chunks = [episode, *(kwargs.get("prev_episode_chunks") or ())]
    length = getattr(episode, "env_t", None)
    if length is None:
        length = episode.t
    folder, returns, lengths = EPISODE_SERIES
    metrics_logger.log_value((folder, returns), float(sum(c.get_return() for c in chunks)), reduce="item_series")
    metrics_logger.log_value((folder, lengths), int(length), reduce="item_series")


# ---- one result ---------------------------------------------------------------


def _state_for(logger: Any) -> RunState:
    return RunState(mode=names_mode(logger), run=str(getattr(logger, "name", "")))


def _send(logger: Any, state: RunState, result: Mapping[str, Any], *, hparams_from_result: bool) -> None:
    """Calling thread: bookkeeping, hyperparameters and steps now; the events
    from a shallow copy of the metrics on the pipeline thread (`result_events`)."""
    now = time.time()
    rllib = is_rllib_result(result)
    source = SOURCE_RLLIB if rllib else SOURCE_TUNE
    metrics, info, hparams = split_result(result, state.info)
    if hparams is not None and hparams_from_result and not state.hparams_logged:
        logger.log_hparams(hparams)
        state.hparams_logged = True
    steps = result_steps(metrics)
    if not state.framework_sent:
        info.setdefault("framework", source)
        state.framework_sent = True
    if info:
        logger.set_run_info(info)
    logger.emit_deferred(partial(result_events, now, metrics, steps, source, rllib, state))
    logger.dump(steps or None)


_LOG_RESULT_STATES: weakref.WeakKeyDictionary[Any, RunState] = weakref.WeakKeyDictionary()


def log_result(logger: Logger, result: Mapping[str, Any]) -> None:
    """Sends one result dict (`algo.train()`, or anything Tune would report) to `logger`.

    The result's `config` is logged as hyperparameters the first time this
    logger sees one; the rest is handled as the package docstring (rltrack.adapters.tune) says. Returns
    in tens of microseconds: the work is done on the logger's pipeline thread.
    """
    if not is_mapping(result):
        raise TypeError(f"log_result expects the result dict (e.g. algo.train()), got {type(result).__name__}")
    state = _LOG_RESULT_STATES.get(logger)
    if state is None:
        state = _LOG_RESULT_STATES[logger] = _state_for(logger)
    _send(logger, state, result, hparams_from_result=True)


# ---- the Tune callback ----------------------------------------------------------


@dataclass
class _Trial:
    logger: Logger
    state: RunState
    config: Any
    errors: int = 0


class TrialLoggers:
    """The behaviour of `RLTrackCallback`, without Ray's base class.

    `RLTrackCallback` is this class plus `ray.tune.logger.LoggerCallback`
    (built on first access, see the package docstring). `run_dirs` maps each
    trial id seen to its run directory; `loggers` the trials still open.
    """

    def __init__(self, config: Any = None, **overrides: Any) -> None:
        from rltrack.training.config import load_config

        self._config = load_config(config, **overrides)
        self._root = Path(self._config["run"]["root"]).expanduser().resolve()
        self._trials: dict[str, _Trial] = {}
        self.run_dirs: dict[str, Path] = {}
        #: Loggers closing on threads of their own (see `_close_id`), joined at the experiment's end.
        self._closing: list[threading.Thread] = []
        #: Per experiment folder, the runs of trials from before this callback (see `_earlier_run`).
        self._earlier: dict[Path, dict[str, Path]] = {}
        #: The trials' loggers closed so far: what the agent has not delivered at the experiment's end is said there, once.
        self._closed: list[Logger] = []

    @property
    def loggers(self) -> dict[str, Logger]:
        return {trial_id: t.logger for trial_id, t in self._trials.items()}

    # -- Tune's hooks (LoggerCallback's log_* methods and on_experiment_end) --

    def log_trial_start(self, trial: Any) -> None:
        self._guard(trial, "log_trial_start", self._open, trial)

    def log_trial_result(self, iteration: int, trial: Any, result: dict[str, Any]) -> None:
        self._guard(trial, "log_trial_result", self._result, trial, result)

    def log_trial_end(self, trial: Any, failed: bool = False) -> None:
        self._guard(trial, "log_trial_end", self._close, trial, "failed" if failed else "finished")

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        """Closes the runs of trials Tune did not end (an interrupted
        experiment), then waits for every trial's close: the journals, and the
        agent's delivery for at most `run.close_timeout` from now (all trials
        at once, not one after the other)."""
        by_id = {getattr(t, "trial_id", None): t for t in trials or []}
        for trial_id in list(self._trials):
            status = getattr(by_id.get(trial_id), "status", None)
            self._close_id(trial_id, {"TERMINATED": "finished", "ERROR": "failed"}.get(str(status), "killed"))
        journals = time.monotonic() + FLUSH_LIMIT  # the closes only complete the journals: they do not wait for the agent
        for closing in self._closing:
            closing.join(max(0.0, journals - time.monotonic()))
        self._closing = [closing for closing in self._closing if closing.is_alive()]
        timeout = self._config["run"]["close_timeout"]
        deadline = None if timeout is None else time.monotonic() + float(timeout)
        closed, self._closed = self._closed, []
        behind = {logger.run_dir: left for logger in closed if (left := logger.still_behind(deadline))}
        if behind:
            _say_left_behind(behind, len(closed), timeout)

    # -- pickling: Tuner pickles its run config; open loggers stay behind --

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_trials"] = {}
        state["_closing"] = []
        state["_earlier"] = {}
        state["_closed"] = []
        return state

    # -- the work --

    def _open(self, trial: Any) -> _Trial:
        entry = self._trials.get(trial.trial_id)
        if entry is not None:  # restarted after a pause or a recoverable failure
            return entry
        from rltrack.training.config import make_logger

        experiment = str(getattr(trial, "experiment_dir_name", None) or "tune")
        cfg = copy.deepcopy(self._config)
        group = cfg["run"]["name"] or experiment
        cfg["run"]["stores"] = str(Path(cfg["run"]["stores"] or self._root).expanduser().resolve())  # one store for every experiment
        cfg["run"]["root"] = str(self._root / group)
        cfg["run"]["name"] = _run_name(trial)
        cfg["run"]["task"] = cfg["run"]["task"] or experiment
        storage = _tune_storage(trial) if cfg["run"]["storage"] is None else cfg["run"]["storage"]
        cfg["run"]["storage"] = join(str(storage), group) if storage else storage
        folder = self._root / group
        logger = make_logger(cfg, resume=self._earlier_run(folder, trial.trial_id))
        self._earlier[folder][trial.trial_id] = logger.run_dir  # a trial Tune retries after a failure continues it too
        entry = self._trials[trial.trial_id] = _Trial(logger, _state_for(logger), trial.config)
        self.run_dirs[trial.trial_id] = logger.run_dir
        info = {
            "framework": SOURCE_TUNE,
            "trial_id": trial.trial_id,
            "trial_name": str(trial),
            "experiment": experiment,
            "experiment_tag": getattr(trial, "experiment_tag", None),
            "trainable_name": getattr(trial, "trainable_name", None),
            "trial_path": _trial_uri(trial),
        }
        entry.state.framework_sent = True
        logger.set_run_info(info)
        logger.log_hparams(trial.config or {})
        entry.state.hparams_logged = True
        return entry

    def _earlier_run(self, folder: Path, trial_id: str) -> Path | None:
        """This trial's run from before, when `Tuner.restore` restarts an
        interrupted or failed trial (under its trial id, not always under
        its name): the run directory in `folder` whose meta.json holds the
        trial id. The folder is read once per callback."""
        if folder not in self._earlier:
            self._earlier[folder] = found = {}
            for meta in sorted(folder.glob("*/meta.json")):
                try:
                    info = json.loads(meta.read_text(encoding="utf-8")).get("info") or {}
                except (OSError, ValueError):
                    continue
                if isinstance(info, dict) and isinstance(info.get("trial_id"), str):
                    found.setdefault(info["trial_id"], meta.parent)
        return self._earlier[folder].get(trial_id)

    def _result(self, trial: Any, result: dict[str, Any]) -> None:
        entry = self._trials.get(trial.trial_id) or self._open(trial)
        if trial.config is not entry.config:  # e.g. PBT gave the trial a new config
            if trial.config != entry.config:
                entry.logger.log_hparams(trial.config or {})
            entry.config = trial.config
        _send(entry.logger, entry.state, result, hparams_from_result=False)

    def _close(self, trial: Any, status: str) -> None:
        if trial.trial_id not in self._trials and status == "failed":
            self._open(trial)  # failed before it started: its run still says so
        self._close_id(trial.trial_id, status)

    def _close_id(self, trial_id: str, status: str) -> None:
        """Closes a trial's logger on a thread of its own: Tune calls this on
        its driver thread, which must not wait for a tracker (64 trials ending
        one after the other each waited up to close_timeout: 1.4x Tune's wall
        time). The thread is not a daemon, so the process finishes the
        journal before it exits. It does not wait for the agent, and says
        nothing of it: the experiment's end waits `close_timeout` for every
        trial at once and says once what is left (each trial said "not done
        at close" before, while the agent finished seconds later)."""
        entry = self._trials.pop(trial_id, None)
        if entry is not None:
            self._closed.append(entry.logger)
            closing = threading.Thread(target=entry.logger.close, kwargs={"status": status, "timeout": 0, "quiet": True}, name=f"rltrack-close-{trial_id}")
            closing.start()
            self._closing = [c for c in self._closing if c.is_alive()] + [closing]

    def _guard(self, trial: Any, hook: str, call: Any, *args: Any) -> None:
        """Runs a hook, `call(*args)`; an error in rltrack must not stop the
        experiment: it is printed once per trial and counted in the run's report.json."""
        try:
            call(*args)
        except Exception as exc:
            entry = self._trials.get(getattr(trial, "trial_id", None))
            reason = f"tune.{hook}: {type(exc).__name__}: {exc}"
            if entry is not None:
                entry.logger.report.count("errors", reason)
                entry.errors += 1
                if entry.errors > 1:
                    return
            print(f"rltrack: {reason} (trial {trial}; Tune continues)\n{traceback.format_exc()}", file=sys.stderr)


def _say_left_behind(behind: Mapping[Path, Mapping[str, str | None]], trials: int, timeout: float | None) -> None:
    """The one stderr line of a sweep whose agent had not delivered every trial when its wait ended."""
    trackers = sorted({name for left in behind.values() for name in left if name != "files"})
    errors = sorted({f"{name}: {error}" for left in behind.values() for name, error in left.items() if error})
    parent = Path(os.path.commonpath([str(run_dir) for run_dir in behind]))
    sync = " ".join(f"--to {name}" for name in trackers)
    print(
        f"rltrack: {len(behind)} of {trials} trials' runs not delivered when the experiment ended"
        + (f" and {timeout:g} s after" if timeout else "")
        + (f" ({'; '.join(errors[:3])})" if errors else "")
        + "; `rltrack status` shows what the agent still delivers, report.json of each run what is pending"
        + (f"; to finish now: for run in {parent}/*/; do rltrack sync \"$run\" {sync}; done" if trackers else ""),
        file=sys.stderr,
    )


def _run_name(trial: Any) -> str:
    name = str(trial)
    tag = getattr(trial, "experiment_tag", None)
    return (f"{name}_{tag}" if tag else name)[:130]


def _tune_storage(trial: Any) -> str | None:
    """Tune's `storage_path` as a URI (see `uri_of`), None when it is Tune's
    default on this machine (a sweep's results there are this machine's only)."""
    context = _safe_attr(trial, "storage")
    filesystem = getattr(context, "storage_filesystem", None)
    path = getattr(context, "storage_fs_path", None)
    if filesystem is None or not isinstance(path, str):
        return None
    if getattr(filesystem, "type_name", "") == "local" and Path(path).expanduser() == Path(DEFAULT_STORAGE_PATH).expanduser():
        return None
    return uri_of(filesystem, path)


def _trial_uri(trial: Any) -> Any:
    """Where Tune keeps the trial, as a URI when its storage is remote (Tune's `path` drops the scheme)."""
    path = _safe_attr(trial, "path")
    filesystem = getattr(_safe_attr(trial, "storage"), "storage_filesystem", None)
    return uri_of(filesystem, path) if filesystem is not None and isinstance(path, str) else path


def _safe_attr(obj: Any, name: str) -> Any:
    try:
        return getattr(obj, name)
    except Exception:
        return None


__getattr__ = subclass_on_access(
    __name__,
    "RLTrackCallback",
    TrialLoggers,
    "ray.tune.logger:LoggerCallback",
    "tune",
    doc="A `ray.tune.logger.LoggerCallback` that gives each trial its own rltrack run.\n\n"
    "`RLTrackCallback(config=None, **overrides)`: `config` and `overrides` as for\n"
    "`rltrack.make_logger`. See the `rltrack.adapters.tune` package docstring.",
)
