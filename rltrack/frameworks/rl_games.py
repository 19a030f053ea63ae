"""What rltrack knows about rl_games (1.6), as data and pure functions: its
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

The adapter (rltrack.adapters.rl_games) reads it here.
"""

from __future__ import annotations

from typing import Any, Mapping

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
