"""Tianshou 2.x -> rltrack: `RLTrackLogger`, a `tianshou.utils.logger.BaseLogger`.

Tianshou's trainers take one logger (`OnPolicyTrainerParams(logger=...)`,
`OffPolicyTrainerParams(logger=...)`, ...) and call its `log_*_data`,
`save_data` and `restore_data`; this class is that logger:

    from rltrack.adapters.tianshou import RLTrackLogger
    logger = RLTrackLogger("rltrack.toml")               # or RLTrackLogger(run={"name": "ppo"}, backends=...)
    algorithm.run_training(OnPolicyTrainerParams(..., logger=logger))
    logger.finalize()

What a `write(step_type, step, data)` becomes: one `scalars` event per
namespace, at `step` on the axis the `step_type` names
(`CANONICAL`, below: `training/env_step` and `test/env_step` ->
`env_steps`, `update/update_step` -> `train_iter`, `info/epoch` -> `epoch`).
The keys are what `prepare_dict_for_logging` produced (Tianshou's own
flattening, that of its TensorBoard logger: `returns_stat/mean`,
`loss/mean`, ...), in the namespace of their scope, so each is stored under
the name Tianshou's TensorBoard logger gives it (`training/returns_stat/mean`);
canonical twins (`collector/reward_mean`, `evaluator/reward_mean`,
`learner/total_loss_avg`, ...) come beside them per `run.names`. Arrays
(with `exclude_arrays=False`) become histograms.

Resuming: `save_data` calls the trainer's `save_checkpoint_fn` at Tianshou's
`save_interval` (in epochs), copies the file it returns into the run's
`ckpt/` (`Logger.log_checkpoint`) and writes the counters as Tianshou's
TensorBoard logger does (`save/epoch`, `save/env_step`,
`save/gradient_step`). Build the logger of the next process with
`resume=<run id or directory>` and set the trainer's `resume_from_log=True`:
`restore_data` reads those counters back from the run's journal, and the run
goes on in the same directory and the same tracker runs.
`restore_logged_data(run_dir)` gives what a run logged, nested by tag as
Tianshou's TensorBoard logger gives it.

What rltrack knows about Tianshou 2.x, as data and pure functions: the step
axis each `step_type` of `BaseLogger.write(step_type, step, data)` names, and
the canonical (DI-engine) names of the keys its collectors, algorithms and
trainer log.

Tianshou's trainer writes four scopes (`tianshou.utils.logger.logger_base.DataScope`):
`training/env_step` (the training collector's `CollectStats`, at env steps),
`test/env_step` (the test collector's, at env steps), `update/update_step`
(the algorithm's `TrainingStats`, at update steps) and `info/epoch` (the
trainer's `InfoStats`, at epochs); its TensorBoard logger writes
`save/epoch`, `save/env_step`, `save/gradient_step` when it saves a
checkpoint. The keys are Tianshou's, flattened by its
`prepare_dict_for_logging` (`returns_stat/mean`, `loss/mean`, ...), and are
stored as its TensorBoard logger tags them: `<scope>/<key>`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Mapping

from rltrack.adapters.on_access import subclass_on_access
from rltrack.core.events import Event
from rltrack.core.optional import installed_version
from rltrack.frameworks.canonical import by_namespace, names_mode, with_canonical_names
from rltrack.frameworks.library import Library
from rltrack.frameworks.stages import ITER_AXIS, STEP_AXIS
from rltrack.journal import read_journal

SOURCE = "tianshou"

#: The step name of a `step_type` (`<scope>/<step name>`) -> rltrack's step axis.
STEP_AXES: dict[str, str] = {
    "env_step": STEP_AXIS,
    "update_step": ITER_AXIS,  # the trainer's update count (gradient steps for off-policy algorithms)
    "gradient_step": ITER_AXIS,
    "epoch": "epoch",
}

#: The namespace of the counters `save_data` writes (as Tianshou's TensorBoard logger's `save/...` tags).
SAVE_SCOPE = "save"
#: `save_data`'s counters: the key it writes each under, and its axis.
SAVE_KEYS: dict[str, str] = {"epoch": "epoch", "env_step": STEP_AXIS, "gradient_step": ITER_AXIS}


def step_axis(step_type: str) -> tuple[str, str]:
    """(scope, axis) of a `step_type` such as `training/env_step`; a step name
    rltrack does not know is kept as the axis name."""
    scope, _, name = step_type.partition("/")
    return scope, STEP_AXES.get(name, name or "step")


def _collect_stats(scope: str, namespace: str, duration: str) -> dict[str, str]:
    """The canonical names of one collector's `CollectStats` keys."""
    return {
        f"{scope}/returns_stat/mean": f"{namespace}/reward_mean",
        f"{scope}/returns_stat/std": f"{namespace}/reward_std",
        f"{scope}/returns_stat/max": f"{namespace}/reward_max",
        f"{scope}/returns_stat/min": f"{namespace}/reward_min",
        f"{scope}/lens_stat/mean": f"{namespace}/avg_envstep_per_episode",
        f"{scope}/n_collected_episodes": f"{namespace}/episode_count",
        f"{scope}/n_collected_steps": f"{namespace}/envstep_count",
        f"{scope}/collect_time": f"{namespace}/{duration}",
        f"{scope}/collect_speed": f"{namespace}/avg_envstep_per_sec",
    }


