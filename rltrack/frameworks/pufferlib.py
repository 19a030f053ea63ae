"""What rltrack knows about PufferLib 3, as data: the names of the flat dict its
trainer logs (`environment/*`, `losses/*`, `SPS`, ...) and their canonical
(DI-engine) twins. The adapter (rltrack.adapters.pufferlib) reads it here.
"""

from __future__ import annotations

from rltrack.frameworks.library import Library

#: PufferLib's log keys -> canonical (DI-engine) names.
CANONICAL: dict[str, str] = {
    "environment/episode_return": "collector/reward_mean",
    "environment/episode_length": "collector/avg_envstep_per_episode",
    "SPS": "collector/avg_envstep_per_sec",
    "learning_rate": "learner/cur_lr_avg",
    "losses/policy_loss": "learner/policy_loss_avg",
    "losses/value_loss": "learner/value_loss_avg",
    "losses/approx_kl": "learner/approx_kl_avg",
    "losses/clipfrac": "learner/clipfrac_avg",
    "losses/explained_variance": "learner/explained_variance_avg",
}

LIBRARY = Library(adapter=True, canonical=CANONICAL)
