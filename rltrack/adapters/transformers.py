"""transformers / TRL -> rltrack: `RLTrackCallback`, a `TrainerCallback`.

transformers' `report_to` takes only the names in its own table, so a
`Trainer` (and every TRL trainer: `GRPOTrainer`, `PPOTrainer`, `DPOTrainer`,
`SFTTrainer` ...) plugs rltrack in as a callback:

    from rltrack.adapters.transformers import RLTrackCallback
    trainer = GRPOTrainer(..., args=GRPOConfig(output_dir="out/grpo", run_name="grpo_len"),
                          callbacks=[RLTrackCallback(backends={"use": ["local", "mlflow"]})])
    trainer.train()

What each of the Trainer's events becomes (on the main process only, as
HF's own callbacks do):

* the first event with the `TrainingArguments` (`on_train_begin`, or an
  `on_log` of a `trainer.evaluate()` without training) opens the run: named
  `args.run_name`, else the last part of `args.output_dir` (unless the config
  names it), its hyperparameters `args.to_dict()` with their types (TRL's
  config classes included) and the model's config under `model_config`, as
  MLflow params and W&B config; `config` and the sections (`run=`,
  `backends=`, `filters=`) are those of `rltrack.make_logger`, or pass
  `logger=` an rltrack `Logger` you made (then left open);
* `on_log(logs)`: every value at `state.global_step` (axis `train_iter`:
  optimizer updates) under the name HF's TensorBoard callback gives it
  (`train/loss`, `train/reward`, `train/rewards/<func>/mean`, `eval/loss`,
  `CANONICAL`, below), with a canonical twin for the few that
  have one (`learner/total_loss_avg` ...) per `run.names`; a text value as a
  `text` event. An evaluation's metrics reach the callbacks through `on_log`
  too (`Trainer.evaluate` logs them), so they are recorded there, once;
* `on_save`: with `checkpoints=True` (default) `ckpt/iteration_<global_step>.pth.tar`
  for `torch.load` as DI-engine lays it out (`model`: the state dict,
  `last_iter`, `hf_checkpoint`: the folder HF just wrote), the best one as
  `ckpt_best.pth.tar` when HF's `metric_for_best_model` says it is;
* the run ends at `close()` or at the process's end: `finished`, or `failed`
  when training raised (rltrack's exit hooks); not at `on_train_end`, so
  that a `trainer.evaluate()` after training lands in the same run.

What rltrack knows about Hugging Face transformers' `Trainer` (and TRL's
trainers built on it: GRPO, PPO, DPO, SFT ...), as data and pure functions:
the names its own TensorBoard callback gives the values of `Trainer.log`, the
axis of `state.global_step`, which of its keys have a canonical twin, and the
run name its arguments give.

`Trainer.log(logs)` hands every callback's `on_log` a flat dict (`loss`,
`learning_rate`, `grad_norm`, TRL's `reward`, `rewards/<func>/mean`,
`completions/mean_length`, ...; an evaluation's `eval_loss`, a prediction's
`test_loss`); HF's TensorBoard callback stores them as `train/loss`,
`eval/loss`, `test/loss` (`rewrite_logs` in
`transformers/integrations/integration_utils.py`), the names its users see in
TensorBoard and W&B: `tags` gives the same.
"""

from __future__ import annotations

import sys
import time
from functools import partial
from pathlib import Path
from typing import Any, Mapping

from rltrack.adapters.on_access import subclass_on_access
from rltrack.core.events import Event
from rltrack.core.optional import installed_version
from rltrack.frameworks.canonical import by_namespace, names_mode, with_canonical_names
from rltrack.frameworks.library import Library

SOURCE = "transformers"

#: The axis of `state.global_step` (optimizer updates) in rltrack's step axes.
STEP_AXIS = "train_iter"

#: `on_log` prefixes -> the namespace HF's TensorBoard callback puts them in; any other key is `train/`.
PREFIXES = (("eval_", "eval"), ("test_", "test"))
TRAIN = "train"

#: HF's tag (as `tags` gives it) -> canonical flat key. TRL's `reward` is the mean reward of the
#: batch's completions (one completion: one episode); `loss` is the whole objective.
CANONICAL: dict[str, str] = {
    "train/loss": "learner/total_loss_avg",
    "train/learning_rate": "learner/cur_lr_avg",
    "train/entropy": "learner/entropy_avg",
    "train/reward": "collector/reward_mean",
    "eval/reward": "evaluator/reward_mean",
}


def tags(logs: Mapping[str, Any]) -> dict[str, Any]:
    """`logs` of one `on_log` under the names HF's TensorBoard callback gives them:
    `eval_x` -> `eval/x`, `test_x` -> `test/x`, anything else `train/x`."""
    tagged: dict[str, Any] = {}
    for key, value in logs.items():
        for prefix, namespace in PREFIXES:
            if key.startswith(prefix):
                tagged[f"{namespace}/{key[len(prefix):]}"] = value
                break
        else:
            tagged[f"{TRAIN}/{key}"] = value
    return tagged