#: Tianshou native flat key (`<scope>/<key>`) -> canonical flat key.
CANONICAL: dict[str, str] = {
    **_collect_stats("training", "collector", "collect_time"),
    **_collect_stats("test", "evaluator", "evaluate_time"),
    "update/loss/mean": "learner/total_loss_avg",  # PPO, A2C, DQN, ...
    "update/actor_loss/mean": "learner/policy_loss_avg",  # PPO, SAC, TD3, DDPG
    "update/clip_loss/mean": "learner/policy_loss_avg",  # PPO before 2.0's rename
    "update/vf_loss/mean": "learner/value_loss_avg",  # PPO, A2C
    "update/ent_loss/mean": "learner/entropy_loss_avg",  # PPO, A2C
    "update/critic_loss/mean": "learner/critic_loss_avg",  # DDPG, TD3
    "update/critic1_loss/mean": "learner/critic_loss_avg",  # SAC
    "update/alpha_loss/mean": "learner/alpha_loss_avg",  # SAC with auto alpha
}


#: Tianshou 2's loggers (its TensorboardLogger too): `<scope>/<key>` at the scope's step.
LIBRARY = Library(
    packages=("tianshou",),
    adapter=True,
    stages={"training": ("collector", STEP_AXES["env_step"]), "test": ("evaluator", STEP_AXES["env_step"]),
            "update": ("learner", STEP_AXES["update_step"])},
    canonical=CANONICAL,
)  # fmt: skip


