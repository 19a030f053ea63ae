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
  and skrl's `timestep` beside it (rltrack.frameworks.skrl);
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
"""

from __future__ import annotations

import inspect
import time
from functools import partial
from pathlib import Path
from typing import Any, Mapping

from rltrack.core.events import Event
from rltrack.core.optional import installed_version
from rltrack.frameworks.canonical import names_mode
from rltrack.frameworks.skrl import SOURCE, hparams, run_name, steps
from rltrack.frameworks.skrl import SKRL as CANONICAL


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
