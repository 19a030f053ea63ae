"""Real frameworks that write TensorBoard, from PyPI, into every tracker with no change to their code.

Each case trains a few thousand steps of the framework's own code:
CleanRL 1.2.0's `dqn.py` and `ppo.py` (the scripts as installed), DI-engine
0.5.3's serial DQN on CartPole (its own config and `serial_pipeline`), skrl's
PPO on a gymnasium CartPole and rsl_rl's `OnPolicyRunner` with its default
TensorBoard writer on the small task of tests/helpers/rsl_rl_task.py. Each runs twice, with the same seed:
once plainly, once under `rltrack run --config ... -- python ...` with MLflow
(SQLite store), W&B (offline) and trackio. Then:

* every scalar of the launched run's event files (TensorBoard's own
  `EventAccumulator`, tests/helpers/tracker_scalars.py) is in MLflow
  (MlflowClient), W&B's run file (tests/helpers/wandb_reader.py) and trackio
  (tests/helpers/trackio_reader.py) at the same step with the same value,
  exactly once; DI-engine's twins are one value with both axes;
* the event files hold the same tags at the same steps as the plain run's, and the
  same values except those measuring time (throughputs, durations);
* the run is `finished`; CleanRL's hyperparameters are MLflow params and W&B config, typed.

CleanRL's and DI-engine's pins need the oldest environment (`make test-oldest`),
skrl and rsl_rl run beside the main lock: each case skips, saying why, where its
framework is not installed. All are `slow` (tens of seconds to minutes each).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest
import wandb_reader
from reliability_helpers import PYTHON, child_env, meta, mlflow_run, sync_run
from tracker_scalars import (
    Series,
    at_iterations,
    event_file_scalars,
    expected_in_trackers,
    mlflow_scalars,
    trackio_scalars,
    wandb_scalars,
)
from waiting import wait_until

from rltrack.trackers.mlflow.batch import mlflow_key

pytestmark = pytest.mark.slow
#: Values that measure time differ between two runs of one seed; only their tags and steps are compared.
TIMING_TAG = re.compile(r"time|_sec|SPS|fps", re.IGNORECASE)
#: Tags whose steps measure time (rsl_rl's `Train/<k>/time`, at whole seconds): only their values are compared.
SECONDS_TAG = re.compile(r"/time$")
PROJECT = "frameworks"


def compared(series: Series) -> dict[str, list[object]]:
    """What two runs of one seed share: every value except those measuring time; a
    value at a time step (`SECONDS_TAG`) without its step."""
    return {
        tag: [value for _, value in points] if SECONDS_TAG.search(tag) else list(points)
        for tag, points in series.items()
        if SECONDS_TAG.search(tag) or not TIMING_TAG.search(tag)
    }


class Case:
    name: ClassVar[str]
    modules: ClassVar[tuple[str, ...]]
    #: the library whose writer it is (rltrack.frameworks.library.libraries()): its tags' canonical twins
    library: ClassVar[str]

    def command(self, seed: int) -> list[str]:
        """The training command, run in a directory of its own."""
        raise NotImplementedError

    def event_folder(self, workdir: Path) -> Path:
        """The folder of event files the command wrote under `workdir`."""
        raise NotImplementedError

    def check(self, run_dir: Path, events: Series) -> None:
        """What else the framework's run must show in the trackers."""

    def pythonpath(self) -> list[str]:
        """Directories the command needs first on its PYTHONPATH (skips the test when one is missing)."""
        return []


class CleanRL(Case):
    """One of CleanRL's scripts as installed, on CartPole-v1 on CPU: `script` and its short command line."""

    script: ClassVar[str]
    options: ClassVar[tuple[str, ...]]
    library = "cleanrl"

    def command(self, seed: int) -> list[str]:
        spec = importlib.util.find_spec(f"cleanrl.{self.script}")  # its path, not imported
        assert spec is not None and spec.origin
        return [spec.origin, "--seed", str(seed), "--cuda", "False", *self.options]

    def event_folder(self, workdir: Path) -> Path:
        (folder,) = (workdir / "runs").iterdir()  # CleanRL's runs/<env>__<script>__<seed>__<time>
        return folder

    def check(self, run_dir: Path, events: Series) -> None:
        assert run_dir.name.startswith(f"CartPole-v1__{self.script}__1__")  # named after CleanRL's run_name
        self.check_hparams(run_dir, events)

    def check_hparams(self, run_dir: Path, events: Series) -> None:
        """The hyperparameters table as MLflow params and typed W&B config; every episodic return there."""
        client, run_id = mlflow_run(run_dir)
        params = client.get_run(run_id).data.params
        assert params["total_timesteps"] == self.options[1] and params["env_id"] == "CartPole-v1"
        (wandb_file,) = wandb_reader.run_files(run_dir)
        config = wandb_reader.config(wandb_file)
        assert config["total_timesteps"] == int(self.options[1]) and config["torch_deterministic"] is True
        assert config["learning_rate"] == 0.00025
        if self.script == "ppo":
            assert config["anneal_lr"] is True and config["num_envs"] == 4 and params["num_envs"] == "4"
        assert len(events["charts/episodic_return"]) > 10  # one-element arrays (dqn.py), every one of them a scalar


