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
* canonical names (DI-engine vocabulary) come as DI-engine's stage blocks
  (`rltrack.stages`), beside the native keys or replacing those that have a
  canonical twin, per the config's `run.names` (`"native"`: no blocks):
  - `collector`, per iteration: from the individual episodes when the result
    has them (`record_episodes` below): `episode_count`, `reward_mean/std/
    max/min`, `each_reward`, `avg_envstep_per_episode`, `envstep_count` and
    running totals, not preaggregated. Without them, from RLlib's own
    statistics as `CANONICAL` maps them, marked `preaggregated`: RLlib's
    `episode_return_mean/min/max` and `episode_len_mean` are over its
    smoothing window (`metrics_num_episodes_for_smoothing`, 100 episodes), not
    over the iteration; `reward_std` and `each_reward` are then absent;
  - `evaluator`, only in iterations where an evaluation ran (RLlib repeats the
    last evaluation's metrics in the results in between; the evaluation's
    lifetime episode and step counts tell them apart): the same two ways, plus
    `train_iter` and one `[INFO]` line per episode when episodes are known;
  - `learner`: `cur_lr_avg`, `total_loss_avg`, `policy_loss_avg`, ... from
    each module's `learners/<module>/...` values (RLlib's means over the
    iteration's updates; `preaggregated`); modules other than
    `default_policy` get `<module>/<name>` (`learners/p0/total_loss` ->
    `learner/p0/total_loss_avg`). RLlib gives no collection or evaluation
    duration for the iteration (its timers are smoothed), so the rates,
    `collect_time` and `evaluate_time` are absent;
* source = "rllib" when the result is an RLlib one (it has `env_runners` or
  `learners`), with `preaggregated=True` (RLlib reports smoothed, windowed
  values and lifetime sums) on all its events except the one holding Tune's
  own per-iteration durations; else "tune", not preaggregated;
* values: numbers, numpy/torch scalars, strings, sequences and arrays are passed
  as they are and sorted out on rltrack's pipeline thread (strings -> `text`,
  arrays and sequences of numbers -> `histogram`; what the core cannot convert,
  e.g. a list of strings, it drops and counts in report.json); objects of any
  other type are turned into their `str()`, so they arrive as text rather
  than being dropped.

Individual episodes: RLlib's results hold only aggregates. Add the RLlib
callback `record_episodes` to the algorithm config
(`config.callbacks(on_episode_end=record_episodes)`): it logs each finished
episode's return and length to RLlib's own metrics as an `item_series`, which
RLlib hands over once per iteration under `env_runners/rltrack/` (and
`evaluation/env_runners/rltrack/`), from every env runner; the blocks are then
computed from those episodes.

