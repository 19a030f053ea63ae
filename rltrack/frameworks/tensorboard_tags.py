"""What the tags of the frameworks that write TensorBoard files mean, as data.

CleanRL, rsl_rl, skrl, Tianshou, DI-engine/LightZero (and SB3's own TensorBoard
format) log through a TensorBoard writer; a tag's prefix says which
framework wrote it, which rltrack namespace its value belongs to and what the
writer's `global_step` counts there (env steps in CleanRL and skrl, learner
iterations in rsl_rl, both in DI-engine's twin tags). This module is that
table and the canonical (DI-engine) names of the tags; the translation of a
writer's events (rltrack.frameworks.tensorboard) reads it, and so does the
shared vocabulary (rltrack.frameworks.canonical). It is data only: it
imports nothing beyond the other knowledge modules.
"""

from __future__ import annotations

import re

from dataclasses import dataclass, field
from typing import Mapping

from rltrack.frameworks import sb3, tianshou
from rltrack.frameworks.stages import ITER_AXIS, STEP_AXIS

#: The axis of a writer's `global_step` where no tag says what it counts.
UNKNOWN_AXIS = "step"
#: The axis of DI-engine's `<stage>_sec/<key>` throughput tables: the table's number in the file.
PERIOD_AXIS = "period"

#: rsl_rl writes `Train/mean_reward/time` against whole seconds of training, not iterations.
SECONDS_SUFFIX = "/time"
SECONDS_AXIS = "seconds"

#: DI-engine/LightZero: every value twice, `<stage>_iter/<key>` (train_iter) and
#: `<stage>_step/<key>` (env steps): the halves of a twin and the axis each is written against.
TWIN_AXES = {"iter": ITER_AXIS, "step": STEP_AXIS}
#: A buffer's throughput tables: `<stage>_sec/<key>`, at the table's number in the file (`PERIOD_AXIS`).
THROUGHPUT_HALF = "sec"
TWIN_TAG = re.compile(rf"^(?P<stage>[A-Za-z][A-Za-z0-9]*)_(?P<axis>{'|'.join([*TWIN_AXES, THROUGHPUT_HALF])})/(?P<key>.+)$")


def twin_prefix(stage: str, half: str) -> str:
    """The tag prefix of `stage`'s values written against `half` (a key of
    `TWIN_AXES`, or `THROUGHPUT_HALF`), as DI-engine writes it: `collector_iter/`.
    rltrack's own DI layout (rltrack.sinks.tfevents) writes with it, the
    translation (rltrack.frameworks.tensorboard) reads `TWIN_TAG`."""
    return f"{stage}_{half}/"

#: Native tag -> canonical flat key, per framework (shown in the vocabulary table).
CLEANRL: dict[str, str] = {
    "charts/episodic_return": "collector/reward_mean",  # one episode's return per value, as Acme's episode_return
    "charts/episode_reward": "collector/reward_mean",  # cleanrl 0.4 on PyPI
    "charts/episodic_length": "collector/avg_envstep_per_episode",
    "charts/SPS": "collector/avg_envstep_per_sec",
    "charts/learning_rate": "learner/cur_lr_avg",
    "losses/value_loss": "learner/value_loss_avg",
    "losses/policy_loss": "learner/policy_loss_avg",
    "losses/entropy": "learner/entropy_avg",
    "losses/approx_kl": "learner/approx_kl_avg",
    "losses/clipfrac": "learner/clipfrac_avg",
    "losses/explained_variance": "learner/explained_variance_avg",
    "losses/td_loss": "learner/total_loss_avg",  # DQN
    "losses/q_values": "learner/q_value_avg",  # DQN
    "losses/qf_loss": "learner/critic_loss_avg",  # SAC, TD3, DDPG
    "losses/actor_loss": "learner/policy_loss_avg",  # SAC, TD3, DDPG
    "losses/alpha": "learner/alpha_avg",  # SAC
    "losses/alpha_loss": "learner/alpha_loss_avg",  # SAC
}
RSL_RL: dict[str, str] = {
    "Train/mean_reward": "collector/reward_mean",
    "Train/mean_episode_length": "collector/avg_envstep_per_episode",
    "Loss/value": "learner/value_loss_avg",
    "Loss/surrogate": "learner/policy_loss_avg",
    "Loss/entropy": "learner/entropy_avg",
    "Loss/learning_rate": "learner/cur_lr_avg",
    "Perf/total_fps": "collector/avg_envstep_per_sec",
}
SKRL: dict[str, str] = {
    "Reward / Total reward (mean)": "collector/reward_mean",
    "Reward / Total reward (max)": "collector/reward_max",
    "Reward / Total reward (min)": "collector/reward_min",
    "Episode / Total timesteps (mean)": "collector/avg_envstep_per_episode",
    "Loss / Policy loss": "learner/policy_loss_avg",
    "Loss / Value loss": "learner/value_loss_avg",
    "Loss / Entropy loss": "learner/entropy_loss_avg",
    "Loss / Critic loss": "learner/critic_loss_avg",
    "Learning / Learning rate": "learner/cur_lr_avg",
}



