"""Tianshou 2.x's loggers -> rltrack: `rltrack.adapters.tianshou.RLTrackLogger`
as the logger of Tianshou's own PPO on gymnasium's CartPole, read back from
progress.csv, MLflow and W&B's run file, and resumed from its `save_data`.

Tianshou 2.0 wants pandas < 3, so it is installed in the oldest environment
only (`make test-oldest`); the main lane skips these tests."""

from __future__ import annotations

import pytest

pytest.importorskip("tianshou", reason="Tianshou 2.0 needs pandas < 3: it is installed in .venv-oldest only (make test-oldest)")
import torch  # noqa: E402
from library_readback import assert_once_everywhere, config  # noqa: E402

from rltrack.adapters.tianshou import RLTrackLogger  # noqa: E402
from rltrack.journal import read_journal  # noqa: E402

AXES = {"training": "env_steps", "test": "env_steps", "update": "train_iter", "info": "epoch", "save": None}


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


class Recording(RLTrackLogger):
    """Our logger, noting each `write(step_type, step, data)` Tianshou's trainer made."""

    def __init__(self, *args, **kwargs):
        self.writes = []
        super().__init__(*args, **kwargs)

    def write(self, step_type, step, data):
        self.writes.append((step_type, step, dict(data)))
        super().write(step_type, step, data)


def _train(logger, *, epochs, resume=False, checkpoint=None):
    """Tianshou's PPO on CartPole-v1, small: 256 env steps per epoch."""
    import gymnasium as gym
    from tianshou.algorithm.modelfree.ppo import PPO
    from tianshou.algorithm.modelfree.reinforce import ProbabilisticActorPolicy
    from tianshou.algorithm.optim import AdamOptimizerFactory
    from tianshou.data import Collector, VectorReplayBuffer
    from tianshou.env import DummyVectorEnv
    from tianshou.trainer import OnPolicyTrainerParams
    from tianshou.utils.net.common import Net
    from tianshou.utils.net.discrete import DiscreteActor, DiscreteCritic

    torch.manual_seed(0)
    env = gym.make("CartPole-v1")
    shape = env.observation_space.shape
    actor = DiscreteActor(preprocess_net=Net(state_shape=shape, hidden_sizes=[16]), action_shape=env.action_space.n)
    critic = DiscreteCritic(preprocess_net=Net(state_shape=shape, hidden_sizes=[16]))
    policy = ProbabilisticActorPolicy(
        actor=actor, dist_fn=torch.distributions.Categorical, action_space=env.action_space, deterministic_eval=True, action_scaling=False
    )
    algorithm = PPO(policy=policy, critic=critic, optim=AdamOptimizerFactory(lr=1e-3))
    training = Collector(algorithm, DummyVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(2)]), VectorReplayBuffer(512, 2))
    test = Collector(algorithm, DummyVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(2)]))

    def save_checkpoint(epoch, env_step, update_step):
        torch.save(algorithm.state_dict(), checkpoint)
        return str(checkpoint)

    return algorithm.run_training(
        OnPolicyTrainerParams(
            training_collector=training, test_collector=test, max_epochs=epochs, epoch_num_steps=256, collection_step_num_env_steps=128,
            update_step_num_repetitions=1, test_step_num_episodes=2, batch_size=64, logger=logger, show_progress=False,
            save_checkpoint_fn=save_checkpoint if checkpoint else None, resume_from_log=resume,
        )
    )  # fmt: skip


def _logged(writes):
    """(stored name, axis, step, value) of every value Tianshou's trainer wrote."""
    return [
        (f"{step_type.split('/')[0]}/{key}", AXES[step_type.split("/")[0]], step, value)
        for step_type, step, data in writes
        for key, value in data.items()
        if not step_type.startswith("save/")
    ]


@pytest.mark.slow
def test_ppo_values_reach_every_tracker_once_on_the_axis_of_their_step_type(tmp_path):
    """Each `write(step_type, step, data)` of Tianshou's PPO trainer is in
    progress.csv, MLflow and W&B once: under Tianshou's TensorBoard tag
    (`training/returns_stat/mean`), at `step` on the axis the step type names
    (env steps, train_iter for update steps, epochs), with canonical twins."""
    logger = Recording(config(tmp_path / "runs", name="ppo"), training_interval=1, update_interval=1)
    _train(logger, epochs=2)
    logger.finalize()
    step_types = {step_type for step_type, _, _ in logger.writes}
    assert step_types == {"training/env_step", "test/env_step", "update/update_step", "info/epoch"}
    logged = _logged(logger.writes)
    twins = {"training/returns_stat/mean": "collector/reward_mean", "test/returns_stat/mean": "evaluator/reward_mean", "update/loss/mean": "learner/total_loss_avg"}
    logged += [(twins[name], axis, step, value) for name, axis, step, value in logged if name in twins]
    assert_once_everywhere(logger.logger.run_dir, logged)


@pytest.mark.slow
def test_save_data_and_restore_data_continue_the_run(tmp_path):
    """`save_data` keeps the checkpoint in the run's ckpt/ and the counters; a
    second process's logger made with `resume=` gives them back to Tianshou's
    trainer (`resume_from_log=True`), which continues the same run's steps."""
    checkpoint = tmp_path / "policy.pt"
    first = Recording(config(tmp_path / "runs", name="resumed"), save_interval=1, training_interval=1, update_interval=1)
    _train(first, epochs=1, checkpoint=checkpoint)
    first.finalize()
    run_dir = first.logger.run_dir
    saved = [(e.data, e.steps) for e in read_journal(run_dir) if e.namespace == "save"]
    assert saved == [({"epoch": 1, "env_step": 256, "gradient_step": 2}, {"epoch": 1, "env_steps": 256, "train_iter": 2})]
    assert (run_dir / "ckpt" / "iteration_1.pth.tar").is_file()

    second = Recording(config(tmp_path / "runs"), resume=str(run_dir), save_interval=1, training_interval=1, update_interval=1)
    assert second.restore_data() == (1, 256, 2)
    _train(second, epochs=2, resume=True, checkpoint=checkpoint)
    second.finalize()
    assert second.logger.run_dir == run_dir
    training_steps = [step for step_type, step, _ in second.writes if step_type == "training/env_step"]
    assert training_steps and min(training_steps) > 256  # the second epoch only
    assert [step for step_type, step, _ in second.writes if step_type == "info/epoch"] == [2]
    restored = RLTrackLogger.restore_logged_data(str(run_dir))
    assert list(restored["info"]["update_step"]) == [2.0, 4.0]