The calling thread (Tune's driver loop, or your training loop) makes a
shallow copy of the result, takes the bookkeeping keys and `config` out of
it, reads the steps and hands the copy to the logger's pipeline thread
(`Logger.emit_deferred`). There the result is walked once, each key looked up
in a cache of decisions kept per path (a key's flat name is built and
classified once per run), into one event per namespace and kind, and the
stage blocks are computed; see bench/bench_tune.py for what the calling
thread pays. The nested dicts, lists and arrays are read there, milliseconds
later: do not change them after handing the result over (Tune and RLlib build
a new result, nested dicts included, every iteration).

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
import threading
import time
import traceback
import weakref
from collections import abc
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from rltrack.canonical import names_mode
from rltrack.events import Event
from rltrack.frameworks.tune import (
    CANONICAL,
    DEFAULT_MODULE,
    ENV_STEP_KEYS,
    HPARAMS_KEY,
    ITERATION_KEY,
    LEARNER_TAILS,
    RUN_INFO_KEYS,
    SOURCE_RLLIB,
    SOURCE_TUNE,
    TIMING_KEYS,
    canonical_name,
    is_rllib_result,
)
from rltrack.pipeline import FLUSH_LIMIT
from rltrack.stages import (
    BLOCK_KEYS,
    CollectorStats,
    block_events,
    evaluator_block,
    evaluator_info_lines,
)

if TYPE_CHECKING:
    from rltrack.pipeline import Logger

#: Where `record_episodes` puts each finished episode, inside RLlib's `env_runners` metrics.
EPISODE_SERIES = ("rltrack", "episode_return", "episode_length")


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


# ---- the calling thread's part -----------------------------------------------

#: Value types the pipeline thread's normaliser takes as they are; grows with
#: the types seen (numpy and torch scalars and arrays, ...), from any thread
#: (a set's `add` and `in` are atomic; what it holds is true for every run).
_PASS_TYPES: set[type] = {int, float, str, bool, type(None), list, tuple, bytes}
_MISSING = object()


def _passes(value: Any) -> bool:
    kind = type(value)
    if isinstance(value, (int, float)) or any(hasattr(kind, a) for a in ("item", "tolist", "__array__")):
        _PASS_TYPES.add(kind)
        return True
    return False


def _is_mapping(value: Any) -> bool:
    kind = type(value)
    return kind is dict or (kind not in _PASS_TYPES and isinstance(value, abc.Mapping))


def _split(result: Mapping[str, Any], known: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """Calling thread: (a shallow copy of the result without its bookkeeping and
    `config`, the bookkeeping values that changed since `known`, which is
    updated, the `config` or None). Only top-level keys are bookkeeping or `config`."""
    metrics = dict(result)
    info: dict[str, Any] = {}
    if not RUN_INFO_KEYS.isdisjoint(metrics):  # checked in C: e.g. a result from log_result
        for key in [key for key in metrics if key in RUN_INFO_KEYS]:
            value = metrics[key]
            if type(value) in _PASS_TYPES or not _is_mapping(value):
                del metrics[key]
                if known.get(key, _MISSING) != value:
                    info[key] = known[key] = value
    hparams = metrics.get(HPARAMS_KEY)
    if hparams is not None and _is_mapping(hparams):
        del metrics[HPARAMS_KEY]
    else:
        hparams = None
    return metrics, info, hparams


# ---- the per-key decisions, cached (pipeline thread) ---------------------------

_STEP = "step"


def _classify(key: str, mode: str, rllib: bool) -> Any:
    """What a flat key becomes: `_STEP`, or a tuple of
    ((namespace, kind, preaggregated), key-within-namespace) destinations
    (none for a key whose canonical twin replaces it). Every RLlib value is
    preaggregated except Tune's own durations."""
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
    if mode == "canonical" and rllib and canonical_name(key) is not None:
        return ()  # its canonical twin is in a stage block
    namespace, _, short = key.partition("/") if "/" in key else ("", "", key)
    return (((namespace, kind, preaggregated), short),)


class _Node:
    """The cached decisions for the keys of one nested dict of a result (its
    path is fixed by where the node hangs), so a key's full flat name is built
    and classified once per run, not once per result."""

    __slots__ = ("children", "leaves")

    def __init__(self) -> None:
        self.children: dict[Any, Any] = {}
        self.leaves: dict[Any, Any] = {}


_CACHE_LIMIT = 100_000  # cached keys per run; beyond it (keys made of ever-new ids) decisions are recomputed


class _Walk:
    """One result's metrics (`_split`) walked through a run's decision tree
    into event data per (namespace, kind, preaggregated)."""

    __slots__ = ("mode", "rllib", "state", "groups")

    def __init__(self, state: _RunState, rllib: bool) -> None:
        self.mode = state.mode
        self.rllib = rllib
        self.state = state
        self.groups: dict[tuple[str, str, bool], dict[str, Any]] = {}

    def walk(self, mapping: Mapping[Any, Any], node: _Node, prefix: str) -> None:
        children, leaves, groups, state = node.children, node.leaves, self.groups, self.state
        for key, value in mapping.items():
            kind = type(value)
            if kind is dict or (kind not in _PASS_TYPES and isinstance(value, abc.Mapping)):
                child = children.get(key)
                if child is None:
                    child = _Node()
                    if state.cached < _CACHE_LIMIT:
                        children[key] = child
                        state.cached += 1
                self.walk(value, child, f"{prefix}{key}/")
                continue
            decision = leaves.get(key)
            if decision is None:
                decision = _classify(f"{prefix}{key}", self.mode, self.rllib)
                if state.cached < _CACHE_LIMIT:
                    leaves[key] = decision
                    state.cached += 1
            if decision is _STEP:
                continue
            if kind not in _PASS_TYPES and not _passes(value):
                value = str(value)  # an object no tracker can take: keep its text
            for group, short in decision:
                data = groups.get(group)
                if data is None:
                    data = groups[group] = {}
                data[short] = value


_ENV_STEP_PATHS = tuple(tuple(key.split("/")) for key in ENV_STEP_KEYS)
_ENV_STEP_ROOTS = frozenset(path[0] for path in _ENV_STEP_PATHS)


def _env_steps(metrics: Mapping[str, Any]) -> int | None:
    """The first of `ENV_STEP_KEYS` in the result that is an integer."""
    if _ENV_STEP_ROOTS.isdisjoint(metrics):  # checked in C: e.g. a plain Tune result
        return None
    for path in _ENV_STEP_PATHS:
        value = _lookup(metrics, path)
        if value is not None:
            try:
                return int(value)
            except (TypeError, ValueError, OverflowError):
                continue
    return None


def _lookup(result: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = result
    for part in path:
        if type(value) is not dict and not _is_mapping(value):
            return None
        value = value.get(part)
        if value is None:
            return None
    return value


# ---- one result ---------------------------------------------------------------


@dataclass
class _RunState:
    """What the adapter remembers about one rltrack Logger: `info`,
    `hparams_logged` and `framework_sent` on the calling thread; the rest
    (decision trees, running totals) on the Logger's pipeline thread."""

    mode: str
    run: str
    info: dict[str, Any] = field(default_factory=dict)
    hparams_logged: bool = False
    framework_sent: bool = False
    collector: CollectorStats = field(default_factory=CollectorStats)
    evaluation_seen: Any = None  # the last evaluation's lifetime counts
    trees: dict[bool, _Node] = field(default_factory=dict)  # per rllib-or-not
    cached: int = 0  # decisions cached in the trees


def _state_for(logger: Any) -> _RunState:
    return _RunState(mode=names_mode(logger), run=str(getattr(logger, "name", "")))


def _send(logger: Any, state: _RunState, result: Mapping[str, Any], *, hparams_from_result: bool) -> None:
    """Calling thread: bookkeeping, hyperparameters and steps now; the events
    from a shallow copy of the metrics on the pipeline thread (`_events`)."""
    now = time.time()
    rllib = is_rllib_result(result)
    source = SOURCE_RLLIB if rllib else SOURCE_TUNE
    metrics, info, hparams = _split(result, state.info)
    if hparams is not None and hparams_from_result and not state.hparams_logged:
        logger.log_hparams(hparams)
        state.hparams_logged = True

    steps: dict[str, int] = {}
    env_steps = _env_steps(metrics)
    if env_steps is not None:
        steps["env_steps"] = env_steps
    iteration = metrics.get(ITERATION_KEY)
    if iteration is not None:
        try:
            steps["train_iter"] = int(iteration)
        except (TypeError, ValueError, OverflowError):
            pass

    if not state.framework_sent:
        info.setdefault("framework", source)
        state.framework_sent = True
    if info:
        logger.set_run_info(info)
    logger.emit_deferred(partial(_events, now, metrics, steps, source, rllib, state))
    logger.dump(steps or None)


def _events(now: float, metrics: dict[str, Any], steps: dict[str, int], source: str, rllib: bool, state: _RunState) -> list[Event]:
    """Pipeline thread: one event per namespace and kind, then the stage blocks."""
    root = state.trees.get(rllib)
    if root is None:
        root = state.trees[rllib] = _Node()
    walk = _Walk(state, rllib)
    walk.walk(metrics, root, "")
    run = state.run
    events = [
        Event(now, data, kind, namespace, dict(steps), source, "0", run, preaggregated)
        for (namespace, kind, preaggregated), data in walk.groups.items()
    ]
    if rllib and state.mode != "native":
        for namespace, block, preaggregated, info_lines in _stage_blocks(metrics, state, steps.get("train_iter")):
            events += block_events(namespace, block, steps, now, run, source=source, preaggregated=preaggregated, info_lines=info_lines)
    return events


# ---- the stage blocks ---------------------------------------------------------------


def _stage_blocks(result: Mapping[str, Any], state: _RunState, train_iter: int | None) -> list[tuple[str, dict[str, Any], bool, list[str]]]:
    """(namespace, block, preaggregated, [INFO] lines) of one RLlib result."""
    blocks = []
    runners = result.get("env_runners")
    if _is_mapping(runners):
        blocks.append(_episode_block("collector", runners, state, train_iter))
    evaluation = _lookup(result, ("evaluation", "env_runners"))
    if _is_mapping(evaluation):
        seen = (evaluation.get("num_episodes_lifetime"), evaluation.get("num_env_steps_sampled_lifetime"))
        if seen == (None, None) or seen != state.evaluation_seen:  # else: the last evaluation, repeated
            state.evaluation_seen = seen
            blocks.append(_episode_block("evaluator", evaluation, state, train_iter))
    learner = _learner_block(result.get("learners"))
    if learner:
        blocks.append(("learner", learner, True, []))
    return blocks


def _episode_block(namespace: str, runners: Mapping[str, Any], state: _RunState, train_iter: int | None) -> tuple[str, dict[str, Any], bool, list[str]]:
    folder, returns_key, lengths_key = EPISODE_SERIES
    series = runners.get(folder)
    returns = series.get(returns_key) if _is_mapping(series) else None
    if isinstance(returns, (list, tuple)):
        lengths = series.get(lengths_key)
        lengths = list(lengths) if isinstance(lengths, (list, tuple)) and len(lengths) == len(returns) else None
        if namespace == "collector":
            envsteps = _int(runners.get("num_env_steps_sampled"))
            return namespace, state.collector.stage(episode_rewards=returns, episode_lengths=lengths, envstep_count=envsteps), False, []
        block = evaluator_block(episode_rewards=returns, episode_lengths=lengths, train_iter=train_iter)
        return namespace, block, False, evaluator_info_lines(returns)
    prefix = "env_runners/" if namespace == "collector" else "evaluation/env_runners/"
    found = {}
    for native, canonical in CANONICAL.items():
        if native.startswith(prefix) and canonical.startswith(f"{namespace}/") and native[len(prefix):] in runners:
            found[canonical[len(namespace) + 1:]] = runners[native[len(prefix):]]
    if namespace == "evaluator" and train_iter is not None:
        found["train_iter"] = train_iter
    block = {key: found[key] for key in BLOCK_KEYS[namespace] if key in found}
    return namespace, block, True, []


def _learner_block(learners: Any) -> dict[str, Any]:
    """`learner` block keys of every module's values, `cur_lr_avg` and `total_loss_avg` first."""
    if not _is_mapping(learners):
        return {}
    block: dict[str, Any] = {}
    for module, values in learners.items():
        if module == "__all_modules__" or not _is_mapping(values):
            continue
        prefix = "" if module == DEFAULT_MODULE else f"{module}/"
        for tail, name in LEARNER_TAILS.items():
            if tail in values:
                block[f"{prefix}{name}"] = values[tail]
    return dict(sorted(block.items(), key=lambda item: (not item[0].endswith("cur_lr_avg"), not item[0].endswith("total_loss_avg"))))


def _int(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError, OverflowError):
        return None


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
        #: Loggers closing on threads of their own (see `_close_id`), joined at the experiment's end.
        self._closing: list[threading.Thread] = []

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
        timeout = self._config["run"]["close_timeout"]
        deadline = None if timeout is None else time.monotonic() + float(timeout) + FLUSH_LIMIT
        for closing in self._closing:
            closing.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        self._closing = [closing for closing in self._closing if closing.is_alive()]

    # -- pickling: Tuner pickles its run config; open loggers stay behind --

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_trials"] = {}
        state["_closing"] = []
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
        """Closes a trial's logger on a thread of its own: Tune calls this on
        its driver thread, which must not wait for a tracker (64 trials ending
        one after the other each waited up to close_timeout: 1.4x Tune's wall
        time). The thread is not a daemon, so the process finishes the
        journal before it exits."""
        entry = self._trials.pop(trial_id, None)
        if entry is not None:
            closing = threading.Thread(target=entry.logger.close, kwargs={"status": status}, name=f"rltrack-close-{trial_id}")
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
    "record_episodes",
]
