"""What rltrack knows about Acme, as data and pure functions: which namespace
a logger label means, the step counters, the canonical (DI-engine) names of
its keys and how many records make one stage block.

The adapter (rltrack.adapters.acme) reads it here.
"""

from __future__ import annotations

SOURCE = "acme"

#: Acme label -> rltrack namespace; labels not listed are kept as given.
LABEL_NAMESPACES: dict[str, str] = {
    "actor": "collector",
    "environment_loop": "collector",
    "evaluator": "evaluator",
    "eval_loop": "evaluator",
    "learner": "learner",
}

#: Acme counter keys that are step axes whenever present, with their canonical axis names.
STEP_AXES: dict[str, str] = {"actor_steps": "env_steps", "learner_steps": "train_iter"}

#: native flat key (`<namespace>/<Acme key>`) -> canonical flat key (DI-engine vocabulary).
#: Acme's environment loop writes one record per episode, so an episode's return
#: is that record's `reward_mean`; learners write one record per SGD step.
CANONICAL: dict[str, str] = {
    "collector/episode_return": "collector/reward_mean",
    "collector/episode_length": "collector/avg_envstep_per_episode",
    "collector/steps_per_second": "collector/avg_envstep_per_sec",
    "collector/actor_episodes": "collector/total_episode_count",
    "collector/actor_steps": "collector/total_envstep_count",
    "evaluator/episode_return": "evaluator/reward_mean",
    "evaluator/episode_length": "evaluator/avg_envstep_per_episode",
    "evaluator/steps_per_second": "evaluator/avg_envstep_per_sec",
    "learner/total_loss": "learner/total_loss_avg",  # SAC, ValueDICE
    "learner/loss_total": "learner/total_loss_avg",  # PPO
    "learner/loss": "learner/total_loss_avg",  # DQN, BC, R2D2, IMPALA, ...
    "learner/loss_policy": "learner/policy_loss_avg",  # PPO
    "learner/policy_loss": "learner/policy_loss_avg",  # D4PG, SAC, MPO, ...
    "learner/loss_value": "learner/value_loss_avg",  # PPO
    "learner/critic_loss": "learner/critic_loss_avg",  # D4PG, TD3, SAC, ...
}

#: Records per stage block, per namespace (None: the evaluator's one evaluation, see the module docstring).
STAGE_EVERY: dict[str, int | None] = {"collector": 10, "evaluator": None, "learner": 100}
#: Learner keys read as the learning rate (`cur_lr_avg`).
LEARNING_RATE_KEYS = ("learning_rate", "lr")


def namespace_for(label: str) -> str:
    """The rltrack namespace of an Acme logger label."""
    return LABEL_NAMESPACES.get(label, label)
