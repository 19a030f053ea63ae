"""Backends by config name. Each lives in its own module, imported only when
chosen, so a backend's third-party package is needed only by its users."""

from __future__ import annotations

import importlib

from rltrack.backends.base import Backend, RunContext
from rltrack.backends.remote import RemoteBackend

#: `backends.use = [...]` names -> "module:Class" that implements them.
BACKEND_TYPES: dict[str, str] = {
    "local": "rltrack.backends.local:LocalBackend",
    "console": "rltrack.backends.console:ConsoleBackend",
    "memory": "rltrack.backends.memory:MemoryBackend",
    "tensorboard": "rltrack.backends.tensorboard:TensorBoardBackend",
    "mlflow": "rltrack.backends.mlflow:MlflowBackend",
    "wandb": "rltrack.backends.wandb:WandbBackend",
    "neptune": "rltrack.backends.neptune:NeptuneBackend",
}


def backend_class(name: str) -> type[Backend | RemoteBackend]:
    module, _, cls = BACKEND_TYPES[name].partition(":")
    return getattr(importlib.import_module(module), cls)  # type: ignore[no-any-return]


__all__ = ["BACKEND_TYPES", "Backend", "RemoteBackend", "RunContext", "backend_class"]
