"""SB3's `learn()` called again, a saved model loaded, and SB3's logger set up
by SB3 or by the user, with rltrack attached: what each counter means across
calls (rltrack.adapters.sb3's module docstring and the README say it), read
back from real PPO and DQN runs on CartPole."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("stable_baselines3")

from stable_baselines3 import DQN, PPO  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.logger import configure  # noqa: E402

import rltrack  # noqa: E402
from rltrack.adapters.sb3 import RLTrackCallback, attach  # noqa: E402

N_ENVS = 2
N_STEPS = 64
ROUND = N_ENVS * N_STEPS  # env steps per PPO rollout-and-update round


def make_logger(tmp_path: Path, name: str) -> Any:
    return rltrack.make_logger({"run": {"root": str(tmp_path / "runs"), "name": name}, "backends": {"use": ["memory"]}})


def ppo(**kwargs: Any) -> PPO:
    env = make_vec_env("CartPole-v1", n_envs=N_ENVS, seed=0)
    return PPO("MlpPolicy", env, n_steps=N_STEPS, batch_size=64, n_epochs=1, seed=0, device="cpu", policy_kwargs={"net_arch": [16]}, **kwargs)


def collector_blocks(logger: Any) -> list[Any]:
    return [e for e in logger.backends["memory"].events if e.namespace == "collector" and e.kind == "scalars" and "episode_count" in e.data]


def assert_blocks_add_up(blocks: list[Any], start_steps: int = 0) -> None:
    """Each block's envstep_count is the env steps since the one before, and the totals are SB3's own count."""
    previous = start_steps
    for block in blocks:
        assert block.data["envstep_count"] == block.steps["env_steps"] - previous >= 0, block
        assert block.data["total_envstep_count"] == block.steps["env_steps"]
        previous = block.steps["env_steps"]


@pytest.mark.parametrize("how", ["attach", "callback"])
def test_learn_again_keeps_counting_and_a_reset_restarts_the_count(tmp_path: Path, how: str) -> None:
    logger = make_logger(tmp_path, how)
    model = ppo()
    callback = None
    if how == "attach":
        attach(model, logger)
    else:
        callback = RLTrackCallback(logger, log_hparams=False)
    model.learn(4 * ROUND, callback=callback)
    model.learn(2 * ROUND, callback=callback, reset_num_timesteps=False)
    assert logger.flush(timeout=120), "the pipeline did not take the records in 120 s"
    continued = collector_blocks(logger)
    assert [b.steps["env_steps"] for b in continued] == [ROUND * i for i in range(1, 7)]
    assert [b.steps["train_iter"] for b in continued] == list(range(1, 7))  # SB3's time/iterations restarts at 1
    assert_blocks_add_up(continued)
    episodes = [b.data["total_episode_count"] for b in continued]
    assert episodes == sorted(episodes) and episodes[-1] == sum(b.data["episode_count"] for b in continued)

    model.learn(2 * ROUND, callback=callback, reset_num_timesteps=True)  # SB3 starts its count over
    logger.close()
    restarted = collector_blocks(logger)[len(continued) :]
    assert [b.steps["env_steps"] for b in restarted] == [ROUND, 2 * ROUND]
    assert [b.steps["train_iter"] for b in restarted] == [1, 2]  # with num_timesteps, as SB3's own records
    assert_blocks_add_up(restarted)
    assert [b.data["total_episode_count"] for b in restarted] == [restarted[0].data["episode_count"], sum(b.data["episode_count"] for b in restarted)]


def test_a_loaded_model_counts_on(tmp_path: Path) -> None:
    first = make_logger(tmp_path, "first")
    model = ppo()
    attach(model, first)
    model.learn(3 * ROUND)
    first.close()
    model.save(tmp_path / "model.zip")
    loaded = PPO.load(tmp_path / "model.zip", env=make_vec_env("CartPole-v1", n_envs=N_ENVS, seed=1), device="cpu")
    second = make_logger(tmp_path, "second")
    attach(loaded, second)
    loaded.learn(2 * ROUND, reset_num_timesteps=False)
    second.close()
    blocks = collector_blocks(second)
    assert [(b.steps["env_steps"], b.steps["train_iter"]) for b in blocks] == [(4 * ROUND, 4), (5 * ROUND, 5)]
    assert_blocks_add_up(blocks, start_steps=3 * ROUND)


def test_off_policy_train_iter_never_goes_back(tmp_path: Path) -> None:
    logger = make_logger(tmp_path, "dqn")
    model = DQN("MlpPolicy", make_vec_env("CartPole-v1", n_envs=1, seed=0), learning_starts=50, train_freq=4, seed=0, device="cpu", policy_kwargs={"net_arch": [16]})
    attach(model, logger)
    model.learn(400, log_interval=2)
    model.learn(400, log_interval=2, reset_num_timesteps=True)
    logger.close()
    iters = [e.steps["train_iter"] for e in logger.backends["memory"].events if e.source == "sb3" and "train_iter" in e.steps]
    assert iters and iters == sorted(iters) and 0 < iters[-1] <= model._n_updates  # SB3 keeps n_updates across calls


def test_attach_lets_learn_name_sb3s_tensorboard_directory(tmp_path: Path) -> None:
    logger = make_logger(tmp_path, "named")
    model = ppo(tensorboard_log=str(tmp_path / "tb"))
    attach(model, logger)
    model.learn(2 * ROUND, tb_log_name="myexp")
    model.learn(ROUND, tb_log_name="myexp")
    logger.close()
    assert sorted(p.name for p in (tmp_path / "tb").iterdir()) == ["myexp_1", "myexp_2"]  # as SB3 alone names them
    assert [b.steps["env_steps"] for b in collector_blocks(logger)] == [ROUND, 2 * ROUND, ROUND]


def test_a_logger_set_after_attach_keeps_rltrack_attached(tmp_path: Path) -> None:
    logger = make_logger(tmp_path, "set")
    model = ppo()
    writer = attach(model, logger)
    model.set_logger(configure(str(tmp_path / "sb3"), ["csv"]))
    model.learn(2 * ROUND)
    logger.close()
    assert writer in model.logger.output_formats
    assert [b.steps["env_steps"] for b in collector_blocks(logger)] == [ROUND, 2 * ROUND]
    native = [e for e in logger.backends["memory"].events if e.namespace == "rollout" and "ep_rew_mean" in e.data]
    assert len(native) == 2 and (tmp_path / "sb3" / "progress.csv").read_text().count("\n") == 3  # SB3's csv too: header, two rows


def test_a_loaded_off_policy_model_counts_episodes_on_as_sb3(tmp_path: Path) -> None:
    """DQN saves its episode count (`time/episodes`) in the zip: the collector's
    `total_episode_count` carries on from it, as `total_envstep_count` does from `num_timesteps`."""

    def dqn_dumps(logger: Any) -> list[tuple[int, int]]:
        events = logger.backends["memory"].events
        sb3 = {e.steps["env_steps"]: e.data["episodes"] for e in events if e.namespace == "time" and "episodes" in e.data}
        return [(b.data["total_episode_count"], sb3[b.steps["env_steps"]]) for b in collector_blocks(logger)]

    first = make_logger(tmp_path, "first")
    model = DQN("MlpPolicy", make_vec_env("CartPole-v1", n_envs=N_ENVS, seed=0), learning_starts=50, seed=0, device="cpu", policy_kwargs={"net_arch": [16]})
    attach(model, first)
    model.learn(300, log_interval=4)
    first.close()
    model.save(tmp_path / "dqn.zip")
    loaded = DQN.load(tmp_path / "dqn.zip", env=make_vec_env("CartPole-v1", n_envs=N_ENVS, seed=1), device="cpu")
    assert loaded._episode_num > 0
    second = make_logger(tmp_path, "second")
    attach(loaded, second)
    loaded.learn(300, log_interval=4, reset_num_timesteps=False)
    second.close()
    for dumps in (dqn_dumps(first), dqn_dumps(second)):
        assert len(dumps) >= 3 and all(ours == sb3s for ours, sb3s in dumps), dumps
