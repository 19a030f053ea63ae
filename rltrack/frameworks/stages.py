"""The collector, evaluator, learner and buffer blocks DI-engine/LightZero users read.

DI-engine's serial pipeline logs one block per stage: the collector after a
collection, the evaluator after an evaluation (preceded by one `[INFO]` line
per finished episode), the learner per dump interval (its model printed once
before), the replay buffer's sampling and throughput tables. Every adapter
computes those blocks from raw per-episode data here, the same way, and sends
them with `emit_block` (rltrack.adapters.blocks), so the names and the
arithmetic are written once. This module is data and pure functions: it
knows nothing of a Logger.

Values a stage cannot provide are absent, never invented: no finished episode
means no `reward_*`, `each_reward` or per-episode averages; no known train
samples means no train-sample keys; no positive duration means no rates.
Standard deviations are population ones (ddof=0, as DI-engine's `np.std`);
plain Python (`math.fsum`), so the module needs nothing beyond the standard library.
`avg_time_per_episode` is the evaluation's duration divided by its episodes,
as the name says (DI-engine's code divides the other way round).

Step axes: blocks carry `{"env_steps": <env steps so far>, "train_iter":
<learner iterations so far>}` (`STEP_AXIS`, `ITER_AXIS`), the axes every
adapter already uses, `env_steps` first (the primary axis). The local backend
can write TensorBoard tags against either or both (`tb_axes`).

How values travel: a block is sent as one record split by kind, its parts
sharing one time, namespace and steps: the numbers as a `scalars` event (they
reach TensorBoard, progress.csv and every tracker), `each_reward` (a list) as a
`histogram` event, `ckpt_name` (a string) as a `text` event. The local
backend folds the parts of one record back into one table block, so the text
log shows `each_reward` (in the evaluator's table under DI-engine 0.5's name
`eval_episode_return`) and `ckpt_name` beside the numbers. Each block ends
with `Logger.dump(steps)`, so the text log gets exactly one table per stage
(tables are otherwise merged when records come faster than once a second).
The evaluator's episode lines travel as one `text` event under `INFO_KEY`
(one line per episode), the learner's model print as a `text` event under
`MODEL_KEY`; the local backend prints both as DI-engine does.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import PurePath
from typing import Any

from rltrack.core.events import Event

STEP_AXIS = "env_steps"
ITER_AXIS = "train_iter"

#: Text key of log lines the local backend prints as `[time][INFO] <line>`, one per line.
INFO_KEY = "INFO"
#: Text key of the learner's model structure, printed once per logger.
MODEL_KEY = "model"

#: The canonical keys of each block, in the order DI-engine prints them.
BLOCK_KEYS: dict[str, tuple[str, ...]] = {
    "collector": (  # DI-engine 0.5's sample and episode collectors merged; each_reward where they comment it out
        "episode_count", "envstep_count", "train_sample_count", "avg_envstep_per_episode", "avg_sample_per_episode",
        "avg_envstep_per_sec", "avg_train_sample_per_sec", "avg_episode_per_sec", "collect_time", "reward_mean",
        "reward_std", "reward_max", "reward_min", "total_envstep_count", "total_train_sample_count",
        "total_episode_count", "total_duration", "each_reward",
    ),
    "evaluator": (  # DI-engine 0.5's InteractionSerialEvaluator
        "train_iter", "ckpt_name", "episode_count", "envstep_count", "avg_envstep_per_episode", "evaluate_time",
        "avg_envstep_per_sec", "avg_time_per_episode", "reward_mean", "reward_std", "reward_max", "reward_min",
        "each_reward",
    ),
    "learner": ("cur_lr_avg", "total_loss_avg"),  # then each <loss>_avg
    "buffer": (
        "use_avg", "use_max", "priority_avg", "priority_max", "priority_min", "staleness_avg", "staleness_max",
        "pushed_in", "sampled_out", "removed", "current_have",
    ),
}


#: Block keys that count (episodes, env steps, samples): integers in every block, however a framework reports them.
COUNT_KEYS = frozenset((
    "episode_count", "envstep_count", "train_sample_count", "total_envstep_count", "total_train_sample_count", "total_episode_count",
))  # fmt: skip


def as_count(value: Any) -> Any:
    """A count a framework reports as a whole float (RLlib's `256.0`) as the int
    rltrack's own blocks hold (`256`); anything else as it is."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


#: The throughput table's keys; DI-engine plots them as `<buffer>_sec/<key>` against the table's number.
THROUGHPUT_KEYS = frozenset(("pushed_in", "sampled_out", "removed", "current_have"))


def is_throughput(namespace: str, keys: Iterable[str]) -> bool:
    """Whether a record is a replay buffer's throughput table."""
    return namespace == "buffer" and THROUGHPUT_KEYS.issuperset(keys)


#: DI-engine's evaluator reports its mean return twice, as `reward_mean` and as
#: this (text log and TensorBoard, the tag its users plot); the blocks hold the first.
RETURN_MEAN = "eval_episode_return_mean"


def with_return_mean(namespace: str, data: dict[str, Any]) -> dict[str, Any]:
    """An evaluator record's values with DI-engine's `RETURN_MEAN` after them,
    equal to their `reward_mean`; any other record's as they are."""
    if namespace != "evaluator" or "reward_mean" not in data:
        return data
    return {**data, RETURN_MEAN: data["reward_mean"]}


def is_collection(keys: Iterable[str]) -> bool:
    """Whether a collector table with these keys is a collection, to be
    printed as DI-engine's `collect end:` block: it holds a key of the
    collector block that describes one collection, rather than only values
    sent between collections (SB3's exploration rate at an evaluation's dump)
    or the running totals (`total_envstep_count`, the twin of the
    `time/total_timesteps` SB3's EvalCallback records), which must not read as one."""
    return not _COLLECTION_KEYS.isdisjoint(keys)


_COLLECTION_KEYS = frozenset(key for key in BLOCK_KEYS["collector"] if not key.startswith("total_"))


def _floats(values: Iterable[Any] | None) -> list[float] | None:
    return None if values is None else [float(v) for v in values]


def _reward_stats(rewards: list[float]) -> dict[str, Any]:
    """reward_mean, reward_std, reward_max, reward_min, each_reward; nothing for no episodes."""
    if not rewards:
        return {}
    return {
        "reward_mean": _mean(rewards),
        "reward_std": _std(rewards),
        "reward_max": max(rewards),
        "reward_min": min(rewards),
        "each_reward": list(rewards),
    }


def _mean(values: list[float]) -> float:
    return math.fsum(values) / len(values)


def _std(values: list[float]) -> float:
    mean = _mean(values)
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values))


