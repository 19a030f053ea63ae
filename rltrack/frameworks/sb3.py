"""What rltrack knows about Stable-Baselines3, as data and pure functions: its
output format names and which `exclude=` keeps a key from rltrack, which
namespace a key prefix means and which `time/` keys are durations, the
canonical (DI-engine) names of its keys, which keys are the `train_iter` axis
and which mark the algorithm's own dump (the end of a collection stage), how
its `train/` values become the learner block's averages, and which of a
model's attributes are hyperparameters and how they become JSON.

The adapter (rltrack.adapters.sb3 and its sb3_* modules) reads it here; the
run database reads SB3's progress.csv through the shared vocabulary
(rltrack.frameworks.canonical). Nothing here imports SB3, numpy or torch: values are
recognised by their shape (`ndim`, `item`, `_asdict`, a module name).
"""

from __future__ import annotations

import enum
import math
import re
from typing import Any, Mapping

from rltrack.core.optional import installed_version
from rltrack.frameworks.library import Library
from rltrack.frameworks.stages import STEP_AXIS

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


# ---- hyperparameters ----------------------------------------------------------

#: Model attributes that are training state, not hyperparameters.
RUNTIME_ATTRIBUTES = frozenset(
    {"num_timesteps", "start_time", "ep_info_buffer", "ep_success_buffer", "lr_schedule", "batch_norm_stats", "batch_norm_stats_target"}
)

_SKIP = object()


def attribute_hparams(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """The hyperparameters among a model's attributes (`vars(model)`): the
    public ones that are not training state, as JSON (see `_jsonable`);
    `action_noise` as its repr, e.g. "NormalActionNoise(mu=[0.], sigma=[0.1])".
    Networks, buffers, environments and optimizers are left out."""
    hparams: dict[str, Any] = {}
    for name, value in attributes.items():
        if name.startswith("_") or name in RUNTIME_ATTRIBUTES:
            continue
        if name == "action_noise" and value is not None:
            hparams[name] = repr(value)
            continue
        converted = _jsonable(value, top=True)
        if converted is not _SKIP:
            hparams[name] = converted
    return hparams


def model_hparams(model: Any) -> dict[str, Any]:
    """The JSON-friendly configuration of an SB3 model: its public attributes
    that are numbers, strings, classes (by name), spaces (as text), schedules
    (their value at the start of training) and containers of those, plus
    `algo`, `env_id`, `total_timesteps` and `sb3_version`. Networks, buffers,
    environments and optimizers are left out."""
    hparams: dict[str, Any] = {"algo": type(model).__name__, **attribute_hparams(vars(model))}
    env = getattr(model, "env", None)
    if env is not None:
        try:
            spec = env.get_attr("spec", indices=[0])[0]
        except Exception:  # a VecEnv wrapper without get_attr, or an env without spec
            spec = None
        if spec is not None and getattr(spec, "id", None):
            hparams["env_id"] = spec.id
    total = getattr(model, "_total_timesteps", 0)
    if total:
        hparams["total_timesteps"] = int(total)
    hparams["sb3_version"] = installed_version("stable-baselines3")
    return hparams


def _jsonable(value: Any, top: bool = False, depth: int = 0) -> Any:
    """A JSON-friendly form of one attribute: numbers, strings, classes (by
    name), spaces and devices (as text), schedules (their value at the start
    of training) and containers of those; anything else its repr, or `_SKIP`
    at the top level."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, enum.Enum):
        return _jsonable(value.value, depth=depth + 1)
    if isinstance(value, type):
        return value.__name__
    if type(value).__module__.startswith("gymnasium.spaces"):
        return str(value)
    if type(value).__name__ == "device":  # torch.device
        return str(value)
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0 and not hasattr(value, "requires_grad"):
        return _jsonable(value.item(), depth=depth + 1)  # numpy scalar
    if depth < 4:
        if isinstance(value, tuple) and hasattr(value, "_asdict"):  # namedtuple, e.g. TrainFreq
            return {k: _jsonable(v, depth=depth + 1) for k, v in value._asdict().items()}
        if isinstance(value, (list, tuple)):
            return [_jsonable(v, depth=depth + 1) for v in value]
        if isinstance(value, Mapping):
            return {str(k): _jsonable(v, depth=depth + 1) for k, v in value.items()}
    if callable(value) and not hasattr(value, "forward"):  # a schedule: progress_remaining 1.0 -> start value
        try:
            start = value(1.0)
        except Exception:
            start = None
        if isinstance(start, (int, float)) and not isinstance(start, bool):
            return float(start)
        if callable(value) and hasattr(value, "__qualname__"):
            return f"{getattr(value, '__module__', '')}.{value.__qualname__}"
    return _SKIP if top else repr(value)[:200]


#: SB3's logger (its own TensorBoard format too): `<prefix>/<key>` at `num_timesteps`.
LIBRARY = Library(
    packages=("stable_baselines3",),
    adapter=True,
    stages={prefix: (stage, STEP_AXIS) for prefix, stage in NAMESPACES.items()},
    canonical=CANONICAL,
    axis=STEP_AXIS,
)