class _Behaviour:
    """A Tianshou logger writing into one rltrack run; see the module docstring.

    `config` and the sections (`run=`, `backends=`, `filters=`) are those of
    `rltrack.make_logger`, `resume` a run to continue; or pass `logger=` an
    rltrack `Logger` you made (then `finalize()` only flushes it). The
    intervals and `exclude_arrays` are Tianshou's."""

    def __init__(
        self,
        config: str | Path | Mapping[str, Any] | None = None,
        *,
        logger: Any = None,
        resume: str | Path | None = None,
        training_interval: int = 1000,
        test_interval: int = 1,
        update_interval: int = 1000,
        info_interval: int = 1,
        save_interval: int | None = None,
        exclude_arrays: bool = True,
        **sections: Any,
    ) -> None:
        super().__init__(training_interval, test_interval, update_interval, info_interval, save_interval, exclude_arrays)
        self.last_save_step = -1
        self._owned = logger is None
        if logger is None:
            from rltrack.training.config import make_logger

            logger = make_logger(config, resume=resume, **sections)
            logger.set_run_info({"framework": SOURCE, "tianshou_version": installed_version("tianshou")})
        self.logger = logger
        self._mode = names_mode(logger)

    def prepare_dict_for_logging(self, log_data: dict) -> dict[str, Any]:
        """Tianshou's own flattening and filtering (its TensorBoard logger's)."""
        from tianshou.utils.logger.tensorboard import TensorboardLogger

        return TensorboardLogger.prepare_dict_for_logging(self, log_data, exclude_arrays=self.exclude_arrays)

    def write(self, step_type: str, step: int, data: dict[str, Any]) -> None:
        scope, axis = step_axis(step_type)
        flat = {f"{scope}/{key}": value for key, value in data.items()}
        self._emit(by_namespace(with_canonical_names(flat, CANONICAL, self._mode)), {axis: int(step)})

    def _emit(self, grouped: dict[str, dict[str, Any]], steps: dict[str, int]) -> None:
        """One `scalars` event per namespace of `grouped` ({namespace: {key: value}})."""
        logger, now = self.logger, time.time()
        for namespace, values in grouped.items():
            logger.emit(Event(now, values, "scalars", namespace, dict(steps), SOURCE, run=logger.name))

    def save_data(
        self,
        epoch: int,
        env_step: int,
        update_step: int,
        save_checkpoint_fn: Callable[[int, int, int], str] | None = None,
    ) -> None:
        if self.save_interval is None or save_checkpoint_fn is None or epoch - self.last_save_step < self.save_interval:
            return
        self.last_save_step = epoch
        path = save_checkpoint_fn(epoch, env_step, update_step)
        if path is not None and Path(path).is_file():
            self.logger.log_checkpoint(path, iteration=epoch)
        counters = {"epoch": epoch, "env_step": env_step, "gradient_step": update_step}
        self._emit({SAVE_SCOPE: counters}, {SAVE_KEYS[key]: int(value) for key, value in counters.items()})

    def restore_data(self) -> tuple[int, int, int]:
        """(epoch, env_step, gradient_step) of the run's last `save_data`;
        zeros when it saved none."""
        self.logger.flush()
        saved: dict[str, Any] = {}
        try:
            for event in read_journal(self.logger.run_dir):
                if event.namespace == SAVE_SCOPE and event.kind == "scalars":
                    saved = event.data
        except FileNotFoundError:
            pass
        epoch, env_step, gradient_step = (int(saved.get(key, 0)) for key in SAVE_KEYS)
        self.last_save_step = self.last_log_test_step = self.last_log_info_step = epoch
        self.last_log_update_step = gradient_step
        self.last_log_training_step = env_step
        return epoch, env_step, gradient_step

    @staticmethod
    def restore_logged_data(log_path: str) -> dict[str, Any]:
        """What the run in `log_path` (a run directory) logged, as Tianshou's
        TensorBoard logger restores it: nested by the parts of each name, each
        a numpy array of its values in order."""
        import numpy as np

        series: dict[str, list[float]] = {}
        for event in read_journal(Path(log_path)):
            if event.kind == "scalars":
                for key, value in event.data.items():
                    series.setdefault(event.tag(key), []).append(value)
        restored: dict[str, Any] = {}
        for name, values in series.items():
            *parents, leaf = name.split("/")
            level = restored
            for part in parents:
                level = level.setdefault(part, {})
            level[leaf] = np.array(values, dtype=float)
        return restored

    def finalize(self) -> None:
        """Ends the run (a `Logger` given to the constructor is only flushed)."""
        if self._owned:
            self.logger.close()
        else:
            self.logger.flush()


__getattr__ = subclass_on_access(__name__, "RLTrackLogger", _Behaviour, "tianshou.utils.logger.logger_base:BaseLogger", "tianshou")


__all__ = ["CANONICAL", "RLTrackLogger"]
