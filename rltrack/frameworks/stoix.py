"""What rltrack knows about Stoix, as data: the names its loggers give values
(`<event>/<key>`: `actor/episode_return/mean`, `trainer/total_loss`, ...) and
their canonical (DI-engine) twins. The adapter (rltrack.adapters.stoix) reads
it here.
"""

from __future__ import annotations

from rltrack.frameworks.library import Library

#: Stoix's stored names -> canonical (DI-engine) names.
CANONICAL: dict[str, str] = {
    "actor/episode_return/mean": "collector/reward_mean",
    "actor/episode_length/mean": "collector/avg_envstep_per_episode",
    "evaluator/episode_return/mean": "evaluator/reward_mean",
    "evaluator/episode_return/std": "evaluator/reward_std",
    "evaluator/episode_length/mean": "evaluator/avg_envstep_per_episode",
    "trainer/total_loss": "learner/total_loss_avg",
    "trainer/actor_loss": "learner/policy_loss_avg",
    "trainer/value_loss": "learner/value_loss_avg",
    "trainer/q_loss": "learner/critic_loss_avg",
    "trainer/entropy_loss": "learner/entropy_loss_avg",
}

LIBRARY = Library(adapter=True, canonical=CANONICAL)
