"""The contract every adapter keeps, run against each through one interface (as
Lightning's tests_pytorch/loggers/test_all.py does for its loggers): each case
drives the real framework's own logging call (SB3's `Logger.record/dump`,
Tune's `LoggerCallback` hooks on a real `Trial`, Acme's `Logger.write`,
SpinningUp's `EpochLogger`, a TensorBoard `SummaryWriter` under `attach`,
TorchRL's `Logger.log_scalar`, Tianshou's `BaseLogger.log_training_data`,
rsl_rl's `LogWriter.add_scalar`, transformers' `TrainerCallback.on_log`, skrl's agent writer, rl_games' observer and writer,
a `jax.debug.callback` target, Brax's `progress_fn`, PufferLib's `log(logs, step)`, Stoix's `log_dict`), and
the run's journal and meta.json are read back:

* every value arrives once, in the order it was logged, under the namespace
  the adapter's docs give it;
* at the step the framework means (SB3's `num_timesteps` as `env_steps`,
  Tune's `training_iteration` as `train_iter`, Acme's `steps_key`,
  SpinningUp's `Epoch`, a TensorBoard writer's `global_step` of a `charts/`
  tag as `env_steps`);
* hyperparameters, where the framework has them, keep their types (an int
  stays an int, a bool a bool);
* a run closed normally is `finished`; a process in which training raises
  ends its run `failed` (a child process each: the status comes from the
  process's exit hooks, as in a user's script).

The cases run over the libraries registered with an adapter (entry-point
group `rltrack.libraries`, rltrack.frameworks.library); a registered adapter
without a case fails the suite. Adding an adapter is one `Case` subclass in `CASES`: how to open a session
with the framework (`open`), log one record at a step (`log`), give
hyperparameters (`hparams`, or `HPARAMS = False` when the framework has none)
and close it (`close`), plus a `CRASH` script that logs a value through the
framework and raises.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

import rltrack
from rltrack.core.events import Event
from rltrack.frameworks.library import libraries

REPO = Path(__file__).resolve().parents[2]
#: `import acme` imports `launchpad`, which has no wheels for Python 3.11: its marked stand-in (tests/helpers/standins).
STANDINS = REPO / "tests" / "helpers" / "standins"
if importlib.util.find_spec("launchpad") is None:
    sys.path.insert(0, str(STANDINS))
#: The records every case logs: (step, {key: value}); two keys with no canonical twin, steps that grow unevenly.
RECORDS = [(10, {"contract_a": 1.5, "contract_b": -1.0}), (25, {"contract_a": 2.5, "contract_b": -2.0}), (40, {"contract_a": 0.5, "contract_b": -3.0})]
HPARAMS = {"lr": 0.0003, "batch_size": 64, "use_gae": True, "env_id": "CartPole-v1"}


def config(root: Path, name: str) -> dict[str, Any]:
    return {"run": {"root": str(root), "name": name}, "backends": {"use": ["memory"]}}


class Case:
    """One adapter: what the contract needs to drive it and where its values land."""

    name: ClassVar[str]
    module: ClassVar[str]  # the framework, skipped (with this reason) where it is not installed
    namespace: ClassVar[str]  # where RECORDS' keys land: the namespace the library wrote them in (issue 41: keys as written)
    axis: ClassVar[str]  # the step axis the framework's step is on
    HPARAMS: ClassVar[bool] = True
    #: The events' `source`, when not the case's name (values carried by another adapter).
    SOURCE: ClassVar[str | None] = None
    #: A script run as `python -c CRASH CONFIG_JSON *ARGS`: logs one value through the framework, then raises.
    CRASH: ClassVar[str]
    ARGS: ClassVar[tuple[str, ...]] = ()

    def open(self, config: dict[str, Any]) -> None:
        raise NotImplementedError

    def log(self, step: int, values: dict[str, float]) -> None:
        raise NotImplementedError

    def hparams(self, hparams: dict[str, Any]) -> None:
        raise NotImplementedError

    def close(self) -> Path:
        """Ends the session normally; returns the run directory."""
        raise NotImplementedError


class SB3(Case):
    name, module, namespace, axis = "sb3", "stable_baselines3", "train", "env_steps"  # SB3's key as written: `train/contract_a`
    CRASH = """
