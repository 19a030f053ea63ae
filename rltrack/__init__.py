"""rltrack: the training logs of RL frameworks, carried into the tools people read them with.

    logger = rltrack.make_logger("rltrack.toml")
    logger.write({"reward": 1.0}, step=100, namespace="collector")
    logger.close()

The public names are imported on first use (PEP 562 `__getattr__`), so that
`import rltrack` stays cheap for code that only needs part of it (an adapter,
`read_journal`); `from rltrack import make_logger` works as usual.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rltrack.core.version import __version__

#: public name -> the module defining it
_PUBLIC = {
    "ConfigError": "rltrack.training.config",
    "load_config": "rltrack.training.config",
    "make_logger": "rltrack.training.config",
    "SCHEMA_VERSION": "rltrack.core.events",
    "Event": "rltrack.core.events",
    "read_journal": "rltrack.journal",
    "MissingExtraError": "rltrack.core.optional",
    "Logger": "rltrack.training.logger",
}

if TYPE_CHECKING:
    from rltrack.training.config import ConfigError, load_config, make_logger
    from rltrack.core.events import SCHEMA_VERSION, Event
    from rltrack.journal import read_journal
    from rltrack.core.optional import MissingExtraError
    from rltrack.training.logger import Logger


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'rltrack' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])


__all__ = [
    "SCHEMA_VERSION",
    "ConfigError",
    "Event",
    "Logger",
    "MissingExtraError",
    "__version__",
    "load_config",
    "make_logger",
    "read_journal",
]
