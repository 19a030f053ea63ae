"""What SB3's keys mean, as data and pure functions: its output format names
and which `exclude=` keeps a key from rltrack, which namespace a key prefix
means and which `time/` keys are durations, the canonical (DI-engine) names
of its keys and the names rltrack's runs store them under, which keys are the
`train_iter` axis and which mark the algorithm's own dump (the end of a
collection stage), and how its `train/` values become the learner block's
averages.

The writer, the stage recorder and the declaration (`LIBRARY`, in the
package's `__init__`, through which the run database and the shared
vocabulary read the tables) read it here. Nothing here imports SB3, numpy or
torch: values are recognised by their shape (`ndim`, `item`).
"""

from __future__ import annotations

import re
from typing import Any, Mapping


#: The name rltrack's writer answers to in SB3's `exclude=` arguments.
FORMAT_NAME = "rltrack"

#: SB3's own output format names; a key excluded from all of them is not sent either.
SB3_FORMATS = frozenset({"stdout", "log", "json", "csv", "tensorboard"})

#: SB3 key prefix -> rltrack namespace.
NAMESPACES = {"rollout": "collector", "eval": "evaluator", "train": "learner", "time": "time"}

#: SB3 native flat key -> canonical (DI-engine/LightZero) flat key.
CANONICAL: dict[str, str] = {
    "rollout/ep_rew_mean": "collector/reward_mean",
    "rollout/ep_len_mean": "collector/avg_envstep_per_episode",
    "time/total_timesteps": "collector/total_envstep_count",
    "time/episodes": "collector/episode_count",
    "time/fps": "collector/avg_envstep_per_sec",
    "eval/mean_reward": "evaluator/reward_mean",
    "eval/mean_ep_length": "evaluator/avg_envstep_per_episode",
    "train/loss": "learner/total_loss_avg",
    "train/policy_gradient_loss": "learner/policy_loss_avg",  # PPO
    "train/policy_loss": "learner/policy_loss_avg",  # A2C
    "train/actor_loss": "learner/policy_loss_avg",  # SAC, TD3, DDPG
    "train/value_loss": "learner/value_loss_avg",
    "train/critic_loss": "learner/critic_loss_avg",
    "train/entropy_loss": "learner/entropy_loss_avg",
    "train/learning_rate": "learner/cur_lr_avg",
    "train/approx_kl": "learner/approx_kl_avg",
    "train/clip_fraction": "learner/clipfrac_avg",
    "train/explained_variance": "learner/explained_variance_avg",
    "train/ent_coef": "learner/alpha_avg",  # SAC's entropy temperature
    "train/ent_coef_loss": "learner/alpha_loss_avg",
}


def stored_key(key: str) -> str:
    """The name rltrack stores an SB3 key under: its prefix becomes the
    namespace (`rollout/ep_rew_mean` -> `collector/ep_rew_mean`)."""
    prefix, _, leaf = key.partition("/") if "/" in key else ("", "", key)
    return f"{NAMESPACES.get(prefix, prefix)}/{leaf}" if prefix else leaf


#: Keys whose value is the `train_iter` step axis, in order of preference.
TRAIN_ITER_KEYS = ("time/iterations", "train/n_updates")

#: A key every dump of the algorithm itself has and EvalCallback's dump has not:
#: such a dump ends a collection stage.
ALGORITHM_DUMP_KEY = "time/fps"

#: SB3 `train/` keys that are counters or settings, not values averaged in the learner block.
NOT_LEARNER_VALUES = frozenset({"train/n_updates", "train/clip_range", "train/clip_range_vf"})

#: Under `time/`, the leaf keys that are durations (sent as kind `timing`); not
#: SB3's `time_elapsed`, a running clock (seconds since `learn()` began), which
#: summed as a stage's durations counted each second many times over.
DURATION = re.compile(r"^(?!time_elapsed$)(?:.*elapsed.*|.*duration.*|.*_time|time_.*|.*_sec|.*_seconds)$")


def excluded(formats: tuple[str, ...] | None) -> bool:
    """Whether a key SB3 recorded with `exclude=formats` is kept from rltrack:
    the exclusion names rltrack's writer, or every one of SB3's own formats."""
    return bool(formats) and (FORMAT_NAME in formats or (len(formats) >= 5 and SB3_FORMATS.issubset(formats)))


# ---- the learner block ------------------------------------------------------


def number(value: Any) -> float | None:
    """A plain float for numbers and 0-d arrays, None for anything else (booleans included)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        item = value.item()
        return float(item) if isinstance(item, (int, float)) else None
    return None


def learner_values(name_to_value: Mapping[str, Any]) -> dict[str, float]:
    """The values of one `train()` call (SB3's logger's `name_to_value`) the
    learner block averages, by the block's name without `_avg`: `train/loss`
    -> `total_loss`, `train/learning_rate` -> `cur_lr`, other `train/<leaf>`
    -> `<leaf>`; counters and settings (`NOT_LEARNER_VALUES`) and non-numbers left out."""
    values = {}
    for key, value in name_to_value.items():
        found = number(value)
        if key.startswith("train/") and key not in NOT_LEARNER_VALUES and found is not None:
            canonical = CANONICAL.get(key)
            values[canonical.split("/", 1)[1].removesuffix("_avg") if canonical else key[len("train/"):]] = found
    return values