import json, sys, rltrack
from stable_baselines3.common.logger import Logger
from rltrack.adapters.sb3 import add_writer
sb3 = Logger(None, [])
add_writer(sb3, rltrack.make_logger(json.loads(sys.argv[1])))
sb3.record("train/contract_a", 1.0)
sb3.dump(1)
raise RuntimeError("training failed")
"""

    def open(self, config: dict[str, Any]) -> None:
        from stable_baselines3.common.logger import Logger

        from rltrack.adapters.sb3 import add_writer

        self.logger = rltrack.make_logger(config)
        self.sb3 = Logger(None, [])
        add_writer(self.sb3, self.logger)

    def log(self, step: int, values: dict[str, float]) -> None:
        for key, value in values.items():
            self.sb3.record(f"train/{key}", value)
        self.sb3.dump(step)

    def hparams(self, hparams: dict[str, Any]) -> None:
        from stable_baselines3.common.logger import HParam

        self.sb3.record("hparams", HParam(hparams, {"train/contract_a": 0}), exclude=("stdout", "log", "json", "csv"))
        self.sb3.dump(0)

    def close(self) -> Path:
        self.sb3.close()
        self.logger.close()
        return self.logger.run_dir


class Tune(Case):
    """Tune's callback hooks called by hand on a real `Trial` (no Ray session is needed for them)."""

    name, module, namespace, axis = "tune", "ray.tune", "", "train_iter"
    CRASH = """
import json, sys
from ray import tune
from ray.train._internal.storage import StorageContext
from ray.tune.experiment import Trial
from rltrack.adapters.tune import RLTrackCallback
config = json.loads(sys.argv[1])
tune.register_trainable("contract", lambda config: None)
storage = StorageContext(storage_path=config["run"]["root"] + "/../ray", experiment_dir_name="contract", trial_dir_name="t0")
trial = Trial("contract", config={"lr": 0.1}, trial_id="crash_00000", storage=storage, experiment_tag="0")
callback = RLTrackCallback(config)
callback.log_trial_start(trial)
callback.log_trial_result(1, trial, {"training_iteration": 1, "contract_a": 1.0})
callback.log_trial_end(trial, failed=True)  # what Tune calls when the trainable raised
callback.on_experiment_end([trial])
"""

    def open(self, config: dict[str, Any]) -> None:
        from ray import tune
        from ray.train._internal.storage import StorageContext
        from ray.tune.experiment import Trial

        from rltrack.adapters.tune import RLTrackCallback

        tune.register_trainable("contract", lambda config: None)
        self.config = config
        self.callback = RLTrackCallback(config)
        storage = StorageContext(storage_path=config["run"]["root"] + "/../ray", experiment_dir_name="contract", trial_dir_name="t0")
        self.trial_hparams: dict[str, Any] = {}
        self.storage = storage
        self.trial: Any = None
        self.Trial = Trial

    def _started(self) -> Any:
        if self.trial is None:  # Tune's hyperparameters are the trial's config, given when it starts
            self.trial = self.Trial("contract", config=self.trial_hparams, trial_id="contract_00000", storage=self.storage, experiment_tag="0")
            self.callback.log_trial_start(self.trial)
        return self.trial

    def log(self, step: int, values: dict[str, float]) -> None:
        self.callback.log_trial_result(step, self._started(), {"training_iteration": step, **values})

    def hparams(self, hparams: dict[str, Any]) -> None:
        self.trial_hparams = dict(hparams)
        self._started()

    def close(self) -> Path:
        trial = self._started()
        self.callback.log_trial_end(trial)
        self.callback.on_experiment_end([trial])
        return self.callback.run_dirs[trial.trial_id]


class Acme(Case):
    """Acme has no hyperparameter call of its own: its configs are plain Python objects."""

    name, module, namespace, axis = "acme", "acme", "learner", "learner_steps"
    HPARAMS = False
    CRASH = """
import json, sys
from rltrack.adapters.acme import make_logger_factory
factory = make_logger_factory(json.loads(sys.argv[1]))
learner = factory("learner", "learner_steps", 0)
learner.write({"learner_steps": 1, "contract_a": 1.0})
raise RuntimeError("training failed")
"""

    def open(self, config: dict[str, Any]) -> None:
        from rltrack.adapters.acme import make_logger_factory

        self.factory = make_logger_factory(config)
        self.acme_logger = self.factory("learner", "learner_steps", 0)

    def log(self, step: int, values: dict[str, float]) -> None:
        self.acme_logger.write({"learner_steps": step, **values})

    def close(self) -> Path:
        self.acme_logger.close()
        self.factory.close()
        return Path(self.factory.logger.run_dir)


