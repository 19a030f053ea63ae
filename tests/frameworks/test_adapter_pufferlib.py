"""PufferLib 3 -> rltrack: `rltrack.adapters.pufferlib.RLTrackLogger` as the logger
of PufferLib's own `pufferl.train` (its `PuffeRL` trainer, vectorized
environments and default policy) on gymnasium's CartPole, every value it
handed to `log` read back from progress.csv, MLflow and W&B's run file; its
args as typed hyperparameters; the model from `close(model_path)` as the
run's checkpoint in MLflow.

`pufferlib-core`'s compiled kernel needs CUDA torch: `pufferlib_kernel`
(tests/helpers) stands in for its one op, and says why.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pufferlib.pufferl", reason="pufferlib-core is not installed (the Makefile installs it with --no-deps)")
import gymnasium  # noqa: E402
import pufferlib_kernel  # noqa: E402
from library_readback import assert_once_everywhere, config  # noqa: E402

from rltrack.adapters.pufferlib import CANONICAL, RLTrackLogger  # noqa: E402
from rltrack.delivery.cursor import tracker_state  # noqa: E402
from rltrack.journal import read_journal  # noqa: E402


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


class EpisodeStats(gymnasium.Wrapper):
    """What PufferLib's own environments put in their infos at an episode's end: `episode_return`, `episode_length`."""

    def reset(self, **kwargs):
        self.ret, self.length = 0.0, 0
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, reward, done, truncated, info = self.env.step(action)
        self.ret, self.length = self.ret + float(reward), self.length + 1
        if done or truncated:
            info = {**info, "episode_return": self.ret, "episode_length": self.length}
        return obs, reward, done, truncated, info


class Recording(RLTrackLogger):
    """Our logger, noting what PuffeRL handed to `log` and `close`."""

    def __init__(self, *args, **kwargs):
        self.calls, self.model_path = [], None
        super().__init__(*args, **kwargs)

    def log(self, logs, step):
        self.calls.append((step, {key: float(value) for key, value in logs.items()}))
        super().log(logs, step)

    def close(self, model_path=None):
        self.model_path = model_path
        super().close(model_path)


def _train_args(data_dir):
    """PufferLib's args as its `load_config` nests them: the trainer's section (every key PuffeRL reads) and the rest."""
    train = {"seed": 1, "torch_deterministic": True, "device": "cpu", "total_timesteps": 512, "batch_size": 64, "bptt_horizon": 16,
             "minibatch_size": 64, "max_minibatch_size": 64, "update_epochs": 1, "compile": False, "compile_mode": "default",
             "compile_fullgraph": False, "optimizer": "adam", "learning_rate": 3e-3, "adam_beta1": 0.9, "adam_beta2": 0.999,
             "adam_eps": 1e-8, "precision": "float32", "cpu_offload": False, "use_rnn": False, "data_dir": str(data_dir),
             "checkpoint_interval": 100, "anneal_lr": True, "prio_alpha": 0.0, "prio_beta0": 1.0, "clip_coef": 0.2, "vf_clip_coef": 0.2,
             "vf_coef": 0.5, "ent_coef": 0.01, "gamma": 0.99, "gae_lambda": 0.95, "vtrace_rho_clip": 1.0, "vtrace_c_clip": 1.0,
             "max_grad_norm": 0.5}  # fmt: skip
    return {"env_name": "CartPole-v1", "train": train, "vec": {"num_envs": 4, "backend": "Serial"}, "wandb": False, "neptune": False, "tag": None}


@pytest.mark.slow  # PufferLib's train() ends with 32 evaluation rollouts: about 20 s here
def test_puffer_train_values_args_and_model_reach_every_tracker(tmp_path):
    import pufferlib.emulation
    import pufferlib.models
    import pufferlib.vector
    from pufferlib import pufferl

    pufferlib_kernel.install()
    args = _train_args(tmp_path / "puffer_data")

    def creator(buf=None, seed=0):
        return pufferlib.emulation.GymnasiumPufferEnv(env_creator=lambda: EpisodeStats(gymnasium.make("CartPole-v1")), buf=buf, seed=seed)

    vecenv = pufferlib.vector.make(creator, num_envs=4, backend=pufferlib.vector.Serial)
    policy = pufferlib.models.Default(vecenv.driver_env, hidden_size=16)
    logger = Recording(args, config=config(tmp_path / "runs"))
    pufferl.train("CartPole-v1", args=args, vecenv=vecenv, policy=policy, logger=logger)
    run_dir = logger.run_dir
    assert logger.run_id == run_dir.name == "CartPole-v1" and logger.model_path.endswith("CartPole-v1.pt")  # PufferLib named its file by our run_id
    keys = {key for _, logs in logger.calls for key in logs}
    assert {"SPS", "agent_steps", "environment/episode_return", "losses/policy_loss", "performance/learn"} <= keys
    logged = [(key, "env_steps", step, value) for step, logs in logger.calls for key, value in logs.items()]
    logged += [(CANONICAL[key], "env_steps", step, value) for step, logs in logger.calls for key, value in logs.items() if key in CANONICAL]
    assert_once_everywhere(run_dir, logged)
    from mlflow import MlflowClient

    state = tracker_state(run_dir, "mlflow")
    client = MlflowClient(state["tracking_uri"])
    params = client.get_run(state["run_id"]).data.params
    assert {key: params[key] for key in ("env_name", "train/learning_rate", "train/batch_size", "train/anneal_lr", "vec/backend")} == {
        "env_name": "CartPole-v1", "train/learning_rate": "0.003", "train/batch_size": "64", "train/anneal_lr": "True", "vec/backend": "Serial"}
    epoch = int(logger.calls[-1][1]["epoch"])
    [ckpt] = [e for e in read_journal(run_dir) if e.kind == "artifact"]
    assert ckpt.data["path"] == f"ckpt/iteration_{epoch}.pth.tar"
    local = client.download_artifacts(state["run_id"], ckpt.data["path"], str(tmp_path / "download"))
    with open(local, "rb") as got, open(logger.model_path, "rb") as model:
        assert got.read() == model.read()  # the model file PufferLib saved, in MLflow
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "finished" and meta["info"]["framework"] == "pufferlib"


def test_run_id_given_names_the_run_and_a_logger_given_is_left_open(tmp_path):
    import rltrack

    logger = RLTrackLogger({"env_name": "puffer_breakout"}, run_id="sweep_7", run={"root": str(tmp_path)}, backends={"use": ["local"]})
    assert logger.run_id == "sweep_7" == logger.run_dir.name
    logger.close()
    mine = rltrack.make_logger(run={"root": str(tmp_path), "name": "mine"}, backends={"use": ["memory"]})
    given = RLTrackLogger(logger=mine)
    given.log({"losses/value_loss": 0.5}, 64)
    given.close()
    mine.write({"after": 1.0}, step=2)  # still open
    mine.close()
    tags = [(e.tag(k), v) for e in read_journal(mine.run_dir) if e.kind == "scalars" for k, v in e.data.items()]
    assert tags == [("losses/value_loss", 0.5), ("learner/value_loss_avg", 0.5), ("after", 1.0)]
