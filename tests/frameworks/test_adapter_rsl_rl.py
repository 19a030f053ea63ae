"""rsl_rl's log writer -> rltrack: `rltrack.adapters.rsl_rl.RLTrackLogWriter`,
named in the runner config as Isaac Lab users name a writer, under rsl_rl's
own `OnPolicyRunner` (PPO) on a small vectorised task written against
rsl_rl's `VecEnv` interface (tests/helpers/rsl_rl_task.py), read back from progress.csv, MLflow and W&B's
run file."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("rsl_rl", reason="rsl-rl-lib is not installed (requirements/test.txt)")
import torch  # noqa: E402
from library_readback import assert_once_everywhere, config  # noqa: E402
from rsl_rl.runners import OnPolicyRunner  # noqa: E402
from rsl_rl.utils.logger import Logger  # noqa: E402
from rsl_rl_task import ReachTarget, train_cfg  # noqa: E402

from rltrack.adapters.rsl_rl import RLTrackLogWriter  # noqa: E402
from rltrack.journal import read_journal  # noqa: E402

WRITER = "rltrack.adapters.rsl_rl:RLTrackLogWriter"


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


class Recording(RLTrackLogWriter):
    """Our writer, noting what rsl_rl's runner handed to `add_scalar`."""

    def __init__(self, log_dir, **kwargs):
        self.calls = []
        super().__init__(log_dir, **kwargs)

    def add_scalar(self, tag, scalar_value, global_step):
        self.calls.append((tag, float(scalar_value), int(global_step)))
        super().add_scalar(tag, scalar_value, global_step)


def _stored(tag: str) -> list[str]:
    """The flat names an rsl_rl tag is stored under: native, then its canonical twin."""
    from rltrack.adapters.rsl_rl import tag_route

    return [f"{namespace}/{key}" for namespace, key, _ in tag_route(tag, "both").places]


@pytest.mark.slow
def test_on_policy_runner_values_reach_every_tracker_once_at_iterations_and_seconds(tmp_path):
    """Every value rsl_rl's runner wrote through the writer is in progress.csv,
    MLflow and W&B once: at its iteration on `train_iter`, the `/time` tags
    at whole seconds of training on `seconds`; every tag as rsl_rl wrote it,
    with canonical twins (`Loss/value` and `learner/value_loss_avg`);
    `store_config` as hyperparameters, `save_model` as checkpoints, `stop` ends the run."""
    log_dir = tmp_path / "logs" / "2026-11-27_12-00-00_reach"
    runner = OnPolicyRunner(ReachTarget(), train_cfg({"class_name": Recording, "config": config(tmp_path / "runs")}), log_dir=str(log_dir))
    runner.learn(num_learning_iterations=4)
    writer = runner.logger.writer
    tags = {tag for tag, _, _ in writer.calls}
    assert {"Loss/value", "Loss/surrogate", "Perf/total_fps", "Train/mean_reward", "Train/mean_reward/time", "Episode/distance", "Metrics/final_error"} <= tags
    logged = [(name, "seconds" if tag.endswith("/time") else "train_iter", step, value) for tag, value, step in writer.calls for name in _stored(tag)]
    run_dir = writer.logger.run_dir
    assert run_dir.name == log_dir.name  # named after rsl_rl's log directory
    assert_once_everywhere(run_dir, logged)
    [hparams] = [e.data for e in read_journal(run_dir) if e.kind == "hparams"]
    assert hparams["env_cfg"] == {"task": "reach_target", "episode_length": 10}
    assert hparams["train_cfg"]["num_steps_per_env"] == 10 and hparams["train_cfg"]["algorithm"]["learning_rate"] == 1e-3
    assert sorted(p.name for p in (run_dir / "ckpt").glob("iteration_*")) == ["iteration_0.pth.tar", "iteration_2.pth.tar", "iteration_3.pth.tar"]  # every save_interval, and the last
    assert json.loads((run_dir / "meta.json").read_text())["status"] == "finished"


def _writer_built_by_rsl_rl(entry: dict, log_dir) -> RLTrackLogWriter:
    """The writer as rsl_rl's own `Logger.init_logging_writer` builds it from
    the runner config's `logger` entry (and then calls `store_config`)."""
    logger = Logger(str(log_dir), train_cfg(entry), {"task": "t"}, 8, False, 1, 0, "cpu")
    logger.init_logging_writer()
    return logger.writer


def test_the_config_entry_names_the_writer_and_its_rltrack_config(tmp_path):
    """`{"class_name": "rltrack.adapters.rsl_rl:RLTrackLogWriter", ...}` as
    rsl_rl resolves it: the other keys are the rltrack config, a file path or
    sections inline; the config's run name wins over the log directory's."""
    (tmp_path / "rltrack.toml").write_text(f'[run]\nroot = "{tmp_path / "runs"}"\nname = "from_file"\n[backends]\nuse = ["local"]\n')
    writer = _writer_built_by_rsl_rl({"class_name": WRITER, "config": str(tmp_path / "rltrack.toml")}, tmp_path / "logs" / "x")
    writer.add_scalar("Loss/value", torch.tensor(0.25), 3)
    writer.add_scalar("Train/mean_reward/time", 1.5, 12)
    writer.stop()
    assert writer.logger.run_dir.name == "from_file"
    events = [(e.namespace, e.data, e.steps) for e in read_journal(writer.logger.run_dir) if e.kind == "scalars"]
    assert events == [
        ("Loss", {"value": 0.25}, {"train_iter": 3}), ("learner", {"value_loss_avg": 0.25}, {"train_iter": 3}),
        ("Train", {"mean_reward/time": 1.5}, {"seconds": 12}),
    ]  # fmt: skip
    assert [e.stage for e in read_journal(writer.logger.run_dir) if e.kind == "scalars"] == ["learner", "", "collector"]

    inline = {"class_name": WRITER, "run": {"root": str(tmp_path / "runs")}, "backends": {"use": ["local"]}}
    named = _writer_built_by_rsl_rl(inline, tmp_path / "logs" / "2026_run")
    named.stop()
    assert named.logger.run_dir == tmp_path / "runs" / "2026_run"
    [hparams] = [e.data for e in read_journal(named.logger.run_dir) if e.kind == "hparams"]
    assert hparams["env_cfg"] == {"task": "t"} and hparams["train_cfg"]["logger"]["backends"] == {"use": ["local"]}


def test_a_mistyped_key_of_the_entry_is_named_with_what_is_allowed(tmp_path):
    from rltrack.training.config import ConfigError

    with pytest.raises(ConfigError, match=r"rsl_rl's logger entry .*unknown key 'confg'; allowed: config \(a file path or dict\), run, filters, backends"):
        _writer_built_by_rsl_rl({"class_name": WRITER, "confg": "rltrack.toml"}, tmp_path / "logs" / "x")
