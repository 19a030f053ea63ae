"""rltrack: the training logs of RL frameworks, carried into the tools people read them with.

    logger = rltrack.make_logger("rltrack.toml")
    logger.write({"reward": 1.0}, step=100, namespace="collector")
    logger.close()
"""

__version__ = "0.1.0"

from rltrack.config import ConfigError, load_config, make_logger  # noqa: E402
from rltrack.events import SCHEMA_VERSION, Event  # noqa: E402
from rltrack.journal import read_journal  # noqa: E402
from rltrack.optional import MissingExtraError  # noqa: E402
from rltrack.pipeline import Logger  # noqa: E402

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
