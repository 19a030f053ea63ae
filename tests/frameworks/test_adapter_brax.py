"""Brax -> rltrack: `rltrack.adapters.brax.train` around Brax's own PPO
(`brax.training.agents.ppo.train`, a `functools.partial` of its keyword
arguments) on Brax's `fast` environment, every value its `progress_fn`
received read back from progress.csv, MLflow and W&B's run file; its keyword
arguments as typed hyperparameters in MLflow and W&B's config."""

from __future__ import annotations

import functools
import json

import pytest

pytest.importorskip("brax", reason="brax is not installed (requirements/test.txt)")
import wandb_reader  # noqa: E402
from brax import envs  # noqa: E402
from brax.training.agents.ppo import train as ppo  # noqa: E402
from library_readback import assert_once_everywhere, config  # noqa: E402

from rltrack.adapters import brax as rltrack_brax  # noqa: E402
from rltrack.delivery.cursor import tracker_state  # noqa: E402
from rltrack.journal import read_journal  # noqa: E402

#: A PPO small enough for a test: 2,048 steps of 8 environments, 3 evaluations, training metrics every 512 steps.
SETTINGS = {"num_timesteps": 2048, "num_evals": 3, "episode_length": 32, "num_envs": 8, "batch_size": 8, "num_minibatches": 2,
            "unroll_length": 8, "num_updates_per_batch": 1, "num_eval_envs": 4, "log_training_metrics": True,
            "training_metrics_steps": 512, "learning_rate": 3e-4, "normalize_observations": True, "seed": 1}  # fmt: skip


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


@pytest.mark.slow  # Brax's PPO compiles for about 20 s
def test_brax_ppo_values_reach_every_tracker_once_and_its_arguments_are_typed_hyperparameters(tmp_path):
    received = []  # what Brax handed to progress_fn: (step, {key: value}); the user's own progress_fn is called too
    train_fn = functools.partial(ppo.train, **SETTINGS)
    _, params, _ = rltrack_brax.train(train_fn, environment=envs.get_environment("fast"), config=config(tmp_path / "runs", name="brax_ppo_fast"),
                                      progress_fn=lambda step, metrics: received.append((step, {k: float(v) for k, v in metrics.items()})))  # fmt: skip
    assert params is not None
    steps = [step for step, _ in received]
    assert steps[0] == 0 and steps[-1] == 2048 and len(steps) > len(set(steps))  # eval and episode metrics at one step, separately
    keys = {key for _, metrics in received for key in metrics}
    assert {"eval/episode_reward", "training/policy_loss", "episode/sum_reward"} <= keys
    logged = [(key, "env_steps", step, value) for step, metrics in received for key, value in metrics.items()]
    logged += [(rltrack_brax.CANONICAL[key], "env_steps", step, value) for step, metrics in received for key, value in metrics.items() if key in rltrack_brax.CANONICAL]
    (run_dir,) = (tmp_path / "runs").glob("brax_ppo_fast*")
    assert_once_everywhere(run_dir, logged)
    from mlflow import MlflowClient

    state = tracker_state(run_dir, "mlflow")
    params = MlflowClient(state["tracking_uri"]).get_run(state["run_id"]).data.params
    assert {key: params[key] for key in ("algorithm", "environment", "num_timesteps", "learning_rate", "normalize_observations")} == {
        "algorithm": "ppo", "environment": "Fast", "num_timesteps": "2048", "learning_rate": "0.0003", "normalize_observations": "True"}
    assert "progress_fn" not in params
    (wandb_file,) = wandb_reader.run_files(run_dir)
    wandb_config = wandb_reader.config(wandb_file)
    assert (wandb_config["num_timesteps"], wandb_config["learning_rate"], wandb_config["log_training_metrics"]) == (2048, 3e-4, True)
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "finished" and meta["info"]["framework"] == "brax"
    report = json.loads((run_dir / "report.json").read_text())
    assert not report.get("converted"), report  # jax arrays and numpy scalars became numbers without a notice


def test_a_training_that_raises_ends_its_run_failed_and_the_error_goes_on(tmp_path):
    def train_fn(*, num_timesteps, progress_fn):
        progress_fn(0, {"eval/episode_reward": 1.0})
        raise FloatingPointError("nan in the loss")

    with pytest.raises(FloatingPointError):
        rltrack_brax.train(train_fn, num_timesteps=10, config={"run": {"root": str(tmp_path), "name": "raises"}, "backends": {"use": ["local"]}})
    (run_dir,) = tmp_path.glob("raises*")
    assert json.loads((run_dir / "meta.json").read_text())["status"] == "failed"
    events = list(read_journal(run_dir))
    assert [e.data for e in events if e.kind == "hparams"] == [{"num_timesteps": 10}]
    scalars = {e.tag(k): (v, e.steps) for e in events if e.kind == "scalars" for k, v in e.data.items()}
    assert scalars == {"eval/episode_reward": (1.0, {"env_steps": 0}), "evaluator/reward_mean": (1.0, {"env_steps": 0})}


def test_train_hparams_typed_from_nested_partials():
    from brax.training.agents.ppo import networks

    inner = functools.partial(ppo.train, num_timesteps=100, network_factory=functools.partial(networks.make_ppo_networks, policy_hidden_layer_sizes=(32, 32)))
    outer = functools.partial(inner, learning_rate=1e-3, num_timesteps=200)
    hparams = rltrack_brax.train_hparams(outer, {"environment": envs.get_environment("fast"), "progress_fn": print, "seed": 3})
    assert hparams == {"algorithm": "ppo", "num_timesteps": 200, "network_factory": "brax.training.agents.ppo.networks.make_ppo_networks",
                       "learning_rate": 1e-3, "environment": "Fast", "seed": 3}  # fmt: skip
