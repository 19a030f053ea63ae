"""What rltrack knows about Brax 0.14 (`brax.training.agents.*.train`), as data:
the names its `progress_fn(step, metrics)` metrics carry
(`eval/episode_reward`, `training/...`, `episode/...`) and their canonical
(DI-engine) twins. The adapter (rltrack.adapters.brax) reads it here.
"""

from __future__ import annotations

from rltrack.frameworks.library import Library

#: Brax's metric names -> canonical (DI-engine) names.
CANONICAL: dict[str, str] = {
    "eval/episode_reward": "evaluator/reward_mean",
    "eval/episode_reward_std": "evaluator/reward_std",
    "episode/sum_reward": "collector/reward_mean",
    "training/total_loss": "learner/total_loss_avg",
    "training/policy_loss": "learner/policy_loss_avg",
    "training/v_loss": "learner/value_loss_avg",
    "training/entropy_loss": "learner/entropy_loss_avg",
    "training/kl_mean": "learner/approx_kl_avg",
}

LIBRARY = Library(adapter=True, canonical=CANONICAL)
