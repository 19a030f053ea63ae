"""An rltrack library plug-in: what the TensorBoard tags of a library named
`example_rl` mean, declared by a package of someone else's
(`[project.entry-points."rltrack.libraries"] example_rl = ...`). Its writer's
tags get its stages, its axis and its canonical twins; the same tags from any
other writer keep their names (tests/frameworks/test_adapter_tensorboard.py)."""

from __future__ import annotations

from rltrack.frameworks.library import Library

LIBRARY = Library(
    packages=("example_rl",),
    stages={"losses": ("learner", "env_steps"), "rewards": ("collector", "env_steps")},
    canonical={"losses/a_loss": "learner/policy_loss_avg", "rewards/step": "collector/reward_mean"},
    axis="env_steps",
)
