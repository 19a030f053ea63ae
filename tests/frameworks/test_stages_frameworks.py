"""The DI-engine stage blocks from RLlib, Acme and SpinningUp: each framework
really runs, the test records every finished episode itself (an environment
wrapper, the loop's own returns), and the collector/evaluator/learner blocks in
`log/<namespace>/<namespace>_logger.txt` (parsed back by tests/helpers/stage_reader.py)
and in the tfevents (TensorBoard's EventAccumulator) are compared with what the
test computes from those episodes with numpy."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rltrack
from growing_files import whole_lines
from stage_reader import Block, read_blocks, read_info_lines, read_tfevents


def _local_config(tmp_path: Path, name: str) -> dict[str, Any]:
    return {"run": {"root": str(tmp_path / "runs"), "name": name}, "backends": {"use": ["local"]}}


#: A key every block of the namespace has (the text logs also table the frameworks' own per-record values).
_BLOCK_MARKERS = {"collector": "episode_count", "evaluator": "episode_count", "learner": None}


def _blocks(run_dir: Path, namespace: str, marker: str | None = None) -> list[Block]:
    """The stage blocks of a namespace's text log: the tables that have `marker`
    (default: `_BLOCK_MARKERS`), or every table."""
    marker = marker or _BLOCK_MARKERS[namespace]
    blocks = read_blocks(run_dir / "log" / namespace / f"{namespace}_logger.txt")
    return [b for b in blocks if marker is None or marker in b.values]


def assert_episode_stats(block: Block, returns: list[float], lengths: list[int] | None) -> None:
    """`block`'s reward statistics and counts equal numpy's on the recorded episodes
    (the evaluator's grids print DI-engine's 6 decimals, its returns under
    DI-engine 0.5's `eval_episode_return`; the collector's lines full precision)."""
    values = block.values
    assert values["episode_count"] == len(returns)
    assert values["reward_mean"] == pytest.approx(np.mean(returns), rel=1e-5)
    assert values["reward_std"] == pytest.approx(np.std(returns), rel=1e-5, abs=1e-6)
    assert values["reward_max"] == pytest.approx(np.max(returns), rel=1e-5)
    assert values["reward_min"] == pytest.approx(np.min(returns), rel=1e-5)
    assert values["eval_episode_return" if "eval_episode_return" in values else "each_reward"] == pytest.approx(returns, rel=1e-5)
    if lengths is not None:
        assert values["avg_envstep_per_episode"] == pytest.approx(np.mean(lengths), rel=1e-5)


def assert_text_equals_tfevents(blocks: list[Block], namespace: str, tfevents: dict[str, dict[int, list[float]]], axis: str) -> None:
    """Every number of every text block equals the one tfevents scalar of that tag
    at the block's `axis` step (TensorBoard keeps float32: 6 significant digits; the
    grids 6 decimals), but the evaluator's eval_episode_return_mean, a text-log
    repeat of reward_mean."""
    compared = 0
    for block in blocks:
        for key, value in block.values.items():
            if isinstance(value, (int, float)) and key != "eval_episode_return_mean":
                tag = f"{namespace}/{key}" if f"{namespace}/{key}" in tfevents else key  # a value filed under the stage by its whole name
                assert tfevents[tag][block.steps[axis]] == [pytest.approx(value, rel=1e-5, abs=1e-6)], key
                compared += 1
    assert compared >= len(blocks)


# ---- SpinningUp -------------------------------------------------------------------


def _spinup_style_loop(logger: Any, epochs: int, steps_per_epoch: int, test_episodes: int) -> list[dict[str, list]]:
    """SpinningUp's VPG loop shape on CartPole with a linear softmax policy and a
    linear value function (one gradient step each per epoch); returns, per epoch,
    the episodes and losses this loop saw itself."""
    import gymnasium as gym
    import torch

    torch.manual_seed(0)
    env, test_env = gym.make("CartPole-v1"), gym.make("CartPole-v1")
    pi, v = torch.nn.Linear(4, 2), torch.nn.Linear(4, 1)
    pi_opt, v_opt = torch.optim.Adam(pi.parameters(), lr=1e-2), torch.optim.Adam(v.parameters(), lr=1e-2)
    seen = []
    obs, _ = env.reset(seed=0)
    ep_ret, ep_len, total = 0.0, 0, 0
    for epoch in range(epochs):
        record: dict[str, list] = {"EpRet": [], "EpLen": [], "TestEpRet": [], "TestEpLen": [], "LossPi": [], "LossV": []}
        observations, actions, rewards = [], [], []
        for _ in range(steps_per_epoch):
            with torch.no_grad():
                action = int(torch.distributions.Categorical(logits=pi(torch.as_tensor(obs))).sample())
            next_obs, reward, terminated, truncated, _ = env.step(action)
            observations.append(obs), actions.append(action), rewards.append(reward)
            ep_ret, ep_len, total, obs = ep_ret + reward, ep_len + 1, total + 1, next_obs
            if terminated or truncated:
                logger.store(EpRet=ep_ret, EpLen=ep_len)
                record["EpRet"].append(ep_ret), record["EpLen"].append(ep_len)
                obs, _ = env.reset()
                ep_ret, ep_len = 0.0, 0
        obs_t = torch.as_tensor(np.array(observations))
        returns_to_go = torch.as_tensor(np.cumsum(rewards[::-1])[::-1].copy(), dtype=torch.float32)
        loss_v = ((v(obs_t).squeeze(-1) - returns_to_go) ** 2).mean()
        advantage = returns_to_go - v(obs_t).squeeze(-1).detach()
        logp = torch.distributions.Categorical(logits=pi(obs_t)).log_prob(torch.as_tensor(actions))
        loss_pi = -(logp * advantage).mean()
        for opt, loss in ((pi_opt, loss_pi), (v_opt, loss_v)):
            opt.zero_grad(), loss.backward(), opt.step()
        logger.store(LossPi=loss_pi.item(), LossV=loss_v.item())
        record["LossPi"].append(loss_pi.item()), record["LossV"].append(loss_v.item())
        for _ in range(test_episodes):
            test_obs, _ = test_env.reset()
            test_ret, test_len, done = 0.0, 0, False
            while not done:
                with torch.no_grad():
                    test_action = int(pi(torch.as_tensor(test_obs)).argmax())
                test_obs, reward, terminated, truncated, _ = test_env.step(test_action)
                test_ret, test_len, done = test_ret + reward, test_len + 1, terminated or truncated
            logger.store(TestEpRet=test_ret, TestEpLen=test_len)
            record["TestEpRet"].append(test_ret), record["TestEpLen"].append(test_len)
        logger.log_tabular("Epoch", epoch)
        logger.log_tabular("EpRet", with_min_and_max=True)
        logger.log_tabular("TestEpRet", with_min_and_max=True)
        logger.log_tabular("EpLen", average_only=True)
        logger.log_tabular("TestEpLen", average_only=True)
        logger.log_tabular("TotalEnvInteracts", total)
        logger.log_tabular("LossPi", average_only=True)
        logger.log_tabular("LossV", average_only=True)
        logger.dump_tabular()
        seen.append(record)
    return seen


def test_spinup_epochs_give_collector_evaluator_learner_blocks(tmp_path: Path) -> None:
    from rltrack.adapters.spinup import EpochLogger

    steps_per_epoch = 300
    with EpochLogger(output_dir=str(tmp_path / "out"), rltrack_config=_local_config(tmp_path, "spinup")) as logger:
        seen = _spinup_style_loop(logger, epochs=3, steps_per_epoch=steps_per_epoch, test_episodes=2)
    run_dir = logger.rltrack.run_dir
    tfevents = read_tfevents(run_dir / "log" / "serial")

    collector = _blocks(run_dir, "collector")
    assert len(collector) == 3
    total_episodes = 0
    for epoch, (block, record) in enumerate(zip(collector, seen)):
        assert block.steps == {"env_steps": steps_per_epoch * (epoch + 1), "epoch": epoch}
        assert_episode_stats(block, record["EpRet"], record["EpLen"])
        total_episodes += len(record["EpRet"])
        assert block.values["envstep_count"] == steps_per_epoch
        assert block.values["total_envstep_count"] == steps_per_epoch * (epoch + 1)
        assert block.values["total_episode_count"] == total_episodes
        assert "collect_time" not in block.values and "avg_envstep_per_sec" not in block.values  # SpinningUp logs neither
    assert_text_equals_tfevents(collector, "collector", tfevents, "env_steps")

    evaluator = _blocks(run_dir, "evaluator")
    assert len(evaluator) == 3
    for block, record in zip(evaluator, seen):
        assert_episode_stats(block, record["TestEpRet"], record["TestEpLen"])
        assert block.values["envstep_count"] == sum(record["TestEpLen"])
        assert "train_iter" not in block.values and "ckpt_name" not in block.values  # not known here
    assert_text_equals_tfevents(evaluator, "evaluator", tfevents, "env_steps")
    info = read_info_lines(run_dir / "log" / "evaluator" / "evaluator_logger.txt")
    expected = [f"final reward: {r:.4f}, current episode: {n}" for record in seen for n, r in enumerate(record["TestEpRet"], 1)]
    assert [line.split(" finish episode, ")[1] for line in info] == expected

    learner = _blocks(run_dir, "learner")
    assert [b.values["policy_loss_avg"] for b in learner] == pytest.approx([r["LossPi"][0] for r in seen], rel=1e-5)
    assert [b.values["value_loss_avg"] for b in learner] == pytest.approx([r["LossV"][0] for r in seen], rel=1e-5)
    assert "cur_lr_avg" not in learner[0].values
    assert_text_equals_tfevents(learner, "learner", tfevents, "env_steps")


# ---- Acme -------------------------------------------------------------------------


def _import_acme() -> Any:
    """Acme 0.4.0 imports launchpad, which has no wheels for Python >= 3.11: the
    marked stand-in in tests/helpers/standins is used when it is missing."""
    import importlib.util
    import sys

    if importlib.util.find_spec("launchpad") is None:
        sys.path.insert(0, str(Path(__file__).parents[1] / "helpers" / "standins"))
    return pytest.importorskip("acme")


def _recording_walk_env(dm_env: Any, specs: Any, seed: int) -> Any:
    """A small dm_env environment: a 1-D random walk with noisy rewards, ended at
    |position| = 3 or after 25 steps; it records each finished episode's return
    and length in `episodes` itself."""

    class RecordingWalk(dm_env.Environment):
        def __init__(self) -> None:
            self.rng = np.random.default_rng(seed)
            self.episodes: list[tuple[float, int]] = []
            self.pos, self.t, self.ret = 0, 0, 0.0

        def reset(self) -> Any:
            self.pos, self.t, self.ret = 0, 0, 0.0
            return dm_env.restart(np.float32([0.0]))

        def step(self, action: Any) -> Any:
            self.t += 1
            self.pos += 1 if int(action) == 1 else -1
            reward = float(np.float32(self.rng.normal(0.5, 1.0)))
            self.ret += reward
            obs = np.float32([self.pos])
            if abs(self.pos) >= 3 or self.t >= 25:
                self.episodes.append((self.ret, self.t))
                end = dm_env.termination if abs(self.pos) >= 3 else dm_env.truncation
                return end(np.float32(reward), obs)
            return dm_env.transition(np.float32(reward), obs)

        def observation_spec(self) -> Any:
            return specs.Array((1,), np.float32)

        def action_spec(self) -> Any:
            return specs.DiscreteArray(2, dtype=np.int32)

    return RecordingWalk()


def test_acme_environment_loops_and_learner_give_blocks(tmp_path: Path) -> None:
    acme = _import_acme()
    import dm_env
    from acme import core, specs
    from acme.utils import counting

    from rltrack.adapters.acme import RLTrackLogger

    class RandomActor(core.Actor):
        def __init__(self) -> None:
            self.rng = np.random.default_rng(1)

        def select_action(self, observation: Any) -> Any:
            return np.int32(self.rng.integers(2))

        def observe_first(self, timestep: Any) -> None:
            pass

        def observe(self, action: Any, next_timestep: Any) -> None:
            pass

        def update(self, wait: bool = False) -> None:
            pass

    logger = rltrack.make_logger(_local_config(tmp_path, "acme"))
    counter = counting.Counter()
    train_env, eval_env = _recording_walk_env(dm_env, specs, 0), _recording_walk_env(dm_env, specs, 1)
    actor_logger = RLTrackLogger(logger, "actor", "actor_steps", stage_every=4)
    eval_logger = RLTrackLogger(logger, "evaluator", "actor_steps")
    learner_logger = RLTrackLogger(logger, "learner", "learner_steps", stage_every=5)
    train_loop = acme.EnvironmentLoop(train_env, RandomActor(), counting.Counter(counter, prefix="actor", time_delta=0.0), actor_logger)
    eval_loop = acme.EnvironmentLoop(eval_env, RandomActor(), counting.Counter(counter, prefix="evaluator", time_delta=0.0), eval_logger)
    learner_counter = counting.Counter(counter, prefix="learner", time_delta=0.0)  # as run_experiment: counts shared at once
    rng = np.random.default_rng(2)
    weight, losses = 0.0, []
    for _ in range(2):
        train_loop.run(num_episodes=5)
        for _ in range(5):  # a learner's SGD steps: least squares on fresh data
            x = rng.normal(size=16)
            y = 3.0 * x
            loss = float(np.mean((weight * x - y) ** 2))
            weight -= 0.1 * float(np.mean(2 * (weight * x - y) * x))
            losses.append(loss)
            learner_logger.write({"loss": loss, "learning_rate": 0.1, **learner_counter.increment(steps=1)})
        eval_loop.run(num_episodes=3)
    for acme_logger in (actor_logger, eval_logger, learner_logger):
        acme_logger.close()
    logger.close()
    tfevents = read_tfevents(logger.run_dir / "log" / "serial")

    collector = _blocks(logger.run_dir, "collector")
    groups = [train_env.episodes[0:4], train_env.episodes[4:8], train_env.episodes[8:10]]  # 4 per block, the rest at close
    assert len(collector) == 3
    for block, episodes in zip(collector, groups):
        returns, lengths = [r for r, _ in episodes], [n for _, n in episodes]
        assert_episode_stats(block, returns, lengths)
        assert block.values["envstep_count"] == sum(lengths)
        assert block.values["collect_time"] > 0 and block.values["avg_envstep_per_sec"] > 0
    assert collector[-1].values["total_envstep_count"] == sum(n for _, n in train_env.episodes)
    assert collector[-1].steps["actor_steps"] == sum(n for _, n in train_env.episodes)
    assert_text_equals_tfevents(collector, "collector", tfevents, "actor_steps")

    evaluator = _blocks(logger.run_dir, "evaluator")  # one per evaluation: 3 episodes each
    assert len(evaluator) == 2
    for block, episodes in zip(evaluator, (eval_env.episodes[:3], eval_env.episodes[3:])):
        assert_episode_stats(block, [r for r, _ in episodes], [n for _, n in episodes])
        assert block.values["envstep_count"] == sum(n for _, n in episodes)
    assert [b.values["train_iter"] for b in evaluator] == [5, 10]  # the learner steps each evaluation saw
    assert_text_equals_tfevents(evaluator, "evaluator", tfevents, "actor_steps")
    assert len(read_info_lines(logger.run_dir / "log" / "evaluator" / "evaluator_logger.txt")) == 6

    learner = _blocks(logger.run_dir, "learner", "total_loss_avg")
    assert [b.values["total_loss_avg"] for b in learner] == pytest.approx([np.mean(losses[:5]), np.mean(losses[5:])], rel=1e-5)
    assert [b.values["cur_lr_avg"] for b in learner] == pytest.approx([0.1, 0.1])
    assert [b.steps["learner_steps"] for b in learner] == [5, 10]
    assert_text_equals_tfevents(learner, "learner", tfevents, "learner_steps")


# ---- RLlib ------------------------------------------------------------------------


def _recording_cartpole(config: dict[str, Any]) -> Any:
    """CartPole that appends each finished episode's return and length, as JSON
    lines, to the file its env_config names (RLlib may build envs anywhere)."""
    import gymnasium as gym

    class Recording(gym.Wrapper):
        def reset(self, **kwargs: Any) -> Any:
            self.ret, self.len = 0.0, 0
            return self.env.reset(**kwargs)

        def step(self, action: Any) -> Any:
            obs, reward, terminated, truncated, info = self.env.step(action)
            self.ret, self.len = self.ret + float(reward), self.len + 1
            if terminated or truncated:
                with open(config["record"], "a") as f:
                    f.write(json.dumps([self.ret, self.len]) + "\n")
            return obs, reward, terminated, truncated, info

    return Recording(gym.make("CartPole-v1"))


def _recorded(path: Path) -> list[list[float]]:
    return [json.loads(line) for line in whole_lines(path)]  # environment workers may be appending


@pytest.mark.slow
def test_rllib_ppo_iterations_give_blocks_from_individual_episodes(tmp_path: Path, ray_cluster: Any) -> None:
    from ray import tune
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray_versions import skip_without_rllib_callback_functions

    skip_without_rllib_callback_functions()

    from rltrack.adapters.tune import log_result, record_episodes

    tune.register_env("rltrack_recording_cartpole", _recording_cartpole)
    train_file, eval_file = tmp_path / "train.jsonl", tmp_path / "eval.jsonl"
    config = (
        PPOConfig()
        .environment("rltrack_recording_cartpole", env_config={"record": str(train_file)})
        .env_runners(num_env_runners=0, num_envs_per_env_runner=2)
        .training(train_batch_size_per_learner=256, minibatch_size=64, num_epochs=1)
        .callbacks(on_episode_end=record_episodes)
        .evaluation(evaluation_interval=2, evaluation_duration=3, evaluation_duration_unit="episodes",
                    evaluation_config=PPOConfig.overrides(env_config={"record": str(eval_file)}))
        .debugging(seed=0)
    )  # fmt: skip
    algo = config.build_algo()
    logger = rltrack.make_logger(_local_config(tmp_path, "rllib"))
    per_iteration, evaluations, sampled, rllib_lr = [], [], [], []
    try:
        for _ in range(3):  # evaluation at iteration 2 only; iteration 3's result repeats it
            train_before, eval_before = len(_recorded(train_file)), len(_recorded(eval_file))
            result = algo.train()
            per_iteration.append(_recorded(train_file)[train_before:])
            evaluations.append(_recorded(eval_file)[eval_before:])
            sampled.append(int(result["env_runners"]["num_env_steps_sampled_lifetime"]))
            rllib_lr.append(float(result["learners"]["default_policy"]["default_optimizer_learning_rate"]))
            log_result(logger, result)
    finally:
        algo.stop()
        logger.close()
    tfevents = read_tfevents(logger.run_dir / "log" / "serial")

    collector = _blocks(logger.run_dir, "collector")
    assert [b.steps for b in collector] == [{"env_steps": s, "train_iter": i} for i, s in enumerate(sampled, 1)]
    for block, episodes in zip(collector, per_iteration):
        assert episodes  # CartPole episodes are short: every iteration finishes some
        assert_episode_stats(block, [r for r, _ in episodes], [n for _, n in episodes])
    assert collector[-1].values["total_episode_count"] == sum(len(e) for e in per_iteration)
    assert_text_equals_tfevents(collector, "collector", tfevents, "env_steps")
    collector_events = [e for e in rltrack.read_journal(logger.run_dir) if e.namespace == "collector" and e.kind == "scalars"]
    assert [e.preaggregated for e in collector_events] == [False] * 3  # computed here from the episodes

    assert [len(e) for e in evaluations] == [0, 3, 0]
    [evaluator] = _blocks(logger.run_dir, "evaluator")  # iteration 3's repeated evaluation is not a new block
    assert evaluator.steps["train_iter"] == evaluator.values["train_iter"] == 2
    assert_episode_stats(evaluator, [r for r, _ in evaluations[1]], [n for _, n in evaluations[1]])
    assert_text_equals_tfevents([evaluator], "evaluator", tfevents, "env_steps")

    learner = _blocks(logger.run_dir, "learner", "total_loss_avg")
    assert [b.values["cur_lr_avg"] for b in learner] == pytest.approx(rllib_lr, rel=1e-5)
    assert {"policy_loss_avg", "value_loss_avg", "entropy_avg"} <= set(learner[0].values)
    assert_text_equals_tfevents(learner, "learner", tfevents, "env_steps")


@pytest.mark.slow
def test_rllib_counts_without_record_episodes_print_as_integers(tmp_path: Path, ray_cluster: Any) -> None:
    """Without `record_episodes` the collector block comes from RLlib's own
    statistics, which report counts as floats (`256.0`); the block prints them
    as integers, as it does when computed from the episodes."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray_versions import skip_without_rllib_callback_functions

    skip_without_rllib_callback_functions()

    from rltrack.adapters.tune import log_result

    config = (
        PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=0, num_envs_per_env_runner=2)
        .training(train_batch_size_per_learner=256, minibatch_size=64, num_epochs=1).debugging(seed=0)
    )  # fmt: skip
    algo = config.build_algo()
    logger = rltrack.make_logger(_local_config(tmp_path, "rllib_counts"))
    sampled = []
    try:
        for _ in range(2):
            result = algo.train()
            sampled.append(result["env_runners"]["num_env_steps_sampled_lifetime"])
            log_result(logger, result)
    finally:
        algo.stop()
        logger.close()
    assert all(isinstance(s, float) for s in sampled)  # RLlib's own: floats
    text = (logger.run_dir / "log" / "collector" / "collector_logger.txt").read_text()
    totals = [line.split(": ")[1] for line in text.splitlines() if line.startswith("total_envstep_count: ")]
    assert totals == [str(int(s)) for s in sampled]
    counts = [line for line in text.splitlines() if line.split(":")[0] in ("episode_count", "envstep_count", "total_episode_count")]
    assert counts and all(re.fullmatch(r"\w+: \d+", line) for line in counts)
