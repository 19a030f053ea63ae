"""TorchRL -> rltrack: `RLTrackLogger`, a `torchrl.record.loggers.Logger`.

TorchRL takes a logger object wherever it logs: its `Trainer` (and the
`PPOTrainer`, `SACTrainer`, ... built on it), the `Recorder` and
`LogValidationReward` hooks, `VideoRecorder`, BenchMARL's logger list. This
class is one more such logger, built like TorchRL's own:

    from rltrack.adapters.torchrl import RLTrackLogger
    logger = RLTrackLogger(exp_name="ppo_cartpole", config="rltrack.toml")
    trainer = PPOTrainer(..., logger=logger)

`exp_name` names the run (unless the config names it), `log_dir` (TorchRL's
second argument) is the run root (`run.root`) when given; `config` and the
config sections (`run=`, `backends=`, `filters=`) are those of
`rltrack.make_logger`; or pass `logger=` an rltrack `Logger` you made (it is
then left open by `close()`). TorchRL's `get_logger("tensorboard", ...)`
knows only its own classes by name: pass this object instead. It also runs as
TorchRL's process or Ray service (`service_backend="process"`): the keyword
arguments are then sent to that process, so give a config path or dict.

What each call becomes:

* `log_scalar(name, value, step)` and `log_metrics(...)` (TorchRL's base class
  converts the tensors, then calls `log_scalar` per key): one `scalars` value
  under TorchRL's own name (`loss_objective`, `r_training`), with its
  canonical twin (`learner/policy_loss_avg`, `CANONICAL` below) per
  `run.names`; `step` on the axis `step_axis` (`env_steps`: TorchRL's
  trainers log at collected frames). A value without a step takes the last
  steps given, as everywhere in rltrack;
* `log_video(name, video, step=, fps=)`: frames (T, C, H, W) or (N, T, C, H,
  W) as TorchRL's loggers take them, saved into the run directory as an
  animated PNG (a `video` event pointing at it);
* `log_histogram(name, data, step=)`: a `histogram` event of the values;
* `log_hparams(cfg)`: a dict, an OmegaConf/Hydra config (resolved to a
  container, as TorchRL's loggers do) or an `argparse.Namespace`, as `hparams`;
* `flush()` waits for the run directory, `close()` (TorchRL 0.14's `shutdown()`) ends the run.

What rltrack knows about TorchRL, as data: the axis its trainers' `step`
counts and the canonical (DI-engine) names of the keys its loss modules and
trainers log.

TorchRL's `Trainer` calls `logger.log_scalar(key, value, step=collected_frames)`
for the values of its hooks and loss modules (`loss_objective`,
`loss_critic`, `r_training`, `grad_norm_0`, ...): its `step` counts collected
environment frames. Its `r_training`/`r_evaluation` are per-step reward
means of a batch, not episode returns, so they get no `reward_mean` twin.
Bare names that any code logs (`loss` of DQN, `entropy`, `lr`) get none
either: the vocabulary also names the values of runs written without
rltrack (rltrack.runs), where such a name says nothing of TorchRL.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Mapping

from rltrack.adapters.on_access import subclass_on_access
from rltrack.adapters.sb3.media import save_video
from rltrack.core.events import Event
from rltrack.core.optional import installed_version
from rltrack.frameworks.canonical import by_namespace, names_mode, with_canonical_names
from rltrack.frameworks.library import Library
from rltrack.frameworks.stages import STEP_AXIS

SOURCE = "torchrl"

#: The axis of `step` in TorchRL's trainers (collected frames); the adapter's default.
TRAINER_STEP_AXIS = STEP_AXIS

#: TorchRL native key (as its loss modules and trainer hooks name it) -> canonical flat key.
CANONICAL: dict[str, str] = {
    "loss_objective": "learner/policy_loss_avg",  # PPO, A2C
    "loss_actor": "learner/policy_loss_avg",  # SAC, TD3, DDPG
    "loss_critic": "learner/value_loss_avg",  # PPO, A2C
    "loss_value": "learner/value_loss_avg",  # DDPG
    "loss_qvalue": "learner/critic_loss_avg",  # SAC, TD3, CQL
    "loss_entropy": "learner/entropy_loss_avg",  # PPO, A2C
    "loss_alpha": "learner/alpha_loss_avg",  # SAC
    "kl_approx": "learner/approx_kl_avg",
    "clip_fraction": "learner/clipfrac_avg",
}


#: TorchRL, through its `Logger` class (`RLTrackLogger`, below): the vocabulary of its loss modules and trainers.
LIBRARY = Library(adapter=True, canonical=CANONICAL)


class _Behaviour:
    """A TorchRL logger writing into one rltrack run; see the module docstring."""

    def __init__(
        self,
        exp_name: str = "",
        log_dir: str | Path | None = None,
        *,
        config: str | Path | Mapping[str, Any] | None = None,
        logger: Any = None,
        step_axis: str = TRAINER_STEP_AXIS,
        **sections: Any,
    ) -> None:
        self._given = logger
        self._config = config
        self._sections = sections
        self.step_axis = step_axis
        self._routes: dict[str, list[tuple[str, str]]] = {}
        self._closed = False
        super().__init__(exp_name=exp_name, log_dir=None if log_dir is None else str(log_dir))

    def _create_experiment(self) -> Any:
        """The rltrack `Logger` (TorchRL's `experiment`): the one given, or a new run."""
        if self._given is not None:
            return self._given
        from rltrack.training.config import load_config, make_logger

        run = dict(self._sections.pop("run", None) or {})
        named = load_config(self._config, run=run, **self._sections)["run"]
        if not named.get("name") and self.exp_name:
            run["name"] = self.exp_name
        if self.log_dir is not None and "root" not in run:
            run["root"] = self.log_dir
        logger = make_logger(self._config, run=run, **self._sections)
        logger.set_run_info({"framework": SOURCE, "torchrl_version": installed_version("torchrl")})
        return logger

    @property
    def run_dir(self) -> Path:
        return Path(self.experiment.run_dir)

    def log_scalar(self, name: str, value: float, step: int | None = None) -> None:
        steps = {} if step is None else {self.step_axis: int(step)}
        logger, now = self.experiment, time.time()
        for namespace, key in self._route(name):
            logger.emit(Event(now, {key: value}, "scalars", namespace, dict(steps), SOURCE, run=logger.name))

    def _route(self, name: str) -> list[tuple[str, str]]:
        """(namespace, key) of each name a TorchRL key is stored under, once per key."""
        found = self._routes.get(name)
        if found is None:
            grouped = by_namespace(with_canonical_names({name: None}, CANONICAL, names_mode(self.experiment)))
            found = self._routes[name] = [(namespace, key) for namespace, keys in grouped.items() for key in keys]
        return found

    def log_video(self, name: str, video: Any, step: int | None = None, **kwargs: Any) -> None:
        fps = kwargs.get("fps", 30)
        logger = self.experiment
        at = int(step) if step is not None else 0
        try:
            data = save_video(logger, name, video, fps, at)
        except Exception as exc:  # a logging call must never take training down
            logger.report.count("dropped", f"{name}: video could not be encoded: {type(exc).__name__}: {exc}", section=SOURCE)
            return
        steps = {self.step_axis: at} if step is not None else {}
        logger.emit(Event(time.time(), {name: data}, "video", "", steps, SOURCE, run=logger.name))

    def log_histogram(self, name: str, data: Any, **kwargs: Any) -> None:
        step, logger = kwargs.get("step"), self.experiment
        steps = {} if step is None else {self.step_axis: int(step)}
        logger.emit(Event(time.time(), {name: data}, "histogram", "", steps, SOURCE, run=logger.name))

    def log_hparams(self, cfg: Any) -> None:
        """A dict, an OmegaConf/Hydra config (resolved, as TorchRL's loggers do) or
        an object of attributes (an `argparse.Namespace`)."""
        if not isinstance(cfg, Mapping):
            cfg = _resolved(cfg)
        self.experiment.log_hparams(dict(cfg))

    def flush(self, timeout: float | None = None) -> None:
        self.experiment.flush(timeout)

    def close(self, timeout: float | None = None) -> None:
        """Ends the run (a `Logger` given to the constructor is only flushed);
        TorchRL 0.14's `shutdown` is the same, TorchRL 0.12 has neither."""
        if self._closed:
            return
        self._closed = True
        if self._given is None:
            self.experiment.close()
        else:
            self.experiment.flush(timeout)
        self._service_shutdown = True

    shutdown = close

    def __repr__(self) -> str:
        return f"RLTrackLogger(exp_name={self.exp_name!r}, run_dir={str(self.experiment.run_dir)!r})"


def _resolved(cfg: Any) -> Any:
    """An OmegaConf config as a container; another object as its attributes."""
    if type(cfg).__module__.startswith("omegaconf"):
        from omegaconf import OmegaConf  # present wherever such a config exists

        return OmegaConf.to_container(cfg, resolve=True)
    return vars(cfg)


__getattr__ = subclass_on_access(__name__, "RLTrackLogger", _Behaviour, "torchrl.record.loggers:Logger", "torchrl")


__all__ = ["CANONICAL", "RLTrackLogger"]
