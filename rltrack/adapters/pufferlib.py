"""PufferLib 3 -> rltrack: `RLTrackLogger`, the duck-typed logger `PuffeRL` takes.

PufferLib's trainer (`pufferlib.pufferl.PuffeRL(config, vecenv, policy,
logger=None)`, and `pufferl.train(env_name, args, vecenv, policy, logger=)`)
talks to its logger through three names, as its own `NoLogger`,
`WandbLogger` and `NeptuneLogger` do: `run_id` (it names the checkpoint
folder `<data_dir>/<run_id>/` and the final `<run_id>.pt`), `log(logs,
step)` with one flat dict at most every 0.25 s (`SPS`, `agent_steps`,
`epoch`, `learning_rate`, `environment/*`, `losses/*`, `performance/*`), and
`close(model_path)` once training is over. This class is one more of them:

    from pufferlib import pufferl
    from rltrack.adapters.pufferlib import RLTrackLogger

    logger = RLTrackLogger(args, config="rltrack.toml")       # args: PufferLib's nested args dict
    pufferl.train(args["env_name"], args=args, vecenv=vecenv, policy=policy, logger=logger)

* `args` (as PufferLib's loggers take it: the nested dict of `load_config`,
  `train`, `env`, `policy`, `vec` ...) become the run's hyperparameters,
  typed (a `torch.device` or another object by its class name);
* `run_id` is the run's name: `run_id=` if given, else `run.name` of the
  config, else `args["env_name"]` (a time is appended when a run of that name
  exists), so PufferLib's checkpoint folder and the rltrack run share a name;
* `log(logs, step)`: every value under the key PufferLib gave it, at `step`
  (PufferLib's agent steps: transitions across all environments) on the
  axis `env_steps`; the episode return and length and the losses also as
  their canonical names per `run.names`;
* `close(model_path)`: the model file as the run's checkpoint
  (`ckpt/iteration_<epoch>.pth.tar`, delivered to the trackers as an
  artifact), then the run ends `finished`. A process that dies in training
  ends it `failed`, as every rltrack run.

`config` and the sections (`run=`, `backends=`, `filters=`) are those of
`rltrack.make_logger`; `logger=` takes an rltrack `Logger` you made (then
`close` leaves it open).

What rltrack knows about PufferLib 3, as data: the names of the flat dict its
trainer logs (`environment/*`, `losses/*`, `SPS`, ...) and their canonical
(DI-engine) twins.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from rltrack.adapters.library_run import emit_values, open_run, typed_hparams
from rltrack.frameworks.library import Library
from rltrack.frameworks.stages import STEP_AXIS

SOURCE = "pufferlib"

#: PufferLib's log keys -> canonical (DI-engine) names.
CANONICAL: dict[str, str] = {
    "environment/episode_return": "collector/reward_mean",
    "environment/episode_length": "collector/avg_envstep_per_episode",
    "SPS": "collector/avg_envstep_per_sec",
    "learning_rate": "learner/cur_lr_avg",
    "losses/policy_loss": "learner/policy_loss_avg",
    "losses/value_loss": "learner/value_loss_avg",
    "losses/approx_kl": "learner/approx_kl_avg",
    "losses/clipfrac": "learner/clipfrac_avg",
    "losses/explained_variance": "learner/explained_variance_avg",
}

LIBRARY = Library(adapter=True, canonical=CANONICAL)


class RLTrackLogger:
    """A PufferLib 3 logger writing into one rltrack run; see the module docstring."""

    def __init__(
        self,
        args: Mapping[str, Any] | None = None,
        *,
        config: str | Path | Mapping[str, Any] | None = None,
        run_id: str | None = None,
        logger: Any = None,
        **sections: Any,
    ) -> None:
        args = dict(args or {})
        self._owned = logger is None
        name = run_id or args.get("env_name")
        self.logger = open_run(config, sections, framework=SOURCE, distribution="pufferlib-core", name=name) if logger is None else logger
        self.run_id: str = self.logger.name
        self._epoch = 0
        if args:
            self.logger.log_hparams(typed_hparams(args))

    def log(self, logs: Mapping[str, Any], step: int) -> None:
        epoch = logs.get("epoch")
        if isinstance(epoch, int):
            self._epoch = epoch
        emit_values(self.logger, logs, {STEP_AXIS: int(step)}, SOURCE, CANONICAL)

    def close(self, model_path: str | Path | None = None) -> None:
        """Saves `model_path` (PufferLib's final model file) as the run's checkpoint, then ends the run."""
        if model_path is not None:
            self.logger.log_checkpoint(str(model_path), iteration=self._epoch)
        if self._owned:
            self.logger.close()
        else:
            self.logger.flush()

    @property
    def run_dir(self) -> Path:
        return Path(self.logger.run_dir)


__all__ = ["CANONICAL", "RLTrackLogger"]
