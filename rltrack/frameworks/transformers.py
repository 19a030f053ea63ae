"""What rltrack knows about Hugging Face transformers' `Trainer` (and TRL's
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

The adapter (rltrack.adapters.transformers) reads it here.
"""

from __future__ import annotations

from typing import Any, Mapping

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