class SpinningUp(Case):
    name, module, namespace, axis = "spinup", "rltrack.adapters.spinup", "", "epoch"  # columns as written: `contract_a`
    CRASH = """
import json, sys
from rltrack.adapters.spinup import EpochLogger
config = json.loads(sys.argv[1])
logger = EpochLogger(output_dir=config["run"]["root"] + "/spinup_out", rltrack_config=config)
logger.log_tabular("Epoch", 1)
logger.log_tabular("contract_a", 1.0)
logger.dump_tabular()
raise RuntimeError("training failed")
"""

    def open(self, config: dict[str, Any]) -> None:
        from rltrack.adapters.spinup import EpochLogger

        self.spinup = EpochLogger(output_dir=config["run"]["root"] + "/spinup_out", rltrack_config=config)

    def log(self, step: int, values: dict[str, float]) -> None:
        self.spinup.log_tabular("Epoch", step)
        for key, value in values.items():
            self.spinup.log_tabular(key, value)
        self.spinup.dump_tabular()

    def hparams(self, hparams: dict[str, Any]) -> None:
        self.spinup.save_config(hparams)

    def close(self) -> Path:
        self.spinup.rltrack.close()
        return Path(self.spinup.rltrack.run_dir)


class TensorBoard(Case):
    """torch's `SummaryWriter` under `attach`, called as CleanRL's scripts call it but from code of no
    known library (tests/frameworks/test_adapter_tensorboard.py has each library's): `charts/` tags as
    written at the writer's `step`, the hyperparameter table as text (torch's `add_hparams` writes a
    bool as the number 1.0, checking `int` first: the event file itself no longer says it was a bool)."""

    name, module, namespace, axis = "tensorboard", "torch.utils.tensorboard", "charts", "step"  # a writer of no known library: its tag as written, at `step`
    CRASH = """
import json, sys, rltrack
from torch.utils.tensorboard import SummaryWriter
from rltrack.adapters.tensorboard import attach
config = json.loads(sys.argv[1])
attach(rltrack.make_logger(config))
writer = SummaryWriter(config["run"]["root"] + "/../tb")
writer.add_scalar("charts/contract_a", 1.0, 1)
raise RuntimeError("training failed")
"""

    def open(self, config: dict[str, Any]) -> None:
        from torch.utils.tensorboard import SummaryWriter

        from rltrack.adapters.tensorboard import attach

        self.logger = rltrack.make_logger(config)
        attach(self.logger)
        self.writer = SummaryWriter(config["run"]["root"] + "/../tb")

    def log(self, step: int, values: dict[str, float]) -> None:
        for key, value in values.items():
            self.writer.add_scalar(f"charts/{key}", value, step)

    def hparams(self, hparams: dict[str, Any]) -> None:
        table = "\n".join(f"|{key}|{value}|" for key, value in hparams.items())
        self.writer.add_text("hyperparameters", f"|param|value|\n|-|-|\n{table}")

    def close(self) -> Path:
        from rltrack.adapters.tensorboard import detach

        self.writer.close()
        detach()
        self.logger.close()
        return self.logger.run_dir


class TorchRL(Case):
    """TorchRL's `Logger` interface as its trainers call it (`log_scalar(name, value, step=frames)`)."""

    name, module, namespace, axis = "torchrl", "torchrl", "", "env_steps"
    CRASH = """
import json, sys
from rltrack.adapters.torchrl import RLTrackLogger
logger = RLTrackLogger("contract", config=json.loads(sys.argv[1]))
logger.log_scalar("contract_a", 1.0, step=1)
raise RuntimeError("training failed")
"""

    def open(self, config: dict[str, Any]) -> None:
        from rltrack.adapters.torchrl import RLTrackLogger

        self.logger = RLTrackLogger("contract", config=config)

    def log(self, step: int, values: dict[str, float]) -> None:
        for key, value in values.items():
            self.logger.log_scalar(key, value, step=step)

    def hparams(self, hparams: dict[str, Any]) -> None:
        self.logger.log_hparams(hparams)

    def close(self) -> Path:
        self.logger.close()
        return self.logger.run_dir


