"""Which configuration entries are hyperparameters, whichever framework saved them.

A config a framework saves holds more than how a run trains: SpinningUp's
`save_config(locals())` sweeps in the logger object (its repr, with a memory
address, becomes a key) and `logger_kwargs` with the per-seed `output_dir`;
DI-engine's `exp_name` differs per seed; SB3 keeps `tensorboard_log`. Such
entries differ between the seeds of one configuration, so as hyperparameters
they would split the seeds into groups of one and fill the run index and the
trackers' parameters with noise. The run database's readers (index columns,
plot groups) and the SpinningUp adapter (what `save_config` sends to the
trackers) both decide with `is_setting` here. `plain` turns a library's
configuration holding objects (skrl's, rl_games') into typed values a tracker takes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

#: An object's default repr, `<module.Class object at 0x7f15...>`: it differs in every process.
OBJECT_REPR = re.compile(r"<[^<>]*\bat 0x[0-9a-fA-F]+>")
#: Config entries that say where a run writes or who logs it, not how it trains: output
#: directories, loggers, the experiment's and the run's names (DI-engine's `exp_name`
#: differs per seed). A key with such a part is left out of the hyperparameters.
NOT_HPARAMS = frozenset({
    "logger", "logger_kwargs", "output_dir", "output_fname", "out_dir", "log_dir", "logdir", "save_dir", "save_path",
    "tensorboard_log", "exp_name", "rltrack_config", "rltrack_logger",
})  # fmt: skip


def is_setting(key_part: str, value: Any) -> bool:
    """Whether one config entry (`key_part`: one level of its key) can be a
    hyperparameter: its key names no output, logger or run name, and neither
    the key nor a text value holds an object's repr."""
    if isinstance(value, str) and OBJECT_REPR.search(value):
        return False
    return key_part not in NOT_HPARAMS and not OBJECT_REPR.search(key_part)


def settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """`config` without the entries that are no hyperparameters (`is_setting`), at every level."""
    return {
        key: settings(value) if isinstance(value, Mapping) else value
        for key, value in config.items()
        if is_setting(str(key), value)
    }


def plain(config: Mapping[str, Any]) -> dict[str, Any]:
    """A framework's configuration as hyperparameters a tracker takes, types
    kept: numbers, text, bools and None as they are, mappings and sequences
    level by level, numpy and torch scalars as numbers; a class or a function (a
    scheduler, a preprocessor) as its dotted name; an object with public
    attributes of such values as those attributes; any other object as its text, or
    its class's dotted name when its text is a default repr (an address
    differs in every process)."""
    return {str(key): _plain(value) for key, value in config.items()}


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):  # a numpy or torch scalar
        return value.item()
    if isinstance(value, Mapping):
        return plain(value)
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    named = value if hasattr(value, "__qualname__") else None
    attributes = vars(value) if named is None and hasattr(value, "__dict__") else {}
    settings = {key: item for key, item in attributes.items() if not key.startswith("_") and (item is None or isinstance(item, (bool, int, float, str)))}
    if settings:
        return settings  # an object built from settings (rl_games' reward shaper, from its config's dict)
    text = "" if named is not None else str(value)
    if named is None and not OBJECT_REPR.search(text):
        return text
    named = named or type(value)
    return f"{getattr(named, '__module__', '')}.{named.__qualname__}".lstrip(".")
