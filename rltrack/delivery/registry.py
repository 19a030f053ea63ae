"""Backends by config name. Each lives in its own module, imported only when
chosen, so a backend's third-party package is needed only by its users.
A backend of the user's own is named by its import path, `"package.module:Class"`
(the agent imports it with the path of the process that registered the run)."""

from __future__ import annotations

import importlib
import re

from rltrack.sinks.base import Backend, RunContext
from rltrack.trackers.remote import RemoteBackend

#: `backends.use = [...]` names -> "module:Class" that implements them.
BACKEND_TYPES: dict[str, str] = {
    "local": "rltrack.sinks.local:LocalBackend",
    "console": "rltrack.sinks.console:ConsoleBackend",
    "memory": "rltrack.sinks.memory:MemoryBackend",
    "tensorboard": "rltrack.sinks.tensorboard:TensorBoardBackend",
    "mlflow": "rltrack.trackers.mlflow.backend:MlflowBackend",
    "wandb": "rltrack.trackers.wandb.backend:WandbBackend",
    "neptune": "rltrack.trackers.neptune.backend:NeptuneBackend",
    "trackio": "rltrack.trackers.trackio:TrackioBackend",
    "storage": "rltrack.trackers.storage:StorageBackend",  # set by run.storage, not in backends.use
}


#: A backend of the user's own: `package.module:Class`.
IMPORT_PATH = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


def is_backend_name(name: str) -> bool:
    return name in BACKEND_TYPES or bool(IMPORT_PATH.fullmatch(name))


def backend_class(name: str) -> type[Backend | RemoteBackend]:
    module, _, cls = BACKEND_TYPES.get(name, name).partition(":")
    return getattr(importlib.import_module(module), cls)  # type: ignore[no-any-return]


__all__ = ["BACKEND_TYPES", "Backend", "RemoteBackend", "RunContext", "backend_class", "is_backend_name"]
