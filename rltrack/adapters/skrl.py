"""skrl -> rltrack: `attach(trainer)`, one run per agent, from its own writer.

skrl's agents write their scalars (`Reward / Total reward (mean)`, `Loss /
Policy loss`, the environments' `Info / ...` and `Episode_Reward/...`
infos the trainer tracks) through skrl's `SummaryWriter.add_scalar(*, tag,
value, timestep)`, which `Agent.init` creates (the trainer calls it when it
is built). `attach` wraps that one writer object's `add_scalar`:

    from rltrack.adapters.skrl import attach
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 10_000})
    logger = attach(trainer, backends={"use": ["local", "mlflow"]})
    trainer.train()

* each value is written to skrl's event file as before, and into the run
  under skrl's tag as written (namespace ""), with its canonical twin
  (`collector/reward_mean` ...) per `run.names`, at `env_steps` = `timestep`
  × the agent's environments (transitions, as CleanRL and SB3 count them)
  and skrl's `timestep` beside it (`steps`, below);
* the agent's and the trainer's configurations as typed hyperparameters
  (merged as skrl's own W&B setup merges them, with `num_envs`);
* the run is named `experiment.experiment_name`, else the last part of the
  agent's `experiment_dir`, unless the config names it; `config` and the
  sections (`run=`, `backends=`, `filters=`) are `rltrack.make_logger`'s, or
  pass `logger=` an rltrack `Logger` you made;
* it ends at `logger.close()` or at the process's end (`failed` when training raised).

Under `rltrack run` (every TensorBoard writer of the process hooked), the
attached writer's events bypass that hook: its values reach one run, this one, once.
With several simultaneous agents, each gets a run of its own (a list of
loggers is returned), at its scope's number of environments.

What rltrack knows about skrl (2.x), as data and pure functions: what its
`timestep` counts, its configuration as hyperparameters, its run name.

skrl's trainers step all `num_envs` environments at once and count one
`timestep` per such vector step; its agents write TensorBoard scalars at that
`timestep`. rltrack's `env_steps` counts transitions across all environments
(as CleanRL's `global_step` and SB3's `num_timesteps` do), so a skrl value at
`timestep` t is at `env_steps` t × `num_envs`, with skrl's own count beside it
on the axis `timestep`: skrl and CleanRL on one CartPole share one x axis.

The agent's configuration (`agent.cfg`, a dataclass in skrl 2) and the
trainer's (`trainer.cfg`) are merged as skrl's own W&B setup merges them
(`{**agent_cfg, **trainer_cfg}`), with `num_envs`. The canonical names of
its tags are `CANONICAL` (`Reward / Total reward (mean)` ->
`collector/reward_mean`, ...).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import time
from functools import partial
from pathlib import Path
from typing import Any, Mapping

from rltrack.core.events import Event
from rltrack.core.optional import installed_version
from rltrack.frameworks.canonical import names_mode
from rltrack.frameworks.hparams import plain
from rltrack.frameworks.library import Library
from rltrack.frameworks.stages import STEP_AXIS

SOURCE = "skrl"
#: skrl's own count of vector steps, kept beside `env_steps`.
TIMESTEP_AXIS = "timestep"

#: Native tag -> canonical flat key.
CANONICAL: dict[str, str] = {
    "Reward / Total reward (mean)": "collector/reward_mean",
    "Reward / Total reward (max)": "collector/reward_max",
    "Reward / Total reward (min)": "collector/reward_min",
    "Episode / Total timesteps (mean)": "collector/avg_envstep_per_episode",
    "Loss / Policy loss": "learner/policy_loss_avg",
    "Loss / Value loss": "learner/value_loss_avg",
    "Loss / Entropy loss": "learner/entropy_loss_avg",
    "Loss / Critic loss": "learner/critic_loss_avg",
    "Learning / Learning rate": "learner/cur_lr_avg",
}

#: skrl's writer: `<Group> / <key>` at skrl's `timestep`, the environments' infos too.
LIBRARY = Library(
    packages=("skrl",),
    adapter=True,
    stages={"Reward": ("collector", STEP_AXIS), "Episode": ("collector", STEP_AXIS), "Loss": ("learner", STEP_AXIS),
            "Policy": ("learner", STEP_AXIS), "Learning": ("learner", STEP_AXIS), "Stats": ("time", STEP_AXIS)},
    canonical=CANONICAL,
    axis=STEP_AXIS,
    separator=" / ",
)  # fmt: skip


def steps(timestep: int, num_envs: int) -> dict[str, int]:
    """The axes of a value skrl writes at `timestep`: transitions first (`env_steps`), then skrl's count."""
    return {STEP_AXIS: int(timestep) * num_envs, TIMESTEP_AXIS: int(timestep)}


