"""The agent's tracker threads: one `Lane` per tracker configuration (tracker
name and settings) steps the `DeliveryWorker`s of every run it serves in
turn, so a tracker that is down or slow holds only its own thread; one
`TrackerRun` (one backend, one tracker run) takes the writers of one run.
rltrack.agent makes them as it picks up registrations.
"""

from __future__ import annotations

import importlib
import importlib.util
import threading
import time
from typing import Callable

from rltrack.backends import RemoteBackend
from rltrack.delivery import POLL, DeliveryWorker


class TrackerRun:
    """One backend (one tracker run) fed by every writer of one run."""

    def __init__(self, backend: RemoteBackend) -> None:
        self.backend = backend
        self.workers: list[DeliveryWorker] = []


def import_clients(backend: RemoteBackend, failed: Callable[[str, str, Exception], None]) -> None:
    """Imports `backend`'s tracker client, and numpy (which the clients
    share, wandb lazily), on the agent's main thread before its lane starts.
    Lanes that import clients at once, each on its own thread, can meet in
    Python's per-module import locks, whose deadlock detection then hands one
    of them a partially initialised module; the tracker then fails for the
    agent's lifetime (a 64-trial sweep: "partially initialized module
    'numpy' has no attribute 'byte'" in the W&B lane while the MLflow lane
    imported mlflow, and no value reached W&B)."""
    for module in ("numpy", *backend.client_modules):
        try:
            if importlib.util.find_spec(module) is not None:
                importlib.import_module(module)
        except Exception as exc:  # the lane meets it again and reports it with the deliveries
            failed(backend.name, "import", exc)


class Lane:
    """The thread of one tracker configuration: steps the workers of every run it serves in turn."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._workers: list[tuple[DeliveryWorker, TrackerRun]] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._loop, name=f"rltrack-agent-{name}", daemon=True).start()

    def add(self, worker: DeliveryWorker, tracker_run: TrackerRun) -> None:
        with self._lock:
            self._workers.append((worker, tracker_run))

    def _loop(self) -> None:
        while True:
            with self._lock:
                workers = [pair for pair in self._workers if not pair[0].done]
                self._workers = workers
            busy = False
            for worker, tracker_run in workers:
                if worker.journal_complete:  # the last writer to end ends the tracker's run
                    worker.close_at_end = all(other.done for other in tracker_run.workers if other is not worker)
                busy = worker.step() or busy
            if not busy:
                time.sleep(POLL)
