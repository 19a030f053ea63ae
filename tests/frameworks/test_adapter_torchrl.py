"""TorchRL's loggers -> rltrack: `rltrack.adapters.torchrl.RLTrackLogger` as
the logger of TorchRL's own `PPOTrainer` on gymnasium's CartPole, read back
from progress.csv, MLflow and W&B's run file; its videos, histograms and
hyperparameters; and the TorchRL machinery around a logger (its `Logger`
base class, `log_metrics`, `state_dict`)."""

from __future__ import annotations

import argparse
import json
import warnings

import pytest

torchrl = pytest.importorskip("torchrl", reason="TorchRL is not installed (requirements/test.txt)")
import torch  # noqa: E402
from library_readback import assert_once_everywhere, config  # noqa: E402

from rltrack.adapters.torchrl import RLTrackLogger  # noqa: E402
from rltrack.journal import read_journal  # noqa: E402


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


class Recording(RLTrackLogger):
    """Our logger, noting what TorchRL handed to `log_scalar` (name, value, step)."""

    def __init__(self, *args, **kwargs):
        self.calls = []
        super().__init__(*args, **kwargs)

    def log_scalar(self, name, value, step=None):
        self.calls.append((name, float(value), step))
        super().log_scalar(name, value, step)


def _ppo_trainer(logger, total_frames):
    """TorchRL's own PPOTrainer on CartPole-v1 (gymnasium), small networks."""
    from tensordict.nn import TensorDictModule
    from torch import nn
    from torchrl import collectors
    from torchrl.data import LazyTensorStorage, ReplayBuffer
    from torchrl.data.replay_buffers.samplers import SamplerWithoutReplacement
    from torchrl.envs import GymEnv
    from torchrl.modules import ProbabilisticActor, ValueOperator
    from torchrl.objectives import ClipPPOLoss
    from torchrl.trainers.algorithms.ppo import PPOTrainer

    torch.manual_seed(0)
    env = GymEnv("CartPole-v1")
    n_obs, n_act = env.observation_spec["observation"].shape[-1], env.action_spec.shape[-1]
    actor = ProbabilisticActor(
        TensorDictModule(nn.Sequential(nn.Linear(n_obs, 16), nn.Tanh(), nn.Linear(16, n_act)), ["observation"], ["logits"]),
        in_keys=["logits"], distribution_class=torch.distributions.OneHotCategorical, spec=env.action_spec, return_log_prob=True,
    )  # fmt: skip
    critic = ValueOperator(nn.Sequential(nn.Linear(n_obs, 16), nn.Tanh(), nn.Linear(16, 1)), in_keys=["observation"])
    loss = ClipPPOLoss(actor, critic)
    collector_class = getattr(collectors, "Collector", None) or collectors.SyncDataCollector  # 0.14 renamed it
    collector = collector_class(env, actor, frames_per_batch=128, total_frames=total_frames)
    buffer = ReplayBuffer(storage=LazyTensorStorage(128), sampler=SamplerWithoutReplacement(), batch_size=64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "PPOTrainer is an experimental/prototype feature"
        return PPOTrainer(
            collector=collector, total_frames=total_frames, frame_skip=1, optim_steps_per_batch=2, loss_module=loss,
            optimizer=torch.optim.Adam(loss.parameters(), 1e-3), logger=logger, log_interval=0, replay_buffer=buffer,
            progress_bar=False, save_trainer_file=None,
        )  # fmt: skip


@pytest.mark.slow
def test_ppo_trainer_values_reach_every_tracker_once_at_collected_frames(tmp_path):
    """Every value TorchRL's PPOTrainer logged is in progress.csv, MLflow and
    W&B once, at the collected frames it gave as `step` (axis `env_steps`),
    under TorchRL's own name; the loss keys also under their canonical names."""
    logger = Recording("ppo_cartpole", config=config(tmp_path / "runs"))
    logger.log_hparams({"lr": 1e-3, "frames_per_batch": 128, "clip": True})
    _ppo_trainer(logger, total_frames=512).train()
    logger.close()
    calls = logger.calls
    assert {step for _, _, step in calls} == {128, 256, 384, 512}
    assert {"loss_objective", "loss_critic", "loss_entropy", "r_training"} <= {name for name, _, _ in calls}
    logged = [(name, "env_steps", step, value) for name, value, step in calls]
    twins = {"loss_objective": "learner/policy_loss_avg", "loss_critic": "learner/value_loss_avg", "kl_approx": "learner/approx_kl_avg"}
    logged += [(twins[name], "env_steps", step, value) for name, value, step in calls if name in twins]
    run_dir = logger.run_dir
    assert run_dir.name == "ppo_cartpole"
    assert_once_everywhere(run_dir, logged)
    from mlflow import MlflowClient

    from rltrack.delivery.cursor import tracker_state

    state = tracker_state(run_dir, "mlflow")
    params = MlflowClient(state["tracking_uri"]).get_run(state["run_id"]).data.params
    assert params == {"lr": "0.001", "frames_per_batch": "128", "clip": "True"}
    assert json.loads((run_dir / "meta.json").read_text())["info"]["framework"] == "torchrl"


def test_videos_histograms_hparams_and_metrics_as_torchrl_hands_them_over(tmp_path):
    """`log_video` frames (T, C, H, W) become an animated PNG in the run with a
    `video` event; `log_histogram` a histogram; `log_metrics` (TorchRL's base
    class, tensors converted by TorchRL) one value per key; an `argparse.Namespace` as hyperparameters; `state_dict` (TorchRL's checkpoint of a logger) works."""
    logger = RLTrackLogger("media", str(tmp_path / "runs"), backends={"use": ["local"]})
    assert isinstance(logger, torchrl.record.loggers.Logger)
    logger.log_video("rollout", torch.randint(0, 255, (3, 3, 6, 5), dtype=torch.uint8), step=7, fps=4)
    logger.log_histogram("weights", torch.tensor([1.0, 2.0, 2.0]), step=7)
    logger.log_metrics({"a": torch.tensor(1.5), "b": 2}, step=8)
    logger.log_hparams(argparse.Namespace(gamma=0.99))  # TorchRL examples parse their arguments so
    if hasattr(torchrl.record.loggers.Logger, "state_dict"):  # TorchRL >= 0.14 checkpoints its loggers
        assert logger.state_dict()["exp_name"] == "media"
    assert "media" in repr(logger)
    logger.close()
    events = list(read_journal(logger.run_dir))
    [video] = [e for e in events if e.kind == "video"]
    assert video.steps == {"env_steps": 7} and video.data["rollout"]["frames"] == 3 and video.data["rollout"]["fps"] == 4
    assert (logger.run_dir / video.data["rollout"]["path"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    [histogram] = [e for e in events if e.kind == "histogram"]
    assert histogram.data == {"weights": [1.0, 2.0, 2.0]} and histogram.steps == {"env_steps": 7}
    scalars = {key: (value, e.steps) for e in events if e.kind == "scalars" for key, value in e.data.items()}
    assert scalars == {"a": (1.5, {"env_steps": 8}), "b": (2, {"env_steps": 8})}
    [hparams] = [e for e in events if e.kind == "hparams"]
    assert hparams.data == {"gamma": 0.99}
    assert logger.run_dir.parent == tmp_path / "runs"  # TorchRL's log_dir is the run root


def test_an_rltrack_logger_given_is_used_and_left_open(tmp_path):
    import rltrack

    run = rltrack.make_logger(run={"root": str(tmp_path), "name": "mine"}, backends={"use": ["local"]})
    logger = RLTrackLogger(logger=run)
    logger.log_scalar("loss_critic", 0.5, step=3)
    logger.close()
    run.write({"after": 1.0}, step=4)  # still open
    run.close()
    data = [(e.data, e.steps) for e in read_journal(run.run_dir) if e.kind == "scalars"]  # the canonical twin in namespace "learner"
    assert data == [({"loss_critic": 0.5}, {"env_steps": 3}), ({"value_loss_avg": 0.5}, {"env_steps": 3}), ({"after": 1.0}, {"step": 4})]


@pytest.mark.slow  # a child process importing TorchRL
def test_runs_as_torchrl_process_service(tmp_path):
    """`service_backend="process"` (TorchRL >= 0.14): TorchRL builds our logger in
    a process of its own from the keyword arguments, and the calls reach the run."""
    import inspect

    if "service_backend" not in inspect.getsource(torchrl.record.loggers.Logger):
        pytest.skip(f"TorchRL {torchrl.__version__} has no logger services")
    logger = RLTrackLogger("service", config={"run": {"root": str(tmp_path / "runs")}, "backends": {"use": ["local"]}}, service_backend="process")
    assert type(logger).__name__ == "ProcessLogger"
    logger.log_scalar("loss_objective", 0.5, step=3)
    logger.log_metrics({"r_training": torch.tensor(1.0)}, step=4)
    logger.shutdown()
    data = [(e.namespace, e.data, e.steps) for e in read_journal(tmp_path / "runs" / "service") if e.kind == "scalars"]
    assert data == [("", {"loss_objective": 0.5}, {"env_steps": 3}), ("learner", {"policy_loss_avg": 0.5}, {"env_steps": 3}), ("", {"r_training": 1.0}, {"env_steps": 4})]
