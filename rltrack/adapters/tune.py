"""Ray Tune / RLlib -> rltrack: one rltrack run per Tune trial, and RLlib result dicts as events.

Two ways in:

    # 1. a Tune callback: one run directory (and tracker run) per trial
    from rltrack.adapters.tune import RLTrackCallback
    tune.run(trainable, config=..., callbacks=[RLTrackCallback("rltrack.toml")])
    tune.Tuner(trainable, run_config=tune.RunConfig(callbacks=[RLTrackCallback()])).fit()

    # 2. a plain RLlib loop, no Tune
    logger = rltrack.make_logger(run={"name": "ppo_cartpole"})
    for _ in range(n):
        log_result(logger, algo.train())

`RLTrackCallback(config=None, **overrides)` takes what `rltrack.make_logger`
takes (a config path or dict, then whole-section overrides such as
`run={"names": "canonical"}`); the config is read and validated when the
callback is built, so a mistake fails before Tune starts. Each trial gets its
own Logger, made when the trial starts and closed when it ends:

* directory: `<run.root>/<experiment>/<trial name>_<experiment tag>`, where
  `<experiment>` is Tune's experiment directory name (`tune.run(name=...)`,
  `RunConfig(name=...)`, or Tune's generated one) unless `run.name` is set in
  the config, in which case `run.name` names that folder instead. A trial
  resumed by `Tuner.restore` gets a new directory beside the first (the core's
  rule for taken names);
* hyperparameters: the trial's config (`log_hparams`), again if a scheduler
  such as PBT changes it;
* `meta.json` "info": `framework`, `trial_id`, `trial_name`, `experiment`,
  `experiment_tag`, `trainable_name`, `trial_path` (where Tune keeps the
  trial) and, from each result, Tune's bookkeeping keys (`RUN_INFO_KEYS`);
* status: "finished" when the trial completes, "failed" when it errors,
  "killed" for trials still open when the experiment ends (interrupted runs).

What one result dict becomes (the same for both ways in):

* it is flattened with "/" (`{"a": {"b": 1}}` -> `a/b`), except `config`,
  which is not a metric: it goes to the hyperparameters (for `log_result`, from
  the first result that carries it);
* `RUN_INFO_KEYS` (`trial_id`, `hostname`, `pid`, `date`, `timestamp`, `done`,
  ...) go to the run's metadata via `Logger.set_run_info`, only when their value
  changed, never to metrics;
* steps: `train_iter` = `training_iteration` (a step axis, not also a
  metric); `env_steps` = the first of `ENV_STEP_KEYS` present
  (`env_runners/num_env_steps_sampled_lifetime` for RLlib's new API stack,
  `timesteps_total` for Tune trainables that report it), the primary axis
  when known; those keys stay metrics too;
* Tune's own durations `time_this_iter_s`, `time_total_s`, `time_since_restore`
  are `timing` events; so are RLlib keys with a `timers` path component or a
  last component ending in `_timer` (`timers/training_iteration`,
  `env_runners/env_step_timer`);
* every other key is a metric under its native name: namespace = its first
  path component (`env_runners`, `learners`, `evaluation`, ...; "" for
  top-level keys), so the tag `namespace/key` is exactly Tune's flat key. One
  `Event` per namespace and kind, then `Logger.dump(steps)`: one table and one
  progress.csv row per result. Keys that appear late (evaluation metrics) are
  simply new columns (the core's progress.csv keeps them);
* canonical names (`CANONICAL`, DI-engine vocabulary) are added beside the
  native ones or replace them, per the config's `run.names`. Modules other than
  RLlib's `default_policy` get `learner/<module>/<name>`
  (`learners/p0/total_loss` -> `learner/p0/total_loss_avg`);
* source = "rllib" when the result is an RLlib one (it has `env_runners` or
  `learners`), with `preaggregated=True` (RLlib reports smoothed, windowed
  values and lifetime sums) on all its events except the one holding Tune's
  own per-iteration durations; else "tune", not preaggregated;
* values: numbers, numpy/torch scalars, strings, sequences and arrays are passed
  as they are and sorted out on rltrack's pipeline thread (strings -> `text`,
  arrays and sequences of numbers -> `histogram`; what the core cannot convert,
  e.g. a list of strings, it drops and counts in report.json); objects of any
  other type are turned into their `str()` here, so they arrive as text rather
  than being dropped.

The calling thread (Tune's driver loop, or your training loop) walks the
nested dict once, looks each key up in a cache of decisions kept per path (a
key's flat name is built and classified once per process), and appends one
event per namespace and kind to the logger's queue; see bench/bench_tune.py
for what that costs.

Ray need not be installed to import this module. `RLTrackCallback` must be a
real subclass of `ray.tune.logger.LoggerCallback` (Tune calls the `on_trial_*`
hooks that base class defines, which route to `log_trial_*`; users and Tune
tell callbacks apart with `isinstance`), and that base class exists only when
Ray does, so the class is
built on first access through a module-level `__getattr__` (PEP 562): `from
rltrack.adapters.tune import RLTrackCallback` imports Ray then, and raises
`rltrack.MissingExtraError` naming the `tune` extra when Ray is missing. The
built class is stored in the module, so it is built once, pickles by reference
(Tuner pickles its callbacks) and is what `isinstance` and `type()` report.
The behaviour lives in the plain class `TrialLoggers`, which needs no Ray.
"""

