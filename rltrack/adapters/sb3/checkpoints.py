"""SB3's model on DI-engine's axes and in DI-engine's checkpoints: which of
SB3's counters is an algorithm's `train_iter` (`axis_options`, `train_iter`),
the model as DI-engine's learner saves a checkpoint (`di_checkpoint`), and
SB3's own zip beside it (`zip_beside`). The callback and `attach`
(rltrack.adapters.sb3.callback) use them; SB3 is imported only inside `axis_options`.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any


def axis_options(model: Any) -> dict[str, Any]:
    """The writer options that give `model`'s algorithm its `train_iter` axis:
    on-policy (PPO, A2C) `time/iterations`, counted as rollout-and-update
    rounds of `n_steps * n_envs` env steps; off-policy (DQN, SAC, TD3)
    `train/n_updates`, SB3's gradient steps, which never restart."""
    from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
    from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm

    if isinstance(model, OnPolicyAlgorithm):
        return {"train_iter_key": "time/iterations", "rollout_steps": model.n_steps * model.n_envs}
    if isinstance(model, OffPolicyAlgorithm):
        return {"train_iter_key": "train/n_updates"}
    return {"train_iter_key": None}


def train_iter(model: Any) -> int:
    """`model`'s `train_iter` now, on the axis `axis_options` gives its dumps:
    rounds completed (on-policy) or gradient steps (off-policy)."""
    rollout_steps = axis_options(model).get("rollout_steps")
    return int(model.num_timesteps // rollout_steps) if rollout_steps else int(getattr(model, "_n_updates", 0))


def di_checkpoint(model: Any) -> dict[str, Any]:
    """`model` as DI-engine's learner saves a checkpoint, for `torch.load`:
    `model` (the policy's state dict), `optimizer` (the policy's optimizer;
    SAC/TD3's several optimizers as `optimizer_<name>`: `optimizer_actor`,
    `optimizer_critic`, `optimizer_ent_coef`), `last_iter` (`train_iter`) and
    `last_step` (`num_timesteps`)."""
    state: dict[str, Any] = {"model": model.policy.state_dict()}
    optimizers = {name: value for name, value in model.get_parameters().items() if name != "policy"}
    if list(optimizers) == ["policy.optimizer"]:
        state["optimizer"] = optimizers["policy.optimizer"]
    else:
        for name, value in optimizers.items():
            state["optimizer_" + name.removesuffix(".optimizer").removesuffix("_optimizer").rpartition(".")[2]] = value
    state["last_iter"] = train_iter(model)
    state["last_step"] = int(model.num_timesteps)
    return state


def zip_beside(checkpoint: Path, sb3_zip: Path, may_be_best: bool) -> None:
    """Copies SB3's zip next to a `.pth.tar` checkpoint (same name, `.zip`),
    and, for a checkpoint with a metric, next to `ckpt_best.pth.tar` when
    `log_checkpoint` just made that the same file."""
    import filecmp

    for target in (checkpoint, checkpoint.with_name("ckpt_best.pth.tar")):
        if target is checkpoint or (may_be_best and target.is_file() and filecmp.cmp(target, checkpoint, shallow=False)):
            destination = target.with_name(target.name.removesuffix(".pth.tar") + ".zip")
            tmp = destination.with_name(f".{destination.name}.tmp")
            shutil.copyfile(sb3_zip, tmp)
            os.replace(tmp, destination)