def run_name(args: Mapping[str, Any]) -> str | None:
    """The run name `TrainingArguments` give (as a dict, `args.to_dict()`):
    `run_name`, else the last part of `output_dir`; None without either."""
    name = args.get("run_name")
    if name:
        return str(name)
    last = str(args.get("output_dir") or "").replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    return last if last not in ("", ".", "..") else None


#: transformers' `Trainer` and TRL's trainers: HF's own tags, at `global_step`.
LIBRARY = Library(packages=("transformers", "trl"), adapter=True, canonical=CANONICAL, axis=STEP_AXIS)


#: HF's folder of one checkpoint in `output_dir` (`transformers.trainer_utils.PREFIX_CHECKPOINT_DIR`).
CHECKPOINT_DIR = "checkpoint-{}"


class _Behaviour:
    """A transformers `TrainerCallback` writing one rltrack run; see the module docstring."""

    def __init__(
        self,
        config: str | Path | Mapping[str, Any] | None = None,
        *,
        logger: Any = None,
        checkpoints: bool = True,
        **sections: Any,
    ) -> None:
        self._config = config
        self._sections = sections
        self._given = logger
        self.logger = logger
        self.checkpoints = checkpoints
        self._mode = names_mode(logger) if logger is not None else "both"
        self._opened = False

    def _open(self, args: Any, model: Any) -> Any:
        """The run, opened (or the given logger taken) at the first event, with the hyperparameters."""
        if self._opened:
            return self.logger
        self._opened = True
        hparams = args.to_dict()
        if self.logger is None:
            from rltrack.training.config import load_config, make_logger

            run = dict(self._sections.pop("run", None) or {})
            name = run_name(hparams)
            if name and not load_config(self._config, run=run, **self._sections)["run"].get("name"):
                run["name"] = name
            self.logger = make_logger(self._config, run=run, **self._sections)
            self._mode = names_mode(self.logger)
        model_config = getattr(model, "config", None)
        if model_config is not None and hasattr(model_config, "to_dict"):
            hparams["model_config"] = model_config.to_dict()
        self.logger.log_hparams(hparams)
        info = {"framework": SOURCE, "transformers_version": installed_version("transformers")}
        if "trl" in sys.modules:
            info["trl_version"] = installed_version("trl")
        self.logger.set_run_info(info)
        return self.logger

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            self._open(args, model)

    def on_log(self, args: Any, state: Any, control: Any, logs: Mapping[str, Any] | None = None, model: Any = None, **kwargs: Any) -> None:
        if not state.is_world_process_zero or not logs:
            return
        logger = self._open(args, model)
        logger.emit_deferred(partial(self._events, logger, dict(logs), {STEP_AXIS: int(state.global_step)}))

    def _events(self, logger: Any, logs: dict[str, Any], steps: dict[str, int]) -> list[Event]:
        """One `on_log` as events (on the pipeline thread): numbers per namespace, texts as `text`."""
        tagged = tags(logs)
        texts = {name: value for name, value in tagged.items() if isinstance(value, str)}
        numbers = {name: value for name, value in tagged.items() if name not in texts}
        now, events = time.time(), []
        for kind, flat in (("scalars", with_canonical_names(numbers, CANONICAL, self._mode)), ("text", texts)):
            for namespace, values in by_namespace(flat).items():
                events.append(Event(now, values, kind, namespace, dict(steps), SOURCE, run=logger.name))
        return events

    def on_save(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if not (self.checkpoints and state.is_world_process_zero) or model is None:
            return
        logger = self._open(args, model)
        folder = str(Path(args.output_dir) / CHECKPOINT_DIR.format(state.global_step))
        best = state.best_model_checkpoint is not None and str(state.best_model_checkpoint) == folder
        checkpoint = {"model": model.state_dict(), "last_iter": int(state.global_step), "hf_checkpoint": folder}
        logger.log_checkpoint(
            checkpoint, iteration=state.global_step, metric=state.best_metric if best else None, higher_is_better=bool(args.greater_is_better)
        )

    def close(self, status: str = "finished") -> None:
        """Ends the run (a `Logger` given to the constructor is only flushed)."""
        if self.logger is None:
            return
        if self._given is None:
            self.logger.close(status=status)
        else:
            self.logger.flush()


__getattr__ = subclass_on_access(__name__, "RLTrackCallback", _Behaviour, "transformers.trainer_callback:TrainerCallback", "transformers")


__all__ = ["CANONICAL", "RLTrackCallback"]