class CleanRLDQN(CleanRL):
    name, modules, script = "cleanrl-dqn", ("cleanrl.dqn", "gymnasium", "stable_baselines3"), "dqn"
    options = ("--total-timesteps", "3000", "--learning-starts", "500", "--train-frequency", "10", "--target-network-frequency", "100")


class CleanRLPPO(CleanRL):
    """ppo.py is written against gym 0.23 (see requirements/test-oldest-cleanrl-ppo.txt): it runs with the
    overlay directory `make test-oldest` installs that gym into first on its PYTHONPATH; the environment's
    own gym stays DI-engine's 0.25.1. Four updates of 4 envs x 128 steps."""

    name, modules, script = "cleanrl-ppo", ("cleanrl", "torch.utils.tensorboard"), "ppo"
    options = ("--total-timesteps", "2048", "--num-envs", "4", "--num-steps", "128")
    OVERLAY = Path(sys.prefix) / "cleanrl-ppo"

    def pythonpath(self) -> list[str]:
        if not (self.OVERLAY / "gym").is_dir():
            pytest.skip(f"cleanrl-ppo needs gym 0.23.1 in {self.OVERLAY} (make test-oldest installs it: requirements/test-oldest-cleanrl-ppo.txt)")
        return [str(self.OVERLAY)]


DI_SCRIPT = """
\"\"\"DI-engine's serial DQN on CartPole, its own config, fewer environments and steps.\"\"\"
import sys
from copy import deepcopy
from ding.entry import serial_pipeline
from dizoo.classic_control.cartpole.config.cartpole_dqn_config import main_config, create_config
main_config, create_config = deepcopy(main_config), deepcopy(create_config)
main_config.exp_name = "cartpole_dqn_seed0"
main_config.env.collector_env_num = main_config.env.evaluator_env_num = main_config.env.n_evaluator_episode = 2
main_config.policy.eval.evaluator.eval_freq = 200
create_config.env_manager.type = "base"
serial_pipeline([main_config, create_config], seed=int(sys.argv[1]), max_env_step=600)
"""


class DIEngineDQN(Case):
    name, modules, library = "di-engine-dqn", ("ding", "dizoo", "gym"), "ding"

    def command(self, seed: int) -> list[str]:
        return ["-c", DI_SCRIPT, str(seed)]

    def event_folder(self, workdir: Path) -> Path:
        return workdir / "cartpole_dqn_seed0" / "log" / "serial"

    def check(self, run_dir: Path, events: Series) -> None:
        by_iteration = wandb_scalars(run_dir, "train_iter")
        for name, points in at_iterations(events).items():  # the `_iter` halves: the same values' other axis
            assert by_iteration[name] == points, name
        mlflow = mlflow_scalars(run_dir)
        assert "collector_iter/reward_mean" not in mlflow and "collector_step/reward_mean" not in mlflow  # one value, not two