class Tianshou(Case):
    """Tianshou's `BaseLogger.log_training_data` as its trainers call it; Tianshou
    has no hyperparameter call of its own (its W&B logger takes them as `wandb.init`'s config)."""

    name, module, namespace, axis = "tianshou", "tianshou", "training", "env_steps"
    HPARAMS = False
    CRASH = """
import json, sys
from rltrack.adapters.tianshou import RLTrackLogger
logger = RLTrackLogger(json.loads(sys.argv[1]), training_interval=1)
logger.log_training_data({"contract_a": 1.0}, 1)
raise RuntimeError("training failed")
"""

    def open(self, config: dict[str, Any]) -> None:
        from rltrack.adapters.tianshou import RLTrackLogger

        self.logger = RLTrackLogger(config, training_interval=1)

    def log(self, step: int, values: dict[str, float]) -> None:
        self.logger.log_training_data(dict(values), step)

    def close(self) -> Path:
        self.logger.finalize()
        return Path(self.logger.logger.run_dir)


class RslRl(Case):
    """rsl_rl's `LogWriter.add_scalar(tag, value, it)` as its runner calls it. Its
    `store_config(env_cfg, train_cfg)` nests the hyperparameters under
    `train_cfg`/`env_cfg` (as rsl_rl's W&B writer does), so their types are
    checked in test_adapter_rsl_rl.py, not here."""

    name, module, namespace, axis = "rsl_rl", "rsl_rl", "Loss", "train_iter"  # rsl_rl's tag as written: `Loss/contract_a`
    HPARAMS = False
    CRASH = """
import json, sys
from rltrack.adapters.rsl_rl import RLTrackLogWriter
config = json.loads(sys.argv[1])
writer = RLTrackLogWriter(log_dir=config["run"]["root"] + "/logs/contract", config=config)
writer.add_scalar("Loss/contract_a", 1.0, 1)
raise RuntimeError("training failed")
"""

    def open(self, config: dict[str, Any]) -> None:
        from rltrack.adapters.rsl_rl import RLTrackLogWriter

        self.writer = RLTrackLogWriter(log_dir=config["run"]["root"] + "/logs/contract", config=config)

    def log(self, step: int, values: dict[str, float]) -> None:
        for key, value in values.items():
            self.writer.add_scalar(f"Loss/{key}", value, step)

    def close(self) -> Path:
        self.writer.stop()
        return Path(self.writer.logger.run_dir)


class Transformers(Case):
    """transformers' `TrainerCallback` hooks as its `Trainer` calls them (`on_log(logs)` at
    `state.global_step`); hyperparameters are `TrainingArguments` fields, here added by a
    dataclass subclass as TRL's configs add theirs. The crash is a real `Trainer` whose model raises."""

    name, module, namespace, axis = "transformers", "transformers", "train", "train_iter"
    CRASH = """
import json, sys, torch
from transformers import Trainer, TrainingArguments
from rltrack.adapters.transformers import RLTrackCallback
class Fails(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(1))
    def forward(self, x):
        raise RuntimeError("training failed")
args = TrainingArguments(output_dir="out", report_to=[], use_cpu=True, max_steps=1)
trainer = Trainer(model=Fails(), args=args, train_dataset=[{"x": torch.ones(1)}], callbacks=[RLTrackCallback(json.loads(sys.argv[1]))])
trainer.log({"contract_a": 1.0})
trainer.train()
"""

    def open(self, config: dict[str, Any]) -> None:
        from transformers import TrainerControl, TrainerState, TrainingArguments

        from rltrack.adapters.transformers import RLTrackCallback

        self.callback = RLTrackCallback(config)
        self.args, self.state, self.control = TrainingArguments(output_dir="out", report_to=[], use_cpu=True), TrainerState(), TrainerControl()

    def log(self, step: int, values: dict[str, float]) -> None:
        self.state.global_step = step
        self.callback.on_log(self.args, self.state, self.control, logs=dict(values))

    def hparams(self, hparams: dict[str, Any]) -> None:
        from dataclasses import field, make_dataclass

        from transformers import TrainingArguments

        fields = [(key, type(value), field(default=value)) for key, value in hparams.items()]
        self.args = make_dataclass("ContractConfig", fields, bases=(TrainingArguments,))(output_dir="out", report_to=[], use_cpu=True)
        self.callback.on_train_begin(self.args, self.state, self.control)

    def close(self) -> Path:
        self.callback.close()
        return Path(self.callback.logger.run_dir)


