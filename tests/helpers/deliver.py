"""`deliver_all`: a test's delivery of a whole journal on its own thread, as
`rltrack sync` does, bounded: a tracker that refuses every batch (a W&B
service that never connects) fails the test with its last error instead of
holding it for ever."""

from __future__ import annotations

from rltrack.delivery.worker import DeliveryWorker

GIVE_UP_AFTER = 120.0  # seconds of nothing but refusals


def deliver_all(worker: DeliveryWorker, status: str) -> None:
    """Delivers `worker`'s journal and ends the tracker's run with `status`;
    fails unless the cursor reached the journal's end."""
    worker.run_until_caught_up(status, give_up_after=GIVE_UP_AFTER)
    assert worker.caught_up(), (
        f"{worker.backend.name}: refused every batch for {GIVE_UP_AFTER:.0f} s or could not heal "
        f"({worker.pending_bytes()} journal bytes left); last error: {worker.last_error}; fix: {worker.fix}"
    )
