"""A library's configuration holding objects as typed hyperparameters
(rltrack.frameworks.hparams.plain, which skrl's and rl_games' adapters use),
and the run names and step axes of the libraries' knowledge modules."""

from __future__ import annotations

import dataclasses
import json
from collections import OrderedDict

import numpy as np

from rltrack.adapters import skrl, transformers
from rltrack.frameworks.hparams import plain


class Shaper:
    def __init__(self) -> None:
        self.scale_value, self.clip, self._private = 0.1, np.clip, 1


class Opaque:
    pass


def test_objects_become_names_or_their_settings_and_numbers_keep_their_types() -> None:
    config = {"lr": 3e-4, "epochs": 4, "gae": True, "none": None, "nested": OrderedDict(units=(32, 32)), "scheduler": Opaque,
              "shaper": Shaper(), "model": Opaque(), "gamma": np.float32(0.5), "steps": np.int64(7), "fn": np.mean}  # fmt: skip
    found = plain(config)
    assert found == {
        "lr": 3e-4, "epochs": 4, "gae": True, "none": None, "nested": {"units": [32, 32]}, "scheduler": f"{__name__}.Opaque",
        "shaper": {"scale_value": 0.1}, "model": f"{__name__}.Opaque", "gamma": 0.5, "steps": 7, "fn": "numpy.mean",
    }  # fmt: skip
    assert type(found["steps"]) is int and json.loads(json.dumps(found)) == found


def test_skrl_steps_config_and_run_name() -> None:
    @dataclasses.dataclass
    class Cfg:
        rollouts: int = 16
        experiment: dict = dataclasses.field(default_factory=lambda: {"experiment_name": ""})

    assert skrl.steps(64, 4096) == {"env_steps": 64 * 4096, "timestep": 64}
    assert skrl.hparams(Cfg(), {"timesteps": 100}, 8) == {"rollouts": 16, "experiment": {"experiment_name": ""}, "timesteps": 100, "num_envs": 8}
    assert skrl.run_name(Cfg(), "runs/torch/26-11-29_07-00-00-000000_PPO/") == "26-11-29_07-00-00-000000_PPO"
    assert skrl.run_name(Cfg(experiment={"experiment_name": "ant"}), "runs/x") == "ant"


def test_hf_tags_as_its_tensorboard_callback_names_them() -> None:
    logs = {"loss": 1.0, "eval_loss": 2.0, "test_accuracy": 0.5, "rewards/f/mean": 3.0, "evaluation": 4.0}
    assert transformers.tags(logs) == {"train/loss": 1.0, "eval/loss": 2.0, "test/accuracy": 0.5, "train/rewards/f/mean": 3.0, "train/evaluation": 4.0}


def test_an_array_of_several_values_is_logged_as_it_was_when_given():
    """`plain` (Brax's, PufferLib's, Stoix's values, converted on rltrack's
    pipeline thread later) copies an array of several values: a library that
    reuses its buffer after the call must not change what was logged."""
    from rltrack.adapters.library_run import plain

    given = np.arange(3.0)
    logged = plain(given)
    given[:] = -1.0
    assert logged.tolist() == [0.0, 1.0, 2.0]