class Skrl(Case):
    """A real skrl PPO agent (tests/helpers/skrl_task.py) writing through its own writer, as its
    `post_interaction` does (`track_data`, then `write_tracking_data` at `timestep`): on the
    axis `timestep` the step is skrl's own (`env_steps` is it × `num_envs`). Hyperparameters
    are the agent's config fields, here added by a dataclass subclass of skrl's `PPO_CFG`."""

    name, module, namespace, axis = "skrl", "skrl", "", "timestep"
    CRASH = """
import json, sys
sys.path.insert(0, sys.argv[2])
from skrl_task import ppo_trainer
from rltrack.adapters.skrl import attach
trainer = ppo_trainer()
attach(trainer, config=json.loads(sys.argv[1]))
trainer.agents.track_data("contract_a", 1.0)
trainer.agents.write_tracking_data(timestep=1, timesteps=10)
raise RuntimeError("training failed")
"""
    ARGS = (str(REPO / "tests" / "helpers"),)

    def open(self, config: dict[str, Any]) -> None:
        self.config, self.cfg_class, self.logger = config, None, None

    def _started(self) -> Any:
        if self.logger is None:  # skrl's hyperparameters are its config, given when the agent is built
            from skrl_task import ppo_trainer

            from rltrack.adapters.skrl import attach

            self.trainer = ppo_trainer(cfg_class=self.cfg_class)
            self.logger = attach(self.trainer, config=self.config)
        return self.trainer.agents

    def log(self, step: int, values: dict[str, float]) -> None:
        agent = self._started()
        for key, value in values.items():
            agent.track_data(key, value)
        agent.write_tracking_data(timestep=step, timesteps=100)

    def hparams(self, hparams: dict[str, Any]) -> None:
        from dataclasses import field, make_dataclass

        from skrl.agents.torch.ppo import PPO_CFG

        fields = [(key, type(value), field(default=value)) for key, value in hparams.items()]
        self.cfg_class = make_dataclass("ContractCfg", fields, bases=(PPO_CFG,), kw_only=True)
        self._started()

    def close(self) -> Path:
        self._started()
        self.logger.close()
        return Path(self.logger.run_dir)


class RlGames(Case):
    """rl_games' observer API as its agent calls it (`before_init(base_name, config,
    experiment_name)` before it makes its writer), then its tensorboardX writer in
    `<experiment>/summaries` as its agent writes (`info/<key>` at the frame count),
    carried by the TensorBoard hook the observer attaches (whose translation decides the axis:
    a tag prefix it has no table for is on the writer's own `step`). Hyperparameters: its config dict."""

    name, module, namespace, axis = "rl_games", "rl_games", "info", "step"
    SOURCE = "tensorboard"
    CRASH = """
import json, sys
from tensorboardX import SummaryWriter
from rltrack.adapters.rl_games import RLTrackObserver
config = json.loads(sys.argv[1])
RLTrackObserver(config).before_init("run", {"name": "contract"}, "contract")
writer = SummaryWriter(config["run"]["root"] + "/../rl_games_runs/contract/summaries")
writer.add_scalar("info/contract_a", 1.0, 1)
raise RuntimeError("training failed")
"""

    def open(self, config: dict[str, Any]) -> None:
        from rltrack.adapters.rl_games import RLTrackObserver

        self.observer, self.root, self.writer = RLTrackObserver(config), config["run"]["root"], None
        self.rl_games_config: dict[str, Any] = {"name": "contract"}

    def _started(self) -> Any:
        if self.writer is None:  # the agent hands its config over, then makes its writer
            from tensorboardX import SummaryWriter

            self.observer.before_init("run", self.rl_games_config, "contract")
            self.writer = SummaryWriter(self.root + "/../rl_games_runs/contract/summaries")
        return self.writer

    def log(self, step: int, values: dict[str, float]) -> None:
        writer = self._started()
        for key, value in values.items():
            writer.add_scalar(f"info/{key}", value, step)

    def hparams(self, hparams: dict[str, Any]) -> None:
        self.rl_games_config.update(hparams)
        self._started()

    def close(self) -> Path:
        from rltrack.adapters.tensorboard import detach

        self._started().close()
        detach()
        self.observer.logger.close()
        return Path(self.observer.logger.run_dir)


