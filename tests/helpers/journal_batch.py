"""A run's journal as delivery hands it to a tracker: events and their ids
(`EventId`), for tests that call a backend's `deliver` themselves, and the
state delivery keeps for a tracker (to `resume` a backend built by hand)."""

from __future__ import annotations

from pathlib import Path

from rltrack.trackers.remote import EventId, RemoteBackend
from rltrack.delivery.cursor import tracker_state
from rltrack.core.events import Event
from rltrack.journal import journal_path, read_batch


def journal_batch(run_dir: Path, writer: str | None = None) -> tuple[list[Event], list[EventId]]:
    """Every event of one writer's journal, with its id."""
    ends: list[int] = []
    entries, _ = read_batch(journal_path(run_dir, writer), 0, 10**9, None, ends)
    pairs = [(entry, EventId(writer, end)) for entry, end in zip(entries, ends) if type(entry) is Event]
    return [event for event, _ in pairs], [event_id for _, event_id in pairs]


def with_saved_state(backend: RemoteBackend, run_dir: Path) -> RemoteBackend:
    """`backend` (opened) given the state delivery saved for its tracker, as a delivery that starts does."""
    backend.resume(None, tracker_state(run_dir, backend.name))
    return backend
