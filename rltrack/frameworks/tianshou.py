"""What rltrack knows about Tianshou 2.x, as data and pure functions: the step
axis each `step_type` of `BaseLogger.write(step_type, step, data)` names, and
the canonical (DI-engine) names of the keys its collectors, algorithms and
trainer log.

Tianshou's trainer writes four scopes (`tianshou.utils.logger.logger_base.DataScope`):
`training/env_step` (the training collector's `CollectStats`, at env steps),
`test/env_step` (the test collector's, at env steps), `update/update_step`
(the algorithm's `TrainingStats`, at update steps) and `info/epoch` (the
trainer's `InfoStats`, at epochs); its TensorBoard logger writes
`save/epoch`, `save/env_step`, `save/gradient_step` when it saves a
checkpoint. The keys are Tianshou's, flattened by its
`prepare_dict_for_logging` (`returns_stat/mean`, `loss/mean`, ...), and are
stored as its TensorBoard logger tags them: `<scope>/<key>`.

The adapter (rltrack.adapters.tianshou) reads it here.
"""

from __future__ import annotations

from rltrack.frameworks.stages import ITER_AXIS, STEP_AXIS
from rltrack.frameworks.library import Library

SOURCE = "tianshou"

#: The step name of a `step_type` (`<scope>/<step name>`) -> rltrack's step axis.
STEP_AXES: dict[str, str] = {
    "env_step": STEP_AXIS,
    "update_step": ITER_AXIS,  # the trainer's update count (gradient steps for off-policy algorithms)
    "gradient_step": ITER_AXIS,
    "epoch": "epoch",
}

#: The namespace of the counters `save_data` writes (as Tianshou's TensorBoard logger's `save/...` tags).
SAVE_SCOPE = "save"
#: `save_data`'s counters: the key it writes each under, and its axis.
SAVE_KEYS: dict[str, str] = {"epoch": "epoch", "env_step": STEP_AXIS, "gradient_step": ITER_AXIS}


def step_axis(step_type: str) -> tuple[str, str]:
    """(scope, axis) of a `step_type` such as `training/env_step`; a step name
    rltrack does not know is kept as the axis name."""
    scope, _, name = step_type.partition("/")
    return scope, STEP_AXES.get(name, name or "step")


def _collect_stats(scope: str, namespace: str, duration: str) -> dict[str, str]:
    """The canonical names of one collector's `CollectStats` keys."""
    return {
        f"{scope}/returns_stat/mean": f"{namespace}/reward_mean",
        f"{scope}/returns_stat/std": f"{namespace}/reward_std",
        f"{scope}/returns_stat/max": f"{namespace}/reward_max",
        f"{scope}/returns_stat/min": f"{namespace}/reward_min",
        f"{scope}/lens_stat/mean": f"{namespace}/avg_envstep_per_episode",
        f"{scope}/n_collected_episodes": f"{namespace}/episode_count",
        f"{scope}/n_collected_steps": f"{namespace}/envstep_count",
        f"{scope}/collect_time": f"{namespace}/{duration}",
        f"{scope}/collect_speed": f"{namespace}/avg_envstep_per_sec",
    }


#: Tianshou native flat key (`<scope>/<key>`) -> canonical flat key.
CANONICAL: dict[str, str] = {
    **_collect_stats("training", "collector", "collect_time"),
    **_collect_stats("test", "evaluator", "evaluate_time"),
    "update/loss/mean": "learner/total_loss_avg",  # PPO, A2C, DQN, ...
    "update/actor_loss/mean": "learner/policy_loss_avg",  # PPO, SAC, TD3, DDPG
    "update/clip_loss/mean": "learner/policy_loss_avg",  # PPO before 2.0's rename
    "update/vf_loss/mean": "learner/value_loss_avg",  # PPO, A2C
    "update/ent_loss/mean": "learner/entropy_loss_avg",  # PPO, A2C
    "update/critic_loss/mean": "learner/critic_loss_avg",  # DDPG, TD3
    "update/critic1_loss/mean": "learner/critic_loss_avg",  # SAC
    "update/alpha_loss/mean": "learner/alpha_loss_avg",  # SAC with auto alpha
}


#: Tianshou 2's loggers (its TensorboardLogger too): `<scope>/<key>` at the scope's step.
LIBRARY = Library(
    packages=("tianshou",),
    adapter=True,
    stages={"training": ("collector", STEP_AXES["env_step"]), "test": ("evaluator", STEP_AXES["env_step"]),
            "update": ("learner", STEP_AXES["update_step"])},
    canonical=CANONICAL,
)  # fmt: skip
