"""What rltrack knows about Stable-Baselines3, as data: its output format
names, which namespace a key prefix means, the canonical (DI-engine) names of
its keys, which keys are the `train_iter` axis and which mark the
algorithm's own dump (the end of a collection stage).

The adapter (rltrack.adapters.sb3) reads it here; the run database reads SB3's
progress.csv through the shared vocabulary (rltrack.canonical).
"""

from __future__ import annotations

#: SB3's own output format names; a key excluded from all of them is not sent either.
SB3_FORMATS = frozenset({"stdout", "log", "json", "csv", "tensorboard"})

#: SB3 key prefix -> rltrack namespace.
NAMESPACES = {"rollout": "collector", "eval": "evaluator", "train": "learner", "time": "time"}

#: SB3 native flat key -> canonical (DI-engine/LightZero) flat key.
CANONICAL: dict[str, str] = {
    "rollout/ep_rew_mean": "collector/reward_mean",
    "rollout/ep_len_mean": "collector/avg_envstep_per_episode",
    "time/total_timesteps": "collector/total_envstep_count",
    "time/episodes": "collector/episode_count",
    "time/fps": "collector/avg_envstep_per_sec",
    "eval/mean_reward": "evaluator/reward_mean",
    "eval/mean_ep_length": "evaluator/avg_envstep_per_episode",
    "train/loss": "learner/total_loss_avg",
    "train/policy_gradient_loss": "learner/policy_loss_avg",  # PPO
    "train/policy_loss": "learner/policy_loss_avg",  # A2C
    "train/actor_loss": "learner/policy_loss_avg",  # SAC, TD3, DDPG
    "train/value_loss": "learner/value_loss_avg",
    "train/critic_loss": "learner/critic_loss_avg",
    "train/entropy_loss": "learner/entropy_loss_avg",
    "train/learning_rate": "learner/cur_lr_avg",
    "train/approx_kl": "learner/approx_kl_avg",
    "train/clip_fraction": "learner/clipfrac_avg",
    "train/explained_variance": "learner/explained_variance_avg",
    "train/ent_coef": "learner/alpha_avg",  # SAC's entropy temperature
    "train/ent_coef_loss": "learner/alpha_loss_avg",
}

#: Keys whose value is the `train_iter` step axis, in order of preference.
TRAIN_ITER_KEYS = ("time/iterations", "train/n_updates")

#: A key every dump of the algorithm itself has and EvalCallback's dump has not:
#: such a dump ends a collection stage.
ALGORITHM_DUMP_KEY = "time/fps"

#: SB3 `train/` keys that are counters or settings, not values averaged in the learner block.
NOT_LEARNER_VALUES = frozenset({"train/n_updates", "train/clip_range", "train/clip_range_vf"})
