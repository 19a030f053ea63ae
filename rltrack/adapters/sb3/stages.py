"""DI-engine's stage blocks from a live SB3 model: what `RLTrackCallback` and `attach` record.

SB3 logs moving means; DI-engine's blocks (rltrack.frameworks.stages) need each stage's
own episodes, `train()` values, replay-buffer counts and evaluations. This
module hooks into the places SB3 hands them out and keeps them per rltrack
logger until SB3's own dump ends the stage: the steps' infos (fed by the
callback, or by a hook on the model's VecEnv under `attach`), the model's
logger after each `train()`, the replay buffer's write position, and each
`EvalCallback` evaluation. What SB3's values mean (the learner block's names)
is framework knowledge in rltrack.adapters.sb3.keys; the blocks' arithmetic is
rltrack.frameworks.stages; sending them is rltrack.adapters.blocks.
"""

from __future__ import annotations

import time
import weakref
from typing import TYPE_CHECKING, Any

from rltrack.frameworks import stages
from rltrack.adapters.blocks import emit_block
from rltrack.adapters.sb3.keys import learner_values

if TYPE_CHECKING:
    from rltrack.training.logger import Logger


class StageRecorder:
    """The raw data of the current collection stage, seen by `RLTrackCallback`
    at every step; turned into blocks by `rltrack.frameworks.stages` at SB3's own dumps.

    * collector: the episodes SB3's `Monitor` reports in each step's
      `infos[i]["episode"]` (`r`, `l`) since the last dump; `envstep_count` and
      `train_sample_count` = the timesteps since then (each is stored for
      training); `collect_time` = the time spent inside `collect_rollouts`.
    * learner: after each `train()` call (seen as a change of
      `model._n_updates`), its `train/*` values; at the dump their averages
      over the calls, named canonically (`train/loss` -> `total_loss_avg`,
      `train/learning_rate` -> `cur_lr_avg`, others `<leaf>_avg`).
    * buffer (off-policy), every `buffer_seconds`, in transitions as DI-engine
      counts them (an SB3 buffer row holds one transition per env, so rows
      are multiplied by `n_envs`): `pushed_in` (added, from the buffer's write
      position), `sampled_out` (gradient steps x `batch_size`), `removed`
      (overwritten), `current_have` (`replay_buffer.size() * n_envs`), at the
      env steps whose transitions the buffer holds (the callback sees a step
      before SB3 stores it: its table is at the previous step's
      `num_timesteps`) and at the gradient steps done (`train_iter`: SB3's
      `n_updates` now, the off-policy axis of the dumps too, not the last dump's). SB3's replay buffers keep no priorities, use counts or
      ages, so there is no sampling table.

    Across `learn()` calls the collector's totals follow SB3's own counters:
    a call with `reset_num_timesteps=True` restarts `num_timesteps` (the
    `env_steps` axis), so the totals restart with it and the episodes of the
    previous call's unfinished stage are dropped, as SB3 drops its own
    episode buffer; with `reset_num_timesteps=False` they carry on. A new
    model object (`PPO.load`) starts the totals at its `num_timesteps` and,
    off-policy, at its `_episode_num` (SB3's `time/episodes`, saved in the
    zip), so `total_envstep_count` equals `env_steps` throughout and
    `total_episode_count` equals SB3's `time/episodes` where SB3 counts
    episodes (on-policy it does not: the count starts at 0 there).
    """

    def __init__(self, logger: Logger, model: Any, buffer_seconds: float) -> None:
        self.logger = logger
        self.model = model
        self.writer: Any = None
        self.collector = _collector_stats(model, model.num_timesteps)
        self.learn_start = getattr(model, "start_time", None)
        self.learner = stages.LearnerAverages()
        self.rewards: list[float] = []
        self.lengths: list[float] = []
        self.stage_start = model.num_timesteps
        self.collect_time = 0.0
        self.rollout_started: float | None = None
        self.seen_updates = getattr(model, "_n_updates", 0)
        #: True once an RLTrackCallback in `learn()` feeds the steps (then the env observer of `attach` stands aside).
        self.fed_by_callback = False
        #: The namespaces whose canonical names the blocks give ("evaluator" once an EvalCallback is observed).
        self.namespaces = {"collector", "learner"}
        self.last_step: float | None = None  # the env observer's: when the previous step ended
        #: During an observed evaluation: the writer's dumps, held back until the evaluator block is sent (see `hold`).
        self.held: list[tuple[Any, dict[str, int]]] | None = None
        self.replay = getattr(model, "replay_buffer", None)
        self.throughput = None if self.replay is None else stages.BufferThroughput(buffer_seconds)
        if self.replay is not None:
            self.buffer_pos, self.buffer_size, self.buffer_updates = self.replay.pos, self.replay.size(), self.seen_updates
            self.buffer_envs = int(getattr(self.replay, "n_envs", 1))

    def steps(self) -> dict[str, int]:
        """The axes the writer gives SB3's own records now."""
        train_iter = None if self.writer is None else self.writer.train_iter
        return {"env_steps": self.model.num_timesteps} if train_iter is None else {"env_steps": self.model.num_timesteps, "train_iter": train_iter}

    def rollout_start(self) -> None:
        self._learner_values()
        self.rollout_started = time.perf_counter()

    def rollout_end(self) -> None:
        if self.rollout_started is not None:
            self.collect_time += time.perf_counter() - self.rollout_started
            self.rollout_started = None

    def step(self, infos: Any, stored_envsteps: int | None = None) -> None:
        """One step's infos; `stored_envsteps`: the env steps whose transitions
        the replay buffer holds now (default `num_timesteps`)."""
        if getattr(self.model, "start_time", None) != self.learn_start:
            self._new_learn_call()
        for info in infos or ():
            episode = info.get("episode") if isinstance(info, dict) else None
            if episode is not None:
                self.rewards.append(float(episode["r"]))
                self.lengths.append(float(episode["l"]))
        if self.throughput is not None:
            self._buffer_counts(self.model.num_timesteps if stored_envsteps is None else stored_envsteps)

    def _new_learn_call(self) -> None:
        """A `learn()` call began; if it reset SB3's `num_timesteps`, the collector's totals restart with it."""
        self.learn_start = getattr(self.model, "start_time", None)
        start = getattr(self.model, "_num_timesteps_at_start", self.model.num_timesteps)
        if start < self.stage_start:
            self.collector = _collector_stats(self.model, start)
            self.rewards, self.lengths = [], []
            self.stage_start = start
            self.collect_time = 0.0

    def observed_step(self, infos: Any) -> None:
        """A step seen by the env observer of `attach` (no callback in
        `learn()`): the collection time is the time between steps with no
        `train()` call between them, which is where `collect_rollouts` spends it."""
        now = time.perf_counter()
        trained = getattr(self.model, "_n_updates", 0) != self.seen_updates
        if trained:
            self._learner_values()
        elif self.last_step is not None:
            self.collect_time += now - self.last_step
        self.last_step = now
        self.step(infos)

    def _learner_values(self) -> None:
        updates = getattr(self.model, "_n_updates", 0)
        if updates == self.seen_updates:
            return
        self.seen_updates = updates
        self.learner.add(learner_values(self.model.logger.name_to_value))

    def _buffer_counts(self, envsteps: int) -> None:
        replay, throughput, envs = self.replay, self.throughput, self.buffer_envs
        assert replay is not None and throughput is not None
        pos, size, updates = replay.pos, replay.size(), getattr(self.model, "_n_updates", 0)
        pushed = (pos - self.buffer_pos) % replay.buffer_size  # rows; checked every step: never a whole buffer apart
        removed = pushed - (size - self.buffer_size)
        throughput.add(pushed_in=pushed * envs, sampled_out=(updates - self.buffer_updates) * self.model.batch_size, removed=removed * envs)
        self.buffer_pos, self.buffer_size, self.buffer_updates = pos, size, updates
        block = throughput.take(size * envs)
        if block is not None:
            emit_block(self.logger, "buffer", block, {"env_steps": envsteps, "train_iter": updates}, source="sb3", info_lines=[throughput.heading])

    def emit_stage(self, steps: dict[str, int]) -> None:
        """The collector block (and the learner block, if `train()` ran) of the
        stage that SB3's dump with `steps` ends; the writer's dump follows."""
        now = time.perf_counter()
        collect_time = self.collect_time + (now - self.rollout_started if self.rollout_started is not None else 0.0)
        envsteps = self.model.num_timesteps - self.stage_start
        block = self.collector.stage(
            episode_rewards=self.rewards, episode_lengths=self.lengths, envstep_count=envsteps, train_sample_count=envsteps, duration=collect_time
        )
        emit_block(self.logger, "collector", block, steps, source="sb3", dump=False)
        self.emit_learner(steps)
        self.rewards, self.lengths = [], []
        self.stage_start = self.model.num_timesteps
        self.collect_time = 0.0
        if self.rollout_started is not None:
            self.rollout_started = now

    def emit_learner(self, steps: dict[str, int]) -> None:
        """The learner block of the `train()` calls since the last one, if any:
        every SB3 dump that carries `train/` values (an `EvalCallback`'s too)
        carries it, so each learner table is a training iteration's result."""
        self._learner_values()
        if self.learner:
            emit_block(self.logger, "learner", self.learner.take(), steps, source="sb3", model=self.model.policy, dump=False)

    def hold(self) -> None:
        """An `EvalCallback` step begins: SB3's dump in it (`eval/mean_reward`,
        ...) is held back until `release`, so that the evaluator block, known
        only once the step is over (its `ckpt_name` is written after SB3's
        dump), comes first and both make one table, one block per evaluation."""
        self.held = []

    def release(self, evaluation: dict[str, Any] | None) -> None:
        """Sends the evaluator block of `evaluation` (the `emit_evaluation`
        arguments; None when the step evaluated nothing), then the held dumps."""
        held, self.held = self.held or [], None
        if evaluation is not None:
            self.emit_evaluation(**evaluation, steps=held[0][1] if held else None)
        for build, steps in held:
            self.logger.emit_deferred(build)
            self.logger.dump(steps)

    def emit_evaluation(
        self, rewards: list[float], lengths: list[float], env_ids: list[int], duration: float, ckpt_name: str | None,
        steps: dict[str, int] | None = None,
    ) -> None:  # fmt: skip
        """The evaluator block at `steps`, left open for SB3's held dump; at no given steps: now, and ended."""
        at = self.steps() if steps is None else steps
        block = stages.evaluator_block(
            episode_rewards=rewards, episode_lengths=lengths, duration=duration, train_iter=at.get("train_iter"), ckpt_name=ckpt_name
        )
        info = stages.evaluator_info_lines(rewards, env_ids)
        emit_block(self.logger, "evaluator", block, at, source="sb3", info_lines=info, dump=steps is None)


