"""transformers / TRL -> rltrack: `rltrack.adapters.transformers.RLTrackCallback`
in `callbacks=[...]` of TRL's own `GRPOTrainer` and of a plain `Trainer`, on a
1-layer Qwen2 model and a BPE tokenizer built in code (tests/helpers/tiny_lm.py),
read back from progress.csv, MLflow (`MlflowClient`) and W&B's run file: every
value `on_log` received at `state.global_step` under HF's own TensorBoard
names, the `TrainingArguments` as typed hyperparameters, the run's name,
evaluations and checkpoints."""

from __future__ import annotations

import json
import warnings

import pytest

pytest.importorskip("trl", reason="TRL and transformers are not installed (requirements/test.txt; not in the oldest lane)")
import torch  # noqa: E402
import tiny_lm  # noqa: E402
from library_readback import assert_once_everywhere, config, tracker_hparams  # noqa: E402

from rltrack.adapters.transformers import RLTrackCallback  # noqa: E402
from rltrack.adapters.transformers import CANONICAL, run_name, tags  # noqa: E402
from rltrack.journal import read_journal  # noqa: E402


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)


class Recording(RLTrackCallback):
    """Our callback, noting what the Trainer handed to `on_log`: (global_step, logs)."""

    def __init__(self, *args, **kwargs):
        self.calls = []
        super().__init__(*args, **kwargs)

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.calls.append((state.global_step, dict(logs or {})))
        super().on_log(args, state, control, logs=logs, **kwargs)


def expected(calls) -> list[tuple[str, str, int, float]]:
    """(name, axis, step, value) of every number `on_log` received, under HF's
    TensorBoard names, and of their canonical twins."""
    logged = []
    for step, logs in calls:
        for name, value in tags(logs).items():
            if isinstance(value, (int, float)):
                logged += [(name, "train_iter", step, value)] + ([(CANONICAL[name], "train_iter", step, value)] if name in CANONICAL else [])
    return logged


