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

What the runner writes becomes (rltrack.frameworks.rsl_rl):

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
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Mapping

from rltrack.core.events import Event
from rltrack.core.optional import installed_version, require
from rltrack.frameworks.canonical import names_mode
from rltrack.frameworks.rsl_rl import SOURCE, config_hparams, tag_route

_log_writer = require("rsl_rl.utils.log_writer", "rsl_rl", "rltrack.adapters.rsl_rl")


class RLTrackLogWriter(_log_writer.LogWriter):
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


__all__ = ["RLTrackLogWriter"]
