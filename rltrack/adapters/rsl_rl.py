"""rsl_rl (Isaac Lab's default trainer) -> rltrack: `RLTrackLogWriter`, the log
writer class a runner config names.

rsl-rl-lib 5.4+ builds its writer from the runner config's `logger` entry:
it deep-copies that dict, resolves `class_name` and calls the class with
`log_dir=<the run's log directory>` and the other keys as keyword arguments;
a `rsl_rl.utils.LogWriter` subclass then also gets `store_config`,
`save_model` and `stop`. So one line of config sends a run to rltrack:

    train_cfg["logger"] = {"class_name": "rltrack.adapters.rsl_rl:RLTrackLogWriter", "config": "rltrack.toml"}
    # or inline: {"class_name": "...:RLTrackLogWriter", "backends": {"use": ["local", "mlflow"]}}

The writer takes its rltrack config from those keys (`config`: a file path or
a dict; `run`, `backends`, `filters`: sections, as `rltrack.make_logger`
takes them), never a live object, since the dict is deep-copied. The run is
named after rsl_rl's log directory (as its W&B writer names its run) unless
the config names it.

What the runner writes becomes (`tag_route`, below):

* `add_scalar(tag, value, it)`: one `scalars` value at `{"train_iter": it}`,
  under its tag as written (`Loss/value`), filed locally under its stage
  (`Loss/` -> learner, `Perf/` -> time, `Train/` and `Episode/` ->
  collector; an environment's own extras under their prefix), with
  canonical twins per `run.names`; the tags rsl_rl writes
  against seconds of training (`Train/mean_reward/time`) at `{"seconds": s}`;
* `store_config(env_cfg, train_cfg)`: `hparams` `{"train_cfg", "env_cfg"}`;
* `save_model(path, it)`: the checkpoint copied into the run's `ckpt/`
  (`Logger.log_checkpoint`, iteration `it`);
* `stop()`: the run ends `finished` (a training that raises leaves the run
  open: rltrack closes it at the process's exit as `failed`).

`save_file` (rsl_rl's git diffs, already in the log directory) and
`save_video` are not sent.

What rltrack knows about rsl_rl's log writer (rsl-rl-lib 5.4+), as pure
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
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any, Mapping

from rltrack.adapters.on_access import subclass_on_access
from rltrack.core.events import Event
from rltrack.core.optional import installed_version
from rltrack.frameworks.canonical import names_mode
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


class _Behaviour:
    """rsl_rl's log writer into one rltrack run; see the module docstring."""

    def __init__(self, log_dir: str, config: str | Path | Mapping[str, Any] | None = None, **sections: Any) -> None:
        from rltrack.training.config import SECTIONS, ConfigError, load_config, make_logger

        unknown = sorted(set(sections) - set(SECTIONS))
        if unknown:
            raise ConfigError(
                f"rsl_rl's logger entry {{'class_name': '{__name__}:RLTrackLogWriter', ...}}: unknown key {unknown[0]!r}; "
                f"allowed: config (a file path or dict), {', '.join(SECTIONS)} (sections inline)"
            )
        run = dict(sections.pop("run", None) or {})
        if not load_config(config, run=run, **sections)["run"].get("name"):
            run["name"] = os.path.basename(os.path.normpath(log_dir))
        self.log_dir = log_dir
        self.logger = make_logger(config, run=run, **sections)
        self.logger.set_run_info({"framework": SOURCE, "rsl_rl_version": installed_version("rsl-rl-lib"), "log_dir": str(log_dir)})
        self._mode = names_mode(self.logger)
        self._routes: dict[str, Any] = {}

    def add_scalar(self, tag: str, scalar_value: float, global_step: int) -> None:
        found = self._routes.get(tag)
        if found is None:
            found = self._routes[tag] = tag_route(tag, self._mode)
        logger, now, steps = self.logger, time.time(), {found.axis: int(global_step)}
        for namespace, key, stage in found.places:  # the tag as written, then its canonical twin
            logger.emit(Event(now, {key: scalar_value}, "scalars", namespace, steps, SOURCE, run=logger.name, stage=stage))

    def store_config(self, env_cfg: dict | object, train_cfg: dict) -> None:
        self.logger.log_hparams(config_hparams(env_cfg, train_cfg))

    def save_model(self, model_path: str, it: int) -> None:
        self.logger.log_checkpoint(model_path, iteration=it)

    def stop(self) -> None:
        self.logger.close()


__getattr__ = subclass_on_access(__name__, "RLTrackLogWriter", _Behaviour, "rsl_rl.utils.log_writer:LogWriter", "rsl_rl")


__all__ = ["RLTrackLogWriter"]