@pytest.mark.slow
def test_grpo_values_hparams_and_checkpoints_reach_every_tracker(tmp_path):
    from trl import GRPOConfig, GRPOTrainer
    from datasets import Dataset

    tok = tiny_lm.tokenizer()
    model = tiny_lm.model(tok)
    callback = Recording(config(tmp_path / "runs"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' FutureWarnings about its own renamed arguments
        args = GRPOConfig(
            output_dir=str(tmp_path / "out" / "grpo"), run_name="grpo_len", per_device_train_batch_size=4, num_generations=4,
            max_completion_length=8, max_steps=4, logging_steps=1, report_to=[], use_cpu=True, save_strategy="steps", save_steps=2, seed=0,
        )  # fmt: skip
        trainer = GRPOTrainer(model=model, reward_funcs=tiny_lm.reward_length, args=args, callbacks=[callback],
                              train_dataset=Dataset.from_dict({"prompt": tiny_lm.PROMPTS * 4}), processing_class=tok)  # fmt: skip
        trainer.train()
    callback.close()
    run_dir = callback.logger.run_dir
    assert run_dir.name == "grpo_len"  # args.run_name
    assert [step for step, _ in callback.calls] == [1, 2, 3, 4, 4]  # a log per step, then the end's summary
    assert {"train/loss", "train/reward", "train/rewards/reward_length/mean", "train/completions/mean_length", "train/train_runtime"} <= {
        name for name, *_ in expected(callback.calls)
    }
    assert_once_everywhere(run_dir, expected(callback.calls))

    params, wandb_config = tracker_hparams(run_dir)
    assert params["num_generations"] == "4" and params["run_name"] == "grpo_len" and params["model_config/num_hidden_layers"] == "1"
    assert wandb_config["num_generations"] == 4 and wandb_config["learning_rate"] == args.learning_rate
    assert wandb_config["use_cpu"] is True and wandb_config["max_completion_length"] == 8
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "finished" and meta["info"]["framework"] == "transformers" and meta["info"]["trl_version"]

    saved = [torch.load(run_dir / "ckpt" / f"iteration_{step}.pth.tar", map_location="cpu") for step in (2, 4)]
    assert [c["last_iter"] for c in saved] == [2, 4]
    assert saved[-1]["hf_checkpoint"] == args.output_dir + "/checkpoint-4"
    assert set(saved[-1]["model"]) == set(model.state_dict())
    assert all(torch.equal(saved[-1]["model"][key], value) for key, value in model.state_dict().items())


@pytest.mark.slow
def test_plain_trainer_evaluations_best_checkpoint_and_a_later_evaluate(tmp_path):
    """A plain `Trainer` with evaluations: `eval/loss` at the evaluation's global
    step, the best checkpoint by `eval_loss` (lower is better) as ckpt_best, the
    run named after `output_dir`; an `evaluate()` after training lands in the same run."""
    from transformers import Trainer, TrainingArguments

    tok = tiny_lm.tokenizer()
    args = TrainingArguments(
        output_dir=str(tmp_path / "out" / "clm_tiny"), per_device_train_batch_size=4, max_steps=6, logging_steps=2, eval_strategy="steps",
        eval_steps=2, save_strategy="steps", save_steps=2, metric_for_best_model="eval_loss", greater_is_better=False, report_to=[],
        use_cpu=True, seed=0, learning_rate=5e-3,
    )  # fmt: skip
    callback = Recording(config(tmp_path / "runs"))
    trainer = Trainer(model=tiny_lm.model(tok), args=args, train_dataset=tiny_lm.text_dataset(tok), eval_dataset=tiny_lm.text_dataset(tok, 4),
                      callbacks=[callback])  # fmt: skip
    trainer.train()
    trainer.evaluate()
    callback.close()
    run_dir = callback.logger.run_dir
    assert run_dir.name == "clm_tiny"
    evaluations = [(step, logs["eval_loss"]) for step, logs in callback.calls if "eval_loss" in logs]
    assert [step for step, _ in evaluations] == [2, 4, 6, 6]  # three during training, one after
    assert_once_everywhere(run_dir, expected(callback.calls))
    [best_step] = [step for step, loss in evaluations[:3] if loss == min(loss for _, loss in evaluations[:3])]
    best = torch.load(run_dir / "ckpt" / "ckpt_best.pth.tar", map_location="cpu")
    assert best["last_iter"] == best_step and best["hf_checkpoint"] == trainer.state.best_model_checkpoint
    params, wandb_config = tracker_hparams(run_dir)
    assert params["metric_for_best_model"] == "eval_loss" and wandb_config["greater_is_better"] is False


def test_text_values_become_text_events_and_the_run_name_falls_back(tmp_path):
    """A text value of `on_log` is a `text` event beside the numbers; `run_name` / `output_dir`."""
    from transformers import TrainerControl, TrainerState, TrainingArguments

    args = TrainingArguments(output_dir=str(tmp_path / "out" / "named_by_folder"), report_to=[], use_cpu=True)
    callback = RLTrackCallback(run={"root": str(tmp_path / "runs")}, backends={"use": ["memory"]})
    state = TrainerState()
    state.global_step = 7
    callback.on_log(args, state, TrainerControl(), logs={"loss": 0.5, "eval_note": "diverged", "eval_loss": 1.5})
    callback.close()
    assert callback.logger.run_dir.name == "named_by_folder"
    events = [(e.kind, e.namespace, e.data, e.steps) for e in read_journal(callback.logger.run_dir) if e.kind in ("scalars", "text")]
    assert ("scalars", "train", {"loss": 0.5}, {"train_iter": 7}) in events
    assert ("scalars", "eval", {"loss": 1.5}, {"train_iter": 7}) in events
    assert ("text", "eval", {"note": "diverged"}, {"train_iter": 7}) in events
    assert ("scalars", "learner", {"total_loss_avg": 0.5}, {"train_iter": 7}) in events
    assert run_name({"run_name": None, "output_dir": "a/b/"}) == "b" and run_name({"output_dir": "."}) is None


def test_tags_are_hfs_own_tensorboard_names() -> None:
    """`tags` gives what transformers' own `rewrite_logs` (its TensorBoard and W&B callbacks) gives."""
    from transformers.integrations.integration_utils import rewrite_logs

    logs = {"loss": 1.0, "eval_loss": 2.0, "eval_runtime": 0.1, "test_accuracy": 0.5, "rewards/f/mean": 3.0, "evaluation": 4.0, "epoch": 0.5}
    assert tags(logs) == rewrite_logs(logs)