SKRL_SCRIPT = """
\"\"\"skrl's own PPO on gymnasium's CartPole-v1: its SequentialTrainer, its TensorBoard writer.\"\"\"
import sys
import gymnasium as gym
from skrl.agents.torch.ppo import PPO
from skrl.envs.wrappers.torch import wrap_env
from skrl.memories.torch import RandomMemory
from skrl.trainers.torch import SequentialTrainer
from skrl.utils import set_seed
from skrl.utils.model_instantiators.torch import categorical_model, deterministic_model

set_seed(int(sys.argv[1]), deterministic=True)
env = wrap_env(gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync"), wrapper="gymnasium")
net = [{"name": "net", "input": "OBSERVATIONS", "layers": [32, 32], "activations": "tanh"}]
spaces = {"observation_space": env.observation_space, "action_space": env.action_space}
models = {"policy": categorical_model(**spaces, network=net, output="ACTIONS"), "value": deterministic_model(**spaces, network=net, output="ONE")}
cfg = {"rollouts": 64, "learning_epochs": 2, "mini_batches": 2,
       "experiment": {"directory": "skrl_runs", "experiment_name": "cartpole_ppo", "write_interval": 64, "checkpoint_interval": 0}}
agent = PPO(models=models, memory=RandomMemory(memory_size=64, num_envs=env.num_envs), **spaces, cfg=cfg)
SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 1024, "headless": True, "disable_progressbar": True}).train()
# skrl never closes its writer: what TensorBoard's writer thread had not written when the process ended was
# lost, more of it the busier the machine, in the run without rltrack as with it (CI saw the two files differ).
# Closed, both files are whole and can be compared; a writer left open at exit: test_adapter_tensorboard.py.
agent.writer.close()
"""


class SkrlPPO(Case):
    """skrl writes `Reward / Total reward (mean)`-style tags at its timestep (MLflow takes no parentheses:
    those keys arrive under rltrack.trackers.mlflow's `mlflow_key`)."""

    name, modules, library = "skrl-ppo", ("skrl", "gymnasium"), "skrl"

    def command(self, seed: int) -> list[str]:
        return ["-c", SKRL_SCRIPT, str(seed)]

    def event_folder(self, workdir: Path) -> Path:
        return workdir / "skrl_runs" / "cartpole_ppo"

    def check(self, run_dir: Path, events: Series) -> None:
        assert len(events["Reward / Total reward (mean)"]) == 1024 // 64  # one row per write interval


RSL_RL_SCRIPT = """
\"\"\"rsl_rl's own OnPolicyRunner (PPO) with its default writer, TensorBoard's, on the small task of tests/helpers.\"\"\"
import sys
import torch
from rsl_rl.runners import OnPolicyRunner
from rsl_rl_task import ReachTarget, train_cfg

torch.manual_seed(int(sys.argv[1]))
OnPolicyRunner(ReachTarget(), train_cfg("tensorboard"), log_dir="logs/reach", device="cpu").learn(num_learning_iterations=5)
"""


class RslRlPPO(Case):
    """rsl_rl writes at its learning iteration `it` (`train_iter`), its `Train/<k>/time` tags at whole
    seconds of training (`seconds`): those steps measure time, only their values are compared."""

    name, modules, library = "rsl-rl-ppo", ("rsl_rl", "torch.utils.tensorboard"), "rsl_rl"

    def command(self, seed: int) -> list[str]:
        return ["-c", RSL_RL_SCRIPT, str(seed)]

    def event_folder(self, workdir: Path) -> Path:
        return workdir / "logs" / "reach"

    def check(self, run_dir: Path, events: Series) -> None:
        assert run_dir.name == "reach"  # named after rsl_rl's log directory
        assert [step for step, _ in events["Loss/value"]] == [0, 1, 2, 3, 4]
        assert {"Train/mean_reward", "Episode/distance", "Metrics/final_error", "Perf/total_fps"} <= set(events)


CASES = [CleanRLDQN, CleanRLPPO, DIEngineDQN, SkrlPPO, RslRlPPO]


@pytest.fixture(params=CASES, ids=lambda case: case.name)
def case(request: pytest.FixtureRequest) -> Case:
    for module in request.param.modules:
        pytest.importorskip(module, reason=f"{request.param.name} needs {module} (installed in the oldest environment, see the Makefile)")
    return request.param()


def train(case: Case, workdir: Path, home: Path, launcher: list[str]) -> subprocess.CompletedProcess[str]:
    workdir.mkdir(parents=True)
    env = child_env(home)
    env["PYTHONPATH"] = os.pathsep.join([*case.pythonpath(), env["PYTHONPATH"]])
    return subprocess.run([*launcher, PYTHON, *case.command(seed=1)], capture_output=True, text=True, env=env,
                          timeout=1800, cwd=workdir, check=False)  # fmt: skip


def delivered(run_dir: Path, home: Path) -> None:
    """Waits for the agent to end its delivery of the run, then syncs what it left (nothing twice):
    `rltrack sync` refuses (exit 2) while the agent holds the run's cursors."""
    wait_until(lambda: sync_run(run_dir, home).returncode == 0, 900, f"`rltrack sync {run_dir}` to run with no agent delivering it", every=1.0)


