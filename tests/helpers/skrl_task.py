"""skrl's own PPO on gymnasium's CartPole-v1 (2 sync environments), its
`SequentialTrainer` built: what the skrl tests train (tests/frameworks/
test_adapter_skrl.py, and the skrl case of test_adapter_contract.py)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

NUM_ENVS, TIMESTEPS, WRITE_INTERVAL = 2, 512, 64


class Counted(gym.vector.VectorWrapper):
    """Counts transitions as CleanRL's `global_step` and SB3's `num_timesteps` do:
    `num_envs` per step of the vector environment (a class attribute)."""

    transitions = 0

    def step(self, actions):
        Counted.transitions += self.num_envs
        return super().step(actions)


def ppo_trainer(name: str = "cartpole_ppo", cfg_class: Any = None) -> Any:
    """skrl's own PPO on CartPole-v1 (2 sync environments, their steps counted), its SequentialTrainer
    built; `cfg_class`: the agent's configuration class (default skrl's `PPO_CFG`)."""
    import torch
    from skrl.agents.torch.ppo import PPO, PPO_CFG
    from skrl.envs.wrappers.torch import wrap_env
    from skrl.memories.torch import RandomMemory
    from skrl.trainers.torch import SequentialTrainer
    from skrl.utils import set_seed
    from skrl.utils.model_instantiators.torch import categorical_model, deterministic_model

    torch.set_num_threads(1)
    set_seed(0, deterministic=True)
    Counted.transitions = 0
    env = wrap_env(Counted(gym.make_vec("CartPole-v1", num_envs=NUM_ENVS, vectorization_mode="sync")), wrapper="gymnasium")
    net = [{"name": "net", "input": "OBSERVATIONS", "layers": [32, 32], "activations": "tanh"}]
    spaces = {"observation_space": env.observation_space, "action_space": env.action_space}
    models = {"policy": categorical_model(**spaces, network=net, output="ACTIONS"), "value": deterministic_model(**spaces, network=net, output="ONE")}
    cfg = {"rollouts": 64, "learning_epochs": 2, "mini_batches": 2,
           "experiment": {"directory": "skrl_runs", "experiment_name": name, "write_interval": WRITE_INTERVAL, "checkpoint_interval": 0}}  # fmt: skip
    agent = PPO(models=models, memory=RandomMemory(memory_size=64, num_envs=env.num_envs), **spaces, cfg=(cfg_class or PPO_CFG)(**cfg))
    return SequentialTrainer(env=env, agents=agent, cfg={"timesteps": TIMESTEPS, "headless": True, "disable_progressbar": True})
