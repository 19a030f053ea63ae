"""What rltrack knows about TorchRL, as data: the axis its trainers' `step`
counts and the canonical (DI-engine) names of the keys its loss modules and
trainers log.

TorchRL's `Trainer` calls `logger.log_scalar(key, value, step=collected_frames)`
for the values of its hooks and loss modules (`loss_objective`,
`loss_critic`, `r_training`, `grad_norm_0`, ...): its `step` counts collected
environment frames. Its `r_training`/`r_evaluation` are per-step reward
means of a batch, not episode returns, so they get no `reward_mean` twin.
Bare names that any code logs (`loss` of DQN, `entropy`, `lr`) get none
either: the vocabulary also names the values of runs written without
rltrack (rltrack.runs), where such a name says nothing of TorchRL.

The adapter (rltrack.adapters.torchrl) reads it here.
"""

from __future__ import annotations

from rltrack.frameworks.stages import STEP_AXIS
from rltrack.frameworks.library import Library

SOURCE = "torchrl"

#: The axis of `step` in TorchRL's trainers (collected frames); the adapter's default.
TRAINER_STEP_AXIS = STEP_AXIS

#: TorchRL native key (as its loss modules and trainer hooks name it) -> canonical flat key.
CANONICAL: dict[str, str] = {
    "loss_objective": "learner/policy_loss_avg",  # PPO, A2C
    "loss_actor": "learner/policy_loss_avg",  # SAC, TD3, DDPG
    "loss_critic": "learner/value_loss_avg",  # PPO, A2C
    "loss_value": "learner/value_loss_avg",  # DDPG
    "loss_qvalue": "learner/critic_loss_avg",  # SAC, TD3, CQL
    "loss_entropy": "learner/entropy_loss_avg",  # PPO, A2C
    "loss_alpha": "learner/alpha_loss_avg",  # SAC
    "kl_approx": "learner/approx_kl_avg",
    "clip_fraction": "learner/clipfrac_avg",
}


#: TorchRL's `Logger` (rltrack.adapters.torchrl).
LIBRARY = Library(adapter=True, canonical=CANONICAL)