@dataclass(frozen=True)
class Library:
    """What one library's writer means by its tags: `stages`, a tag prefix ->
    (the DI-engine stage its values are filed under in the local layout, the
    axis its `global_step` counts); `axis`, the axis of every other tag its
    writer writes (the environments' infos it passes through: skrl's
    `Episode_Reward/alive`); `canonical`, tag -> canonical flat key;
    `separator`, what ends a prefix (skrl's `Reward / Total reward (mean)`);
    `twins`, DI-engine's `<stage>_iter/`, `<stage>_step/` twin tags."""

    stages: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    canonical: Mapping[str, str] = field(default_factory=dict)
    axis: str = UNKNOWN_AXIS
    separator: str = "/"
    twins: bool = False

    def place(self, tag: str) -> tuple[str, str]:
        """(stage, axis) of a tag its writer writes ("" for a prefix of no stage)."""
        prefix = tag.partition(self.separator)[0].strip() if self.separator in tag else tag.partition("/")[0]
        stage, axis = self.stages.get(prefix, ("", self.axis))
        if axis == ITER_AXIS and tag.endswith(SECONDS_SUFFIX):
            axis = SECONDS_AXIS
        return stage, axis


#: Each library whose writer rltrack recognises (`creator_library` says which
#: library a writer's caller is) -> what its tags mean. A tag of any
#: other writer keeps its name, at axis `step`, with no canonical twin.
LIBRARIES: dict[str, Library] = {
    # every CleanRL script: `global_step` counts env steps over all envs
    "cleanrl": Library({"charts": ("collector", STEP_AXIS), "losses": ("learner", STEP_AXIS)}, CLEANRL, STEP_AXIS),
    # rsl_rl.utils.logger: the learning iteration `it`, `Train/<k>/time` at whole seconds
    "rsl_rl": Library(
        {"Train": ("collector", ITER_AXIS), "Episode": ("collector", ITER_AXIS), "Loss": ("learner", ITER_AXIS),
         "Policy": ("learner", ITER_AXIS), "Rnd": ("learner", ITER_AXIS), "Perf": ("time", ITER_AXIS)},
        RSL_RL, ITER_AXIS,
    ),  # fmt: skip
    # skrl's writer: `<Group> / <key>` at skrl's `timestep`, the environments' infos too
    "skrl": Library(
        {"Reward": ("collector", STEP_AXIS), "Episode": ("collector", STEP_AXIS), "Loss": ("learner", STEP_AXIS),
         "Policy": ("learner", STEP_AXIS), "Learning": ("learner", STEP_AXIS), "Stats": ("time", STEP_AXIS)},
        SKRL, STEP_AXIS, separator=" / ",
    ),  # fmt: skip
    # Tianshou 2's TensorboardLogger: `<scope>/<key>` at the scope's step (rltrack.frameworks.tianshou)
    "tianshou": Library(
        {"training": ("collector", tianshou.STEP_AXES["env_step"]), "test": ("evaluator", tianshou.STEP_AXES["env_step"]),
         "update": ("learner", tianshou.STEP_AXES["update_step"])},
        tianshou.CANONICAL,
    ),  # fmt: skip
    # SB3's own TensorBoard format: `num_timesteps`
    "sb3": Library({prefix: (stage, STEP_AXIS) for prefix, stage in sb3.NAMESPACES.items()}, sb3.CANONICAL, STEP_AXIS),
    # DI-engine and LightZero: twin tags named after their stages
    "ding": Library(twins=True),
    # known writers without a vocabulary: their tags as written (HF's `train/loss` is not SB3's)
    "transformers": Library(),
    "rl_games": Library(),
}