from __future__ import annotations

import copy
import sys
import time
import traceback
import weakref
from collections import abc
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from rltrack.canonical import NAME_MODES, with_canonical_names
from rltrack.events import Event

if TYPE_CHECKING:
    from rltrack.pipeline import Logger

SOURCE_RLLIB = "rllib"
SOURCE_TUNE = "tune"

#: native flat key of RLlib's new API stack -> canonical flat key (DI-engine vocabulary).
#: Learner keys are given for the default module; other modules follow the same
#: table under `learner/<module>/` (see `canonical_name`).
CANONICAL: dict[str, str] = {
    "env_runners/episode_return_mean": "collector/reward_mean",
    "env_runners/episode_return_max": "collector/reward_max",
    "env_runners/episode_return_min": "collector/reward_min",
    "env_runners/episode_len_mean": "collector/avg_envstep_per_episode",
    "env_runners/num_episodes": "collector/episode_count",
    "env_runners/num_env_steps_sampled": "collector/envstep_count",
    "env_runners/num_episodes_lifetime": "collector/total_episode_count",
    "env_runners/num_env_steps_sampled_lifetime": "collector/total_envstep_count",
    "evaluation/env_runners/episode_return_mean": "evaluator/reward_mean",
    "evaluation/env_runners/episode_return_max": "evaluator/reward_max",
    "evaluation/env_runners/episode_return_min": "evaluator/reward_min",
    "evaluation/env_runners/episode_len_mean": "evaluator/avg_envstep_per_episode",
    "evaluation/env_runners/num_episodes": "evaluator/episode_count",
    "evaluation/env_runners/num_env_steps_sampled": "evaluator/envstep_count",
    "learners/default_policy/total_loss": "learner/total_loss_avg",
    "learners/default_policy/policy_loss": "learner/policy_loss_avg",
    "learners/default_policy/vf_loss": "learner/value_loss_avg",
    "learners/default_policy/qf_loss": "learner/critic_loss_avg",  # DQN, SAC
    "learners/default_policy/entropy": "learner/entropy_avg",
    "learners/default_policy/mean_kl_loss": "learner/approx_kl_avg",  # PPO
    "learners/default_policy/default_optimizer_learning_rate": "learner/cur_lr_avg",
}

_DEFAULT_MODULE = "default_policy"
_LEARNER_TAILS = {
    native[len(f"learners/{_DEFAULT_MODULE}/") :]: canonical[len("learner/") :]
    for native, canonical in CANONICAL.items()
    if native.startswith(f"learners/{_DEFAULT_MODULE}/")
}

#: Tune's (and RLlib's) bookkeeping: run metadata (meta.json "info"), not metrics.
RUN_INFO_KEYS = frozenset(
    {
        "trial_id",
        "experiment_id",
        "experiment_tag",
        "hostname",
        "node_ip",
        "pid",
        "date",
        "timestamp",
        "done",
        "should_checkpoint",
        "checkpoint_dir_name",
        "iterations_since_restore",
        "timesteps_since_restore",
        "__duplicate__",
        "__trial_info__",
    }
)

#: Tune's own durations (seconds): `timing` events.
TIMING_KEYS = frozenset({"time_this_iter_s", "time_total_s", "time_since_restore"})

#: The train_iter axis.
ITERATION_KEY = "training_iteration"

#: Candidates for the env_steps axis, first present wins (flat keys).
ENV_STEP_KEYS = ("env_runners/num_env_steps_sampled_lifetime", "num_env_steps_sampled_lifetime", "timesteps_total")

_RLLIB_MARKERS = ("env_runners", "learners")
_HPARAMS_KEY = "config"