class Jax(Case):
    """`SeedLogger` as `jax.debug.callback` calls it, the values as jax arrays (no seed given: one run)."""

    name, module, namespace, axis = "jax", "jax", "", "env_steps"
    CRASH = """
import json, sys
import jax.numpy as jnp
from rltrack.adapters.jax import SeedLogger
log = SeedLogger(json.loads(sys.argv[1]))
log({"contract_a": jnp.float32(1.0)}, step=jnp.int32(1))
raise RuntimeError("training failed")
"""

    def open(self, config: dict[str, Any]) -> None:
        from rltrack.adapters.jax import SeedLogger

        self.logger = SeedLogger(config)

    def log(self, step: int, values: dict[str, float]) -> None:
        import jax.numpy as jnp

        self.logger({key: jnp.float32(value) for key, value in values.items()}, step=jnp.int32(step))

    def hparams(self, hparams: dict[str, Any]) -> None:
        self.logger.log_hparams(hparams)

    def close(self) -> Path:
        self.logger.close()
        return self.logger.runs[None].run_dir


class Brax(Case):
    """Brax's `progress_fn(step, metrics)` as its trainers call it, values as jax arrays."""

    name, module, namespace, axis = "brax", "brax", "", "env_steps"
    CRASH = """
import json, sys
import jax.numpy as jnp
from rltrack.adapters.brax import ProgressFn
progress = ProgressFn(json.loads(sys.argv[1]))
progress(1, {"contract_a": jnp.float32(1.0)})
raise RuntimeError("training failed")
"""

    def open(self, config: dict[str, Any]) -> None:
        from rltrack.adapters.brax import ProgressFn

        self.progress = ProgressFn(config)

    def log(self, step: int, values: dict[str, float]) -> None:
        import jax.numpy as jnp

        self.progress(step, {key: jnp.float32(value) for key, value in values.items()})

    def hparams(self, hparams: dict[str, Any]) -> None:
        self.progress.log_hparams(hparams)

    def close(self) -> Path:
        self.progress.close()
        return self.progress.run_dir


class PufferLib(Case):
    """PufferLib 3's duck-typed logger as `PuffeRL` calls it (`log(logs, step)`, `close(model_path)`);
    its args are given when the logger is made, as to PufferLib's own loggers."""

    name, module, namespace, axis = "pufferlib", "rltrack.adapters.pufferlib", "", "env_steps"
    CRASH = """
import json, sys
from rltrack.adapters.pufferlib import RLTrackLogger
logger = RLTrackLogger(config=json.loads(sys.argv[1]))
logger.log({"contract_a": 1.0}, 1)
raise RuntimeError("training failed")
"""

    def open(self, config: dict[str, Any]) -> None:
        self.config, self.logger = config, None

    def _made(self, args: dict[str, Any] | None = None) -> Any:
        from rltrack.adapters.pufferlib import RLTrackLogger

        if self.logger is None:
            self.logger = RLTrackLogger(args, config=self.config)
        return self.logger

    def log(self, step: int, values: dict[str, float]) -> None:
        self._made().log(values, step)

    def hparams(self, hparams: dict[str, Any]) -> None:
        self._made(hparams)

    def close(self) -> Path:
        self._made().close()
        return self.logger.run_dir


class Stoix(Case):
    """Stoix's `log_dict(metrics, t, t_eval, event)` as its `MultiLogger` calls it (the event as its value)."""

    name, module, namespace, axis = "stoix", "rltrack.adapters.stoix", "trainer", "env_steps"
    CRASH = """
import json, sys
from rltrack.adapters.stoix import RLTrackLogger
logger = RLTrackLogger("results", "20261129", "contract", config=json.loads(sys.argv[1]))
logger.log_stat("contract_a", 1.0, 1, 0, "trainer")
raise RuntimeError("training failed")
"""

    def open(self, config: dict[str, Any]) -> None:
        from rltrack.adapters.stoix import RLTrackLogger

        self.logger = RLTrackLogger("results", "20261129", "contract", config=config)

    def log(self, step: int, values: dict[str, float]) -> None:
        self.logger.log_dict(values, step, 0, "trainer")

    def hparams(self, hparams: dict[str, Any]) -> None:
        self.logger.log_config(hparams)

    def close(self) -> Path:
        self.logger.stop()
        return self.logger.run_dir


