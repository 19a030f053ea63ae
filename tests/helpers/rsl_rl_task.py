"""A small vectorised task written against rsl_rl's `VecEnv` interface, and a short
`OnPolicyRunner` config for it: what the rsl_rl tests train (tests/frameworks/
test_adapter_rsl_rl.py in the test process, test_tensorboard_frameworks.py in a
child under `rltrack run`, which imports this module from tests/helpers)."""

from __future__ import annotations

from typing import Any

import torch
from rsl_rl.env import VecEnv
from tensordict import TensorDict


class ReachTarget(VecEnv):
    """A point that learns to move onto a target on a line: 8 environments,
    episodes of 10 steps; `extras["log"]` carries a mean (`distance`, logged by
    rsl_rl as `Episode/distance`) and an Isaac-Lab-style prefixed key
    (`Metrics/final_error`)."""

    def __init__(self) -> None:
        self.num_envs, self.num_actions, self.max_episode_length = 8, 1, 10
        self.device = "cpu"
        self.cfg = {"task": "reach_target", "episode_length": self.max_episode_length}
        self.generator = torch.Generator().manual_seed(0)
        self.position = torch.zeros(self.num_envs)
        self.target = torch.rand(self.num_envs, generator=self.generator) * 2 - 1
        self.episode_length_buf = torch.zeros(self.num_envs, dtype=torch.long)

    def get_observations(self) -> TensorDict:
        return TensorDict({"policy": torch.stack([self.position, self.target], dim=1)}, batch_size=[self.num_envs])

    def step(self, actions: torch.Tensor):
        self.position = (self.position + 0.2 * actions[:, 0].clamp(-1, 1)).clamp(-2, 2)
        distance = (self.position - self.target).abs()
        rewards = -distance
        self.episode_length_buf += 1
        dones = self.episode_length_buf >= self.max_episode_length
        extras = {"time_outs": dones.clone(), "log": {"distance": distance.mean(), "Metrics/final_error": distance[dones].mean() if dones.any() else 0.0}}
        if dones.any():
            self.position[dones] = 0.0
            self.target[dones] = torch.rand(int(dones.sum()), generator=self.generator) * 2 - 1
            self.episode_length_buf[dones] = 0
        return self.get_observations(), rewards, dones.long(), extras


def train_cfg(logger: Any) -> dict:
    """PPO with small MLPs, 10 steps per env an iteration; `logger`: rsl_rl's `logger` entry."""
    return {
        "num_steps_per_env": 10, "save_interval": 2, "obs_groups": {"actor": ["policy"], "critic": ["policy"]}, "run_name": "reach",
        "algorithm": {"class_name": "PPO", "num_learning_epochs": 1, "num_mini_batches": 2, "learning_rate": 1e-3, "rnd_cfg": None},
        "actor": {"class_name": "MLPModel", "hidden_dims": [16], "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0}},
        "critic": {"class_name": "MLPModel", "hidden_dims": [16]},
        "logger": logger,
    }  # fmt: skip
