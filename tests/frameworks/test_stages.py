"""rltrack.frameworks.stages: the collector/evaluator/learner/buffer blocks, checked against
numpy computed here, and `emit_block` read back from the journal."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rltrack
from rltrack.frameworks import stages
from rltrack.adapters.blocks import emit_block

REWARDS = [12.0, 30.5, 9.0, 44.25]
LENGTHS = [12, 31, 9, 45]

finite = st.floats(-1e6, 1e6, allow_nan=False)


def test_collector_stage_against_numpy_and_running_totals() -> None:
    stats = stages.CollectorStats()
    first = stats.stage(episode_rewards=REWARDS, episode_lengths=LENGTHS, envstep_count=128, train_sample_count=100, duration=0.5)
    assert list(first) == [k for k in stages.BLOCK_KEYS["collector"] if k in first]  # DI-engine's order
    assert first["episode_count"] == 4 and first["envstep_count"] == 128 and first["train_sample_count"] == 100
    assert first["avg_envstep_per_episode"] == pytest.approx(np.mean(LENGTHS))
    assert first["avg_sample_per_episode"] == pytest.approx(100 / 4)
    assert first["avg_envstep_per_sec"] == pytest.approx(128 / 0.5)
    assert first["avg_train_sample_per_sec"] == pytest.approx(100 / 0.5)
    assert first["avg_episode_per_sec"] == pytest.approx(4 / 0.5)
    assert first["collect_time"] == 0.5
    assert first["reward_mean"] == pytest.approx(np.mean(REWARDS))
    assert first["reward_std"] == pytest.approx(np.std(REWARDS))
    assert first["reward_max"] == np.max(REWARDS) and first["reward_min"] == np.min(REWARDS)
    assert first["each_reward"] == REWARDS
    second = stats.stage(episode_rewards=[1.0], episode_lengths=[7], envstep_count=64, train_sample_count=50, duration=0.25)
    assert second["total_envstep_count"] == 128 + 64
    assert second["total_train_sample_count"] == 150
    assert second["total_episode_count"] == 5
    assert second["total_duration"] == pytest.approx(0.75)
    assert second["reward_std"] == 0.0


def test_collector_stage_leaves_out_what_it_cannot_know() -> None:
    stats = stages.CollectorStats()
    block = stats.stage(episode_rewards=[], envstep_count=128, duration=0.0)
    assert block == {"episode_count": 0, "envstep_count": 128, "collect_time": 0.0, "total_envstep_count": 128,
                     "total_episode_count": 0, "total_duration": 0.0}
    only_returns = stats.stage(episode_rewards=[3.0, 5.0])
    assert "avg_envstep_per_episode" not in only_returns and "envstep_count" not in only_returns
    assert "collect_time" not in only_returns and "avg_episode_per_sec" not in only_returns
    assert only_returns["total_envstep_count"] == 128  # the total known so far stays
    assert only_returns["reward_mean"] == 4.0
    never_timed = stages.CollectorStats().stage(episode_rewards=[1.0], envstep_count=10)
    assert "total_duration" not in never_timed and "collect_time" not in never_timed  # unknown, not 0


def test_mismatched_lengths_name_both_counts_and_the_fix() -> None:
    with pytest.raises(ValueError, match="episode_lengths has 1 entries but episode_rewards has 2.*episode_lengths=None"):
        stages.CollectorStats().stage(episode_rewards=[1.0, 2.0], episode_lengths=[3])


@settings(max_examples=50, deadline=None)
@given(st.lists(finite, min_size=1, max_size=30), st.floats(0.01, 100))
def test_evaluator_block_matches_numpy(rewards: list[float], duration: float) -> None:
    lengths = [int(abs(r)) % 200 + 1 for r in rewards]
    block = stages.evaluator_block(episode_rewards=rewards, episode_lengths=lengths, duration=duration, train_iter=7,
                                   ckpt_name="ckpt/iteration_7.pth.tar")
    assert list(block) == [k for k in stages.BLOCK_KEYS["evaluator"] if k in block]
    assert block["train_iter"] == 7 and block["ckpt_name"] == "iteration_7.pth.tar"  # DI-engine's name: the file in ckpt/
    assert block["episode_count"] == len(rewards) and block["envstep_count"] == sum(lengths)
    assert block["evaluate_time"] == duration
    assert block["avg_envstep_per_episode"] == pytest.approx(np.mean(lengths))
    assert block["avg_envstep_per_sec"] == pytest.approx(np.sum(lengths) / duration)
    assert block["avg_time_per_episode"] == pytest.approx(duration / len(rewards))
    assert block["reward_mean"] == pytest.approx(np.mean(rewards), rel=1e-9, abs=1e-6)
    assert block["reward_std"] == pytest.approx(np.std(rewards), rel=1e-6, abs=1e-6)
    assert block["reward_max"] == np.max(rewards) and block["reward_min"] == np.min(rewards)


def test_evaluator_block_without_checkpoint_or_lengths() -> None:
    block = stages.evaluator_block(episode_rewards=[1.0, 2.0], duration=2.0)
    assert "ckpt_name" not in block and "train_iter" not in block and "envstep_count" not in block
    assert block["avg_time_per_episode"] == 1.0


def test_evaluator_info_lines_are_dingine_lines() -> None:
    lines = stages.evaluator_info_lines([9.0, 10.5], env_ids=[1, 0])
    assert lines == [
        "[EVALUATOR]env 1 finish episode, final reward: 9.0000, current episode: 1",
        "[EVALUATOR]env 0 finish episode, final reward: 10.5000, current episode: 2",
    ]


def test_learner_averages_over_the_dump_interval() -> None:
    rng = np.random.default_rng(0)
    losses = rng.normal(size=(6, 2))
    averages = stages.LearnerAverages()
    assert not averages
    for i, (policy, value) in enumerate(losses):
        averages.add({"policy_loss": policy, "total_loss": policy + value, "cur_lr": 1e-3 / (i + 1), "skipped": None})
    block = averages.take()
    assert list(block)[:2] == ["cur_lr_avg", "total_loss_avg"]
    assert block["cur_lr_avg"] == pytest.approx(np.mean([1e-3 / (i + 1) for i in range(6)]))
    assert block["total_loss_avg"] == pytest.approx(losses.sum(axis=1).mean())
    assert block["policy_loss_avg"] == pytest.approx(losses[:, 0].mean())
    assert "skipped_avg" not in block
    assert averages.take() == {}  # the next interval starts empty


def test_buffer_sampling_block_against_numpy() -> None:
    uses, priorities = [1, 3, 2, 2], [0.5, 0.25, 2.0]
    block = stages.buffer_sampling_block(uses=uses, priorities=priorities, staleness=[])
    assert block == pytest.approx({"use_avg": np.mean(uses), "use_max": 3, "priority_avg": np.mean(priorities),
                                   "priority_max": 2.0, "priority_min": 0.25})


def test_buffer_throughput_every_interval() -> None:
    with pytest.raises(ValueError, match="seconds=0 must be > 0"):
        stages.BufferThroughput(0)
    throughput = stages.BufferThroughput(10)
    start = throughput._since = 1000.0  # exact: with a monotonic reading, (start + 10) - start can round below 10
    throughput.add(pushed_in=4, sampled_out=32)
    throughput.add(pushed_in=4)
    assert throughput.take(8, now=start + 5) is None
    assert throughput.take(8, now=start + 10) == {"pushed_in": 8, "sampled_out": 32, "current_have": 8}
    assert throughput.take(8, now=start + 25) == {"pushed_in": 0, "sampled_out": 0, "current_have": 8}


def test_emit_block_sends_numbers_list_and_text_as_one_record(tmp_path: Path) -> None:
    logger = rltrack.make_logger({"run": {"root": str(tmp_path), "name": "blocks"}, "backends": {"use": ["memory"]}})
    block = stages.evaluator_block(episode_rewards=REWARDS, episode_lengths=LENGTHS, duration=1.5, train_iter=3,
                                   ckpt_name="ckpt/iteration_3.pth.tar")
    steps = {"env_steps": 500, "train_iter": 3}
    lines = stages.evaluator_info_lines(REWARDS)
    emit_block(logger, "evaluator", block, steps, source="sb3", info_lines=lines, model="Net(\n  (fc): Linear)")
    emit_block(logger, "evaluator", block, steps, model="printed once only")
    logger.close()
    events = [e for e in rltrack.read_journal(logger.run_dir) if e.namespace == "evaluator"]
    kinds = [(e.kind, sorted(e.data)) for e in events]
    assert kinds[:5] == [
        ("text", [stages.MODEL_KEY]),
        ("text", [stages.INFO_KEY]),
        ("scalars", sorted(k for k in block if k not in ("each_reward", "ckpt_name"))),
        ("histogram", ["each_reward"]),
        ("text", ["ckpt_name"]),
    ]
    assert len(events) == 8  # the second block: no model, no lines
    first = events[:5]
    assert {e.time for e in first[2:]} == {first[2].time} and all(e.steps == steps and e.source == "sb3" for e in first)
    assert first[1].data[stages.INFO_KEY].splitlines() == lines
    assert first[2].data["reward_mean"] == pytest.approx(np.mean(REWARDS))
    assert first[3].data["each_reward"] == REWARDS
    assert first[4].data["ckpt_name"] == "iteration_3.pth.tar"
    assert logger.report.total("routed") == 0 and logger.report.total("converted") == 0  # sent as their own kinds