#: A case per adapter, by the name its library is registered under (entry-point group `rltrack.libraries`).
CASES = {case.name: case for case in (SB3, Tune, Acme, SpinningUp, TensorBoard, TorchRL, Tianshou, RslRl, Transformers, Skrl, RlGames, Jax, Brax, PufferLib, Stoix)}


def registered_adapters() -> list[str]:
    """The registered libraries that have an adapter (rltrack.frameworks.library)."""
    return [name for name, library in libraries().items() if library.adapter]


def test_every_registered_adapter_has_a_contract_case() -> None:
    adapters = registered_adapters()
    assert {"sb3", "tune", "acme", "tensorboard", "transformers", "jax"} <= set(adapters), adapters
    assert sorted(set(adapters) - set(CASES)) == [], "registered libraries with an adapter but no case in CASES"


@pytest.fixture(params=[CASES[name] for name in registered_adapters() if name in CASES], ids=lambda case: case.name)
def case(request: pytest.FixtureRequest) -> Case:
    cls = request.param
    pytest.importorskip(cls.module, reason=f"{cls.name}: {cls.module} is not installed in this environment")
    return cls()


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for var in ("RLTRACK_CONFIG", "RLTRACK_BACKENDS"):
        monkeypatch.delenv(var, raising=False)


def journal(run_dir: Path) -> list[Event]:
    return list(rltrack.read_journal(run_dir))


def logged(events: list[Event], namespace: str, key: str) -> list[tuple[dict[str, int], float]]:
    return [(event.steps, event.data[key]) for event in events if event.kind == "scalars" and event.namespace == namespace and key in event.data]


def test_values_arrive_once_in_order_at_the_frameworks_step(case: Case, tmp_path: Path) -> None:
    case.open(config(tmp_path / "runs", case.name))
    for step, values in RECORDS:
        case.log(step, values)
    events = journal(case.close())
    for key in RECORDS[0][1]:
        arrived = logged(events, case.namespace, key)
        assert [value for _, value in arrived] == [values[key] for _, values in RECORDS], key
        assert [steps.get(case.axis) for steps, _ in arrived] == [step for step, _ in RECORDS], (key, arrived)
    assert {event.source for event in events if event.kind == "scalars"} <= {case.SOURCE or case.name, "rllib"}


def test_hyperparameters_keep_their_types(case: Case, tmp_path: Path) -> None:
    if not case.HPARAMS:
        pytest.skip(f"{case.name} has no hyperparameter call of its own")
    case.open(config(tmp_path / "runs", case.name))
    case.hparams(HPARAMS)
    case.log(*RECORDS[0])
    events = journal(case.close())
    merged: dict[str, Any] = {}
    for event in events:
        if event.kind == "hparams":
            merged.update(event.data)
    for key, value in HPARAMS.items():
        assert merged.get(key) == value and type(merged.get(key)) is type(value), (key, merged.get(key))


def test_a_run_closed_normally_is_finished(case: Case, tmp_path: Path) -> None:
    case.open(config(tmp_path / "runs", case.name))
    case.log(*RECORDS[0])
    run_dir = case.close()
    assert json.loads((run_dir / "meta.json").read_text())["status"] == "finished"


@pytest.mark.slow  # a child process per adapter, importing its framework: about 30 s in all
def test_a_process_where_training_raises_ends_its_run_failed(case: Case, tmp_path: Path) -> None:
    root = tmp_path / "runs"
    env = {"PYTHONPATH": ":".join([str(REPO), *([str(STANDINS)] if str(STANDINS) in sys.path else [])]), "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", case.CRASH, json.dumps(config(root, case.name)), *case.ARGS], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300, check=False)  # fmt: skip
    assert done.returncode != 0 or case.name == "tune", done.stderr
    metas = [json.loads(meta.read_text()) for meta in root.rglob("meta.json")]
    assert [meta["status"] for meta in metas] == ["failed"], (done.stderr[-2000:], metas)
    (run_dir,) = [meta.parent for meta in root.rglob("meta.json")]
    assert logged(journal(run_dir), case.namespace, "contract_a") and logged(journal(run_dir), case.namespace, "contract_a")[0][1] == 1.0
