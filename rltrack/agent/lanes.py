"""The agent's tracker threads: one lane per tracker configuration (tracker
name and settings), a `rltrack.core.turns.Turns` (`lane`), steps the
`DeliveryWorker`s of every run it serves in turn, so a tracker that is down
or slow holds only its own thread; one `TrackerRun` (one backend, one
tracker run) takes the writers of one run. rltrack.agent.process makes them as it
picks up registrations.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Callable

from rltrack.delivery.registry import RemoteBackend
from rltrack.delivery.worker import POLL, DeliveryWorker
from rltrack.core.turns import Turns


class TrackerRun:
    """One backend (one tracker run) fed by every writer of one run: the last of
    `workers` to end ends the tracker's run (`DeliveryWorker.shared`)."""

    def __init__(self, backend: RemoteBackend) -> None:
        self.backend = backend
        self.workers: list[DeliveryWorker] = []


def lane(name: str) -> Turns:
    """The thread of one tracker configuration: steps the workers of every run it serves in turn."""
    return Turns(f"rltrack-agent-{name}", POLL)


def import_clients(backend: RemoteBackend, failed: Callable[[str, str, Exception], None]) -> None:
    """Imports `backend`'s tracker client, and numpy (which the clients
    share, wandb lazily), on the agent's main thread before its lane starts.
    Lanes that import clients at once, each on its own thread, can meet in
    Python's per-module import locks, whose deadlock detection then hands one
    of them a partially initialised module; the tracker then fails for the
    agent's lifetime (a 64-trial sweep: "partially initialized module
    'numpy' has no attribute 'byte'" in the W&B lane while the MLflow lane
    imported mlflow, and no value reached W&B)."""
    for module in ("numpy", *backend.rules.client_modules):
        try:
            if importlib.util.find_spec(module) is not None:
                importlib.import_module(module)
        except Exception as exc:  # the lane meets it again and reports it with the deliveries
            failed(backend.name, "import", exc)
