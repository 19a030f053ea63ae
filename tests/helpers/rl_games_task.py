"""A short rl_games PPO run on gymnasium's CartPole-v1 in the test process:
rl_games' own `Runner` and `a2c_discrete` agent (its tensorboardX writer),
with a vector environment of its `IVecEnv` interface registered as `SYNC`
(rl_games' own CartPole entry steps its environments in Ray actors, which the
tests do not need). For tests/frameworks/test_adapter_rl_games.py."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

NUM_ACTORS, HORIZON = 4, 32


class SyncVecEnv:
    """rl_games' `IVecEnv` over gymnasium's synchronous vector env: episodes reset
    within the step that ended them (`AutoresetMode.SAME_STEP`, as rl_games' Ray workers do)."""

    def __init__(self, config_name: str, num_actors: int, **kwargs: Any) -> None:
        self.env = gym.make_vec("CartPole-v1", num_envs=num_actors, vectorization_mode="sync",
                                vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})  # fmt: skip
        self.seed_value = kwargs.get("seed", 0)

    def step(self, actions: Any) -> tuple[Any, Any, Any, dict[str, Any]]:
        obs, rewards, terminated, truncated, _ = self.env.step(np.asarray(actions))
        return obs.astype(np.float32), rewards.astype(np.float32), (terminated | truncated).astype(np.uint8), {}

    def reset(self) -> Any:
        obs, _ = self.env.reset(seed=self.seed_value)
        return obs.astype(np.float32)

    def get_number_of_agents(self) -> int:
        return 1

    def has_action_masks(self) -> bool:
        return False

    def set_train_info(self, env_frames: int, *args: Any, **kwargs: Any) -> None:
        pass

    def get_env_state(self) -> None:
        return None

    def set_env_state(self, env_state: Any) -> None:
        pass

    def get_env_info(self) -> dict[str, Any]:
        return {"action_space": self.env.single_action_space, "observation_space": self.env.single_observation_space,
                "state_space": None, "use_global_observations": False, "agents": 1, "value_size": 1}  # fmt: skip


def register() -> None:
    """`SYNC` among rl_games' vector env types, `cartpole_sync` among its environments."""
    from rl_games.common import env_configurations, vecenv

    vecenv.register("SYNC", lambda config_name, num_actors, **kwargs: SyncVecEnv(config_name, num_actors, **kwargs))
    env_configurations.register("cartpole_sync", {"vecenv_type": "SYNC", "env_creator": lambda **kwargs: None})


def params(name: str = "cartpole_ppo", epochs: int = 3, **config: Any) -> dict[str, Any]:
    """rl_games' own `ppo_cartpole.yaml`, on CPU, shorter, with 4 actors."""
    return {"params": {
        "seed": 0, "algo": {"name": "a2c_discrete"}, "model": {"name": "discrete_a2c"}, "load_checkpoint": False,
        "network": {"name": "actor_critic", "separate": True, "space": {"discrete": None},
                    "mlp": {"units": [32, 32], "activation": "relu", "initializer": {"name": "default"}, "regularizer": {"name": "None"}}},
        "config": {
            "reward_shaper": {"scale_value": 0.1}, "normalize_advantage": True, "gamma": 0.99, "tau": 0.9, "learning_rate": 2e-4,
            "name": name, "score_to_win": 400, "grad_norm": 1.0, "entropy_coef": 0.01, "truncate_grads": True, "env_name": "cartpole_sync",
            "e_clip": 0.2, "clip_value": True, "num_actors": NUM_ACTORS, "horizon_length": HORIZON, "minibatch_size": 64, "mini_epochs": 2,
            "critic_coef": 1, "lr_schedule": None, "kl_threshold": 0.008, "normalize_input": False, "save_best_after": 10,
            "device": "cpu", "multi_gpu": False, "torch_compile": False, "max_epochs": epochs, "save_frequency": 0, "train_dir": "rl_games_runs", **config,
        },
    }}  # fmt: skip


def train(observer: Any, **kwargs: Any) -> Any:
    """A short PPO run with `observer`; returns the runner."""
    import torch
    from rl_games.torch_runner import Runner

    torch.set_num_threads(1)
    register()
    runner = Runner(algo_observer=observer)
    runner.load(params(**kwargs))
    runner.run({"train": True, "play": False})
    return runner