def _collector_stats(model: Any, envsteps: int) -> stages.CollectorStats:
    """Collector totals starting at `envsteps` and at SB3's own episode count
    (`_episode_num`: counted by off-policy algorithms, reset with `num_timesteps`, 0 on-policy)."""
    return stages.CollectorStats(envsteps=envsteps, episodes=int(getattr(model, "_episode_num", 0)))


#: The stage recorder of each rltrack logger (shared by the RLTrackCallbacks writing to it).
_RECORDERS: weakref.WeakKeyDictionary[Any, StageRecorder] = weakref.WeakKeyDictionary()
#: The checkpoint an RLTrackCallback wrote last for each rltrack logger, until an evaluation claims it.
LAST_CHECKPOINT: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def recorder_for(logger: Logger, model: Any, buffer_seconds: float) -> StageRecorder:
    """The stage recorder of `logger`, a new one when it has none or had one for another model."""
    recorder = _RECORDERS.get(logger)
    if recorder is None or recorder.model is not model:
        recorder = _RECORDERS[logger] = StageRecorder(logger, model, buffer_seconds)
    return recorder


def observe_evaluations(eval_callback: Any, logger: Logger) -> None:
    """Makes every evaluation of `eval_callback` (an SB3 `EvalCallback`) send an
    evaluator block: its per-episode returns and lengths are read from
    `evaluate_policy`'s locals through the callback hook EvalCallback passes it,
    the duration from the start of `_on_step` to the last evaluation step, and
    `ckpt_name` is the checkpoint an RLTrackCallback wrote during it (on a new
    best), else absent. Installed once per EvalCallback."""
    if getattr(eval_callback, "_rltrack_observed", False):
        return
    eval_callback._rltrack_observed = True
    recorder = _RECORDERS.get(logger)
    if recorder is not None:
        recorder.namespaces.add("evaluator")
    on_step, log_success = eval_callback._on_step, eval_callback._log_success_callback
    seen: dict[str, Any] = {}

    def capture(locals_: dict[str, Any], globals_: dict[str, Any]) -> None:
        log_success(locals_, globals_)
        seen["rewards"], seen["lengths"], seen["end"] = locals_["episode_rewards"], locals_["episode_lengths"], time.perf_counter()
        if locals_["done"] and (not locals_.get("is_monitor_wrapped") or "episode" in locals_["info"]):
            seen.setdefault("env_ids", []).append(int(locals_["i"]))

    def observed_on_step() -> bool:
        seen.clear()
        LAST_CHECKPOINT.pop(logger, None)
        start = time.perf_counter()
        recorder = _RECORDERS.get(logger)
        if recorder is not None:
            recorder.hold()
        evaluation = None
        try:
            result = on_step()
            if "rewards" in seen:
                evaluation = {
                    "rewards": [float(r) for r in seen["rewards"]], "lengths": [float(n) for n in seen["lengths"]],
                    "env_ids": seen.get("env_ids", []), "duration": seen["end"] - start, "ckpt_name": LAST_CHECKPOINT.pop(logger, None),
                }  # fmt: skip
        finally:
            if recorder is not None:
                recorder.release(evaluation)
        return bool(result)

    eval_callback._log_success_callback = capture
    eval_callback._on_step = observed_on_step


def eval_callbacks(callback: Any) -> list[Any]:
    """The EvalCallbacks in a tree of SB3 callbacks (CallbackList, EventCallback children)."""
    from stable_baselines3.common.callbacks import EvalCallback

    found, stack = [], [callback]
    while stack:
        item = stack.pop()
        if isinstance(item, EvalCallback):
            found.append(item)
        stack.extend(getattr(item, "callbacks", None) or ())
        stack.extend(c for c in (getattr(item, "callback", None), getattr(item, "callback_on_new_best", None)) if c is not None)
    return found