def _check_lengths(rewards: list[float], lengths: list[float] | None) -> None:
    if lengths is not None and len(lengths) != len(rewards):
        raise ValueError(
            f"episode_lengths has {len(lengths)} entries but episode_rewards has {len(rewards)}; "
            "pass one length per finished episode, or episode_lengths=None when lengths are unknown"
        )


class CollectorStats:
    """Running totals of a collector; `stage(...)` turns one stage's raw data into its block.
    `envsteps` and `episodes`: the env steps (each a train sample) and the
    episodes collected before the first stage, e.g. by a resumed model; the
    totals count on from there."""

    def __init__(self, envsteps: int | None = None, episodes: int = 0) -> None:
        self.total_envstep_count: int | None = envsteps
        self.total_train_sample_count: int | None = envsteps
        self.total_episode_count = episodes
        self.total_duration: float | None = None

    def stage(
        self,
        *,
        episode_rewards: Sequence[float],
        episode_lengths: Sequence[float] | None = None,
        envstep_count: int | None = None,
        train_sample_count: int | None = None,
        duration: float | None = None,
    ) -> dict[str, Any]:
        """The collector block of one stage: the episodes that finished in it
        (their returns, and their lengths when known), the env steps and train
        samples collected in it, and its wall-clock duration in seconds.
        `avg_envstep_per_episode` is the finished episodes' mean length."""
        rewards = _floats(episode_rewards) or []
        lengths = _floats(episode_lengths)
        _check_lengths(rewards, lengths)
        episodes = len(rewards)
        self.total_episode_count += episodes
        block: dict[str, Any] = {"episode_count": episodes}
        if envstep_count is not None:
            block["envstep_count"] = int(envstep_count)
            self.total_envstep_count = (self.total_envstep_count or 0) + int(envstep_count)
        if train_sample_count is not None:
            block["train_sample_count"] = int(train_sample_count)
            self.total_train_sample_count = (self.total_train_sample_count or 0) + int(train_sample_count)
        if episodes and lengths is not None:
            block["avg_envstep_per_episode"] = _mean(lengths)
        if episodes and train_sample_count is not None:
            block["avg_sample_per_episode"] = int(train_sample_count) / episodes
        if duration is not None and duration > 0:
            if envstep_count is not None:
                block["avg_envstep_per_sec"] = int(envstep_count) / duration
            if train_sample_count is not None:
                block["avg_train_sample_per_sec"] = int(train_sample_count) / duration
            block["avg_episode_per_sec"] = episodes / duration
        if duration is not None:
            block["collect_time"] = float(duration)
            self.total_duration = (self.total_duration or 0.0) + float(duration)
        rewards_stats = _reward_stats(rewards)
        each_reward = rewards_stats.pop("each_reward", None)
        block.update(rewards_stats)
        if self.total_envstep_count is not None:
            block["total_envstep_count"] = self.total_envstep_count
        if self.total_train_sample_count is not None:
            block["total_train_sample_count"] = self.total_train_sample_count
        block["total_episode_count"] = self.total_episode_count
        if self.total_duration is not None:  # no stage said how long it took: unknown, not 0
            block["total_duration"] = self.total_duration
        if each_reward is not None:  # last, where DI-engine's collectors have it (commented out)
            block["each_reward"] = each_reward
        return block


