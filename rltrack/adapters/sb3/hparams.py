"""Which of an SB3 model's attributes are hyperparameters, and how they become JSON.

`RLTrackCallback` and `attach` (rltrack.adapters.sb3.callback) record
`model_hparams(model)` at the start of each `learn()`. Nothing here imports
SB3, numpy or torch: values are recognised by their shape (`ndim`, `item`,
`_asdict`, a module name).
"""

from __future__ import annotations

import enum
import math
from typing import Any, Mapping

from rltrack.core.optional import installed_version

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
