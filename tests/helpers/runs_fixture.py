"""A runs root for the experiment-database tests, made by the real tools.

`make_runs_root(root, scratch)` fills `root` with:

* rltrack runs made by the real adapters: SB3 PPO (`attach` + `RLTrackCallback`),
  a Tune grid (`RLTrackCallback` in a real `tune.run`, two trials), Acme
  (`make_logger_factory` loggers for actor and evaluator), SpinningUp
  (`EpochLogger`), and the plain API;
* foreign directories, written with no rltrack at all: SB3's own logger
  (`configure(folder, ["csv"])` under a real PPO `learn`), a real `tune.run`
  with no callbacks (two trials), a SpinningUp `progress.txt` + `config.json`
  in SpinningUp's format (SpinningUp is not on PyPI: the file is written here
  the way `spinup.utils.logx.Logger` writes it), and a DI-engine layout
  (`log/serial` TensorBoard files written by tensorboardX's `SummaryWriter`,
  `total_config.py` as DI-engine's `save_config_py` writes it).

It returns one `MadeRun` per run: what was put in, so tests compute what
queries must answer from these declarations rather than from the index.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STANDINS = Path(__file__).parent / "standins"

#: The DI-engine config, as DI-engine's `save_config_py` writes it (`exp_config = ` + formatted dict, `float("inf")`).
DI_CONFIG_TEXT = """exp_config = {
    'env': {'env_id': 'CartPole-v1', 'collector_env_num': 8, 'stop_value': 195, 'max_episode_steps': float("inf"),},
    'policy': {'cuda': False, 'learn': {'learning_rate': 0.001, 'batch_size': 64}, 'discount_factor': 0.97},
    'exp_name': 'cartpole_dqn_seed0',
    'seed': 0,
}
"""


@dataclass
class MadeRun:
    """One run the fixture made and what it was given."""

    name: str  # a short handle for tests
    writer: str  # "rltrack" or the foreign format
    source: str
    hparams: dict[str, Any]  # what a where over hyperparameters sees (flat names)
    rewards: list[float] = field(default_factory=list)  # collector/reward_mean in order, when logged
    path: Path | None = None


def _config(root: Path, name: str, task: str, tracked: list[str], use: tuple[str, ...] = ("local",)) -> dict[str, Any]:
    return {"run": {"root": str(root), "name": name, "task": task, "tracked": tracked}, "backends": {"use": list(use)}}


def _sb3_runs(root: Path) -> list[MadeRun]:
    from stable_baselines3 import PPO
    from stable_baselines3.common.logger import configure

    import rltrack
    from rltrack.adapters.sb3 import RLTrackCallback, attach

    kwargs = dict(n_steps=64, batch_size=64, n_epochs=1, seed=0, device="cpu", policy_kwargs=dict(net_arch=[8]))
    made = []
    with rltrack.make_logger(_config(root, "sb3_ppo", "cartpole", ["env_id", "lr"])) as logger:
        logger.log_hparams({"env_id": "CartPole-v1", "lr": 0.001})
        model = PPO("MlpPolicy", "CartPole-v1", learning_rate=0.001, **kwargs)
        attach(model, logger)
        model.learn(256, callback=RLTrackCallback(logger))
        made.append(MadeRun("sb3", "rltrack", "sb3", {"env_id": "CartPole-v1", "lr": 0.001}, path=logger.run_dir))
    native = root / "sb3_native"
    model = PPO("MlpPolicy", "CartPole-v1", learning_rate=0.003, **kwargs)
    model.set_logger(configure(str(native), ["csv"]))
    model.learn(256)
    made.append(MadeRun("sb3_native", "sb3", "sb3", {}, path=native))
    return made


def _tune_runs(root: Path, storage: Path) -> list[MadeRun]:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray
    from ray import tune

    from rltrack.adapters.tune import RLTrackCallback

    def trainable(config: dict[str, Any]) -> None:
        for i in range(1, 4):
            tune.report({"env_runners": {"episode_return_mean": config["lr"] * 1000 * i, "num_env_steps_sampled_lifetime": 100 * i}})

    assert ray.is_initialized(), "start Ray first (the ray_cluster fixture of tests/conftest.py)"
    callback = RLTrackCallback(_config(root, "tune_grid", "cartpole", ["env_id", "lr"]))
    tune.run(trainable, config={"lr": tune.grid_search([0.001, 0.1]), "env_id": "CartPole-v1"}, callbacks=[callback],
             storage_path=str(storage), name="grid", verbose=0)
    tune.run(trainable, config={"lr": tune.grid_search([0.005, 0.05]), "env_id": "CartPole-v1"},
             storage_path=str(root), name="tune_native", verbose=0)
    made = []
    for run_dir in sorted((root / "tune_grid").iterdir()):
        lr = json.loads((run_dir / "meta.json").read_text())["tracked"]["lr"]
        made.append(MadeRun(f"tune_{lr}", "rltrack", "rllib", {"env_id": "CartPole-v1", "lr": lr}, [lr * 1000 * i for i in (1, 2, 3)], run_dir))
    for run_dir in sorted(p for p in (root / "tune_native").iterdir() if (p / "result.json").is_file()):
        lr = json.loads((run_dir / "params.json").read_text())["lr"]
        made.append(MadeRun(f"tune_native_{lr}", "tune", "rllib", {"env_id": "CartPole-v1", "lr": lr}, [lr * 1000 * i for i in (1, 2, 3)], run_dir))
    return made


def _acme_run(root: Path) -> MadeRun:
    if importlib.util.find_spec("launchpad") is None:
        sys.path.insert(0, str(STANDINS))
    from rltrack.adapters.acme import make_logger_factory

    rewards = [10.0, 30.0, 20.0]
    with make_logger_factory(_config(root, "acme_d4pg", "pendulum", ["env_id", "lr"])) as factory:
        factory.logger.log_hparams({"env_id": "Pendulum-v1", "lr": 0.0003})
        actor = factory("actor", steps_key="actor_steps")
        for i, reward in enumerate(rewards, start=1):
            actor.write({"episode_return": reward, "actor_steps": 100 * i, "episode_length": 100})
        factory("evaluator", steps_key="actor_steps").write({"episode_return": 25.0, "actor_steps": 300})
        run_dir = factory.logger.run_dir
    # the adapter sums an actor's episodes up at close, DI-engine style: one collector/reward_mean, their mean
    return MadeRun("acme", "rltrack", "acme", {"env_id": "Pendulum-v1", "lr": 0.0003}, [sum(rewards) / len(rewards)], run_dir)


def _spinup_runs(root: Path, scratch: Path) -> list[MadeRun]:
    from rltrack.adapters.spinup import EpochLogger

    hparams = {"env_id": "HalfCheetah-v4", "lr": 0.0003}
    logger = EpochLogger(output_dir=str(scratch / "spinup_out"), exp_name="vpg",
                         rltrack_config=_config(root, "spinup_vpg", "halfcheetah", ["env_id", "lr"]))
    logger.save_config(hparams)
    rewards = []
    for epoch in range(3):
        for ret in (epoch * 10.0, epoch * 10.0 + 2.0):
            logger.store(EpRet=ret)
        rewards.append(epoch * 10.0 + 1.0)
        logger.log_tabular("Epoch", epoch)
        logger.log_tabular("EpRet", with_min_and_max=True)
        logger.log_tabular("TotalEnvInteracts", (epoch + 1) * 400)
        logger.dump_tabular()
    run_dir = logger.rltrack.run_dir
    logger.close()
    made = [MadeRun("spinup", "rltrack", "spinup", {**hparams, "exp_name": "vpg"}, rewards, run_dir)]
    native = root / "spinup_native" / "spinup_native_s0"  # SpinningUp's `<exp_name>/<exp_name>_s<seed>`
    native.mkdir(parents=True)
    config = {"exp_name": "spinup_native", "env_id": "Hopper-v4", "lr": 0.002, "seed": 0, "logger_kwargs": {"output_dir": str(native)}}
    (native / "config.json").write_text(json.dumps(config, separators=(",", ":\t"), indent=4, sort_keys=True))
    native_rewards = [5.0, 7.5, 9.0]
    lines = ["\t".join(["Epoch", "AverageEpRet", "StdEpRet", "TotalEnvInteracts", "LossPi", "Time"])]
    lines += ["\t".join(f"{v:.8g}" for v in (epoch, ret, 1.0, (epoch + 1) * 400, -0.5 * epoch, 3.0 * epoch)) for epoch, ret in enumerate(native_rewards)]
    (native / "progress.txt").write_text("\n".join(lines) + "\n")
    made.append(MadeRun("spinup_native", "spinup", "spinup", {k: v for k, v in config.items() if k != "logger_kwargs"} | {"logger_kwargs/output_dir": str(native)}, native_rewards, native))
    return made


def _di_run(root: Path) -> MadeRun:
    from tensorboardX import SummaryWriter

    run_dir = root / "cartpole_dqn_seed0"
    (run_dir / "log" / "serial").mkdir(parents=True)
    (run_dir / "total_config.py").write_text(DI_CONFIG_TEXT)
    rewards = [12.0, 40.0, 95.5]
    writer = SummaryWriter(str(run_dir / "log" / "serial"))
    for i, reward in enumerate(rewards):
        writer.add_scalar("evaluator_iter/reward_mean", reward, i * 10)
        writer.add_scalar("evaluator_step/reward_mean", reward, i * 1000)
        writer.add_scalar("learner_iter/total_loss", 1.0 / (i + 1), i * 10)
    writer.close()
    hparams = {"env/env_id": "CartPole-v1", "env/collector_env_num": 8, "env/stop_value": 195, "env/max_episode_steps": float("inf"),
               "policy/cuda": False, "policy/learn/learning_rate": 0.001, "policy/learn/batch_size": 64,
               "policy/discount_factor": 0.97, "exp_name": "cartpole_dqn_seed0", "seed": 0}
    return MadeRun("di", "di-engine", "di-engine", hparams, rewards, run_dir)


def _plain_run(root: Path) -> MadeRun:
    import rltrack

    rewards = [1.0, 3.0, 2.0]
    with rltrack.make_logger(_config(root, "plain_demo", "cartpole", ["env_id", "lr"])) as logger:
        logger.log_hparams({"env_id": "CartPole-v1", "lr": 0.02, "opt": {"eps": 1e-8}})
        for i, reward in enumerate(rewards):
            logger.write({"reward_mean": reward}, step={"env_steps": 10 * i, "train_iter": i}, namespace="collector")
            with logger.timer("train"):
                pass
            logger.dump()
        logger.log_checkpoint({"w": [1.0]}, iteration=2, metric=2.0)
    return MadeRun("plain", "rltrack", "plain", {"env_id": "CartPole-v1", "lr": 0.02, "opt/eps": 1e-8}, rewards, logger.run_dir)


def make_runs_root(root: Path, scratch: Path, with_tune: bool = True) -> list[MadeRun]:
    """Fills `root` (see the module docstring); `scratch` holds what must not be under it.
    `with_tune=False` leaves out the two `tune.run`s; with them, Ray must be running
    (the session's `ray_cluster` fixture, tests/conftest.py).
    The returned paths are relative to `root`."""
    saved = {k: os.environ.pop(k) for k in ("RLTRACK_CONFIG", "RLTRACK_BACKENDS") if k in os.environ}
    try:
        made = [_plain_run(root), *_sb3_runs(root), _acme_run(root), *_spinup_runs(root, scratch), _di_run(root)]
        if with_tune:
            made += _tune_runs(root, scratch / "ray_results")
    finally:
        os.environ.update(saved)
    for run in made:
        assert run.path is not None
        run.path = run.path.resolve().relative_to(root.resolve())
    return made


_BUILT: dict[bool, tuple[Path, list[MadeRun]]] = {}


def runs_root_copy(tmp_path_factory: Any, target: Path, with_tune: bool = False) -> list[MadeRun]:
    """A fresh copy of the fixture root at `target` (built once per test session
    and kept for the other tests), without any index; returns what it holds."""
    if with_tune not in _BUILT:
        base = tmp_path_factory.mktemp("runs_fixture_tune" if with_tune else "runs_fixture")
        made = make_runs_root(base / "root", base / "scratch", with_tune)
        _BUILT[with_tune] = (base / "root", made)
    source, made = _BUILT[with_tune]
    shutil.copytree(source, target, symlinks=True, ignore=shutil.ignore_patterns("rltrack_index.db*"))
    return [dataclasses.replace(run) for run in made]