def evaluator_block(
    *,
    episode_rewards: Sequence[float],
    episode_lengths: Sequence[float] | None = None,
    duration: float | None = None,
    train_iter: int | None = None,
    ckpt_name: str | None = None,
) -> dict[str, Any]:
    """The evaluator block of one evaluation: its episodes' returns and lengths,
    its duration in seconds, the learner iteration it evaluated and the
    checkpoint file written for it (absent when none was), by its file name
    (`iteration_7.pth.tar`, in `ckpt/`) as DI-engine names it."""
    rewards = _floats(episode_rewards) or []
    lengths = _floats(episode_lengths)
    _check_lengths(rewards, lengths)
    episodes = len(rewards)
    block: dict[str, Any] = {}
    if train_iter is not None:
        block["train_iter"] = int(train_iter)
    if ckpt_name is not None:
        block["ckpt_name"] = PurePath(str(ckpt_name)).name
    block["episode_count"] = episodes
    envsteps = None if lengths is None else int(sum(lengths))
    if envsteps is not None:
        block["envstep_count"] = envsteps
    if episodes and envsteps is not None:
        block["avg_envstep_per_episode"] = envsteps / episodes
    if duration is not None:
        block["evaluate_time"] = float(duration)
    if duration is not None and duration > 0 and envsteps is not None:
        block["avg_envstep_per_sec"] = envsteps / duration
    if duration is not None and episodes:
        block["avg_time_per_episode"] = float(duration) / episodes
    block.update(_reward_stats(rewards))
    return block


def evaluator_info_lines(episode_rewards: Sequence[float], env_ids: Sequence[int] | None = None) -> list[str]:
    """DI-engine's line per finished evaluation episode: its env, final reward
    and how many episodes have finished so far."""
    ids = list(env_ids) if env_ids is not None else [0] * len(episode_rewards)
    return [
        f"[EVALUATOR]env {env} finish episode, final reward: {float(reward):.4f}, current episode: {n}"
        for n, (env, reward) in enumerate(zip(ids, episode_rewards), start=1)
    ]


class LearnerAverages:
    """Averages each learner value over a dump interval: `add` per training
    iteration (e.g. `{"cur_lr": 3e-4, "total_loss": 0.5, "policy_loss": 0.1}`),
    `take` at the dump returns `{"cur_lr_avg": ..., "total_loss_avg": ...,
    "policy_loss_avg": ...}` and starts the next interval. None values are skipped."""

    def __init__(self) -> None:
        self._sums: dict[str, float] = {}
        self._counts: dict[str, int] = {}

    def add(self, values: Mapping[str, float | None]) -> None:
        for key, value in values.items():
            if value is None:
                continue
            self._sums[key] = self._sums.get(key, 0.0) + float(value)
            self._counts[key] = self._counts.get(key, 0) + 1

    def __bool__(self) -> bool:
        return bool(self._counts)

    def take(self) -> dict[str, float]:
        order = sorted(self._sums, key=lambda k: (k != "cur_lr", k != "total_loss"))
        block = {f"{key}_avg": self._sums[key] / self._counts[key] for key in order}
        self._sums, self._counts = {}, {}
        return block


