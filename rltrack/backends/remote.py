"""The interface of trackers that are fed from the journal (MLflow, W&B, Neptune).

A remote backend never sees the pipeline thread. A `DeliveryWorker` reads the
journal from the backend's cursor and calls `deliver` with batches of at most
`max_batch` events; `deliver` either takes the whole batch or raises, and the
same batch is offered again after a backoff. So `deliver` must be safe to
repeat (MLflow: timestamps fixed at capture make the store ignore duplicates).
The tracker's run is created on first delivery, not in the constructor.
"""

from __future__ import annotations

from rltrack.backends.base import RunContext
from rltrack.events import Event


class RemoteBackend:
    name = ""
    #: Events per `deliver` call; each backend splits further to its tracker's limits.
    max_batch = 1000

    def open(self, run: RunContext) -> None:
        self.run = run

    def deliver(self, events: list[Event]) -> None:
        raise NotImplementedError

    def close(self, status: str) -> None:
        """Ends the tracker's run with `status` (finished, failed, killed)."""
