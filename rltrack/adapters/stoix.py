"""Stoix -> rltrack: `RLTrackLogger`, a logger Stoix instantiates from its Hydra
config like its own (`stoix.utils.logger.BaseLogger`).

Stoix builds its loggers in `_make_multi_logger`: for every entry of
`logger.loggers` that is `enabled`, `hydra.utils.instantiate(entry,
base_exp_path=..., unique_token=<a time stamp>, system_name=...)`, and calls
them through a `MultiLogger`: `log_config(config)` once, `log_dict(metrics,
t, t_eval, event)` for the actor, trainer and evaluator metrics (its
`StoixLogger` has reduced them: `{"episode_return": {"mean", "std", "min",
"max"}}` for acting and evaluation, means for training), `log_stat` for one
value and `stop()` at the end. This class is one more entry:

    # stoix/configs/logger/logger.yaml, under `loggers:`
    rltrack:
      _target_: rltrack.adapters.stoix.RLTrackLogger
      enabled: True
      config: rltrack.toml          # or any section as a mapping: run:, backends:, filters:

What each call becomes:

* `log_stat(key, value, step, eval_step, event)`, `log_dict(data, ...)`: each
  value under the name Stoix's own TensorBoard, W&B and Neptune loggers give it,
  `<event>/<key>` (`actor/episode_return/mean`, `trainer/total_loss`,
  `evaluator/episode_return/mean`; the event's value: actor, trainer,
  evaluator, absolute, misc), at `step` on the axis `env_steps` (Stoix's `t`,
  environment steps) and `eval_step` on the axis `t_eval` (the evaluation's
  number); jax and numpy scalars as numbers without a notice; the episode
  returns and losses also under their canonical names per `run.names`;
* `log_config(config)`: the config (a dict or an OmegaConf config, resolved)
  as typed hyperparameters;
* `stop()`: the run ends `finished` (a process that dies ends it `failed`).

The run is named `<system_name>_<unique_token>` (Stoix's system, `ff_ppo`,
and the time stamp it gives all its loggers) unless the config names it.
The class needs neither Stoix nor Hydra to import: Stoix calls its loggers
by name, so it takes any `LogEvent`-like enum (or its value as a string).

What rltrack knows about Stoix, as data: the names its loggers give values
(`<event>/<key>`: `actor/episode_return/mean`, `trainer/total_loss`, ...) and
their canonical (DI-engine) twins.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from rltrack.adapters.library_run import emit_values, open_run, typed_hparams
from rltrack.frameworks.library import Library
from rltrack.frameworks.stages import STEP_AXIS

SOURCE = "stoix"

#: Stoix's stored names -> canonical (DI-engine) names.
CANONICAL: dict[str, str] = {
    "actor/episode_return/mean": "collector/reward_mean",
    "actor/episode_length/mean": "collector/avg_envstep_per_episode",
    "evaluator/episode_return/mean": "evaluator/reward_mean",
    "evaluator/episode_return/std": "evaluator/reward_std",
    "evaluator/episode_length/mean": "evaluator/avg_envstep_per_episode",
    "trainer/total_loss": "learner/total_loss_avg",
    "trainer/actor_loss": "learner/policy_loss_avg",
    "trainer/value_loss": "learner/value_loss_avg",
    "trainer/q_loss": "learner/critic_loss_avg",
    "trainer/entropy_loss": "learner/entropy_loss_avg",
}

LIBRARY = Library(adapter=True, canonical=CANONICAL)
#: The axis of Stoix's `eval_step` (`t_eval`: the number of evaluations so far).
EVAL_AXIS = "t_eval"


class RLTrackLogger:
    """A Stoix logger writing into one rltrack run; see the module docstring."""

    def __init__(
        self,
        base_exp_path: str | Path,
        unique_token: str,
        system_name: str,
        config: str | Path | Mapping[str, Any] | None = None,
        **sections: Any,
    ) -> None:
        sections = {key: _container(value) for key, value in sections.items()}
        self.logger = open_run(_container(config), sections, framework=SOURCE, distribution="stoix", name=f"{system_name}_{unique_token}")
        self.logger.set_run_info({"stoix_system": system_name, "stoix_unique_token": unique_token, "stoix_base_exp_path": str(base_exp_path)})

    def log_stat(self, key: str, value: float, step: int, eval_step: int, event: Any) -> None:
        self.log_dict({key: value}, step, eval_step, event)

    def log_dict(self, data: Mapping[str, Any], step: int, eval_step: int, event: Any) -> None:
        """Every value of a (nested) dict, flattened with "/" as Stoix's `BaseLogger.log_dict` does."""
        prefix = getattr(event, "value", event)
        emit_values(self.logger, {str(prefix): dict(data)}, {STEP_AXIS: int(step), EVAL_AXIS: int(eval_step)}, SOURCE, CANONICAL)

    def log_config(self, config: Mapping[str, Any]) -> None:
        self.logger.log_hparams(typed_hparams(_container(config)))

    def stop(self) -> None:
        self.logger.close()

    @property
    def run_dir(self) -> Path:
        return Path(self.logger.run_dir)


def _container(value: Any) -> Any:
    """An OmegaConf config (Hydra hands over nested entries as `DictConfig`) as plain, resolved containers."""
    if type(value).__module__.startswith("omegaconf"):
        from omegaconf import OmegaConf  # present wherever such a config exists

        return OmegaConf.to_container(value, resolve=True)
    return value


__all__ = ["CANONICAL", "RLTrackLogger"]