def write_config(directory: Path) -> Path:
    config = directory / "rltrack.toml"
    config.write_text(
        f'[run]\nroot = "{directory / "rl"}"\n\n[backends]\nuse = ["mlflow", "wandb", "trackio"]\n\n'
        f'[backends.mlflow]\ntracking_uri = "sqlite:///{directory / "mlflow.db"}"\nexperiment = "{PROJECT}"\n\n'
        f'[backends.trackio]\nproject = "{PROJECT}"\ndir = "{directory / "trackio"}"\n'
    )
    return config


def test_every_scalar_reaches_every_tracker_once_and_the_event_files_stay_the_same(case: Case, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    plain = train(case, tmp_path / "plain", home, [])
    assert plain.returncode == 0, plain.stderr[-3000:]
    config = write_config(tmp_path)
    launched = train(case, tmp_path / "launched", home, [PYTHON, "-m", "rltrack.cli", "run", "--config", str(config), "--"])
    assert launched.returncode == 0, launched.stderr[-3000:]
    (run_dir,) = [p.parent for p in (tmp_path / "rl").glob("*/meta.json")]
    delivered(run_dir, home)
    assert meta(run_dir)["status"] == "finished"

    events = event_file_scalars(case.event_folder(tmp_path / "launched"))
    expected = expected_in_trackers(events, case.library)  # every tag as written, and its canonical twin
    assert "collector/reward_mean" in expected  # the return's canonical twin, beside the library's own tag
    if case.library != "ding":  # DI-engine's two tags of a value are that one value
        assert set(events) <= set(expected)
    stores = {"mlflow": mlflow_scalars(run_dir), "wandb": wandb_scalars(run_dir, "env_steps", "train_iter", "seconds", "step"),
              "trackio": trackio_scalars(tmp_path / "trackio", PROJECT)}  # fmt: skip
    for name, points in expected.items():
        for tracker, held in stores.items():
            key = mlflow_key(name) if tracker == "mlflow" else name
            assert held.get(key) == points, (tracker, name, held.get(key, [])[:5], points[:5])
    case.check(run_dir, events)

    without = event_file_scalars(case.event_folder(tmp_path / "plain"))
    assert {tag: [s for s, _ in points] for tag, points in events.items() if not SECONDS_TAG.search(tag)} == {
        tag: [s for s, _ in points] for tag, points in without.items() if not SECONDS_TAG.search(tag)
    }
    assert events.keys() == without.keys()
    assert compared(events) == compared(without)



ATTACHED = """
\"\"\"A user's two lines: attach rltrack to every TensorBoard writer, then run CleanRL's script as it is.\"\"\"
import runpy, sys
import rltrack
from rltrack.adapters.tensorboard import attach
attach(rltrack.make_logger(sys.argv[1]))
sys.argv = sys.argv[3:]  # after the config: the interpreter `train` puts before every command, then CleanRL's command line
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def cleanrl(case: CleanRL) -> CleanRL:
    for module in case.modules:
        pytest.importorskip(module, reason=f"{case.name} needs {module} (installed in the oldest environment, see the Makefile)")
    return case


@pytest.mark.parametrize("script", [CleanRLDQN, CleanRLPPO], ids=lambda case: case.name)
def test_cleanrl_with_attach_in_the_users_code(script: type[CleanRL], tmp_path: Path) -> None:
    case = cleanrl(script())
    home = tmp_path / "home"
    home.mkdir()
    config = write_config(tmp_path)
    done = train(case, tmp_path / "attached", home, [PYTHON, "-c", ATTACHED, str(config)])
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = [p.parent for p in (tmp_path / "rl").glob("*/meta.json")]
    delivered(run_dir, home)
    assert meta(run_dir)["status"] == "finished"
    events = event_file_scalars(case.event_folder(tmp_path / "attached"))
    stores = {"mlflow": mlflow_scalars(run_dir), "wandb": wandb_scalars(run_dir, "env_steps"), "trackio": trackio_scalars(tmp_path / "trackio", PROJECT)}
    for name, points in expected_in_trackers(events, "cleanrl").items():
        for tracker, held in stores.items():
            assert held.get(name) == points, (tracker, name)
    case.check_hparams(run_dir, events)


def test_a_cleanrl_script_that_raises_ends_its_run_failed(tmp_path: Path) -> None:
    """dqn.py with an environment gymnasium does not know: the writer has written the
    hyperparameters when `gym.make` raises; the launcher exits with the script's code."""
    case = cleanrl(CleanRLDQN())
    home = tmp_path / "home"
    home.mkdir()
    config = write_config(tmp_path)
    command = [PYTHON, "-m", "rltrack.cli", "run", "--config", str(config), "--", PYTHON, *case.command(seed=1), "--env-id", "NoSuchEnv-v0"]
    (tmp_path / "work").mkdir()
    done = subprocess.run(command, capture_output=True, text=True, env=child_env(home), timeout=600, cwd=tmp_path / "work", check=False)
    assert done.returncode == 1 and "NoSuchEnv" in done.stderr, done.stderr[-3000:]
    (run_dir,) = [p.parent for p in (tmp_path / "rl").glob("*/meta.json")]
    delivered(run_dir, home)
    assert meta(run_dir)["status"] == "failed"
    client, run_id = mlflow_run(run_dir)
    assert client.get_run(run_id).info.status == "FAILED"
    assert client.get_run(run_id).data.params["env_id"] == "NoSuchEnv-v0"


HF_SCRIPT = """
\"\"\"transformers' own Trainer with report_to=["tensorboard"] (TRL's trainers log through the same callback):
a 1-layer GPT-2 built in code, random tokens, 4 optimizer steps on CPU.\"\"\"
import sys
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

torch.manual_seed(int(sys.argv[1]))
model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2))
data = [{"input_ids": torch.randint(0, 64, (16,)), "labels": torch.randint(0, 64, (16,))} for _ in range(32)]
args = TrainingArguments(output_dir="out/tiny-lm", run_name=sys.argv[2] or None, report_to=["tensorboard"], logging_steps=1, max_steps=4,
                         per_device_train_batch_size=4, learning_rate=1e-3, use_cpu=True, save_strategy="no", disable_tqdm=True)
Trainer(model=model, args=args, train_dataset=data).train()
"""


@pytest.mark.parametrize("run_name", ["", "tiny-run"])
def test_a_transformers_trainer_keeps_hfs_keys_its_arguments_and_its_run_name(run_name: str, tmp_path: Path) -> None:
    """HF's `train/loss` is stored as `train/loss` with no canonical twin (SB3's `train/` table is
    not transformers'); the TrainingArguments JSON HF writes as text arrives as typed MLflow params
    and W&B config; the run is named after `run_name`, else `output_dir`, not HF's timestamp folder."""
    pytest.importorskip("transformers", reason="transformers' Trainer and its TensorBoard callback (requirements/test.txt)")
    home, workdir = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    workdir.mkdir()
    config = write_config(tmp_path)
    command = [PYTHON, "-m", "rltrack.cli", "run", "--config", str(config), "--", PYTHON, "-c", HF_SCRIPT, "1", run_name]
    done = subprocess.run(command, capture_output=True, text=True, env=child_env(home), timeout=900, cwd=workdir, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = [p.parent for p in (tmp_path / "rl").glob("*/meta.json")]
    assert run_dir.name == (run_name or "tiny-lm")
    delivered(run_dir, home)
    assert meta(run_dir)["status"] == "finished"
    (folder,) = (workdir / "out" / "tiny-lm" / "runs").iterdir()  # HF's `<month><day>_<time>_<host>`
    events = event_file_scalars(folder)
    assert {"train/loss", "train/learning_rate", "train/grad_norm"} <= set(events)
    stores = {"mlflow": mlflow_scalars(run_dir), "wandb": wandb_scalars(run_dir, "train_iter"), "trackio": trackio_scalars(tmp_path / "trackio", PROJECT)}
    for tracker, held in stores.items():  # HF's global_step counts updates: the axis train_iter
        assert {name: held.get(name) for name in events} == events, tracker  # every value, as written, once
        twins = {name for name in held if name.startswith(("learner/", "collector/"))}  # HF's own table only (not SB3's `learner/loss`)
        assert twins == {"learner/total_loss_avg", "learner/cur_lr_avg"}, (tracker, twins)
        assert held["learner/total_loss_avg"] == events["train/loss"] and held["learner/cur_lr_avg"] == events["train/learning_rate"], tracker
    client, run_id = mlflow_run(run_dir)
    params = client.get_run(run_id).data.params
    assert params["learning_rate"] == "0.001" and params["max_steps"] == "4" and params["output_dir"] == "out/tiny-lm"
    (wandb_file,) = wandb_reader.run_files(run_dir)
    settings = wandb_reader.config(wandb_file)
    assert settings["learning_rate"] == 0.001 and settings["max_steps"] == 4 and settings["use_cpu"] is True
    assert settings["report_to"] == ["tensorboard"]