def buffer_sampling_block(
    *,
    uses: Sequence[float] | None = None,
    priorities: Sequence[float] | None = None,
    staleness: Sequence[float] | None = None,
) -> dict[str, float]:
    """The sampling table over the samples drawn in a dump interval: how often
    each was used, their priorities and their staleness (learner iterations
    since they were pushed); each group only where the buffer provides it."""
    block: dict[str, float] = {}
    for prefix, values, stats in (
        ("use", uses, ("avg", "max")),
        ("priority", priorities, ("avg", "max", "min")),
        ("staleness", staleness, ("avg", "max")),
    ):
        if values is None or len(values) == 0:
            continue
        floats = [float(v) for v in values]
        computed = {"avg": _mean(floats), "max": max(floats), "min": min(floats)}
        block.update({f"{prefix}_{stat}": computed[stat] for stat in stats})
    return block


class BufferThroughput:
    """Counts pushes, samples and removals; `take` returns the throughput table
    (`pushed_in`, `sampled_out`, `removed` in the interval, `current_have` now)
    once every `seconds`, else None, and sets `heading`: DI-engine's line
    before that table, with the seconds it covers. A count never reported
    (None) is absent."""

    def __init__(self, seconds: float) -> None:
        if not seconds > 0:
            raise ValueError(f"buffer throughput interval seconds={seconds!r} must be > 0, e.g. 60")
        self.seconds = seconds
        self.heading = ""
        self._counts: dict[str, int] = {}
        self._since = time.monotonic()

    def add(self, *, pushed_in: int | None = None, sampled_out: int | None = None, removed: int | None = None) -> None:
        for key, value in (("pushed_in", pushed_in), ("sampled_out", sampled_out), ("removed", removed)):
            if value is not None:
                self._counts[key] = self._counts.get(key, 0) + int(value)

    def take(self, current_have: int | None, now: float | None = None) -> dict[str, int] | None:
        now = time.monotonic() if now is None else now
        if now - self._since < self.seconds:
            return None
        block = dict(self._counts)
        if current_have is not None:
            block["current_have"] = int(current_have)
        self._counts = {key: 0 for key in self._counts}
        self.heading = f"In the past {now - self._since:.1f} seconds, buffer statistics is as follows:"
        self._since = now
        return block


def block_events(
    namespace: str,
    block: Mapping[str, Any],
    steps: Mapping[str, int],
    now: float,
    run: str,
    *,
    source: str = "api",
    preaggregated: bool = False,
    info_lines: Sequence[str] = (),
    model_text: str | None = None,
) -> list[Event]:
    """The events of one stage's block, as `emit_block` (rltrack.adapters.blocks) sends them, without
    sending them: an adapter's build function returns these from the pipeline
    thread (`Logger.emit_deferred`), with `now` taken on the calling thread.
    `model_text` is the model's print, if it is to be sent with this block."""
    events: list[Event] = []

    def send(data: dict[str, Any], kind: str) -> None:
        if data:
            events.append(Event(now, data, kind, namespace, dict(steps), source, run=run, preaggregated=preaggregated))

    if model_text is not None:
        send({MODEL_KEY: model_text}, "text")
    send({INFO_KEY: "\n".join(info_lines)} if info_lines else {}, "text")
    numbers: dict[str, Any] = {}
    lists: dict[str, Any] = {}
    texts: dict[str, str] = {}
    for key, value in block.items():
        if isinstance(value, str):
            texts[key] = value
        elif isinstance(value, (list, tuple)):
            lists[key] = list(value)
        else:
            numbers[key] = value
    send(numbers, "scalars")  # the parts of one block share one time
    send(lists, "histogram")
    send(texts, "text")
    return events
