"""What rltrack knows about rsl_rl's log writer (rsl-rl-lib 5.4+), as pure
functions: which namespace, key(s) and step axis a tag its runner writes
goes to, and what `store_config(env_cfg, train_cfg)` becomes as hyperparameters.

rsl_rl's runner (`rsl_rl.utils.logger.Logger.log`) calls the writer's
`add_scalar(tag, value, it)` once per value and learning iteration: `Loss/`,
`Policy/`, `Perf/`, `Train/`, `Episode/` tags and the environment's own
extras (Isaac Lab's `Episode_Reward/...`, `Metrics/...`), all against the
iteration `it`, except `Train/mean_reward/time` and
`Train/mean_episode_length/time`, written against whole seconds of
training. The tags mean here what they mean in rsl_rl's TensorBoard files,
so the table is rsl_rl's TensorBoard one (`LIBRARY`: `Loss/` -> learner,
`Perf/` -> time, `Train/` and `Episode/` -> collector, with their canonical
names; every other tag at the iteration too).

The adapter (rltrack.adapters.rsl_rl) reads it here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rltrack.frameworks.library import Library
from rltrack.frameworks.stages import ITER_AXIS
from rltrack.frameworks.tensorboard import Route, route

SOURCE = "rsl_rl"

#: Native tag -> canonical flat key.
RSL_RL: dict[str, str] = {
    "Train/mean_reward": "collector/reward_mean",
    "Train/mean_episode_length": "collector/avg_envstep_per_episode",
    "Loss/value": "learner/value_loss_avg",
    "Loss/surrogate": "learner/policy_loss_avg",
    "Loss/entropy": "learner/entropy_avg",
    "Loss/learning_rate": "learner/cur_lr_avg",
    "Perf/total_fps": "collector/avg_envstep_per_sec",
}

#: rsl_rl.utils.logger: the learning iteration `it`, `Train/<k>/time` at whole seconds.
LIBRARY = Library(
    packages=("rsl_rl",),
    adapter=True,
    stages={"Train": ("collector", ITER_AXIS), "Episode": ("collector", ITER_AXIS), "Loss": ("learner", ITER_AXIS),
            "Policy": ("learner", ITER_AXIS), "Rnd": ("learner", ITER_AXIS), "Perf": ("time", ITER_AXIS)},
    canonical=RSL_RL,
    axis=ITER_AXIS,
)  # fmt: skip


def tag_route(tag: str, mode: str) -> Route:
    """Where the values of one rsl_rl tag go (the tag as written and its
    canonical twin per `run.names` `mode`, the stage, the axis): the route of
    a tag rsl_rl's TensorBoard writer writes."""
    return route(tag, mode, SOURCE)


def config_hparams(env_cfg: Any, train_cfg: Any) -> dict[str, Any]:
    """`store_config(env_cfg, train_cfg)` as hyperparameters: `{"train_cfg":
    ..., "env_cfg": ...}` as rsl_rl's W&B writer stores them; an env config
    object becomes a dict through its `to_dict()` (Isaac Lab's configclass),
    as a dataclass, or through its attributes."""
    return {"train_cfg": train_cfg, "env_cfg": _as_dict(env_cfg)}


def _as_dict(cfg: Any) -> Any:
    if isinstance(cfg, dict) or cfg is None:
        return cfg
    to_dict = getattr(cfg, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        return dataclasses.asdict(cfg)
    attributes = getattr(cfg, "__dict__", None)
    return dict(attributes) if isinstance(attributes, dict) else repr(cfg)
