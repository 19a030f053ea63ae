"""rl_games -> rltrack: `RLTrackObserver`, an `AlgoObserver` naming the run and giving its hyperparameters.

rl_games' agents write their scalars through a tensorboardX writer, which
rltrack's TensorBoard hook carries (`rltrack run`, or
rltrack.adapters.tensorboard.attach). What the event files do not hold, the
run's name and its configuration, rl_games hands to its observer:

    from rl_games.torch_runner import Runner
    from rltrack.adapters.rl_games import RLTrackObserver
    runner = Runner(algo_observer=RLTrackObserver(backends={"use": ["local", "mlflow"]}))
    runner.load(yaml_config)
    runner.run({"train": True})

In `before_init(base_name, config, experiment_name)`, called before the
agent makes its writer, the observer opens the run, named `experiment_name`
(rl_games' `full_experiment_name`, else its `name` and start time: the
folder it writes) unless rltrack's config names it, records `config` as typed
hyperparameters, and attaches the TensorBoard hook to that run
(`attach(logger)`): the agent's scalars (`losses/a_loss`, `rewards/...`)
land in it, whether or not the script runs under `rltrack run` (whose
configuration, `RLTRACK_CONFIG`, it then opens the run with). `config` and
the sections (`run=`, `backends=`, `filters=`) are `rltrack.make_logger`'s,
or pass `logger=` an rltrack `Logger` you made.

It is rl_games' `DefaultAlgoObserver` otherwise (`scores/mean` and the
episode statistics it writes stay); rl_games takes one observer: derive yours
from this one (calling `super()`) to keep both. The run ends with the process (`finished`, or
`failed` when training raised) or at `logger.close()`.

What rltrack knows about rl_games (1.6), as data and pure functions: its
configuration as hyperparameters.

rl_games' agents write their scalars through a tensorboardX `SummaryWriter`
in `<train_dir>/<experiment_name>/summaries` (`losses/a_loss`,
`performance/step_fps`, `info/last_lr`, `rewards/...`, at the frame count),
which rltrack's TensorBoard hook carries (rltrack.adapters.tensorboard). Its
`AlgoObserver.before_init(base_name, config, experiment_name)` sees the rest:
`config` (the `params["config"]` section of its YAML) and the experiment's
name (`full_experiment_name`, else `name` and the start time: the folder it
writes). `config["features"]` holds objects the runner adds (the observer
itself), not settings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from rltrack.adapters import tensorboard
from rltrack.adapters.on_access import subclass_on_access
from rltrack.core.optional import installed_version
from rltrack.frameworks.hparams import plain
from rltrack.frameworks.library import Library

SOURCE = "rl_games"
#: Entries of `params["config"]` that the runner fills with objects, not settings.
RUNTIME_ENTRIES = frozenset({"features"})


def hparams(config: Mapping[str, Any]) -> dict[str, Any]:
    """rl_games' `config` as typed hyperparameters (the runner's objects left out)."""
    return plain({key: value for key, value in config.items() if key not in RUNTIME_ENTRIES})


#: rl_games' writer (`losses/`, `performance/`, `info/`, `rewards/` at the frame count): its tags as written.
LIBRARY = Library(packages=("rl_games",), adapter=True)


class _Behaviour:
    """rl_games' default observer, plus the run's name and hyperparameters; see the module docstring."""

    def __init__(self, config: str | Path | Mapping[str, Any] | None = None, *, logger: Any = None, **sections: Any) -> None:
        super().__init__()
        self._config = config
        self._sections = sections
        self.logger = logger

    def before_init(self, base_name: str, config: dict[str, Any], experiment_name: str) -> None:
        super().before_init(base_name, config, experiment_name)
        if self.logger is None:
            from rltrack.training.config import load_config, make_logger

            run = dict(self._sections.pop("run", None) or {})
            if not load_config(self._config, run=run, **self._sections)["run"].get("name"):
                run["name"] = experiment_name
            self.logger = make_logger(self._config, run=run, **self._sections)
        self.logger.log_hparams(hparams(config))
        self.logger.set_run_info({"framework": SOURCE, "rl_games_version": installed_version("rl-games"), "experiment_name": experiment_name})
        tensorboard.attach(self.logger)


__getattr__ = subclass_on_access(__name__, "RLTrackObserver", _Behaviour, "rl_games.common.algo_observer:DefaultAlgoObserver", "rl_games")


__all__ = ["RLTrackObserver"]