def canonical_name(native: str) -> str | None:
    """The canonical flat name of an RLlib flat key, or None."""
    canonical = CANONICAL.get(native)
    if canonical is not None:
        return canonical
    if native.startswith("learners/"):
        parts = native.split("/")
        if len(parts) == 3 and parts[1] not in (_DEFAULT_MODULE, "__all_modules__"):
            tail = _LEARNER_TAILS.get(parts[2])
            if tail is not None:
                return f"learner/{parts[1]}/{tail}"
    return None


def is_rllib_result(result: Mapping[str, Any]) -> bool:
    """True for a result of RLlib's new API stack (it has `env_runners` or `learners`)."""
    return any(marker in result for marker in _RLLIB_MARKERS)


# ---- the per-key decisions, cached -------------------------------------------

_INFO = "info"
_STEP = "step"


def _classify(key: str, mode: str, rllib: bool) -> Any:
    """What a flat key becomes: `_INFO`, `_STEP`, or a tuple of
    ((namespace, kind, preaggregated), key-within-namespace) destinations.
    Every RLlib value is preaggregated except Tune's own durations."""
    if key in RUN_INFO_KEYS:
        return _INFO
    if key == ITERATION_KEY:
        return _STEP
    preaggregated = rllib and key not in TIMING_KEYS
    if key in TIMING_KEYS:
        kind = "timing"
    elif rllib:
        parts = key.split("/")
        kind = "timing" if "timers" in parts[:-1] or parts[-1].endswith("_timer") else "scalars"
    else:
        kind = "scalars"
    mapping = {}
    if rllib:
        canonical = canonical_name(key)
        if canonical is not None:
            mapping[key] = canonical
    out = []
    for name in with_canonical_names({key: None}, mapping, mode):
        namespace, _, short = name.partition("/") if "/" in name else ("", "", name)
        out.append(((namespace, kind, preaggregated), short))
    return tuple(out)


class _Node:
    """The cached decisions for the keys of one nested dict of a result (its
    path is fixed by where the node hangs), so a key's full flat name is built
    and classified once per process, not once per result."""

    __slots__ = ("children", "leaves")

    def __init__(self) -> None:
        self.children: dict[Any, Any] = {}
        self.leaves: dict[Any, Any] = {}


_HPARAMS = object()  # the root's `config` entry: hyperparameters, not metrics
_TREES: dict[tuple[str, bool], _Node] = {}
_CACHED = [0]
_CACHE_LIMIT = 100_000  # cached keys in all; beyond it (keys made of ever-new ids) decisions are recomputed


def _tree(mode: str, rllib: bool) -> _Node:
    root = _TREES.get((mode, rllib))
    if root is None:
        root = _TREES[(mode, rllib)] = _Node()
        root.children[_HPARAMS_KEY] = _HPARAMS
    return root


#: Value types the pipeline thread's normaliser takes as they are; grows with
#: the types seen (numpy and torch scalars and arrays, ...).
_PASS_TYPES: set[type] = {int, float, str, bool, type(None), list, tuple, bytes}


def _passes(value: Any) -> bool:
    kind = type(value)
    if isinstance(value, (int, float)) or any(hasattr(kind, a) for a in ("item", "tolist", "__array__")):
        _PASS_TYPES.add(kind)
        return True
    return False


def _is_mapping(value: Any) -> bool:
    kind = type(value)
    return kind is dict or (kind not in _PASS_TYPES and isinstance(value, abc.Mapping))


class _Walk:
    """One result's trip through the decision tree."""

    __slots__ = ("mode", "rllib", "known", "groups", "info", "hparams")

    def __init__(self, mode: str, rllib: bool, known: dict[str, Any]) -> None:
        self.mode = mode
        self.rllib = rllib
        self.known = known  # bookkeeping values already sent for this run
        self.groups: dict[tuple[str, str, bool], dict[str, Any]] = {}
        self.info: dict[str, Any] = {}
        self.hparams: Any = None

    def walk(self, mapping: Mapping[Any, Any], node: _Node, prefix: str) -> None:
        children, leaves, groups = node.children, node.leaves, self.groups
        for key, value in mapping.items():
            kind = type(value)
            if kind is dict or (kind not in _PASS_TYPES and isinstance(value, abc.Mapping)):
                child = children.get(key)
                if child is _HPARAMS:
                    self.hparams = value
                    continue
                if child is None:
                    child = _Node()
                    if _CACHED[0] < _CACHE_LIMIT:
                        children[key] = child
                        _CACHED[0] += 1
                self.walk(value, child, f"{prefix}{key}/")
                continue
            decision = leaves.get(key)
            if decision is None:
                decision = _classify(f"{prefix}{key}", self.mode, self.rllib)
                if _CACHED[0] < _CACHE_LIMIT:
                    leaves[key] = decision
                    _CACHED[0] += 1
            if decision is _INFO:
                if self.known.get(key, _MISSING) != value:
                    self.info[key] = self.known[key] = value
                continue
            if decision is _STEP:
                continue
            if kind not in _PASS_TYPES and not _passes(value):
                value = str(value)  # an object no tracker can take: keep its text
            for group, short in decision:
                data = groups.get(group)
                if data is None:
                    data = groups[group] = {}
                data[short] = value


