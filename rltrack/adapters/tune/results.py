"""What one Ray Tune / RLlib result dict becomes in rltrack, as pure functions:
its bookkeeping and `config` taken out, its steps, its events (one per
namespace and kind) and DI-engine's stage blocks computed from it.

The callback (rltrack.adapters.tune.callback: `log_result`, the Tune
callback) hands each result to these functions; they know no Logger and
import no framework. The key names and the canonical vocabulary they use are
in rltrack.adapters.tune.keys.

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
* Tune's own duration of each iteration, `time_this_iter_s`, is a `timing`
  event (its running clocks `time_total_s`, `time_since_restore` are metrics); so are RLlib keys with a `timers` path component or a
  last component ending in `_timer` (`timers/training_iteration`,
  `env_runners/env_step_timer`);
* every other key is a metric under its native name: namespace = its first
  path component (`env_runners`, `learners`, `evaluation`, ...; "" for
  top-level keys), so the tag `namespace/key` is exactly Tune's flat key. One
  `Event` per namespace and kind, then `Logger.dump(steps)`: one table and one
  progress.csv row per result. Keys that appear late (evaluation metrics) are
  simply new columns (the core's progress.csv keeps them);
* canonical names (DI-engine vocabulary) come as DI-engine's stage blocks
  (`rltrack.frameworks.stages`), beside the native keys or replacing those that have a
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

The calling thread (Tune's driver loop, or your training loop) makes a
shallow copy of the result, takes the bookkeeping keys and `config` out of
it, reads the steps (`split_result`, `result_steps`) and hands the copy to
the logger's pipeline thread (`Logger.emit_deferred`). There the result is
walked once (`result_events`), each key looked up in a cache of decisions
kept per path (a key's flat name is built and classified once per run), into
one event per namespace and kind, and the stage blocks are computed; see
bench/bench_tune.py for what the calling thread pays. The nested dicts, lists and arrays are read there, milliseconds
later: do not change them after handing the result over (Tune and RLlib build
a new result, nested dicts included, every iteration).
"""

from __future__ import annotations

from collections import abc
from dataclasses import dataclass, field
from typing import Any, Mapping

from rltrack.core.events import Event
from rltrack.adapters.tune.keys import (
    CANONICAL,
    DEFAULT_MODULE,
    ENV_STEP_KEYS,
    EPISODE_SERIES,
    HPARAMS_KEY,
    ITERATION_KEY,
    LEARNER_TAILS,
    RUN_INFO_KEYS,
    TIMING_KEYS,
    canonical_name,
)
from rltrack.frameworks.stages import (
    BLOCK_KEYS,
    COUNT_KEYS,
    CollectorStats,
    as_count,
    block_events,
    evaluator_block,
    evaluator_info_lines,
)

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


def is_mapping(value: Any) -> bool:
    """True for a dict or other Mapping (checked cheaply for the value types already seen)."""
    kind = type(value)
    return kind is dict or (kind not in _PASS_TYPES and isinstance(value, abc.Mapping))


def split_result(result: Mapping[str, Any], known: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """Calling thread: (a shallow copy of the result without its bookkeeping and
    `config`, the bookkeeping values that changed since `known`, which is
    updated, the `config` or None). Only top-level keys are bookkeeping or `config`."""
    metrics = dict(result)
    info: dict[str, Any] = {}
    if not RUN_INFO_KEYS.isdisjoint(metrics):  # checked in C: e.g. a result from log_result
        for key in [key for key in metrics if key in RUN_INFO_KEYS]:
            value = metrics[key]
            if type(value) in _PASS_TYPES or not is_mapping(value):
                del metrics[key]
                if known.get(key, _MISSING) != value:
                    info[key] = known[key] = value
    hparams = metrics.get(HPARAMS_KEY)
    if hparams is not None and is_mapping(hparams):
        del metrics[HPARAMS_KEY]
    else:
        hparams = None
    return metrics, info, hparams


def result_steps(metrics: Mapping[str, Any]) -> dict[str, int]:
    """Calling thread: the steps of a result (`split_result`'s metrics):
    `env_steps` (`_env_steps`) and `train_iter`, when known."""
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
    return steps


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
    """One result's metrics (`split_result`) walked through a run's decision tree
    into event data per (namespace, kind, preaggregated)."""

    __slots__ = ("mode", "rllib", "state", "groups")

    def __init__(self, state: RunState, rllib: bool) -> None:
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
        if type(value) is not dict and not is_mapping(value):
            return None
        value = value.get(part)
        if value is None:
            return None
    return value

# ---- one result ---------------------------------------------------------------


@dataclass
class RunState:
    """What is remembered about one rltrack Logger's results: `info`,
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


def result_events(now: float, metrics: dict[str, Any], steps: dict[str, int], source: str, rllib: bool, state: RunState) -> list[Event]:
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


def _stage_blocks(result: Mapping[str, Any], state: RunState, train_iter: int | None) -> list[tuple[str, dict[str, Any], bool, list[str]]]:
    """(namespace, block, preaggregated, [INFO] lines) of one RLlib result."""
    blocks = []
    runners = result.get("env_runners")
    if is_mapping(runners):
        blocks.append(_episode_block("collector", runners, state, train_iter))
    evaluation = _lookup(result, ("evaluation", "env_runners"))
    if is_mapping(evaluation):
        seen = (evaluation.get("num_episodes_lifetime"), evaluation.get("num_env_steps_sampled_lifetime"))
        if seen == (None, None) or seen != state.evaluation_seen:  # else: the last evaluation, repeated
            state.evaluation_seen = seen
            blocks.append(_episode_block("evaluator", evaluation, state, train_iter))
    learner = _learner_block(result.get("learners"))
    if learner:
        blocks.append(("learner", learner, True, []))
    return blocks


def _episode_block(namespace: str, runners: Mapping[str, Any], state: RunState, train_iter: int | None) -> tuple[str, dict[str, Any], bool, list[str]]:
    folder, returns_key, lengths_key = EPISODE_SERIES
    series = runners.get(folder)
    returns = series.get(returns_key) if is_mapping(series) else None
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
            key = canonical[len(namespace) + 1:]
            value = runners[native[len(prefix):]]
            found[key] = as_count(value) if key in COUNT_KEYS else value
    if namespace == "evaluator" and train_iter is not None:
        found["train_iter"] = train_iter
    block = {key: found[key] for key in BLOCK_KEYS[namespace] if key in found}
    return namespace, block, True, []


def _learner_block(learners: Any) -> dict[str, Any]:
    """`learner` block keys of every module's values, `cur_lr_avg` and `total_loss_avg` first."""
    if not is_mapping(learners):
        return {}
    block: dict[str, Any] = {}
    for module, values in learners.items():
        if module == "__all_modules__" or not is_mapping(values):
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
