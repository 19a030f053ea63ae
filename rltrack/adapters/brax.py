"""Brax -> rltrack: `ProgressFn`, the `progress_fn(step, metrics)` Brax's trainers
call, and `train`, which runs a Brax `train` function into one rltrack run with
its keyword arguments as hyperparameters.

Brax's trainers (`brax.training.agents.ppo.train`, `sac`, `es`, ...) report only
through `progress_fn(step, metrics)`: the evaluation metrics (`eval/episode_reward`,
`eval/sps`, ...) with the training metrics (`training/policy_loss`, ...) at
each evaluation, and, with `log_training_metrics=True`, the episode metrics
(`episode/sum_reward`, ...) in separate calls, sometimes at the same step.
Its values are jax arrays, numpy scalars and floats. Brax has no logger
object and no experiment name; its configuration is the keyword arguments of
`train`, usually bound with `functools.partial`:

    import functools
    from brax.training.agents.ppo import train as ppo
    from rltrack.adapters import brax as rltrack_brax

    train_fn = functools.partial(ppo.train, num_timesteps=1_000_000, num_envs=2048, learning_rate=3e-4, seed=1)
    make_policy, params, metrics = rltrack_brax.train(train_fn, environment=env, config="rltrack.toml")

`train(train_fn, *, config=None, logger=None, **kwargs)` records the
partial's keywords and `kwargs` as hyperparameters (typed: numbers, bools,
strings as they are; a function by its qualified name, an environment by its
class name), calls `train_fn(**kwargs, progress_fn=...)` (a `progress_fn`
of yours among `kwargs` is called too, after rltrack's), and ends the run
`finished`, or `failed` when training raises (the exception goes on).
`ProgressFn(config, hparams=...)` is the callable alone, for code that
calls Brax's `train` itself; `close()` ends its run.

Each call becomes one event per namespace at `step` on the axis `env_steps`
(Brax's `step` counts environment steps across all environments), keys as
Brax writes them; `eval/episode_reward` also as `evaluator/reward_mean`,
`episode/sum_reward` as `collector/reward_mean` and the losses as their
canonical names, per `run.names`.

What rltrack knows about Brax 0.14 (`brax.training.agents.*.train`), as data:
the names its `progress_fn(step, metrics)` metrics carry
(`eval/episode_reward`, `training/...`, `episode/...`) and their canonical
(DI-engine) twins.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Callable, Mapping

from rltrack.adapters.library_run import emit_values, open_run, typed_hparams
from rltrack.frameworks.library import Library
from rltrack.frameworks.stages import STEP_AXIS

SOURCE = "brax"

#: Brax's metric names -> canonical (DI-engine) names.
CANONICAL: dict[str, str] = {
    "eval/episode_reward": "evaluator/reward_mean",
    "eval/episode_reward_std": "evaluator/reward_std",
    "episode/sum_reward": "collector/reward_mean",
    "training/total_loss": "learner/total_loss_avg",
    "training/policy_loss": "learner/policy_loss_avg",
    "training/v_loss": "learner/value_loss_avg",
    "training/entropy_loss": "learner/entropy_loss_avg",
    "training/kl_mean": "learner/approx_kl_avg",
}

LIBRARY = Library(adapter=True, canonical=CANONICAL)


#: `train` keyword arguments that are callbacks, not settings.
CALLBACKS = frozenset({"progress_fn", "policy_params_fn", "wrap_env_fn", "randomization_fn"})


class ProgressFn:
    """A Brax `progress_fn` writing into one rltrack run; see the module docstring.

    `config` and the sections (`run=`, `backends=`, `filters=`) are those of
    `rltrack.make_logger`; or pass `logger=` an rltrack `Logger` you made (then
    `close()` leaves it open). `hparams` are recorded at once."""

    def __init__(
        self,
        config: str | Path | Mapping[str, Any] | None = None,
        *,
        hparams: Mapping[str, Any] | None = None,
        logger: Any = None,
        step_axis: str = STEP_AXIS,
        **sections: Any,
    ) -> None:
        self._owned = logger is None
        self.logger = open_run(config, sections, framework=SOURCE) if logger is None else logger
        self.step_axis = step_axis
        if hparams:
            self.log_hparams(hparams)

    def log_hparams(self, hparams: Mapping[str, Any]) -> None:
        self.logger.log_hparams(typed_hparams(hparams))

    def __call__(self, step: int, metrics: Mapping[str, Any]) -> None:
        emit_values(self.logger, metrics, {self.step_axis: int(step)}, SOURCE, CANONICAL)

    @property
    def run_dir(self) -> Path:
        return Path(self.logger.run_dir)

    def close(self, status: str = "finished") -> None:
        if self._owned:
            self.logger.close(status=status)
        else:
            self.logger.flush()


def train(train_fn: Callable[..., Any], *, config: str | Path | Mapping[str, Any] | None = None, logger: Any = None, **kwargs: Any) -> Any:
    """Runs `train_fn(**kwargs)` (a Brax `train` or a `functools.partial` of
    one) into one rltrack run; returns what it returns. See the module docstring."""
    progress = ProgressFn(config, hparams=train_hparams(train_fn, kwargs), logger=logger)
    theirs = kwargs.pop("progress_fn", None)

    def both(step: int, metrics: Mapping[str, Any]) -> None:
        progress(step, metrics)
        if theirs is not None:
            theirs(step, metrics)

    try:
        result = train_fn(**kwargs, progress_fn=both)
    except BaseException:
        progress.close(status="failed")
        raise
    progress.close()
    return result


def train_hparams(train_fn: Callable[..., Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of one Brax training: the keywords bound in `train_fn` (a
    `functools.partial`, nested ones included) and `kwargs`, callbacks left
    out, typed as `typed_hparams` says; the trainer as `algorithm` (`ppo`)."""
    bound: dict[str, Any] = {}
    func = train_fn
    while isinstance(func, functools.partial):
        bound = {**func.keywords, **bound}
        func = func.func
    module = getattr(func, "__module__", "") or ""
    settings = {key: value for key, value in {**bound, **kwargs}.items() if key not in CALLBACKS}
    algorithm = {"algorithm": module.split(".")[-2]} if module.startswith("brax.training.agents.") else {}
    return {**algorithm, **typed_hparams(settings)}


__all__ = ["CANONICAL", "ProgressFn", "train", "train_hparams"]