_MISSING = object()
_ENV_STEP_PATHS = tuple(tuple(key.split("/")) for key in ENV_STEP_KEYS)


def _lookup(result: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = result
    for part in path:
        if not _is_mapping(value):
            return None
        value = value.get(part)
        if value is None:
            return None
    return value


# ---- one result ---------------------------------------------------------------


@dataclass
class _RunState:
    """What the adapter remembers about one rltrack Logger."""

    mode: str
    run: str
    info: dict[str, Any] = field(default_factory=dict)
    hparams_logged: bool = False
    framework_sent: bool = False


def _state_for(logger: Any) -> _RunState:
    config = getattr(logger, "config", None)
    run_cfg = config.get("run") if isinstance(config, dict) else None
    mode = run_cfg.get("names", "both") if isinstance(run_cfg, dict) else "both"
    return _RunState(mode=mode if mode in NAME_MODES else "both", run=str(getattr(logger, "name", "")))


def _send(logger: Any, state: _RunState, result: Mapping[str, Any], *, hparams_from_result: bool) -> None:
    now = time.time()
    rllib = is_rllib_result(result)
    source = SOURCE_RLLIB if rllib else SOURCE_TUNE
    walk = _Walk(state.mode, rllib, state.info)
    walk.walk(result, _tree(state.mode, rllib), "")
    if walk.hparams is not None and hparams_from_result and not state.hparams_logged:
        logger.log_hparams(walk.hparams)
        state.hparams_logged = True

    steps: dict[str, int] = {}
    for path in _ENV_STEP_PATHS:
        value = _lookup(result, path)
        if value is not None:
            try:
                steps["env_steps"] = int(value)
            except (TypeError, ValueError, OverflowError):
                continue
            break
    iteration = result.get(ITERATION_KEY)
    if iteration is not None:
        try:
            steps["train_iter"] = int(iteration)
        except (TypeError, ValueError, OverflowError):
            pass

    info = walk.info
    if not state.framework_sent:
        info.setdefault("framework", source)
        state.framework_sent = True
    if info:
        logger.set_run_info(info)
    run = state.run
    for (namespace, kind, preaggregated), data in walk.groups.items():
        logger.emit(Event(now, data, kind, namespace, dict(steps), source, "0", run, preaggregated))
    logger.dump(steps or None)


_LOG_RESULT_STATES: weakref.WeakKeyDictionary[Any, _RunState] = weakref.WeakKeyDictionary()


def log_result(logger: Logger, result: Mapping[str, Any]) -> None:
    """Sends one result dict (`algo.train()`, or anything Tune would report) to `logger`.

    The result's `config` is logged as hyperparameters the first time this
    logger sees one; the rest is handled as the module docstring says. Returns
    in tens of microseconds: the work is done on the logger's pipeline thread.
    """
    if not _is_mapping(result):
        raise TypeError(f"log_result expects the result dict (e.g. algo.train()), got {type(result).__name__}")
    state = _LOG_RESULT_STATES.get(logger)
    if state is None:
        state = _LOG_RESULT_STATES[logger] = _state_for(logger)
    _send(logger, state, result, hparams_from_result=True)


# ---- the Tune callback ----------------------------------------------------------


@dataclass
class _Trial:
    logger: Logger
    state: _RunState
    config: Any
    errors: int = 0


class TrialLoggers:
    """The behaviour of `RLTrackCallback`, without Ray's base class.

    `RLTrackCallback` is this class plus `ray.tune.logger.LoggerCallback`
    (built on first access, see the module docstring). `run_dirs` maps each
    trial id seen to its run directory; `loggers` the trials still open.
    """

    def __init__(self, config: Any = None, **overrides: Any) -> None:
        from rltrack.config import load_config

        self._config = load_config(config, **overrides)
        self._root = Path(self._config["run"]["root"]).expanduser().resolve()
        self._trials: dict[str, _Trial] = {}
        self.run_dirs: dict[str, Path] = {}

    @property
    def loggers(self) -> dict[str, Logger]:
        return {trial_id: t.logger for trial_id, t in self._trials.items()}

    # -- Tune's hooks (LoggerCallback's log_* methods and on_experiment_end) --

    def log_trial_start(self, trial: Any) -> None:
        self._guard(trial, "log_trial_start", lambda: self._open(trial))

    def log_trial_result(self, iteration: int, trial: Any, result: dict[str, Any]) -> None:
        self._guard(trial, "log_trial_result", lambda: self._result(trial, result))

    def log_trial_end(self, trial: Any, failed: bool = False) -> None:
        self._guard(trial, "log_trial_end", lambda: self._close(trial, "failed" if failed else "finished"))

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        """Closes the runs of trials Tune did not end (an interrupted experiment)."""
        by_id = {getattr(t, "trial_id", None): t for t in trials or []}
        for trial_id in list(self._trials):
            status = getattr(by_id.get(trial_id), "status", None)
            self._close_id(trial_id, {"TERMINATED": "finished", "ERROR": "failed"}.get(str(status), "killed"))

    # -- pickling: Tuner pickles its run config; open loggers stay behind --

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_trials"] = {}
        return state

    # -- the work --

    def _open(self, trial: Any) -> _Trial:
        entry = self._trials.get(trial.trial_id)
        if entry is not None:  # restarted after a pause or a recoverable failure
            return entry
        from rltrack.config import make_logger

        experiment = str(getattr(trial, "experiment_dir_name", None) or "tune")
        cfg = copy.deepcopy(self._config)
        group = cfg["run"]["name"] or experiment
        cfg["run"]["root"] = str(self._root / group)
        cfg["run"]["name"] = _run_name(trial)
        logger = make_logger(cfg)
        entry = self._trials[trial.trial_id] = _Trial(logger, _state_for(logger), trial.config)
        self.run_dirs[trial.trial_id] = logger.run_dir
        info = {
            "framework": SOURCE_TUNE,
            "trial_id": trial.trial_id,
            "trial_name": str(trial),
            "experiment": experiment,
            "experiment_tag": getattr(trial, "experiment_tag", None),
            "trainable_name": getattr(trial, "trainable_name", None),
            "trial_path": _safe_attr(trial, "path"),
        }
        entry.state.framework_sent = True
        logger.set_run_info(info)
        logger.log_hparams(trial.config or {})
        entry.state.hparams_logged = True
        return entry

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
        entry = self._trials.pop(trial_id, None)
        if entry is not None:
            entry.logger.close(status=status)

    def _guard(self, trial: Any, hook: str, call: Any) -> None:
        """Runs a hook; an error in rltrack must not stop the experiment: it is
        printed once per trial and counted in the run's report.json."""
        try:
            call()
        except Exception as exc:
            entry = self._trials.get(getattr(trial, "trial_id", None))
            reason = f"tune.{hook}: {type(exc).__name__}: {exc}"
            if entry is not None:
                entry.logger.report.count("errors", reason)
                entry.errors += 1
                if entry.errors > 1:
                    return
            print(f"rltrack: {reason} (trial {trial}; Tune continues)\n{traceback.format_exc()}", file=sys.stderr)


def _run_name(trial: Any) -> str:
    name = str(trial)
    tag = getattr(trial, "experiment_tag", None)
    return (f"{name}_{tag}" if tag else name)[:130]


def _safe_attr(obj: Any, name: str) -> Any:
    try:
        return getattr(obj, name)
    except Exception:
        return None


def _build_callback_class() -> type:
    from rltrack.optional import require

    tune_logger = require("ray.tune.logger", "tune", "rltrack.adapters.tune.RLTrackCallback")
    cls = type(
        "RLTrackCallback",
        (TrialLoggers, tune_logger.LoggerCallback),
        {
            "__module__": __name__,
            "__qualname__": "RLTrackCallback",
            "__doc__": "A `ray.tune.logger.LoggerCallback` that gives each trial its own rltrack run.\n\n"
            "`RLTrackCallback(config=None, **overrides)`: `config` and `overrides` as for\n"
            "`rltrack.make_logger`. See the `rltrack.adapters.tune` module docstring.",
        },
    )
    globals()["RLTrackCallback"] = cls
    return cls


def __getattr__(name: str) -> Any:
    if name == "RLTrackCallback":
        return _build_callback_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | {"RLTrackCallback"})


__all__ = [
    "CANONICAL",
    "ENV_STEP_KEYS",
    "RUN_INFO_KEYS",
    "TIMING_KEYS",
    "RLTrackCallback",
    "TrialLoggers",
    "canonical_name",
    "is_rllib_result",
    "log_result",
]
