"""Ray's names across the releases rltrack supports.

Ray 2.40 (the oldest, requirements/constraints-oldest.txt) reports from a
trainable with `ray.train.report` and configures a `Tuner` with
`ray.train.RunConfig`; newer releases name both in `ray.tune`. RLlib's
callback functions (`config.callbacks(on_episode_end=...)`, which
`rltrack.adapters.tune.record_episodes` plugs into) and `build_algo` are newer
than 2.40: the tests that drive RLlib skip there and run with the newest Ray.
"""

from __future__ import annotations

import inspect

import pytest
from ray import train, tune

report = getattr(tune, "report", None) or train.report
RunConfig = getattr(tune, "RunConfig", None) or train.RunConfig


def skip_without_rllib_callback_functions() -> None:
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

    if "on_episode_end" not in inspect.signature(AlgorithmConfig.callbacks).parameters or not hasattr(AlgorithmConfig, "build_algo"):
        pytest.skip("this RLlib has neither callbacks(on_episode_end=...) nor build_algo (Ray 2.40): RLlib is tested with the newest Ray")
