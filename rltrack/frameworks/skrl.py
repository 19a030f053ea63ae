"""What rltrack knows about skrl (2.x), as data and pure functions: what its
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
its tags are `SKRL` (`Reward / Total reward (mean)` ->
`collector/reward_mean`, ...).

The adapter (rltrack.adapters.skrl) reads it here.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from rltrack.frameworks.hparams import plain
from rltrack.frameworks.library import Library
from rltrack.frameworks.stages import STEP_AXIS

SOURCE = "skrl"
#: skrl's own count of vector steps, kept beside `env_steps`.
TIMESTEP_AXIS = "timestep"

#: Native tag -> canonical flat key.
SKRL: dict[str, str] = {
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
    canonical=SKRL,
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