def config_dict(cfg: Any) -> dict[str, Any]:
    """A skrl configuration (a dataclass in skrl 2, a dict before) as a plain dict."""
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        return dataclasses.asdict(cfg)
    return dict(cfg or {})


def hparams(agent_cfg: Any, trainer_cfg: Any, num_envs: int) -> dict[str, Any]:
    """The agent's and the trainer's configuration merged as skrl's W&B setup
    merges them, and `num_envs`; classes and functions (a learning-rate
    scheduler, a preprocessor, a reward shaper) as their dotted names."""
    merged = {**config_dict(agent_cfg), **config_dict(trainer_cfg), "num_envs": int(num_envs)}
    return plain(merged)


def run_name(agent_cfg: Any, experiment_dir: str) -> str:
    """`experiment.experiment_name`, else the last part of the agent's
    `experiment_dir` (skrl's default, `<date>_<time>_<Agent>`, as its W&B setup names the run)."""
    experiment = config_dict(agent_cfg).get("experiment") or {}
    return str(experiment.get("experiment_name") or os.path.basename(os.path.normpath(experiment_dir)))


def attach(trainer: Any, logger: Any = None, *, config: str | Path | Mapping[str, Any] | None = None, **sections: Any) -> Any:
    """Sends the values of `trainer`'s agent (built, so its writer exists) to
    `logger` or to a new run; returns the logger (a list of them for several
    simultaneous agents). See the module docstring."""
    agents = trainer.agents if isinstance(trainer.agents, (list, tuple)) else [trainer.agents]
    if len(agents) == 1:
        return attach_agent(agents[0], trainer.env.num_envs, trainer.cfg, logger, config=config, **sections)
    if logger is not None:
        raise ValueError(f"attach(trainer, logger): the trainer has {len(agents)} simultaneous agents, one run each; call attach(trainer) without a logger")
    scopes = [end - start for start, end in trainer.scopes] if isinstance(trainer.scopes[0], (list, tuple)) else list(trainer.scopes)
    return [attach_agent(agent, scope, trainer.cfg, config=config, **sections) for agent, scope in zip(agents, scopes)]


def attach_agent(agent: Any, num_envs: int, trainer_cfg: Any = None, logger: Any = None, *, config: Any = None, **sections: Any) -> Any:
    """`attach` for one agent whose `init` has run, stepping `num_envs` environments."""
    writer = getattr(agent, "writer", None)
    if writer is None:
        raise ValueError(
            "attach: the agent has no TensorBoard writer: call it after the trainer is built (it runs agent.init), "
            f"with experiment.write_interval > 0 (it is {agent.write_interval!r})"
        )
    if logger is None:
        from rltrack.training.config import load_config, make_logger

        run = dict(sections.pop("run", None) or {})
        if not load_config(config, run=run, **sections)["run"].get("name"):
            run["name"] = run_name(agent.cfg, agent.experiment_dir)
        logger = make_logger(config, run=run, **sections)
    logger.log_hparams(hparams(agent.cfg, trainer_cfg, num_envs))
    logger.set_run_info({"framework": SOURCE, "skrl_version": installed_version("skrl"), "agent": type(agent).__name__})
    _bypass_hook(writer)
    writer.add_scalar = partial(_add_scalar, writer.add_scalar, logger, int(num_envs), names_mode(logger))
    return logger


def _add_scalar(original: Any, logger: Any, num_envs: int, mode: str, *, tag: str, value: float, timestep: int) -> None:
    """skrl's `add_scalar`, then the value into the run (its tag as written, its canonical twin)."""
    original(tag=tag, value=value, timestep=timestep)
    at, now, number, canonical = steps(timestep, num_envs), time.time(), float(value), CANONICAL.get(tag)
    if canonical is None or mode != "canonical":
        logger.emit(Event(now, {tag: number}, "scalars", "", at, SOURCE, run=logger.name))
    if canonical is not None and mode != "native":
        namespace, _, key = canonical.partition("/")
        logger.emit(Event(now, {key: number}, "scalars", namespace, dict(at), SOURCE, run=logger.name))


def _bypass_hook(writer: Any) -> None:
    """This writer's event file written by TensorBoard's own `add_event`, not
    through the class-wide hook of rltrack.adapters.tensorboard (`rltrack run`):
    an attribute of the one `EventFileWriter` object, as the class defines it."""
    event_file_writer = getattr(writer, "_event_file_writer", None)
    if event_file_writer is not None:
        add_event = inspect.unwrap(type(event_file_writer).add_event)
        event_file_writer.add_event = partial(add_event, event_file_writer)


__all__ = ["CANONICAL", "attach", "attach_agent"]
