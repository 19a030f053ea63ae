"""What rltrack knows about CleanRL, as data: what its scripts' TensorBoard tags
mean. Every CleanRL script writes through torch's `SummaryWriter`:
`charts/` (episodes, throughput, the learning rate) and `losses/` at
`global_step`, which counts env steps over all environments, and its
hyperparameters as one `add_text("hyperparameters", <markdown table>)`
(rltrack.frameworks.tensorboard_values). A script is CleanRL's when it lies in
a `cleanrl` folder or imports `cleanrl_utils` (rltrack.frameworks.library.creator_library).
"""

from __future__ import annotations

from rltrack.frameworks.library import Library
from rltrack.frameworks.stages import STEP_AXIS

#: Native tag -> canonical flat key.
CLEANRL: dict[str, str] = {
    "charts/episodic_return": "collector/reward_mean",  # one episode's return per value, as Acme's episode_return
    "charts/episode_reward": "collector/reward_mean",  # cleanrl 0.4 on PyPI
    "charts/episodic_length": "collector/avg_envstep_per_episode",
    "charts/SPS": "collector/avg_envstep_per_sec",
    "charts/learning_rate": "learner/cur_lr_avg",
    "losses/value_loss": "learner/value_loss_avg",
    "losses/policy_loss": "learner/policy_loss_avg",
    "losses/entropy": "learner/entropy_avg",
    "losses/approx_kl": "learner/approx_kl_avg",
    "losses/clipfrac": "learner/clipfrac_avg",
    "losses/explained_variance": "learner/explained_variance_avg",
    "losses/td_loss": "learner/total_loss_avg",  # DQN
    "losses/q_values": "learner/q_value_avg",  # DQN
    "losses/qf_loss": "learner/critic_loss_avg",  # SAC, TD3, DDPG
    "losses/actor_loss": "learner/policy_loss_avg",  # SAC, TD3, DDPG
    "losses/alpha": "learner/alpha_avg",  # SAC
    "losses/alpha_loss": "learner/alpha_loss_avg",  # SAC
}


LIBRARY = Library(
    packages=("cleanrl", "cleanrl_utils"),
    stages={"charts": ("collector", STEP_AXIS), "losses": ("learner", STEP_AXIS)},
    canonical=CLEANRL,
    axis=STEP_AXIS,
)