#: The tags of CleanRL's hyperparameter table (`add_text("hyperparameters", ...)`) as written.
HPARAMS_TEXT_TAGS = frozenset({"hyperparameters/text_summary", "hyperparameters"})
#: The suffix torch's and tensorboardX's `add_text` put after the tag.
TEXT_SUFFIX = "/text_summary"
#: The HParams plugin's tags; only the session start holds the values.
HPARAMS_PREFIX = "_hparams_/"
HPARAMS_SESSION_START = "_hparams_/session_start_info"

#: Log directory endings below the folder that names the run: DI-engine and
#: LightZero write `./<exp_name>/log/serial`.
LOGDIR_TAILS: tuple[tuple[str, ...], ...] = (("log", "serial"),)

#: Folders of event files found on disk, whose writer is gone: library -> (the
#: name its runs' folders get, an entry it writes beside the event files or "").
#: CleanRL's `runs/{env_id}__{exp_name}__{seed}__{int(time.time())}`; skrl's
#: `<yy-mm-dd_HH-MM-SS-ffffff>_<Agent>` with `checkpoints/`; rsl_rl's (Isaac
#: Lab's) `<YYYY-MM-DD_HH-MM-SS>[_<name>]` with the `git/` diffs it stores;
#: Tianshou 2's `exp_seed=<n>`. DI-engine's is its `log/serial` (`LOGDIR_TAILS`).
FOLDERS: dict[str, tuple[str, str]] = {
    "cleanrl": (r".+__.+__\d+__\d{9,}", ""),
    "skrl": (r"\d{2,4}-\d\d-\d\d_\d\d-\d\d-\d\d(-\d+)?_.+", "checkpoints"),
    "rsl_rl": (r"\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d(_.+)?", "git"),
    "tianshou": (r"exp_seed=\d+", ""),
}

#: Top-level package of the code calling a writer -> the library whose tags it writes.
CREATORS: dict[str, str] = {
    "cleanrl": "cleanrl", "cleanrl_utils": "cleanrl", "rsl_rl": "rsl_rl", "skrl": "skrl", "tianshou": "tianshou",
    "stable_baselines3": "sb3", "ding": "ding", "lzero": "ding", "transformers": "transformers", "trl": "transformers",
    "rl_games": "rl_games",
}  # fmt: skip
#: Packages of the writers themselves, passed over when looking for the code calling one.
WRITER_PACKAGES = ("tensorboard", "tensorboardX", "torch.utils.tensorboard", "rltrack")


def creator_library(module: str, file: str | None = None, imported: tuple[str, ...] = ()) -> str | None:
    """The library a writer's caller belongs to: its package (`trl.trainer` ->
    "transformers"); for a script (`__main__`, or a module of no known
    package), CleanRL when it lies in a `cleanrl` folder (CleanRL's scripts,
    as installed or cloned) or imports CleanRL's `cleanrl_utils`
    (`imported`: the top-level names of the modules it imported). None: a
    writer of unknown meaning, its tags kept as written with no twin."""
    found = CREATORS.get(module.partition(".")[0])
    if found is not None:
        return found
    parts = re.split(r"[\\/]", file or "")[:-1]
    if "cleanrl" in parts or "cleanrl_utils" in imported or "cleanrl" in imported:
        return "cleanrl"
    return None
