"""SB3 PPO and DQN on CartPole with rltrack's DI-engine blocks: the collector and
evaluator numbers equal those computed here from the episodes SB3's `Monitor`
wrote to its CSV files, the text logs parsed back equal the tfevents on both
axes (the buffer's throughput tables as DI-engine's `buffer_sec/`), each
evaluation is one evaluator table and each `collect end:` a collection, the
buffer tables count transitions (n_envs of them per SB3 buffer row) at the
step the buffer holds, and canonical names leave SB3's twins out."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pandas as pd
import pytest
import torch
from stable_baselines3 import DQN, PPO
from stable_baselines3.common.callbacks import EvalCallback
from stable_baselines3.common.monitor import Monitor

import rltrack
from rltrack.adapters.sb3 import RLTrackCallback, attach
from stage_reader import Block, holds, read_blocks, read_info_lines, read_tfevents

EVAL_EPISODES = 3
DINGINE_RUN = Path(__file__).parents[1] / "helpers" / "fixtures" / "dingine_dqn_cartpole"  # a real DI-engine run's files


def train(tmp_path: Path, algo: type, timesteps: int, log_interval: int, *, attached: str = "", **kwargs: Any) -> dict[str, Any]:
    """`attached`: "" (RLTrackCallback in learn()), "alone" (`attach` and no
    rltrack callback: the one-line idiom), "both" (`attach`, then the callback too)."""
    logger = rltrack.make_logger(
        {"run": {"root": str(tmp_path / "runs"), "name": algo.__name__}, "backends": {"use": ["local"], "local": {"tb_axes": ["iter", "step"]}}}
    )
    env = Monitor(gym.make("CartPole-v1"), str(tmp_path / "train"))
    eval_env = Monitor(gym.make("CartPole-v1"), str(tmp_path / "eval"))
    model = algo("MlpPolicy", env, seed=0, device="cpu", **kwargs)
    evaluation = EvalCallback(eval_env, eval_freq=timesteps // 4, n_eval_episodes=EVAL_EPISODES, callback_on_new_best=RLTrackCallback(logger), verbose=0)
    callbacks = [RLTrackCallback(logger, buffer_seconds=0.05), evaluation]
    if attached:
        attach(model, logger)
    if attached == "alone":
        callbacks = []
    model.learn(timesteps, callback=callbacks, log_interval=log_interval)
    logger.close()
    env.close()
    eval_env.close()
    monitor = {name: pd.read_csv(tmp_path / f"{name}.monitor.csv", skiprows=1) for name in ("train", "eval")}
    return {"run_dir": logger.run_dir, "monitor": monitor, "model": model}


@pytest.fixture(scope="module")
def ppo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return train(tmp_path_factory.mktemp("ppo"), PPO, 2048, 1, n_steps=128, batch_size=64, n_epochs=2)


@pytest.fixture(scope="module")
def ppo_attached(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return train(tmp_path_factory.mktemp("ppo_attached"), PPO, 2048, 1, attached="alone", n_steps=128, batch_size=64, n_epochs=2)


@pytest.fixture(scope="module")
def ppo_attached_and_callback(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return train(tmp_path_factory.mktemp("ppo_both"), PPO, 2048, 1, attached="both", n_steps=128, batch_size=64, n_epochs=2)


@pytest.fixture(scope="module")
def dqn(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return train(tmp_path_factory.mktemp("dqn"), DQN, 2000, 5, learning_starts=200, buffer_size=800, train_freq=4)


def blocks(run: dict[str, Any], namespace: str) -> list[Block]:
    """The stage blocks of a namespace (SB3's own tables of the same namespace have no `episode_count`)."""
    return [b for b in read_blocks(run["run_dir"] / "log" / namespace / f"{namespace}_logger.txt") if "episode_count" in b.values]


def assert_rewards_match(block: Block, rewards: np.ndarray, lengths: np.ndarray) -> None:
    values = block.values
    assert values["episode_count"] == len(rewards)
    if len(rewards) == 0:
        assert "reward_mean" not in values and "each_reward" not in values and "eval_episode_return" not in values
        return
    returns = "eval_episode_return" if "eval_episode_return" in values else "each_reward"  # the evaluator's: DI-engine 0.5's name
    assert values[returns] == pytest.approx(rewards.tolist(), rel=1e-5)
    assert values["reward_mean"] == pytest.approx(rewards.mean(), rel=1e-5)
    assert values["reward_std"] == pytest.approx(rewards.std(), rel=1e-5, abs=1e-6)
    assert values["reward_max"] == pytest.approx(rewards.max()) and values["reward_min"] == pytest.approx(rewards.min())
    assert values["avg_envstep_per_episode"] == pytest.approx(lengths.mean(), rel=1e-5)


@pytest.mark.parametrize("algo", ["ppo", "dqn", "ppo_attached", "ppo_attached_and_callback"])
def test_collector_blocks_equal_the_monitor_episodes(algo: str, request: pytest.FixtureRequest) -> None:
    run = request.getfixturevalue(algo)
    episodes = run["monitor"]["train"]
    collector = blocks(run, "collector")
    assert len(collector) >= 4
    start, previous_steps = 0, 0
    for block in collector:
        count = block.values["episode_count"]
        chunk = episodes.iloc[start : start + count]
        assert_rewards_match(block, chunk["r"].to_numpy(), chunk["l"].to_numpy())
        start += count
        assert block.values["envstep_count"] == block.steps["env_steps"] - previous_steps
        assert block.values["total_envstep_count"] == block.steps["env_steps"]
        assert block.values["total_episode_count"] == start
        previous_steps = block.steps["env_steps"]
    assert start > 10  # the blocks covered the episodes in order, none skipped or counted twice


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_evaluator_blocks_equal_the_eval_monitor_episodes(algo: str, request: pytest.FixtureRequest) -> None:
    run = request.getfixturevalue(algo)
    episodes = run["monitor"]["eval"]
    evaluator = blocks(run, "evaluator")
    assert len(evaluator) == 4 and len(episodes) == 4 * EVAL_EPISODES
    for i, block in enumerate(evaluator):
        chunk = episodes.iloc[i * EVAL_EPISODES : (i + 1) * EVAL_EPISODES]
        assert_rewards_match(block, chunk["r"].to_numpy(), chunk["l"].to_numpy())
        assert block.values["envstep_count"] == chunk["l"].sum()
        assert block.values["train_iter"] == block.steps["train_iter"]
    info = read_info_lines(run["run_dir"] / "log" / "evaluator" / "evaluator_logger.txt")
    finals = [float(line.split("final reward: ")[1].split(",")[0]) for line in info if "finish episode" in line]
    assert finals == pytest.approx(episodes["r"].tolist(), abs=1e-4)
    named = [b.values["ckpt_name"] for b in evaluator if "ckpt_name" in b.values]
    new_best = [b.values["reward_mean"] > max([-math.inf] + [a.values["reward_mean"] for a in evaluator[:i]]) for i, b in enumerate(evaluator)]
    assert ["ckpt_name" in b.values for b in evaluator] == new_best  # every evaluation that wrote a checkpoint names it, and only those
    assert named and all(re.fullmatch(r"iteration_\d+\.pth\.tar", name) and (run["run_dir"] / "ckpt" / name).is_file() for name in named)
    for block in (b for b in evaluator if "ckpt_name" in b.values):  # named as DI-engine names it: by the evaluated train_iter
        assert block.values["ckpt_name"] == f"iteration_{int(block.values['train_iter'])}.pth.tar"
        assert torch.load(run["run_dir"] / "ckpt" / block.values["ckpt_name"], map_location="cpu")["last_step"] == block.steps["env_steps"]
    best = max((b for b in evaluator if "ckpt_name" in b.values), key=lambda b: b.values["reward_mean"])
    assert (run["run_dir"] / "ckpt" / "ckpt_best.pth.tar").read_bytes() == (run["run_dir"] / "ckpt" / best.values["ckpt_name"]).read_bytes()


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_text_blocks_equal_the_tfevents_on_both_axes(algo: str, request: pytest.FixtureRequest) -> None:
    run = request.getfixturevalue(algo)
    tfevents = read_tfevents(run["run_dir"] / "log" / "serial")
    compared = 0
    namespaces = ("collector", "evaluator", "learner") + (("buffer",) if algo == "dqn" else ())  # PPO has no replay buffer
    assert not (run["run_dir"] / "log" / "buffer").exists() or algo == "dqn"
    # as DI-engine: no tag for the counter that is the axis itself
    not_plotted = {("evaluator", "iter", "train_iter"), ("evaluator", "step", "train_iter"), ("collector", "step", "total_envstep_count")}
    for namespace in namespaces:
        for period, block in enumerate(read_blocks(run["run_dir"] / "log" / namespace / f"{namespace}_logger.txt")):
            if namespace == "buffer":  # DI-engine's throughput tags: buffer_sec/<key> at the table's number
                for key, value in block.values.items():
                    assert f"buffer_iter/{key}" not in tfevents and f"buffer_step/{key}" not in tfevents
                    assert tfevents[f"buffer_sec/{key}"][period] == [pytest.approx(value)]
                    compared += 1
                continue
            for key, value in block.values.items():
                if isinstance(value, (int, float)):
                    for name, axis in (("iter", "train_iter"), ("step", "env_steps")):
                        tag = f"{namespace}_{name}/{key}"
                        if (namespace, name, key) in not_plotted:
                            assert tag not in tfevents
                        elif axis in block.steps:  # DQN before its first gradient step has no train_iter yet
                            assert holds(tfevents[tag], block.steps[axis], value), (namespace, key, block.steps)
                    compared += 1
    assert compared > 100
    if algo == "dqn":
        tables = read_blocks(run["run_dir"] / "log" / "buffer" / "buffer_logger.txt")
        assert sorted(tfevents["buffer_sec/current_have"]) == list(range(len(tables))) and len(tables) >= 3


@pytest.mark.parametrize("algo", ["ppo", "dqn", "ppo_attached"])
def test_learner_blocks_and_the_policy_printed_once(algo: str, request: pytest.FixtureRequest) -> None:
    run = request.getfixturevalue(algo)
    learner = [b for b in read_blocks(run["run_dir"] / "log" / "learner" / "learner_logger.txt") if "total_loss_avg" in b.values]
    assert learner and all(b.values["cur_lr_avg"] == pytest.approx(run["model"].learning_rate) for b in learner)
    text = (run["run_dir"] / "log" / "learner" / "learner_logger.txt").read_text()
    assert text.count("[INFO] model:") == 1 and str(run["model"].policy) in text


def test_dqn_buffer_tables_follow_the_replay_buffer(dqn: dict[str, Any]) -> None:
    buffer = read_blocks(dqn["run_dir"] / "log" / "buffer" / "buffer_logger.txt")
    assert len(buffer) >= 3
    for block in buffer:  # the buffer holds the transitions of the steps up to its table's, one env: one per step
        assert block.values["current_have"] == min(block.steps["env_steps"], 800)
    pushed = sum(b.values["pushed_in"] for b in buffer)
    removed = sum(b.values["removed"] for b in buffer)
    assert pushed - removed == buffer[-1].values["current_have"]  # the buffer started empty
    assert buffer[-1].values["current_have"] == 800 and removed > 0  # full: rows were overwritten
    batch = dqn["model"].batch_size
    assert all(b.values["sampled_out"] % batch == 0 for b in buffer)


def test_dqn_buffer_tables_follow_di_engines_heading_line(dqn: dict[str, Any]) -> None:
    """DI-engine's advanced buffer logs `In the past <seconds> seconds, buffer
    statistics is as follows:` before each throughput table, the seconds it
    covers to one decimal (the recorded real run's log: 1.0 and 1.1 for a
    1-second period); so does rltrack's (`buffer_seconds=0.05`)."""
    heading = re.compile(r"In the past (\d+\.\d) seconds, buffer statistics is as follows:")
    dingine = (DINGINE_RUN.parent / "dingine_dqn_cartpole_advanced" / "log" / "buffer" / "buffer_logger.txt").read_text()
    seconds = [float(s) for s in heading.findall(dingine)]
    assert len(seconds) == dingine.count("| pushed_in ") > 10 and all(s >= 1.0 for s in seconds)
    log = (dqn["run_dir"] / "log" / "buffer" / "buffer_logger.txt").read_text()
    messages = re.findall(r"^\[[^\]]*\]\[[^\]]*\]\[INFO\] (.*)$", log, re.M)
    assert len(messages) == 2 * log.count("| pushed_in ") >= 6
    assert all(float(heading.fullmatch(m)[1]) >= 0.05 for m in messages[::2]), messages[::2]
    assert messages[1::2] == [""] * (len(messages) // 2)  # each followed by its table's line


def test_attach_leaves_the_env_as_sb3_and_evalcallback_expect(tmp_path):
    """`attach` observes the steps without wrapping the env: the model's env
    keeps its type, EvalCallback raises no type warning, and
    `sync_envs_normalization` (which walks both wrapper chains side by side)
    still copies the training VecNormalize's statistics into the eval one."""
    import warnings

    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    logger = rltrack.make_logger({"run": {"root": str(tmp_path / "runs"), "name": "normalized"}, "backends": {"use": ["local"]}})
    env = VecNormalize(make_vec_env("CartPole-v1", n_envs=2, seed=0))
    eval_env = VecNormalize(make_vec_env("CartPole-v1", n_envs=1, seed=1), training=False)
    model = PPO("MlpPolicy", env, seed=0, device="cpu", n_steps=64, batch_size=64, n_epochs=1)
    attach(model, logger)
    assert type(model.get_env()) is VecNormalize
    evaluation = EvalCallback(eval_env, eval_freq=64, n_eval_episodes=2, verbose=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.learn(256, callback=evaluation)
    logger.close()
    assert not [w for w in caught if "not of the same type" in str(w.message)]
    assert eval_env.obs_rms.count == env.obs_rms.count > 1  # copied at the last evaluation
    np.testing.assert_array_equal(eval_env.obs_rms.mean, env.obs_rms.mean)
    blocks = read_blocks(logger.run_dir / "log" / "collector" / "collector_logger.txt")
    assert sum(block.values["episode_count"] for block in blocks) > 0  # the hook saw the Monitor episodes


def buffer_run(tmp_path: Path, algo: type, env_id: str, n_envs: int, timesteps: int, *, attached: bool, **kwargs: Any) -> tuple[list[Block], Any]:
    """`algo` on `n_envs` envs with a buffer table at every step (`buffer_seconds`
    tiny), through `RLTrackCallback` or `attach` alone; the tables read back."""
    from stable_baselines3.common.env_util import make_vec_env

    logger = rltrack.make_logger({"run": {"root": str(tmp_path / "runs"), "name": algo.__name__}, "backends": {"use": ["local"]}})
    model = algo("MlpPolicy", make_vec_env(env_id, n_envs=n_envs, seed=0), seed=0, device="cpu", **kwargs)
    if attached:
        attach(model, logger, buffer_seconds=1e-9)
    model.learn(timesteps, callback=None if attached else RLTrackCallback(logger, buffer_seconds=1e-9))
    logger.close()
    return read_blocks(logger.run_dir / "log" / "buffer" / "buffer_logger.txt"), model


@pytest.mark.parametrize(
    "algo, env_id, n_envs, capacity, attached",
    [("DQN", "CartPole-v1", 4, 800, False), ("DQN", "CartPole-v1", 4, 800, True), ("TD3", "Pendulum-v1", 2, 200, False), ("SAC", "Pendulum-v1", 1, 10_000, False)],
)
def test_buffer_tables_count_transitions_at_the_steps_they_hold(tmp_path: Path, algo: str, env_id: str, n_envs: int, capacity: int, attached: bool) -> None:
    """DI-engine counts transitions: with n envs an SB3 buffer row holds n of
    them. The buffer started empty and is never reset, so after E env steps it
    holds min(E, capacity) transitions, and every transition was pushed once."""
    import stable_baselines3

    steps = 1000 if algo == "DQN" else 300
    buffer, model = buffer_run(
        tmp_path, getattr(stable_baselines3, algo), env_id, n_envs, steps, attached=attached,
        buffer_size=capacity, learning_starts=100, batch_size=32, train_freq=4 if algo == "DQN" else 1, policy_kwargs={"net_arch": [16]},
    )  # fmt: skip
    assert len(buffer) > 50
    for block in buffer:
        assert block.values["current_have"] == min(block.steps["env_steps"], capacity), block
    assert buffer[-1].values["current_have"] == min(buffer[-1].steps["env_steps"], capacity)
    assert sum(b.values["pushed_in"] for b in buffer) == buffer[-1].steps["env_steps"]  # every transition, from the first
    assert sum(b.values["pushed_in"] - b.values["removed"] for b in buffer) == buffer[-1].values["current_have"]
    if capacity < steps:
        assert buffer[-1].values["current_have"] == capacity and sum(b.values["removed"] for b in buffer) > 0
    assert sum(b.values["sampled_out"] for b in buffer) <= model._n_updates * 32


def test_buffer_tables_are_at_the_gradient_steps_done(tmp_path: Path) -> None:
    """An off-policy `train_iter` is SB3's `n_updates`: a buffer table between two
    dumps is at the gradient steps done by then, not at the last dump's count
    (nor without `train_iter` before the first dump). TD3 with `train_freq=1`
    and 2 envs: after `learning_starts`, each step's `train()` does one
    gradient step, so consecutive tables (one a step) are one apart."""
    from stable_baselines3 import TD3

    buffer, model = buffer_run(
        tmp_path, TD3, "Pendulum-v1", 2, 500, attached=False, buffer_size=1000, learning_starts=100, batch_size=32, policy_kwargs={"net_arch": [16]}
    )  # 2 envs, 200-step episodes: SB3's first dump is at 800 env steps, after this run
    iters = [block.steps["train_iter"] for block in buffer]
    assert iters[0] == 0 and iters == sorted(iters)
    trained = [i for i in iters if i > 0]
    assert trained == list(range(1, len(trained) + 1)) and trained[-1] == model._n_updates - 1  # the last step's train() comes after its table


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_one_evaluator_block_per_evaluation_holding_sb3s_own_values(algo: str, request: pytest.FixtureRequest) -> None:
    """SB3's `eval/` dump and the evaluator block of the same evaluation are one
    table, as DI-engine writes one per evaluation; SB3's values are in it,
    after DI-engine's keys in DI-engine's order (a real DI-engine run's table)."""
    run = request.getfixturevalue(algo)
    tables = read_blocks(run["run_dir"] / "log" / "evaluator" / "evaluator_logger.txt")
    assert len(tables) == 4  # EVAL_FREQ: 4 evaluations
    dingine = list(read_blocks(DINGINE_RUN / "log" / "evaluator" / "evaluator_logger.txt")[0].values)
    for table in tables:
        assert table.values["eval/mean_reward"] == table.values["reward_mean"]  # SB3's key as written, filed under its stage
        assert table.values["eval/mean_ep_length"] == table.values["avg_envstep_per_episode"]
        keys = list(table.values)
        assert keys == [key for key in dingine if key in keys] + ["eval/mean_reward", "eval/mean_ep_length"]


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_every_collection_block_holds_a_collection(algo: str, request: pytest.FixtureRequest) -> None:
    """DQN records its exploration rate at every step, so EvalCallback's dump
    carries it: that is no collection, and it must not read as one."""
    run = request.getfixturevalue(algo)
    text = (run["run_dir"] / "log" / "collector" / "collector_logger.txt").read_text()
    sections = text.split("collect end:\n")[1:]
    assert len(sections) >= 4 and all(section.startswith("episode_count: ") for section in sections)
    if algo == "dqn":  # still in the text log, as a plain table
        assert text.count("| rollout/exploration_rate |") == 4


def test_without_stage_blocks_an_evaluations_dump_is_no_collection(tmp_path: Path) -> None:
    """`attach(model, logger, stages=False)`: SB3's own keys and their twins only. EvalCallback's
    dump records `time/total_timesteps`, whose twin is the collector's running total: the
    collector log holds it in a plain table there, and every `collect end:` is a collection."""
    logger = rltrack.make_logger({"run": {"root": str(tmp_path / "runs"), "name": "dqn"}, "backends": {"use": ["local"]}})
    model = DQN("MlpPolicy", Monitor(gym.make("CartPole-v1")), seed=0, device="cpu", learning_starts=100, train_freq=4, policy_kwargs={"net_arch": [16]})
    attach(model, logger, stages=False)
    model.learn(2000, callback=EvalCallback(Monitor(gym.make("CartPole-v1")), eval_freq=500, n_eval_episodes=2, verbose=0), log_interval=4)
    logger.close()
    text = (logger.run_dir / "log" / "collector" / "collector_logger.txt").read_text()
    sections = text.split("collect end:\n")[1:]
    assert len(sections) >= 10 and all(section.startswith("episode_count: ") for section in sections)
    totals = re.findall(r"\[env_steps=(\d+) [^\]]*\]\[INFO\] \n(?:\|[^\n]*\n|\+[^\n]*\n)*?\| total_envstep_count +\| (\d+) ", text)
    assert [(int(step), int(total)) for step, total in totals] == [(s, s) for s in (500, 1000, 1500, 2000)]  # a plain table


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_every_training_iteration_result_holds_the_learner_block(algo: str, request: pytest.FixtureRequest) -> None:
    """EvalCallback's dump carries the `train/` values SB3 recorded since the
    algorithm's last dump (PPO's losses, DQN's `n_updates`): the learner block
    of those `train()` calls goes with them, so that no `=== Training
    Iteration N Result ===` table lacks DI-engine's `cur_lr_avg` and `total_loss_avg`."""
    run = request.getfixturevalue(algo)
    text = (run["run_dir"] / "log" / "learner" / "learner_logger.txt").read_text()
    results = re.findall(r"=== Training Iteration \d+ Result ===\n[^\n]*\n\+[-+]+\n\| Name +\|([^\n]*)", text)
    assert len(results) == text.count("=== Training Iteration ") >= 4
    assert all([cell.strip() for cell in names.split("|")][:2] == ["cur_lr_avg", "total_loss_avg"] for names in results), results
    learner = read_blocks(run["run_dir"] / "log" / "learner" / "learner_logger.txt")
    evaluations = read_blocks(run["run_dir"] / "log" / "evaluator" / "evaluator_logger.txt")
    at_evaluations = [b for b in learner if b.steps in [e.steps for e in evaluations]]
    assert len(at_evaluations) == len(evaluations) == 4  # SB3's train/ values at each evaluation's dump, with their block
    assert all(b.values["cur_lr_avg"] == b.values["train/learning_rate"] for b in at_evaluations)


def test_canonical_names_leave_sb3s_twins_out_when_blocks_carry_them(tmp_path: Path) -> None:
    logger = rltrack.make_logger({"run": {"root": str(tmp_path / "runs"), "name": "canonical", "names": "canonical"}, "backends": {"use": ["local"]}})
    model = DQN("MlpPolicy", Monitor(gym.make("CartPole-v1")), seed=0, device="cpu", learning_starts=100, train_freq=4, policy_kwargs={"net_arch": [16]})
    evaluation = EvalCallback(Monitor(gym.make("CartPole-v1")), eval_freq=200, n_eval_episodes=2, verbose=0)
    model.learn(600, callback=[RLTrackCallback(logger, buffer_seconds=0.05), evaluation], log_interval=4)
    logger.close()
    tags = set(read_tfevents(logger.run_dir / "log" / "serial"))
    assert {"collector/reward_mean", "evaluator/reward_mean", "learner/total_loss_avg", "learner/cur_lr_avg", "collector/total_envstep_count"} <= tags
    twins = {"eval/mean_reward", "eval/mean_ep_length", "rollout/ep_rew_mean", "rollout/ep_len_mean", "train/loss", "train/learning_rate", "time/total_timesteps", "time/fps"}
    assert not twins & tags
    assert {"rollout/exploration_rate", "train/n_updates"} <= tags  # no canonical name: kept as they are
